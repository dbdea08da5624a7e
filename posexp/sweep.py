"""Sweeps: encodings x training lengths x seeds through Hydra's multirun.

Hydra's sweeper expands the grid and its launcher plugins run the jobs (sequential, joblib,
submitit).  posexp adds three things around them: every job of the grid is composed and
checked before the first one starts (``plan``); each job is a run (run/lifecycle.py), which
skips a run directory that already holds a completed run of the same identity and resumes an
unfinished one, so a sweep run again finishes only what is missing; and a failed job is
recorded and reported without stopping the others.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, open_dict

from posexp.config import GROUPS, RunSpec, check, compose_overrides, in_identity
from posexp.config.compose import group_options
from posexp.config.guards import check_overrides, parse_override
from posexp.errors import PosexpError, UsageError, first_line


def grid(overrides: list[str], preset_params: dict[str, str],
         options: Callable[[str], list[str]]) -> tuple[list[list[str]], list[str]]:
    """The override lists of every job: the command line's sweeps (``a,b``, ``range()``,
    ``glob()``), and for keys the command line leaves alone, the preset's
    ``hydra.sweeper.params``.  ``glob(...)`` chooses among ``options(group)``, a config
    group's options without its schema, so ``encoding=glob(*)`` is every registered
    encoding; each glob comes back spelled out (``encoding=alibi,fire,...``) for Hydra's
    launcher to sweep exactly the planned values."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType

    parser = OverridesParser.create()
    parsed = parser.parse_overrides(overrides)
    given = {o.get_key_element() for o in parsed}
    parsed += parser.parse_overrides(
        [f"{k}={v}" for k, v in preset_params.items() if k not in given])
    axes, spelled = [], []
    for o in parsed:
        key = o.get_key_element()
        if o.value_type == ValueType.GLOB_CHOICE_SWEEP:
            available = options(key)
            if not available:
                raise UsageError(f"{o.input_line}: glob() chooses among a config group's "
                                 f"options, and {key} is not a config group")
            values = o.value().filter(available)
            if not values:
                raise UsageError(f"{o.input_line} matches none of the {key} options "
                                 f"({', '.join(available)})")
            spelled.append(f"{key}={','.join(values)}")
        else:
            values = (list(o.sweep_string_iterator()) if o.is_sweep_override()
                      else [o.get_value_element_as_str()])
        axes.append([f"{key}={v}" for v in values])
    return [list(job) for job in itertools.product(*axes)], spelled


def is_glob(override: str) -> bool:
    """Whether an override of the command line sweeps a glob of group options."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType

    return OverridesParser.create().parse_override(override).value_type == \
        ValueType.GLOB_CHOICE_SWEEP


# Already in the default run name ${encoding.name}-L${train.seq_len}-s${seed}.
NAMED_KEYS = ("encoding", "train.seq_len", "seed")


def run_name_override(jobs: list[list[str]]) -> list[str]:
    """The run_name override that gives every job of a sweep its own directory: the default
    name plus ``,key=${key}`` for each swept key of the identity it does not hold (a config
    group by its option's name), with the last part of a dotted key where that is unique.
    Nothing when the command line or the sweep preset sets run_name, or nothing else is
    swept."""
    values: dict[str, set[str]] = {}
    for job in jobs:
        for override in job:
            key, _, value = override.partition("=")
            values.setdefault(key.lstrip("+~"), set()).add(value)
    if "run_name" in values:
        return []
    swept = [k for k, v in values.items()
             if len(v) > 1 and k not in NAMED_KEYS and in_identity(k)]
    if not swept:
        return []
    short = [k.rsplit(".", 1)[-1] for k in swept]
    parts = []
    for key, name in zip(swept, short, strict=True):
        label = name if short.count(name) == 1 else key
        # a config group is named by the option chosen
        value = f"${{hydra:runtime.choices.{key}}}" if key in GROUPS else f"${{{key}}}"
        parts.append(f",{label}={value}")
    return [f"run_name='${{encoding.name}}-L${{train.seq_len}}-s${{seed}}{''.join(parts)}'"]


@dataclass
class Job:
    """One job of a sweep: its overrides, its checked config, and Hydra's part of it."""

    overrides: list[str]
    cfg: DictConfig
    hydra: DictConfig


def plan(overrides: list[str], config_dir: str | None = None,
         config_name: str | None = None, devices: bool = True) -> tuple[list[Job], list[str]]:
    """Every job's overrides and composed, checked config, before the first one starts, and
    the overrides posexp adds to the sweep (the run name, globs spelled out).  Two jobs
    never share a directory: unless run_name is given, it grows with every swept key of the
    identity that the default name does not already hold, in Hydra's override_dirname style
    (rope-L64-s0,d_model=32,lr=0.001); a plan that still puts two jobs in one directory is
    refused.  ``devices``: check each job's device exists here."""
    from posexp.run import existing, pick_device  # torch: not for --help
    from posexp.runs import Run

    check_overrides(overrides, "sweep")
    preset = compose_overrides(one_job(overrides), config_dir, config_name, with_hydra=True,
                               command="sweep", resolve=False)
    params = preset.hydra.sweeper.params or {}
    jobs, globs = grid(overrides, {str(k): str(v) for k, v in params.items()},
                       lambda group: group_options(group, config_dir))
    run_name = run_name_override(jobs)
    planned, where, checked = [], {}, set()
    for job in jobs:
        j = _job(job, run_name, config_dir, config_name)
        if devices and (j.cfg.device, j.cfg.attention) not in checked:
            try:
                pick_device(j.cfg)
            except PosexpError as e:
                raise UsageError(f"{' '.join(job)}: {e}") from None
            checked.add((j.cfg.device, j.cfg.attention))
        path = Path(j.cfg.results_dir) / j.cfg.experiment / j.cfg.run_name
        if path in where:
            first = [o for o in where[path] if o not in job]
            second = [o for o in job if o not in where[path]]
            raise UsageError(f"two jobs of this sweep would share the run directory {path}: "
                             f"[{' '.join(first)}] and [{' '.join(second)}]; give each its "
                             "own run_name= or experiment= (e.g. run_name='${encoding.name}-"
                             "${train.lr}'), or sweep evaluation settings with posexp eval")
        where[path] = job
        planned.append(j)
    for j in planned:  # before any job runs: a directory holding another identity
        if j.cfg.train.resume:
            spec = RunSpec.of(j.cfg)
            existing(Run(spec.path), spec)
    return planned, [*run_name, *globs]


def one_job(overrides: list[str]) -> list[str]:
    """The overrides with each sweep replaced by its first value (a glob left out): what the
    sweep's common config composes from (task.* needs a task, say)."""
    from hydra.core.override_parser.types import ValueType

    out = []
    for o in overrides:
        parsed = parse_override(o)
        if not parsed.is_sweep_override():
            out.append(o)
        elif parsed.value_type != ValueType.GLOB_CHOICE_SWEEP:
            out.append(f"{parsed.get_key_element()}={next(parsed.sweep_string_iterator())}")
    return out


def launcher_overrides(overrides: list[str]) -> list[str]:
    """The overrides as Hydra's launcher gets them: a key inside a config group the sweep
    chooses among (task.eval_count with task=copy,reverse) becomes a sweep of its one value,
    so that Hydra sets it in each job, where the group is chosen, and not in the config it
    composes first, where it is not."""
    swept = {parse_override(o).get_key_element() for o in overrides
             if parse_override(o).is_sweep_override()}
    groups = swept & set(GROUPS)
    out = []
    for o in overrides:
        parsed = parse_override(o)
        key = parsed.get_key_element()
        if not parsed.is_sweep_override() and key.split(".")[0] in groups and "." in key:
            o = f"{key}=choice({o.partition('=')[2]})"
        out.append(o)
    return out


def _job(overrides: list[str], run_name: list[str], config_dir: str | None,
         config_name: str | None) -> Job:
    """One job composed and checked; a UsageError names its overrides."""
    try:
        cfg = compose_overrides([*overrides, *run_name], config_dir, config_name,
                                with_hydra=True, command="sweep")
        with open_dict(cfg):
            hydra_node = cfg.hydra
            del cfg["hydra"]
        check(cfg)
    except PosexpError as e:
        raise UsageError(f"{' '.join(overrides)}: {e}") from None
    return Job(overrides, cfg, hydra_node)


def worker_threads(launcher: DictConfig) -> int | None:
    """Torch threads per job so that parallel jobs share the cores instead of fighting over
    them (two 2-thread jobs on 2 cores run several times slower than one after the other)."""
    target = str(launcher.get("_target_", ""))
    cores = os.cpu_count() or 1
    if "joblib" in target:
        n_jobs = int(launcher.get("n_jobs") or -1)
        n_jobs = n_jobs if n_jobs > 0 else max(1, cores + 1 + n_jobs)
        return max(1, cores // n_jobs)
    if "submitit" in target and launcher.get("cpus_per_task"):
        return int(launcher.cpus_per_task)
    return None


class Lines(io.TextIOBase):
    """A text stream that writes only whole lines, each with its prefix and in one write
    call, so that the lines of jobs running at once on one terminal or log never run
    together (a pipe keeps a write of up to 4096 bytes in one piece).  What follows the last
    newline waits for the rest of its line, or for ``close``."""

    def __init__(self, fd: int, prefix: str) -> None:
        super().__init__()
        self.fd, self.prefix, self.pending = fd, prefix, ""

    @property
    def encoding(self) -> str:
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False  # progress bars stay off: their redrawn lines are not whole lines

    def fileno(self) -> int:
        return self.fd

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            self._write_all(f"{self.prefix + line if line else self.prefix.rstrip()}\n"
                            .encode())
        return len(text)

    def _write_all(self, data: bytes) -> None:
        while data:
            data = data[os.write(self.fd, data):]

    def close(self) -> None:
        if self.pending:
            self.write("\n")
        super().close()


@contextlib.contextmanager
def whole_lines(prefix: str) -> Iterator[None]:
    """stdout and stderr of this process as Lines with ``prefix``, until the block ends."""
    saved = sys.stdout, sys.stderr
    for stream in saved:
        stream.flush()
    out, err = Lines(saved[0].fileno(), prefix), Lines(saved[1].fileno(), prefix)
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        out.close()
        err.close()


def sweep_job(cfg: DictConfig) -> str:
    """One job of a sweep, run by Hydra's launcher; returns the run's status.  Under a
    parallel launcher every line the job prints is whole and starts with its run name, and
    there are no progress bars."""
    import torch
    from hydra.core.hydra_config import HydraConfig

    from posexp.run import run
    from posexp.run.training import Interrupted

    name = f"{cfg.experiment}/{cfg.run_name}"
    launcher = HydraConfig.get().launcher
    threads = worker_threads(launcher)
    if threads:
        torch.set_num_threads(threads)
    sequential = "BasicLauncher" in str(launcher.get("_target_", ""))
    with contextlib.nullcontext() if sequential else whole_lines(f"[{cfg.run_name}] "):
        try:
            check(cfg)
            return run(RunSpec.of(cfg), progress=sequential, group=cfg.experiment)
        except Interrupted:
            raise  # a signal stops the whole sweep; its run is checkpointed
        except Exception as e:  # one failed job must not stop the sweep
            print(f"posexp sweep: {name}: failed: {first_line(e)}", file=sys.stderr)
            return "failed"


def summarize(jobs: list[DictConfig]) -> None:
    """Print the sweep's table and write summary.md / summary.csv next to its runs; a job
    that did not complete, or whose run cannot be read, is listed with the reason, and makes
    the exit status 1."""
    from posexp.report import Report, terminal_table, write_tables
    from posexp.runs import MISSING, RunResult, load_run, split_runs

    by_experiment: dict[Path, list[RunResult]] = {}
    for cfg in jobs:
        root = Path(cfg.results_dir) / cfg.experiment
        path = root / cfg.run_name
        result = load_run(path)
        if result.status == MISSING:  # the job failed before its directory held a run
            result = RunResult(path, {"status": "not started",
                                      "reason": "failed before training; see messages above"})
        by_experiment.setdefault(root, []).append(result)
    failed = []
    for root, results in by_experiment.items():
        report = Report.of(*split_runs(results))
        files = write_tables(report, root, f"posexp sweep: {root}")
        print(terminal_table(report) if report.runs else "no run completed")
        for r in report.not_done:
            print(f"  not completed: {r.path} ({r.status}: {r.reason})")
        print(f"tables: {', '.join(str(f) for f in files)}")
        failed += report.not_done
    if failed:
        raise PosexpError(f"{len(failed)} of {len(jobs)} runs did not complete")
