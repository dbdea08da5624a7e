"""Campaigns with a time limit: ``posexp reproduce --time-limit 2h`` and ``posexp sweep
--time-limit 2h`` train their runs in order within a wall-clock budget, like a cluster job
within its walltime.  A run starts only when its estimate -- its tokens at the training
speed this machine last measured for a run of the campaign -- fits in the time left; at the
limit the run that is going (training or scoring) is stopped through the stop file every
run already reads between steps and batches (sweep.request_stop), so it is checkpointed and
marked interrupted like a run stopped by a signal, and the command ends with exit status
TIME_LIMIT_EXIT.  Running the same command again continues where it stopped."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from posexp.errors import InUse, Stopped, UsageError

# The exit status of a campaign stopped at its time limit: neither a failure (1), a usage
# error (2) nor a signal (128 + n), so a job script can tell "run me again" from the rest.
TIME_LIMIT_EXIT = 3
LIMIT = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
UNITS = (3600, 60, 1)
FORMS = "a duration such as 90s, 45m, 2h or 1h30m"


def parse_time_limit(text: str) -> float:
    """Seconds of ``--time-limit TEXT``: hours, minutes and seconds, in that order, each a
    whole number with its unit; a UsageError for anything else or for no time at all."""
    match = LIMIT.fullmatch(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise UsageError(f"--time-limit takes {FORMS}; got {text!r}")
    seconds = sum(int(v) * unit for v, unit in zip(match.groups(), UNITS, strict=True) if v)
    if seconds <= 0:
        raise UsageError(f"--time-limit must be more than no time at all; got {text!r}")
    return float(seconds)


def pop_time_limit(args: list[str]) -> tuple[list[str], float | None]:
    """``args`` without ``--time-limit VALUE`` (or ``--time-limit=VALUE``), and its seconds:
    for a command whose other arguments go to Hydra (posexp sweep)."""
    out, seconds, i = [], None, 0
    while i < len(args):
        arg = args[i]
        if arg == "--time-limit" or arg.startswith("--time-limit="):
            if arg == "--time-limit":
                if i + 1 >= len(args):
                    raise UsageError(f"--time-limit needs a value: {FORMS}")
                i += 1
            seconds = parse_time_limit(args[i] if arg == "--time-limit" else arg.split("=", 1)[1])
        else:
            out.append(arg)
        i += 1
    return out, seconds


class TimeLimitReached(Stopped):
    """The campaign stopped at its time limit; its message is the summary line."""

    exit_code = TIME_LIMIT_EXIT


@dataclass(frozen=True)
class Speed:
    """What a completed run of the campaign measured: training tokens a second, and the
    seconds it then spent scoring for each second of training."""

    tok_per_s: float
    scoring: float
    run: str


def read_info(path: Path) -> dict:
    """run.json, or {} where there is none or it cannot be read (a run not started yet)."""
    try:
        info = json.loads((path / "run.json").read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def tokens_done(path: Path) -> int:
    """Tokens an unfinished run has trained (its training curve's last record): a resumed
    run needs only the rest."""
    try:
        lines = (path / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("tokens"), int):
            return record["tokens"]
    return 0


def duration(seconds: float) -> str:
    seconds = math.ceil(seconds)
    h, m, s = seconds // 3600, seconds // 60 % 60, seconds % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class Campaign:
    """The runs of one command, in order, with their time limit (None: no limit): which may
    start, a line for each (started, recorded, skipped, pending), and the summary."""

    def __init__(self, command: str, seconds: float | None, paths: list[Path]) -> None:
        self.command, self.paths = command, list(paths)
        self.deadline = None if seconds is None else time.time() + seconds
        self.timer: threading.Timer | None = None

    def __enter__(self) -> Campaign:
        """At the deadline the stop file is written as a signal would (sweep.request_stop):
        the run going then stops at its next step or batch, checkpointed."""
        from posexp.sweep.stop import request_stop

        if self.deadline is not None:
            self.timer = threading.Timer(self.left(), request_stop, (signal.SIGTERM,))
            self.timer.daemon = True
            self.timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.timer is not None:
            self.timer.cancel()

    def left(self) -> float:
        return math.inf if self.deadline is None else max(0.0, self.deadline - time.time())

    @property
    def expired(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline

    def speed(self) -> Speed | None:
        """The most recently completed run's speed: this machine as it runs now (a run of
        another machine, or of a busier hour, counts less the older it is)."""
        done = [(str(info.get("finished_at", "")), info, path) for path in self.paths
                if (info := read_info(path)).get("status") == "completed"
                and isinstance(info.get("tok_per_s"), (int, float)) and info["tok_per_s"] > 0]
        if not done:
            return None
        _, info, path = max(done, key=lambda d: d[0])
        train, score = info.get("train_seconds") or 0, info.get("eval_seconds") or 0
        return Speed(float(info["tok_per_s"]), score / train if train > 0 else 0.0, path.name)

    def estimate(self, path: Path, cfg: DictConfig, again: bool = False) -> float | None:
        """Seconds ``cfg``'s run needs at the measured speed, scoring included -- with
        ``again``, a record trained again for its weights (run/restore.py): its whole
        budget; None when nothing is measured yet."""
        speed = self.speed()
        if speed is None:
            return None
        if read_info(path).get("status") == "completed" and not again:
            return 0.0
        tokens = max(0, int(cfg.train.tokens) - (0 if again else tokens_done(path)))
        return tokens / speed.tok_per_s * (1 + speed.scoring)

    def admit(self, path: Path, cfg: DictConfig, again: bool = False) -> bool:
        """Whether ``cfg``'s run starts now, with its line; ``again``: a record that lacks
        points asked for, whose weights are trained again first (its whole budget)."""
        if path not in self.paths:
            self.paths.append(path)
        if self.deadline is None:
            return True
        # a recorded run is left as it is, and is not pending: its points are scored, or it
        # is skipped
        recorded = read_info(path).get("status") == "completed" and not again
        if self.expired:
            if not recorded:
                self.say("pending", path, "not started: the time limit has passed")
            return False
        from posexp.run.training import stop_requested

        if (signum := stop_requested()) is not None:  # the sweep was stopped: none starts
            if not recorded:
                self.say("pending", path, f"not started: stopped by {signal.Signals(signum).name}")
            return False
        if recorded:
            return True
        need, left = self.estimate(path, cfg, again), self.left()
        what = "its weights again: " if again else ""
        if need is None:
            # nothing measured yet: the run itself measures this machine, and at the limit
            # it is checkpointed, so starting it loses nothing
            self.say("started", path, f"{what}nothing measured yet; {duration(left)} left")
            return True
        if need > left:
            self.say("pending", path, f"{what}needs about {duration(need)}, {duration(left)} "
                     "left")
            return False
        self.say("started", path, f"{what}about {duration(need)} of {duration(left)} left")
        return True

    def say(self, what: str, path: Path, detail: str = "") -> None:
        print(f"{self.command}: {what}: {path.parent.name}/{path.name}"
              + (f" ({detail})" if detail else ""), file=sys.stderr, flush=True)

    def summary(self, pending: dict[Path, DictConfig | None]) -> str:
        """Runs recorded, runs pending, and the time the pending ones need at the measured
        speed (those whose config is not known yet, fine-tunes of pending runs, counted at
        their parent's tokens)."""
        from posexp.runs import Run

        recorded = sum(read_info(p).get("status") == "completed" and p not in pending
                       for p in self.paths)
        speed = self.speed()
        if not pending:
            left = "nothing left to train"
        elif speed is None:
            left = "time left unknown: no run has been measured yet"
        else:
            need = sum(self.estimate(p, cfg, again=Run(p).is_record(read_info(p))) or 0.0
                       for p, cfg in pending.items() if cfg is not None)
            left = f"about {duration(need)} left at {speed.tok_per_s:,.0f} tok/s " \
                   f"(measured by {speed.run})"
        return f"{recorded} run{'s' * (recorded != 1)} recorded, {len(pending)} pending; {left}"


PLAN_VARIABLE = "POSEXP_CAMPAIGN_PLAN"  # where a launched job finds its campaign's plan


def write_plan(campaign: Campaign, folder: Path) -> tuple[Path, list[str]]:
    """The campaign's deadline and runs in a file in ``folder``, beside the
    runs, which a cluster's nodes see too; and the override that hands it to every job."""
    from posexp.runs import atomic_write_json

    folder.mkdir(parents=True, exist_ok=True)
    plan = folder / f"plan-{os.getpid()}.json"
    atomic_write_json(plan, {"deadline": campaign.deadline,
                             "paths": [str(p) for p in campaign.paths]})
    return plan, [f"+hydra.job.env_set.{PLAN_VARIABLE}='{plan}'"]


def read_plan(command: str) -> tuple[Campaign, dict]:
    """In a launched job: its campaign, deadline included, and the plan it was read from."""
    plan = json.loads(Path(os.environ[PLAN_VARIABLE]).read_text())
    campaign = Campaign(command, None, [Path(p) for p in plan["paths"]])
    campaign.deadline = plan["deadline"]
    return campaign, plan


def held_elsewhere(campaign: Campaign, path: Path) -> bool:
    """Whether another process holds ``path``'s run lock -- a second campaign on the same
    results directory trains it -- said in the run's line: it is left to that process, and
    not counted as failed."""
    from posexp.runs import Run

    try:
        with Run(path).lock():
            return False
    except InUse as e:
        campaign.say("skipped", path, f"running elsewhere: {e}")
        return True


def timed_job(cfg: DictConfig) -> str:
    """A job of ``posexp sweep --time-limit``: posexp sweep's job (sweep_job), started only
    if its estimate fits in the time left; one stopped at the limit is pending, not a stop
    of the sweep by a signal."""
    from posexp.run.training import Interrupted
    from posexp.sweep.launch import guard_worker, sweep_job

    guard_worker()  # also for a job that returns pending without training
    campaign, _ = read_plan(SWEEP)
    path = Path(cfg.results_dir) / cfg.experiment / cfg.run_name
    if held_elsewhere(campaign, path) or not campaign.admit(path, cfg):
        return "pending"
    try:
        return sweep_job(cfg)
    except Interrupted:
        if not campaign.expired:
            raise
        campaign.say("pending", path, "stopped at the time limit, checkpointed")
        return "interrupted"


SWEEP = "posexp sweep"


def end_sweep(campaign: Campaign, jobs: list[DictConfig]) -> None:
    """The summary of ``posexp sweep --time-limit``; TimeLimitReached while runs are
    pending (a failed run is summarize's to report)."""
    pending = {}
    for cfg in jobs:
        path = Path(cfg.results_dir) / cfg.experiment / cfg.run_name
        if read_info(path).get("status") not in ("completed", "failed", "diverged"):
            pending[path] = cfg
    line = campaign.summary(pending)
    print(f"{SWEEP}: {line}", file=sys.stderr)
    if pending:
        raise TimeLimitReached(f"stopped at the time limit: {line}; run the same command "
                               "again to continue")


@contextlib.contextmanager
def sweep_campaign(seconds: float | None,
                   jobs: list[DictConfig]) -> Iterator[tuple[Campaign | None, list[str]]]:
    """Around the launch of a sweep's jobs, inside sweep.stopping (whose stop file the
    deadline writes): its campaign and the overrides that hand every job the plan; nothing
    without a time limit."""
    if seconds is None:
        yield None, []
        return
    paths = [Path(cfg.results_dir) / cfg.experiment / cfg.run_name for cfg in jobs]
    campaign = Campaign(SWEEP, seconds, paths)
    plan, handed = write_plan(campaign, paths[0].parent / ".campaign")
    try:
        with campaign:
            yield campaign, handed
    finally:
        plan.unlink(missing_ok=True)
