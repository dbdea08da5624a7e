"""What ``posexp reproduce`` adds for a campaign: its runs handed to one of Hydra's launchers
(``hydra/launcher=joblib`` on one machine, ``submitit_slurm`` on a cluster), as posexp sweep
hands its grid; and the claims of a partial campaign marked *pending (N runs)* rather than
judged.  The time limit itself is posexp/timelimit.py's."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from posexp.claims.base import UNMEASURED, VARIANT_KEYS, Claim, CurveRef, Verdict
from posexp.claims.base import variant as variant_of_values
from posexp.errors import PosexpError, UsageError, first_line
from posexp.timelimit import Campaign, held_elsewhere, read_info, read_plan, write_plan

LAUNCHER_ARGS = ("hydra/launcher=", "hydra.launcher.")
COMMAND = "posexp reproduce"


def check_launcher_args(args: list[str]) -> list[str]:
    """posexp reproduce's extra arguments: only the launcher and its settings, as posexp
    sweep takes them; one line for anything else."""
    for arg in args:
        if not arg.startswith(LAUNCHER_ARGS):
            raise UsageError(f"posexp reproduce takes hydra/launcher=NAME and "
                             f"hydra.launcher.KEY=VALUE besides its options; got {arg!r} "
                             "(posexp reproduce --help)")
    return list(args)


@dataclass(frozen=True)
class Pending:
    """What a claim's needs are matched on, of a run not recorded yet."""

    encoding: str
    train_len: int
    task: str | None
    variant: tuple
    fine_tune: bool
    tokens: int | None = None  # train.tokens: which budget's verdicts it holds back


def pending_of(cfg: DictConfig, fine_tune: bool = False,
               overrides: tuple[str, ...] = ()) -> Pending:
    """``cfg``'s run; for a fine-tune not composed yet (its parent is pending), ``cfg`` is
    the parent's and ``overrides`` the fine-tune's, of which only its length matters here."""
    length = next((int(o.split("=", 1)[1]) for o in reversed(overrides)
                   if o.startswith("train.seq_len=")), int(cfg.train.seq_len))
    variant = variant_of_values({k: OmegaConf.select(cfg, k, default=None)
                                 for k in VARIANT_KEYS})
    return Pending(str(cfg.encoding.name), length, OmegaConf.select(cfg, "task.name",
                                                                   default=None),
                   variant, fine_tune or OmegaConf.select(cfg, "parent.identity",
                                                          default=None) is not None,
                   None if fine_tune else int(cfg.train.tokens))


def needs(need: object, run: Pending) -> bool:
    """Whether a claim's need -- a curve, or a task claim's arm (task, encoding, variant) --
    would be read from ``run``."""
    if isinstance(need, CurveRef):
        return (need.encoding, need.train_len, tuple(need.variant),
                need.fine_tune is not None) == (run.encoding, run.train_len, run.variant,
                                                run.fine_tune)
    task, encoding, variant = need
    return (task, encoding, tuple(variant)) == (run.task, run.encoding, run.variant)


def mark_pending(rows: list[Verdict], claims: list[Claim],
                 pending: list[Pending]) -> list[Verdict]:
    """A claim that reads a run not recorded yet gets no verdict however much of it was
    measured: *pending (N runs)*, and no p-value, so Holm's correction leaves it out."""
    out = []
    for row, claim in zip(rows, claims, strict=True):
        arms = [need for test in claim.tests for need in (getattr(test, "a", None),
                                                          getattr(test, "b", None)) if need]
        wanted = claim.needs or arms
        n = sum(any(needs(w, run) for w in wanted) for run in pending)
        out.append(row if not n else replace(
            row, verdict=f"pending ({n} run{'s' * (n != 1)})", p=None, holm=UNMEASURED,
            measured=f"pending: {n} of its runs not recorded yet"))
    return out


def launch(jobs: list[dict], launcher: list[str], config_dir: str | None, folder: Path,
           campaign: Campaign) -> None:
    """``jobs`` (each {"configs": [YAML, ...]} or {"parent": DIR, "overrides": [...]}) run
    by Hydra's launcher, each job handed its own; the campaign's deadline is a file in
    ``folder`` (beside the runs, which a cluster's nodes see too)."""
    from posexp.config import compose_overrides
    from posexp.config.hydra_jobs import launch as launch_jobs
    from posexp.sweep.plan import check_launcher
    from posexp.sweep.stop import stop_overrides

    if not jobs:
        return
    chosen = compose_overrides(launcher, config_dir, with_hydra=True, command="sweep",
                               resolve=False).hydra.launcher
    plan, handed = write_plan(campaign, folder)
    hydra = [f"hydra.sweep.dir='{folder}'", "hydra.sweep.subdir=${hydra.job.num}", *handed,
             *launcher, *check_launcher(chosen, len(jobs)), *stop_overrides()]
    try:
        launch_jobs(campaign_job, jobs, [[] for _ in jobs], hydra, config_dir)
    finally:
        plan.unlink(missing_ok=True)


def campaign_job(job: dict) -> str:
    """One job of a launched campaign: its run, started only if it fits in the time left,
    trained and scored by posexp sweep's job (sweep_job), whose lines and stop handling
    it shares."""
    from posexp.config import RunSpec, apply_overrides
    from posexp.run.restore import lacks_points, restore_weights
    from posexp.runs.parents import finetune_config
    from posexp.sweep.launch import guard_worker, sweep_job

    guard_worker()  # before the composing, and for a job that returns pending
    campaign, _ = read_plan(COMMAND)
    if "parent" in job:
        configs = [finetune_config(Path(job["parent"]), job["overrides"], record=True)]
    else:
        configs = [apply_overrides(OmegaConf.create(text), [], allowed=()) for text in
                   job["configs"]]
    path = Path(configs[0].results_dir) / configs[0].experiment / configs[0].run_name
    specs = [RunSpec.of(c) for c in configs]
    again = lacks_points(path, specs)  # a record asked for more points: its weights again
    if held_elsewhere(campaign, path) or not campaign.admit(path, configs[0], again):
        return "pending"
    if again:
        try:
            restore_weights(path, specs[0])
        except PosexpError as e:
            print(f"posexp: {first_line(e)}", file=sys.stderr)
            return "failed"
    for each in configs:
        status = sweep_job(each)
        if status in ("failed", "interrupted", "not started"):
            return status
    return "completed"  # the parent says so, with every other run's outcome


def outcome(path: Path, failed: dict[Path, str]) -> str:
    """How a launched job's run ended, read back from its directory: recorded, failed (its
    reason into ``failed``) or pending."""
    info = read_info(path)
    status = info.get("status")
    if status == "completed":
        return "recorded"
    if status in ("failed", "diverged"):
        failed[path] = str(info.get("reason") or status)
        return "failed"
    return "pending"


def report_launched(paths: list[Path], failed: dict[Path, str]) -> None:
    """One line per run of a launched campaign, as its jobs left it."""
    for path in paths:
        what = outcome(path, failed)
        detail = f": {failed[path]}" if what == "failed" else ""
        print(f"{COMMAND}: {what}: {path.parent.name}/{path.name}{detail}", file=sys.stderr)


def modes_of(preset: DictConfig, cfg: DictConfig) -> list[DictConfig]:
    """A run's configs: trained (or found completed) and scored, then scored in sliding
    windows too unless the preset says ``sliding: false``."""
    from posexp.claims.base import SLIDING

    modes = [cfg]
    if preset.get("sliding", True):
        modes.append(OmegaConf.merge(cfg, {"eval": {"mode": SLIDING, "stride": None}}))
    return modes


def launch_all(preset: DictConfig, configs: list[DictConfig], paths: list[Path],
               tunes: list[tuple[Path, list[str]]], launcher: list[str],
               config_dir: str | None, campaign: Campaign) -> tuple[list[Path], dict]:
    """Every run through the launcher, then every fine-tune whose parent was recorded (a
    fine-tune starts from its parent's weights); (every run's directory, the failures)."""
    from posexp.runs.parents import finetune_config

    folder = paths[0].parent / ".campaign"  # a dot-directory: never read as a run
    folder.mkdir(parents=True, exist_ok=True)
    launch([{"configs": [OmegaConf.to_yaml(c) for c in modes_of(preset, cfg)]}
            for cfg in configs], launcher, config_dir, folder, campaign)
    failed: dict[Path, str] = {}
    report_launched(paths, failed)
    jobs, tuned = [], []
    for i, (parent, overrides) in enumerate(tunes, len(configs) + 1):
        path = parent.with_name(f"{parent.name}-ft-{i}")
        if parent in failed:
            failed[path] = f"its parent {parent.name} failed"
        elif read_info(parent).get("status") == "completed":
            cfg = finetune_config(parent, overrides, record=True)
            path = Path(cfg.results_dir) / cfg.experiment / cfg.run_name
            jobs.append({"parent": str(parent), "overrides": overrides})
            campaign.paths.append(path)
        tuned.append(path)
    launch(jobs, launcher, config_dir, folder, campaign)
    report_launched([p for p in tuned if p not in failed], failed)
    return [*paths, *tuned], failed


def pending_runs(preset: DictConfig, configs: list[DictConfig], paths: list[Path],
                 tunes: list[tuple[Path, list[str]]],
                 failed: dict[Path, str]) -> dict[Path, tuple[DictConfig, Pending]]:
    """The campaign's runs neither recorded nor failed, each with a config good for its
    estimate (a fine-tune not composed yet: its parent's, at the fine-tune's tokens) and
    what claims are matched on."""
    from posexp.config import RunSpec
    from posexp.run.restore import lacks_points

    out: dict[Path, tuple[DictConfig, Pending]] = {}
    by_path = dict(zip(paths[:len(configs)], configs, strict=True))
    for path, cfg in by_path.items():  # a completed run short of a point asked is pending
        if path not in failed and (read_info(path).get("status") != "completed" or lacks_points(
                path, [RunSpec.of(c) for c in modes_of(preset, cfg)], records_only=False)):
            out[path] = (cfg, pending_of(cfg))
    for path, (parent, overrides) in zip(paths[len(configs):], tunes, strict=True):
        if path not in failed and read_info(path).get("status") != "completed":
            tokens = next((o.split("=", 1)[1] for o in reversed(overrides)
                           if o.startswith("train.tokens=")), by_path[parent].train.tokens)
            cfg = OmegaConf.merge(by_path[parent], {"train": {"tokens": int(tokens)}})
            out[path] = (cfg, pending_of(by_path[parent], True, tuple(overrides)))
    return out


def run_campaign(preset: DictConfig, configs: list[DictConfig], paths: list[Path],
                 tunes: list[tuple[Path, list[str]]], config_dir: str | None,
                 seconds: float | None, launcher: tuple[str, ...], train_all: Callable,
                 ) -> tuple[list[Path], dict[Path, str], Campaign, dict]:
    """Every run of the suite, in this process (``train_all``, the suite's) or through the
    launcher, within ``seconds`` (None: no limit); (every run's directory, the failures, the
    campaign, the pending runs as pending_runs gives them).  A signal (not the time limit)
    ends it as it ends a sweep."""
    import contextlib

    from posexp.sweep.launch import stopped_line
    from posexp.sweep.stop import stopping, take_stop

    campaign = Campaign(COMMAND, seconds, paths)
    # the basic launcher runs one job after another in this process: what train_all does
    parallel = [a for a in launcher if a != "hydra/launcher=basic"]
    watched = seconds is not None or bool(parallel)
    with stopping() if watched else contextlib.nullcontext(), campaign:
        if parallel:
            paths, failed = launch_all(preset, configs, paths, tunes, parallel, config_dir,
                                       campaign)
        else:
            paths, failed = train_all(preset, configs, paths, tunes, campaign)
    signum, broke = take_stop() if watched else (None, None)
    if signum is not None and (not campaign.expired or broke):
        raise stopped_line(configs, signum, broke)
    return paths, failed, campaign, pending_runs(preset, configs, paths, tunes, failed)


def end_campaign(campaign: Campaign, pending: dict, failed: dict[Path, str], total: int) -> None:
    """The summary of a campaign with a time limit, and its exit: TimeLimitReached while
    runs are pending; without a limit, runs pending (trained elsewhere) are an error."""
    from posexp.errors import PosexpError
    from posexp.timelimit import TimeLimitReached

    failures = f"; {len(failed)} failed" if failed else ""
    if campaign.deadline is not None:
        line = campaign.summary({path: cfg for path, (cfg, _) in pending.items()})
        print(f"{COMMAND}: {line}{failures}", file=sys.stderr)
        if pending:
            raise TimeLimitReached(f"stopped at the time limit: {line}{failures}; run the same "
                                   "command again to continue")
    elif pending:
        raise PosexpError(f"{len(pending)} of {total} runs are pending (running elsewhere, or "
                          "stopped); their claims are pending: run the same command again "
                          "once they are done")
