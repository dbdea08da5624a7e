"""The default corpus: the running interpreter's standard library sources.

Every ``.py`` file under the stdlib directory, in sorted order, except installed packages
(site-packages, dist-packages) and files the interpreter's build generated (such as
``_sysconfigdata_*``, which holds build paths), so the same Python version gives the same
corpus on every machine.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Iterator
from pathlib import Path

EXCLUDED_DIRS = {"site-packages", "dist-packages", "__pycache__"}
EXCLUDED_PREFIXES = ("_sysconfigdata_",)


def stdlib_files(root: Path | None = None) -> list[Path]:
    root = root or Path(sysconfig.get_paths()["stdlib"])
    return sorted(
        p
        for p in root.rglob("*.py")
        if not EXCLUDED_DIRS.intersection(p.relative_to(root).parts)
        and not p.name.startswith(EXCLUDED_PREFIXES)
    )


def stdlib_documents(root: Path | None = None) -> Iterator[tuple[str, bytes]]:
    root = root or Path(sysconfig.get_paths()["stdlib"])
    for path in stdlib_files(root):
        yield path.relative_to(root).as_posix(), path.read_bytes()
