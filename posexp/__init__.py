"""posexp: which positional encoding keeps working past the length it was trained on?

The Python API -- what the command line is built on, for a notebook or a script::

    import posexp

    spec = posexp.compose(["encoding=alibi", "train.tokens=200000"])  # checked, resolved
    posexp.train(spec)                   # trains and scores it: "completed" (or "skipped")
    rows = posexp.curves(spec.path)      # one record per scored point (summary.csv's rows)
    frame = posexp.curves_frame("results/default")  # the same as a pandas DataFrame
    model = posexp.load_model(spec.path)  # the trained GPT, in eval mode
    logits = model(tokens)                # [batch, seq, vocab] for token ids [batch, seq]

Nothing heavy is imported until a function is called.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from pathlib import Path

if typing.TYPE_CHECKING:
    import pandas

    from posexp.config import RunSpec
    from posexp.model import GPT
    from posexp.runs import RunResult

from posexp.version import __version__

__all__ = ["__version__", "compose", "curves", "curves_frame", "load_model", "load_run",
           "load_runs", "train"]


def __dir__() -> list[str]:
    return list(__all__)


def compose(overrides: Sequence[str] = (), config_dir: str | Path | None = None) -> RunSpec:
    """The run posexp train would make of ``overrides`` (Hydra syntax, as on the command
    line; ``config_dir`` adds config files as --config-dir does), checked and resolved: a
    frozen RunSpec whose ``cfg`` is what config.yaml will hold and whose ``path`` is where
    the run goes.  A bad override raises posexp.errors.UsageError with the CLI's one line."""
    from posexp.config import RunSpec, register
    from posexp.config import compose as compose_config

    register()
    cfg = compose_config(list(overrides), str(config_dir) if config_dir else None)
    return RunSpec.of(cfg)


def train(spec: RunSpec, progress: bool = True) -> str:
    """Train and score ``spec`` as posexp train does (same identity, lock, skip or resume):
    "completed", "scored" (only missing points were computed) or "skipped".  (The function
    is named for the command: posexp.run is the package of a run's lifecycle.)"""
    from posexp.run import run

    return run(spec, progress=progress)


def load_run(path: str | Path) -> RunResult:
    """One run directory read back: status, identity, curve and task points (a damaged run
    has status "damaged" and a reason; it never raises)."""
    from posexp.runs import load_run as load

    return load(Path(path))


def load_runs(root: str | Path) -> list[RunResult]:
    """Every run under ``root``, completed or not."""
    from posexp.runs import load_run as load
    from posexp.runs import run_dirs

    return [load(d) for d in run_dirs(Path(root))]


def curves(where: str | Path | Sequence[RunResult]) -> list[dict]:
    """One record per scored point of the completed runs under ``where`` (a run directory,
    a directory of runs, or runs already loaded): summary.csv's columns, with the series
    each point belongs to (seeds of one config share a series)."""
    from posexp.report import Report, tidy_rows
    from posexp.runs import split_runs

    if isinstance(where, (str, Path)):
        path = Path(where)
        found = [load_run(path)] if (path / "run.json").is_file() else load_runs(path)
    else:
        found = list(where)
    done, _ = split_runs(found)
    return tidy_rows(Report.of(done))


def curves_frame(where: str | Path | Sequence[RunResult]) -> pandas.DataFrame:
    """``curves(where)`` as a pandas DataFrame (pandas must be installed)."""
    try:
        import pandas
    except ImportError:
        from posexp.errors import UsageError

        raise UsageError("curves_frame needs pandas (pip install pandas); curves() gives "
                         "the same records as dicts") from None
    from posexp.report.tables import CSV_COLUMNS

    return pandas.DataFrame(curves(where), columns=CSV_COLUMNS)


def load_model(path: str | Path, device: str = "cpu") -> GPT:
    """The trained model of a completed run, its weights loaded, in eval mode, on
    ``device``; RoPE scaled as a fine-tune with encoding.scaling was trained."""
    from posexp.config import RunSpec, apply_overrides, register
    from posexp.errors import PosexpError
    from posexp.run.setup import build_model
    from posexp.runs import Run

    register()
    stored = Run.open(Path(path))
    stored.require_checkpoint("posexp.load_model")
    spec = RunSpec.of(apply_overrides(stored.config(), [], allowed=(), run_dir=stored.path))
    vocab = (stored.info().get("corpus") or {}).get("vocab_size")
    if not isinstance(vocab, int):
        raise PosexpError(f"{stored.path / 'run.json'} does not record the vocabulary size")
    model = build_model(spec, vocab)
    model.load_state_dict(stored.load_checkpoint()["model"])
    return model.to(device).eval()
