"""posexp's version, where its source is, and what identifies the code a run's numbers come
from: a hash of posexp's own source and of an encoding module of the user's, recorded in
run.json and eval.json so that points of two codes are never taken for one run's
(docs/runs.md, "Code").  Light: the CLI imports it for --version."""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

__version__ = "0.1.0"
# What training and scoring compute, as a number: bumped by every change to the numbers a run
# records for the same config on the same device (tests/unit/test_golden.py fails until it
# is, and scripts/golden.py records the new numbers).  run.json records it; reports and
# claims never compare runs of two protocols, nor continue one protocol's run with another's.
# A run that predates the record is protocol 0.  1 (issue #32): documents' shares of the scored
# text capped (spans.py), no span for a document with no text, precision and device kind in
# the identity, intervals with Satterthwaite's degrees of freedom.
PROTOCOL = 1
SOURCE = Path(__file__).resolve().parent  # the posexp package directory


def _hash_files(files: list[Path], root: Path) -> str:
    """SHA-256 over each file's path below ``root`` and its bytes, in order."""
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        digest.update(file.read_bytes() + b"\0")
    return digest.hexdigest()


# Parts of posexp that compute no number a run records: the command line, reports, claims'
# verdicts, ls and compare, sweeps' plans and summaries, W&B.  An edit there is not a new
# code for a run's points (every other module is, a new one too: left out only by name here).
PRESENTATION = ("cli", "report", "claims", "listing.py", "sinks.py", "sweep")


@functools.cache
def source_sha256() -> str:
    """SHA-256 of the source of posexp's modules that train, score and record runs (all but
    PRESENTATION).  The version number stays the same across edits, and a checkout's git
    describe only says "dirty", so neither tells two codes apart; this does, for any edit.
    Cached: the first call hashes the files, so callers make it before long work, while the
    files are still those this process loaded."""
    return _hash_files(sorted(f for f in SOURCE.rglob("*.py")
                              if f.relative_to(SOURCE).parts[0] not in PRESENTATION), SOURCE)


@functools.cache
def package_sha256() -> str:
    """SHA-256 of every module of posexp, PRESENTATION's too: what a committed report's
    verdicts were judged and written by (a claim's test is code too, and changes a verdict
    without changing a run's numbers)."""
    return _hash_files(sorted(SOURCE.rglob("*.py")), SOURCE)


@functools.cache
def module_sha256(module: str) -> str | None:
    """SHA-256 of the source of ``module`` (encoding.module, an encoding of the user's own):
    its file, or every .py file of it when it is a package; None when posexp cannot find
    its source (then nothing is compared).  Found where it was imported from, else where
    config.custom would import it from -- the working directory first, then sys.path --
    without running it.  Cached, as source_sha256."""
    origin = getattr(sys.modules.get(module), "__file__", None) or _find(module)
    if origin is None or not Path(origin).is_file():
        return None
    file = Path(origin)
    if file.name == "__init__.py":
        return _hash_files(sorted(file.parent.rglob("*.py")), file.parent)
    return _hash_files([file], file.parent)


def _find(module: str) -> str | None:
    """The source file ``module`` would be imported from, found package by package and
    never imported (a package's __init__ is code of the user's: it runs only on the way to
    training or scoring, config/custom.py)."""
    search: list[str] = [os.getcwd(), *sys.path]
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, search)
            if spec is None and i == 1:  # an editable install's finder: a top-level name
                spec = importlib.util.find_spec(name)  # is looked up without importing
        except (ImportError, ValueError, OSError):
            return None
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
    return spec.origin
