"""The token cache: one directory per (corpus, tokenizer), arrays memory-mapped read-only.

A directory is built once across processes: a builder takes a file lock, assembles the
directory under a temporary name and renames it into place, so a reader never sees a
half-written one and concurrent runs that need the same cache wait for the first builder
instead of building it again.  A reader that finds the directory does not lock at all.

A token cache is verified before every use: meta.json records each file's size and SHA-256,
and a file that is short, long or changed (a full disk, a copy cut off, a stray edit) would
otherwise train a run on other tokens than its fingerprint names.  A damaged directory is
rebuilt, under the same lock, with one warning.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from filelock import FileLock

from posexp.errors import PosexpError

Build = Callable[[Path], None]

DTYPES = ("uint8", "uint16", "uint32")
HASH_CHUNK = 4 << 20

# errno values that mean the cache cannot be written, whichever file met them; any other
# OSError is the cache's only if it names a path in the cache (a source file that vanished
# between fingerprinting and tokenizing is not).
CANNOT_WRITE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def cache_root(cache_dir: str | None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser()
    if env := os.environ.get("POSEXP_CACHE"):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "posexp"


def lock_path(directory: Path) -> Path:
    return directory.parent / ".locks" / f"{directory.name}.lock"


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s build lock; a failure to write the cache becomes one line."""
    try:
        lock = lock_path(directory)
        lock.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(lock):
            yield
    except OSError as e:
        named = isinstance(e.filename, str) and \
            Path(e.filename).absolute().is_relative_to(directory.parent.absolute())
        if e.errno in CANNOT_WRITE or named:
            raise PosexpError(f"cannot write the token cache {directory}: "
                              f"{e.strerror or e}") from e
        raise


def build_into(directory: Path, build: Build) -> None:
    """Under the lock: build in a temporary directory and rename it into place.

    Temporaries left by a builder that died hold the lock no more, so they are removed.
    """
    for stale in directory.parent.glob(f".{directory.name}.*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    aside = tmp.with_name(f"{tmp.name}-damaged")
    try:
        build(tmp)
        if directory.is_dir():
            # Moved aside, not deleted in place: a reader, which takes no lock, sees the
            # damaged directory (and rejects it) or none (and waits for the lock), never a
            # half-deleted one.
            os.replace(directory, aside)
        os.replace(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(aside, ignore_errors=True)


def build_once(directory: Path, build: Build) -> bool:
    """Make ``directory`` with ``build(tmp)`` unless it exists; True if this call built it."""
    if directory.is_dir():
        return False
    with locked(directory):
        if directory.is_dir():
            return False
        build_into(directory, build)
    return True


def rebuild(directory: Path, build: Build, problem: Callable[[], str | None]) -> None:
    """Replace a damaged ``directory``, unless another process has while this one waited."""
    with locked(directory):
        if directory.is_dir() and problem() is None:
            return
        build_into(directory, build)


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned integer that holds every token id."""
    for dtype in DTYPES:
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    raise ValueError(f"a vocabulary of {vocab_size} does not fit in uint32 token ids")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_meta(directory: Path, meta: dict) -> None:
    """meta.json, with the size and SHA-256 of every other file in ``directory``."""
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
             for p in sorted(directory.iterdir()) if p.name != "meta.json"}
    (directory / "meta.json").write_text(json.dumps({**meta, "files": files}, indent=2) + "\n")


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def meta_problem(meta: object, splits: tuple[str, ...]) -> str | None:
    """What meta.json lacks for ``open_tokens``, or None."""
    if not isinstance(meta, dict):
        return "meta.json is not a JSON object"
    if meta.get("dtype") not in DTYPES:
        return f"meta.json has no valid \"dtype\" (one of {', '.join(DTYPES)})"
    tokens = meta.get("tokens")
    if not (isinstance(tokens, dict) and all(is_count(tokens.get(s)) for s in splits)):
        return f"meta.json has no valid \"tokens\" (a count for each of {', '.join(splits)})"
    if "files" not in meta:
        return "meta.json records no sizes or checksums (an older posexp wrote it)"
    files = meta["files"]
    if isinstance(files, dict) and not all(f"{s}.docs.npy" in files for s in splits):
        return "meta.json records no document offsets (an older posexp wrote it)"
    if not (isinstance(files, dict) and all(f"{s}.bin" in files for s in splits)
            and all(isinstance(r, dict) and is_count(r.get("bytes"))
                    and isinstance(r.get("sha256"), str) for r in files.values())):
        return "meta.json has no valid \"files\" (a size and a SHA-256 for each file)"
    return None


def cache_problem(directory: Path, splits: tuple[str, ...]) -> str | None:
    """What is wrong with the token cache ``directory``, or None if every file is as built."""
    try:
        meta = json.loads((directory / "meta.json").read_text())
    except OSError as e:
        return f"cannot read meta.json: {e.strerror}"
    except ValueError:  # not UTF-8, or not JSON
        return "meta.json is not valid JSON"
    if problem := meta_problem(meta, splits):
        return problem
    itemsize = np.dtype(meta["dtype"]).itemsize
    for split in splits:
        name, count = f"{split}.bin", meta["tokens"][split]
        if meta["files"][name]["bytes"] != count * itemsize:
            return (f"meta.json records {count} {meta['dtype']} tokens in {name} but "
                    f"{meta['files'][name]['bytes']} bytes")
    for name, record in meta["files"].items():
        try:
            size = (directory / name).stat().st_size
            if size != record["bytes"]:
                return f"{name} has {size} bytes, meta.json records {record['bytes']}"
            if sha256_file(directory / name) != record["sha256"]:
                return f"{name} does not match its SHA-256 in meta.json"
        except OSError as e:
            return f"cannot read {name}: {e.strerror}"
    return None


def open_tokens(directory: Path, splits: tuple[str, ...], build: Build) -> dict[str, np.ndarray]:
    """Read-only memory maps of each split's tokens, from ``directory`` once ``build(tmp)``
    has made it and it is verified; a damaged directory is rebuilt, with a warning."""
    build_once(directory, build)
    if problem := cache_problem(directory, splits):
        print(f"posexp: warning: token cache {directory}: {problem}; rebuilding it",
              file=sys.stderr)
        rebuild(directory, build, lambda: cache_problem(directory, splits))
        if problem := cache_problem(directory, splits):
            raise PosexpError(f"token cache {directory} is still damaged after a rebuild: "
                              f"{problem}")
    dtype = json.loads((directory / "meta.json").read_text())["dtype"]
    return {split: np.memmap(directory / f"{split}.bin", dtype=dtype, mode="r")
            for split in splits}
