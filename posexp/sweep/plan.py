"""A sweep planned before anything trains: the grid Hydra's sweeper would expand, every job
composed and checked (``plan``), each named by the keys it sweeps; a large plan says how far
it has got every 30 s."""

from __future__ import annotations

import itertools
import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from posexp.config import GROUPS, RunSpec, check, compose_overrides, in_identity, split_hydra
from posexp.config.bounds import MAX_SWEEP_JOBS
from posexp.config.compose import group_options
from posexp.config.guards import check_overrides, parse_override
from posexp.errors import PosexpError, UsageError

MAX_JOBS_VARIABLE = "POSEXP_SWEEP_MAX_JOBS"


def grid(overrides: list[str], preset_params: dict[str, str],
         options: Callable[[str], list[str]]) -> list[list[str]]:
    """The override lists of every job: the command line's sweeps (``a,b``, ``range()``,
    ``glob()``), and for keys the command line leaves alone, the preset's
    ``hydra.sweeper.params``.  ``glob(...)`` chooses among ``options(group)``, a config
    group's options without its schema, so ``encoding=glob(*)`` is every registered
    encoding."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType

    parser = OverridesParser.create()
    parsed = parser.parse_overrides(overrides)
    given = {o.get_key_element() for o in parsed}
    parsed += parser.parse_overrides(
        [f"{k}={v}" for k, v in preset_params.items() if k not in given])
    axes = []
    bound = max_jobs()
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
        else:  # at most one value past the bound: range(0,10**12) is not listed
            values = (list(itertools.islice(o.sweep_string_iterator(), bound + 2))
                      if o.is_sweep_override() else [o.get_value_element_as_str()])
        axes.append([f"{key}={v}" for v in values])
    count = math.prod(len(axis) for axis in axes)
    if count > bound:
        many = f"more than {bound + 1:,}" if any(len(a) > bound + 1 for a in axes) \
            else f"{count:,}"
        raise UsageError(f"this sweep has {many} jobs; one sweep runs at most {bound:,} (each "
                         "job is composed and checked before the first starts, about 0.2 s a "
                         f"job); split it into sweeps of at most {bound:,} jobs (e.g. "
                         f"seed=range(0,{bound}), then seed=range({bound},{2 * bound}); a sweep "
                         "run again skips completed runs), or raise the bound: "
                         f"{MAX_JOBS_VARIABLE}=N posexp sweep ...")
    return [list(job) for job in itertools.product(*axes)]


def max_jobs() -> int:
    """The most jobs one sweep may have: MAX_SWEEP_JOBS, or POSEXP_SWEEP_MAX_JOBS."""
    value = os.environ.get(MAX_JOBS_VARIABLE)
    if value is None:
        return MAX_SWEEP_JOBS
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"{MAX_JOBS_VARIABLE} must be a positive integer, got {value!r}")
    return int(value)


# Already in the default run name ${encoding.name}-L${train.seq_len}-s${seed}.
NAMED_KEYS = ("encoding", "train.seq_len", "seed")


def run_name_override(jobs: list[list[str]], pinned: Iterable[str] = ()) -> list[str]:
    """The run_name override that gives every job of a sweep its own directory: the default
    name plus ``,key=${key}`` for each swept key of the identity it does not hold (a config
    group by its option's name), and each such key the sweep preset ``pinned`` to one value
    (sweep=lr-cpu's train.tokens: its runs sit beside the suite's at another budget), with
    the last part of a dotted key where that is unique.  Nothing when the command line or the
    sweep preset sets run_name, or nothing else is swept."""
    values: dict[str, set[str]] = {}
    for job in jobs:
        for override in job:
            key, _, value = override.partition("=")
            values.setdefault(key.lstrip("+~"), set()).add(value)
    if "run_name" in values:
        return []
    swept = [k for k, v in values.items()
             if (len(v) > 1 or k in pinned) and k not in NAMED_KEYS and in_identity(k)]
    if not swept:
        return []
    short = [k.rsplit(".", 1)[-1] for k in swept]
    parts = []
    for key, name in zip(swept, short, strict=True):
        label = name if short.count(name) == 1 else key
        # a config group is named by the option chosen
        value = f"${{hydra:runtime.choices.{key}}}" if key in GROUPS else \
            f"${{plain:${{{key}}}}}"
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
    the overrides posexp adds to the sweep (the run name, the launcher's n_jobs).  Two jobs
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
    jobs = grid(overrides, {str(k): str(v) for k, v in params.items()},
                       lambda group: group_options(group, config_dir))
    run_name = run_name_override(jobs, params)
    launcher = check_launcher(preset.hydra.launcher, len(jobs))
    planned, where, checked = [], {}, set()
    planning = Planning(len(jobs))
    for job in jobs:
        planning.tick()
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
    return planned, [*run_name, *launcher]


class Planning:
    """A line every 30 s while a large sweep (or a claim suite: ``command`` reproduce, its
    ``items`` runs) is planned -- composing a job takes about 0.2 s, so 1,000 take minutes:
    on a terminal and in a log alike, nothing for a short plan."""

    def __init__(self, total: int, command: str = "sweep", items: str = "jobs") -> None:
        from posexp.run.training import progress_every

        self.total, self.done, self.every = total, 0, progress_every()
        self.start = self.last = time.perf_counter()
        self.command, self.items = command, items

    def tick(self) -> None:
        now = time.perf_counter()
        if self.done and now - self.last >= self.every:
            self.last = now
            left = (now - self.start) / self.done * (self.total - self.done)
            print(f"posexp {self.command}: planning: {self.done:,} of {self.total:,} "
                  f"{self.items} composed and checked, about {left:.0f} s left",
                  file=sys.stderr, flush=True)
        self.done += 1


def check_launcher(launcher: DictConfig, jobs: int) -> list[str]:
    """The launcher's settings that would fail only once the jobs are launched, refused now
    (joblib's n_jobs=0); and the overrides posexp adds: joblib's n_jobs lowered to the
    number of jobs, so no worker sits idle (an idle worker dies of a signal it has no
    handler for yet, and takes the pool down with it) and each job gets more threads."""
    target = str(launcher.get("_target_", ""))
    if "joblib" not in target:
        return []
    n_jobs = launcher.get("n_jobs")
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0:
        raise UsageError(f"hydra.launcher.n_jobs must be a non-zero integer (the jobs run at "
                         f"once; -1: one for each core), got {n_jobs!r}")
    cores = os.cpu_count() or 1
    effective = n_jobs if n_jobs > 0 else max(1, cores + 1 + n_jobs)
    return [f"hydra.launcher.n_jobs={jobs}"] if effective > jobs else []


def one_job(overrides: list[str]) -> list[str]:
    """The overrides with each sweep replaced by its first value (a glob left out): what the
    sweep's common config composes from (task.* needs a task, say).  An interval is
    refused here, first: Hydra's sweeper cannot list one, and says so in its own words."""
    from hydra.core.override_parser.types import ValueType

    out = []
    for o in overrides:
        parsed = parse_override(o)
        if parsed.value_type == ValueType.INTERVAL_SWEEP:
            key = parsed.get_key_element()
            raise UsageError(f"{o}: interval() is a continuous range, which a sweep cannot "
                             "list (it is for samplers such as Optuna's); give the values: "
                             f"{key}=0,1 or {key}=range(0,10)")
        if not parsed.is_sweep_override():
            out.append(o)
        elif parsed.value_type != ValueType.GLOB_CHOICE_SWEEP:
            out.append(f"{parsed.get_key_element()}={next(parsed.sweep_string_iterator())}")
    return out


def is_hydra(override: str) -> bool:
    """Whether an override sets Hydra's part of the config (hydra/launcher=joblib,
    hydra.launcher.n_jobs=2): the launcher's, not a job's."""
    return parse_override(override).key_or_group.split("/")[0].split(".")[0] == "hydra"


def _job(overrides: list[str], run_name: list[str], config_dir: str | None,
         config_name: str | None) -> Job:
    """One job composed and checked; a UsageError names its overrides."""
    try:
        cfg, hydra_node = split_hydra(compose_overrides(
            [*overrides, *run_name], config_dir, config_name, with_hydra=True,
            command="sweep"))
        check(cfg)
    except PosexpError as e:
        raise UsageError(f"{' '.join(overrides)}: {e}") from None
    return Job(overrides, cfg, hydra_node)
