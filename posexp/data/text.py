"""Local text corpora, loaded through the ``datasets`` library's text builder.

``data.path`` is a file or a directory; a directory is read recursively, keeping the files
that match ``data.glob`` (empty files are skipped).  Each file is one document.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from posexp.errors import UsageError


def text_files(path: str, glob: str) -> list[Path]:
    root = Path(path).expanduser()
    if not root.exists():
        raise UsageError(f"data.path {path!r} does not exist")
    files = [root] if root.is_file() else sorted(p for p in root.glob(glob) if p.is_file())
    if not files:
        raise UsageError(f"data.path {path!r} holds no files matching data.glob={glob!r}")
    for f in files:
        try:
            with f.open("rb") as fh:
                head = fh.read(8192)
        except OSError as e:
            raise UsageError(f"data.path: cannot read {f}: {e.strerror}") from None
        if b"\0" in head:
            raise UsageError(f"data.path: {f} is binary, not text (narrow it with data.glob)")
    files = [f for f in files if f.stat().st_size > 0]
    if not files:
        raise UsageError(f"data.path {path!r} holds only empty files")
    return files


def text_documents(path: str, glob: str, cache_dir: Path) -> Iterator[tuple[str, bytes]]:
    import datasets

    files = text_files(path, glob)
    root = Path(path).expanduser()
    datasets.disable_progress_bars()
    try:
        ds = datasets.load_dataset(
            "text",
            data_files={"train": [str(f) for f in files]},
            sample_by="document",
            cache_dir=str(cache_dir / "datasets"),
        )["train"]
    except UnicodeDecodeError as e:
        raise UsageError(f"data.path {path!r}: a file is not UTF-8 text ({e.reason})") from None
    for f, row in zip(files, ds, strict=True):
        name = f.name if root.is_file() else f.relative_to(root).as_posix()
        yield name, row["text"].encode()
