"""The files of a run directory and how they are written: every whole-file write goes to a
temporary file in the same directory and is renamed over the target, so a crash leaves
either the old file or the new one, never half of one."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import stat
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
    """JSON that every JSON reader takes: a NaN or an infinity is refused, naming the file,
    and the file is left as it was (json's own words, "Out of range float values are not
    JSON compliant", name neither)."""
    try:
        text = json.dumps(obj, indent=2, allow_nan=False)
    except ValueError:
        raise PosexpError(f"cannot write {path}: it would hold a value that is not a finite "
                          f"number ({non_finite(obj) or 'NaN or infinity'})") from None
    atomic_write_text(path, text + "\n")


def non_finite(obj: Any) -> str | None:
    """Where in ``obj`` the first NaN or infinity is, as 'curve[2].ppl = inf' (walked without
    recursion: JSON nested deeper than Python's stack is still answered)."""
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return f"{where or 'the value'} = {value}"
        items = value.items() if isinstance(value, dict) else enumerate(value) \
            if isinstance(value, (list, tuple)) else ()
        children = [(f"{where}[{key}]" if isinstance(key, int)
                     else f"{where}.{key}" if where else str(key), child)
                    for key, child in items]
        stack.extend(reversed(children))
    return None


def is_regular(path: Path) -> bool:
    """Whether ``path`` is a regular file (or a link to one).  Opening a FIFO waits for a
    writer, and /dev/zero reads without end: a run file that is anything else is damaged,
    never opened."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def require_regular(path: Path) -> None:
    """A PosexpError naming ``path`` when it exists and is not a regular file."""
    if os.path.lexists(path) and not is_regular(path):
        what = ("a directory" if path.is_dir() else "a FIFO" if path.is_fifo()
                else "a link to nothing" if not path.exists() else "a device or socket")
        raise PosexpError(f"{path} is damaged: it is {what}, not a regular file")


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


def code_record(module: str | None) -> dict:
    """The code this process scores and trains with: posexp's version and source hash and,
    for an encoding of the user's own (encoding.module), its module and source hash.
    run.json records it when a run starts, eval.json with its points."""
    record = {"posexp": version.__version__, "source_sha256": version.source_sha256()}
    if module:
        record.update(encoding_module=module,
                      encoding_module_sha256=version.module_sha256(module))
    return record


def code_text(record: dict | None) -> str:
    """A code record in a line: 'posexp 0.1.0 (source 3f2a...)' and the module's."""
    if not isinstance(record, dict):
        return "unrecorded"
    text = f"posexp {record.get('posexp')} (source {str(record.get('source_sha256'))[:12]})"
    if record.get("encoding_module"):
        text += (f", {record['encoding_module']} "
                 f"(source {str(record.get('encoding_module_sha256'))[:12]})")
    return text


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
