"""A run record's weights, trained again for a campaign that asks it for points it lacks.

A record travels without its checkpoint (docs/runs.md).  A campaign may still ask it for
points it was not scored at -- the learning-rate sweep scores at L only, and the suite then
reads the chosen run at every length.  Training on the CPU is deterministic (the golden test,
tests/unit/test_golden.py, holds it bit for bit), so the record's config trained again gives
its weights back: the campaign trains it in a scratch directory beside the runs, takes the
checkpoint only if its weights are the record's own (run.json's weights_sha256), and scores
the missing points from it as from any completed run.  Weights that differ (another machine's
numerics) are refused in one line; the record is never changed by a failed attempt.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from posexp.config import RunSpec
from posexp.errors import PosexpError
from posexp.runs import CHECKPOINT, Run

SCRATCH = ".campaign"  # beside the runs: results/.gitignore keeps it out of git


def lacks_points(path: Path, specs: list[RunSpec], records_only: bool = True) -> bool:
    """Whether ``path`` holds a run record (with ``records_only`` false, any completed run)
    that lacks a point one of ``specs`` asks for."""
    from posexp.run.evaluation import missing_points
    from posexp.run.workloads import workload_of

    run = Run(path)
    if not os.path.lexists(path / "run.json"):
        return False
    info = run.info()
    if not run.is_record(info) if records_only else info.get("status") != "completed":
        return False
    scored = run.read_eval()
    return any(missing_points(workload_of(spec), spec.run_scalings, scored) for spec in specs)


def restore_weights(path: Path, spec: RunSpec) -> None:
    """The record in ``path`` gets its checkpoint back: ``spec`` (its run) trained again in
    a scratch directory, its weights checked against the record's; a PosexpError, the record
    untouched, when they differ."""
    from posexp.run import run

    recorded = Run(path).info().get("weights_sha256")
    if not recorded:
        raise PosexpError(f"{path} records no weights_sha256: its weights cannot be checked, "
                          "so they are not trained again")
    scratch = path.parent / SCRATCH / "restore"
    # scored again where it is: here L is enough (a task run is scored at its task lengths)
    again = spec.relocated(str(scratch), path.parent.name, path.name,
                           None if spec.is_task_run else [spec.train.seq_len])
    where = scratch / path.parent.name / path.name
    shutil.rmtree(where, ignore_errors=True)  # a killed attempt's leftovers start nothing
    print(f"posexp: {path}: a record without its checkpoint lacks points asked for; training "
          "its config again for its weights", file=sys.stderr)
    try:
        run(again)
        found = Run(where).info().get("weights_sha256")
        if found != recorded:
            raise PosexpError(f"{path}: training its config again gave other weights (sha256 "
                              f"{str(found)[:12]}, the record has {recorded[:12]}): this "
                              "machine does not reproduce the record's numerics, so its "
                              "missing points cannot be scored here")
        tmp = path / f".{CHECKPOINT}.restore.tmp"
        shutil.copyfile(where / CHECKPOINT, tmp)
        os.replace(tmp, path / CHECKPOINT)
    finally:  # kept only while it trains: an interrupted attempt starts afresh next time
        shutil.rmtree(where, ignore_errors=True)
