"""The default corpus: the running interpreter's standard library sources.

Every ``.py`` file under the stdlib directory, in sorted order, except installed packages
(site-packages, dist-packages) and files the interpreter's build generated (such as
``_sysconfigdata_*``, which holds build paths), so the same Python version gives the same
corpus on every machine.
"""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

from posexp.data.kinds import CorpusKind, register_corpus_kind
from posexp.data.source import Source, file_source

EXCLUDED_DIRS = {"site-packages", "dist-packages", "__pycache__"}
EXCLUDED_PREFIXES = ("_sysconfigdata_",)


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The corpus's files, sorted.  Excluded directories are pruned, not walked and filtered:
    an interpreter's site-packages can hold a thousand times the stdlib's files (walking them
    took 1.3 s of every run's start here)."""
    root = root or Path(sysconfig.get_paths()["stdlib"])
    files = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in EXCLUDED_DIRS]
        files += [Path(directory, name) for name in names
                  if name.endswith(".py") and not name.startswith(EXCLUDED_PREFIXES)]
    return sorted(files)


def stdlib_source(name: str, val_fraction: float) -> Source:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = stdlib_files(root)
    return file_source(name, files, [p.relative_to(root).as_posix() for p in files],
                       val_fraction)


register_corpus_kind(CorpusKind("stdlib", lambda d: stdlib_source(d["name"], d["val_fraction"])))
