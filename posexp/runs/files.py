"""The files of a run directory and how they are written: every whole-file write goes to a
temporary file in the same directory and is renamed over the target, so a crash leaves
either the old file or the new one, never half of one."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from posexp import version
from posexp.errors import PosexpError

CONFIG, RUN, METRICS, EVAL, CHECKPOINT = (
    "config.yaml", "run.json", "metrics.jsonl", "eval.json", "checkpoint.pt",
)


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


FILE_MODE = _file_mode()  # what open() would give; mkstemp alone makes files private (0600)


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` through a temporary file and a rename.  A failed write (a full disk,
    say) leaves the previous file as it was and raises PosexpError naming the file."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise PosexpError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise PosexpError(f"cannot write {path}: {e.strerror or e}") from None
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda fh: fh.write(text.encode()))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


def code_version() -> str:
    """The git commit of posexp's own source tree when it runs from a checkout of it, else the
    package version (a git repository that merely encloses an installed posexp -- a project
    whose .venv holds it -- says nothing about posexp's code)."""
    src = version.SOURCE
    if not (src.parent / "pyproject.toml").is_file() or not (src.parent / ".git").exists():
        return version.__version__
    try:
        out = subprocess.run(
            ["git", "-C", str(src.parent), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True, text=True, timeout=5, check=True,
        )
        return f"{version.__version__}+git.{out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        return version.__version__


def versions() -> dict[str, str]:
    import hydra
    import numpy
    import torch

    return {
        "posexp": version.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "hydra": hydra.__version__,
    }
