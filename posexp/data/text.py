"""Local corpora: UTF-8 text files, and the enwik8 file.

``data.path`` is a file or a directory; a directory is read recursively, keeping the files
that match ``data.glob`` (empty files are skipped).  Each file is one document.  With
``data.train_path`` and ``data.val_path`` instead, the split is the user's.  Files are read
in blocks, never whole, and checked to be UTF-8 as they are read.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from omegaconf import DictConfig

from posexp.data.kinds import CorpusKind, register_corpus_kind
from posexp.data.source import Document, Source, cut_blocks, file_source, read_range
from posexp.errors import UsageError
from posexp.values import check_path

# enwik8: the first 10^8 bytes of a Wikipedia dump; 90M train, 5M validation, 5M test
ENWIK8_SIZE = 100_000_000
ENWIK8_TRAIN = 90_000_000
ENWIK8_VAL = 5_000_000


def text_files(path: str, glob: str, key: str = "data.path") -> list[Path]:
    check_path(key, path)  # a FIFO, a device or a loop of links is named as such
    root = Path(path).expanduser()
    files = [root] if root.is_file() else sorted(p for p in root.glob(glob) if p.is_file())
    if not files:
        raise UsageError(f"{key} {path!r} holds no files matching data.glob={glob!r}")
    for f in files:
        try:
            with f.open("rb") as fh:
                head = fh.read(8192)
        except OSError as e:
            raise UsageError(f"{key}: cannot read {f}: {e.strerror}") from None
        if b"\0" in head:
            raise UsageError(f"{key}: {f} is binary, not text (narrow it with data.glob)")
    files = [f for f in files if f.stat().st_size > 0]
    if not files:
        raise UsageError(f"{key} {path!r} holds only empty files")
    return files


def document_names(path: str, files: list[Path]) -> list[str]:
    root = Path(path).expanduser()
    return [f.name if root.is_file() else f.relative_to(root).as_posix() for f in files]


def read_utf8(path: Path, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for chunk in read_range(path, start, end):
            decoder.decode(chunk)
            yield chunk
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as e:
        raise UsageError(f"data: {path} is not UTF-8 text ({e.reason})") from None


def text_source(cfg: DictConfig) -> Source:
    if cfg.path:
        files = text_files(cfg.path, cfg.glob)
        return file_source(cfg.name, files, document_names(cfg.path, files), cfg.val_fraction,
                           read_utf8)
    splits = {"train": text_files(cfg.train_path, cfg.glob, "data.train_path"),
              "val": text_files(cfg.val_path, cfg.glob, "data.val_path")}

    def documents(files: list[Path]) -> Iterator[Document]:
        for f in files:
            yield cut_blocks(read_utf8(f))

    return Source(cfg.name, {split: lambda files=files: documents(files)
                             for split, files in splits.items()})


def enwik8_source(cfg: DictConfig) -> Source:
    path = Path(cfg.path).expanduser()
    if not path.is_file():
        raise UsageError(f"data.path {cfg.path!r} is not a file (data=enwik8 needs the unzipped "
                         "enwik8 file)")
    if path.stat().st_size != ENWIK8_SIZE:
        raise UsageError(f"data.path: enwik8 is {ENWIK8_SIZE:,} bytes; {path} has "
                         f"{path.stat().st_size:,} (is it still zipped?)")
    val_end = ENWIK8_TRAIN + ENWIK8_VAL
    return Source(cfg.name, {
        "train": lambda: iter([cut_blocks(read_range(path, 0, ENWIK8_TRAIN))]),
        "val": lambda: iter([cut_blocks(read_range(path, ENWIK8_TRAIN, val_end))]),
    })


def check_text(d: Mapping) -> None:
    name = d["name"]
    if not d["path"] and not (d["train_path"] and d["val_path"]):
        raise UsageError(f"data={name} needs data.path=FILE_OR_DIR, or both "
                         "data.train_path and data.val_path")
    if d["path"] and (d["train_path"] or d["val_path"]):
        raise UsageError("data.path and data.train_path/data.val_path exclude each other; "
                         "set one or the other")
    glob = d["glob"]
    if not glob or os.path.isabs(glob) or ".." in glob.split("/"):
        raise UsageError("data.glob must be a pattern relative to data.path (e.g. "
                         f"'**/*.txt'), got {glob!r}")


def check_enwik8(d: Mapping) -> None:
    if not d["path"]:
        raise UsageError(f"data={d['name']} needs data.path=ENWIK8_FILE (unzipped from "
                         "http://mattmahoney.net/dc/enwik8.zip)")


FILES = ("path", "train_path", "val_path")
register_corpus_kind(CorpusKind("text", text_source, FILES, FILES, check_text))
register_corpus_kind(CorpusKind("enwik8", enwik8_source, ("path",), ("path",), check_enwik8))
