"""A sweep's jobs as Hydra's launcher runs them: torch threads shared between parallel jobs,
one job (``sweep_job``), and the table and line a sweep ends with."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

from omegaconf import DictConfig

from posexp.config import RunSpec
from posexp.errors import PosexpError, Stopped, first_line
from posexp.sweep.lines import whole_lines
from posexp.sweep.stop import request_stop, take_stop


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


def guard_worker() -> bool:
    """First thing in a job that a parallel launcher runs in a worker process: SIGINT and
    SIGTERM (a terminal's Ctrl-C and timeout reach the whole process group) write the stop
    file instead of ending the worker -- a worker ended so breaks joblib's pool, which
    reports a dead worker instead of the stop.  Returns whether the job runs in a worker
    (not under the basic launcher, which runs it in the sweep's own process)."""
    from hydra.core.hydra_config import HydraConfig

    target = str(HydraConfig.get().launcher.get("_target_", ""))
    if "BasicLauncher" in target:
        return False
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):
            signal.signal(sig, request_stop)
    return True


def sweep_job(cfg: DictConfig) -> str:
    """One job of a sweep, its config planned and checked (sweep.plan), run by Hydra's
    launcher; returns the run's status.  Under a parallel launcher every line the job
    prints is whole and starts with its run name, and progress is a plain line every 30 s.
    A job stopped by a signal (its own, or its parent's through the stop file) is
    checkpointed and marked interrupted: one after another, the sweep ends there; in
    parallel, the job reports it and the parent says so once all have; a job not started
    by then does not start."""
    import torch
    from hydra.core.hydra_config import HydraConfig

    from posexp.run import run
    from posexp.run.training import Interrupted, stop_requested

    name = f"{cfg.experiment}/{cfg.run_name}"
    launcher = HydraConfig.get().launcher
    threads = worker_threads(launcher)
    if threads:
        torch.set_num_threads(threads)
    sequential = not guard_worker()
    if stop_requested() is not None:
        return "not started"
    with contextlib.nullcontext() if sequential else whole_lines(f"[{cfg.run_name}] "):
        try:
            return run(RunSpec.of(cfg), progress=True, group=cfg.experiment)
        except (Interrupted, KeyboardInterrupt):
            if sequential:
                raise  # a signal stops the whole sweep; its run is checkpointed
            request_stop(signal.SIGTERM)  # its own signal: the other jobs stop too
            return "interrupted"
        except Exception as e:  # one failed job must not stop the sweep
            print(f"posexp sweep: {name}: failed: {first_line(e)}", file=sys.stderr)
            return "failed"


def summarize(jobs: list[DictConfig]) -> None:
    """Print the sweep's table and write summary.md / summary.csv next to its runs; a job
    that did not complete, or whose run cannot be read, is listed with the reason, and makes
    the exit status 1."""
    from posexp.report import Report, terminal_table, write_tables
    from posexp.runs import MISSING, RunResult, load_run, split_runs

    signum, broke = take_stop()
    if signum is not None:
        raise stopped_line(jobs, signum, broke)
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


def stopped_line(jobs: list[DictConfig], signum: int, broke: str | None = None) -> Stopped:
    """The one line a stopped sweep ends with: how many runs were checkpointed and marked
    interrupted, how many completed and how many never started, and the launcher's error
    where a worker the signal ended broke it off (``broke``); exit 128 + signum."""
    from posexp.runs import load_run

    statuses = [load_run(Path(c.results_dir) / c.experiment / c.run_name).status
                for c in jobs]
    counts = {s: statuses.count(s) for s in dict.fromkeys(statuses)}
    interrupted = counts.pop("interrupted", 0)
    parts = [f"{interrupted} run{'s' * (interrupted != 1)} checkpointed and marked "
             "interrupted"] + [f"{n} {status}" for status, n in counts.items()
                               if status != "missing"]
    if counts.get("missing"):
        parts.append(f"{counts['missing']} not started")
    if broke:
        parts.append(f"the launcher broken off by a worker the signal ended ({broke})")
    error = Stopped(f"stopped by {signal.Signals(signum).name}: {', '.join(parts)}; run the "
                    "same command again to finish the sweep")
    error.exit_code = 128 + signum
    return error
