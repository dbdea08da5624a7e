"""The token cache: one directory per corpus fingerprint, arrays memory-mapped read-only.

A cache directory is assembled under a temporary name and renamed into place, so a reader
never sees a half-written one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np


def cache_root(cache_dir: str | None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser()
    if env := os.environ.get("POSEXP_CACHE"):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "posexp"


def load_or_build(directory: Path, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Write ``arrays`` under ``directory`` unless it exists; return read-only memory maps."""
    if not directory.is_dir():
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
        try:
            for split, array in arrays.items():
                array.tofile(tmp / f"{split}.bin")
            os.replace(tmp, directory)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not directory.is_dir():  # another process may have won the race
                raise
    return {
        split: np.memmap(directory / f"{split}.bin", dtype=array.dtype, mode="r")
        for split, array in arrays.items()
    }
