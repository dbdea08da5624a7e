"""The token cache: one directory per (corpus, tokenizer), arrays memory-mapped read-only.

A directory is built once across processes: a builder takes a file lock, assembles the
directory under a temporary name and renames it into place, so a reader never sees a
half-written one and concurrent runs that need the same cache wait for the first builder
instead of building it again.  A reader that finds the directory does not lock at all.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from filelock import FileLock


def cache_root(cache_dir: str | None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser()
    if env := os.environ.get("POSEXP_CACHE"):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "posexp"


def lock_path(directory: Path) -> Path:
    return directory.parent / ".locks" / f"{directory.name}.lock"


def build_once(directory: Path, build: Callable[[Path], None]) -> bool:
    """Make ``directory`` with ``build(tmp)`` unless it exists; True if this call built it.

    Temporaries left by a builder that died hold the lock no more, so the next builder
    removes them.
    """
    if directory.is_dir():
        return False
    lock = lock_path(directory)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(lock):
        if directory.is_dir():
            return False
        for stale in directory.parent.glob(f".{directory.name}.*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
        try:
            build(tmp)
            os.replace(tmp, directory)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return True


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned integer that holds every token id."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    raise ValueError(f"a vocabulary of {vocab_size} does not fit in uint32 token ids")


def write_meta(directory: Path, meta: dict) -> None:
    (directory / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def open_tokens(directory: Path, splits: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Read-only memory maps of each split's tokens, in the dtype meta.json names."""
    dtype = json.loads((directory / "meta.json").read_text())["dtype"]
    return {split: np.memmap(directory / f"{split}.bin", dtype=dtype, mode="r")
            for split in splits}
