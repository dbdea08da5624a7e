"""The run directory: the only reader and writer of run files.  files.py writes atomically;
store.py is one run directory (lock, status, config, points, checkpoint); records.py reads
files back checked; results.py reads whole runs back for ls, compare, report and claims."""

from posexp.runs.files import (
    CHECKPOINT,
    CONFIG,
    EVAL,
    METRICS,
    RUN,
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    code_record,
    code_text,
    code_version,
    is_regular,
    now,
    require_regular,
    shorten,
    versions,
)
from posexp.runs.points import (
    MODES,
    Region,
    is_spread,
    point_key,
    point_scaling,
    region,
    region_text,
    task_point_key,
)
from posexp.runs.results import (
    DAMAGED,
    MISSING,
    RunResult,
    continues_protocol,
    load_run,
    load_runs,
    run_dirs,
    split_runs,
)
from posexp.runs.store import Run, identity_sha256, scored_points, weights_sha256

__all__ = ["CHECKPOINT", "CONFIG", "DAMAGED", "EVAL", "METRICS", "MISSING", "MODES", "RUN",
           "Region", "Run", "RunResult", "atomic_write", "atomic_write_json",
           "atomic_write_text", "code_record", "code_text", "code_version", "continues_protocol",
           "identity_sha256", "is_regular", "is_spread", "load_run", "load_runs", "now",
           "point_key", "point_scaling", "region", "region_text", "require_regular",
           "run_dirs", "scored_points", "shorten", "split_runs", "task_point_key",
           "versions", "weights_sha256"]
