"""A corpus as streams: each split is a sequence of documents, each document a sequence of
text blocks of at most 128 KiB, so no document or split is ever held in memory whole.

Blocks end at a line end where one is near (otherwise at a UTF-8 character boundary), so a
tokenizer that encodes blocks one by one sees whole lines and whole characters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

SEPARATOR = b"\0"  # between documents; text never holds it
SPLITS = ("train", "val")
BLOCK = 128 << 10

Document = Iterable[bytes]


@dataclass
class Source:
    name: str
    splits: dict[str, Callable[[], Iterator[Document]]]  # each call reads the split again


def in_validation(name: str, val_fraction: float) -> bool:
    """The deterministic document-level split: a hash of the name, compared to the fraction."""
    h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return h / 2**64 < val_fraction


def char_boundary(data: bytes | bytearray, at: int) -> int:
    """The last UTF-8 character start at or before ``at`` (continuation bytes are 10xxxxxx)."""
    for cut in range(at, max(0, at - 4), -1):
        if data[cut] & 0xC0 != 0x80:
            return cut
    return at


def cut_blocks(chunks: Iterable[bytes], size: int = BLOCK) -> Iterator[bytes]:
    """Re-cut a stream of text into blocks of at most ``size`` bytes (small chunks are joined),
    each ending after the last line end in its second half, or at a character boundary."""
    pending = bytearray()
    for chunk in chunks:
        pending += chunk
        while len(pending) > size:
            cut = pending.rfind(b"\n", size // 2, size) + 1 or char_boundary(pending, size)
            yield bytes(pending[:cut])
            del pending[:cut]
    if pending:
        yield bytes(pending)


def read_range(path: Path, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """The bytes ``start:end`` of a file, in blocks."""
    with path.open("rb") as f:
        f.seek(start)
        left = (path.stat().st_size if end is None else end) - start
        while left > 0 and (chunk := f.read(min(BLOCK, left))):
            left -= len(chunk)
            yield chunk


def line_cut(path: Path, val_fraction: float) -> int:
    """Where a one-document corpus is split: the first line start after the last
    ``val_fraction`` of the file begins (or exactly there if no line starts after it)."""
    size = path.stat().st_size
    cut = int(size * (1 - val_fraction))
    with path.open("rb") as f:
        f.seek(cut)
        offset = cut
        while chunk := f.read(BLOCK):
            if (i := chunk.find(b"\n")) >= 0:
                line_start = offset + i + 1
                return line_start if line_start < size else cut
            offset += len(chunk)
    return cut


def file_source(name: str, files: list[Path], names: list[str], val_fraction: float,
                read: Callable[[Path, int, int | None], Iterator[bytes]] = read_range) -> Source:
    """Files as documents, each sent to a split by a hash of its name.  A single file is
    split inside instead: its last ``val_fraction``, from a line start, is validation."""
    if len(files) == 1:
        path = files[0]
        cut = line_cut(path, val_fraction)
        return Source(name, {
            "train": lambda: iter([cut_blocks(read(path, 0, cut))]),
            "val": lambda: iter([cut_blocks(read(path, cut, None))]),
        })
    val = [in_validation(n, val_fraction) for n in names]

    def documents(held_out: bool) -> Iterator[Document]:
        for path, is_val in zip(files, val, strict=True):
            if is_val == held_out:
                yield cut_blocks(read(path, 0, None))

    return Source(name, {"train": lambda: documents(False), "val": lambda: documents(True)})
