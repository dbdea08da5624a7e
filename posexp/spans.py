"""The scored text: a fixed set of spans spread over every validation document.

A curve point scores ``eval.tokens`` targets of the validation stream.  They are not one
stretch at its end -- that is one file, and which file decides the number -- but spans in
every document, each document's share proportional to its length (largest remainder; a
document that is not empty gets at least one target), and inside a document spread out: its
share is cut into spans of at most ``SPAN_TOKENS`` targets, each at the end of an equal block
of the document, so that every span has text of its own document before it.

The layout depends on the validation split (its length and where its documents start) and
on eval.tokens, never on the lengths asked for: every point of a run, at any length, in
either mode, is scored on the same targets.  Each span belongs to its document: intervals
resample documents (posexp/stats.py), so they say how the number would move with other text
of the same kind, not only with other stretches of one file.

A span is (first, length): it scores the targets first+1 .. first+length.
"""

from __future__ import annotations

import hashlib
import lzma
import zlib
from dataclasses import dataclass

import numpy as np

SPAN_TOKENS = 4096  # the longest span; a longer share of a document is cut into several


@dataclass(frozen=True, eq=False)
class Spans:
    first: np.ndarray  # int64 [spans]: a span scores targets first+1 .. first+length
    length: np.ndarray  # int64 [spans]
    document: np.ndarray  # int64 [spans]: the validation document it lies in

    @property
    def tokens(self) -> int:
        return int(self.length.sum())

    @property
    def documents(self) -> int:
        """How many documents hold at least one span."""
        return len(np.unique(self.document))

    @property
    def id(self) -> str:
        """Twelve hex digits naming this layout: points of one id scored the same targets."""
        digest = hashlib.sha256()
        for array in (self.first, self.length, self.document):
            digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
        return digest.hexdigest()[:12]

    @property
    def offset(self) -> np.ndarray:
        """Where each span's targets begin in the targets of all spans, in order."""
        return np.concatenate([[0], np.cumsum(self.length)[:-1]]).astype(np.int64)

    def targets(self) -> np.ndarray:
        """The stream positions of every target, span after span."""
        return np.concatenate([np.arange(f + 1, f + n + 1)
                               for f, n in zip(self.first, self.length, strict=True)])

    def record(self) -> dict:
        """The layout as eval.json records it (``from_record`` reads it back)."""
        return {"first": self.first.tolist(), "length": self.length.tolist(),
                "document": self.document.tolist()}

    @classmethod
    def from_record(cls, record: dict) -> Spans:
        return cls(*(np.asarray(record[k], dtype=np.int64)
                     for k in ("first", "length", "document")))


def _shares(sizes: np.ndarray, n_tokens: int) -> np.ndarray:
    """Each document's targets: proportional to its size, largest remainder, at most its
    size, and at least one for every document that is not empty (when there are enough)."""
    share = np.zeros(len(sizes), dtype=np.int64)
    nonempty = sizes > 0
    if n_tokens >= nonempty.sum():
        share[nonempty] = 1
    left = n_tokens - int(share.sum())
    exact = (sizes - share) * left / max(1, int((sizes - share).sum()))
    share += np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - np.floor(exact)), kind="stable")
    for i in order[: n_tokens - int(share.sum())]:
        share[i] += 1
    return np.minimum(share, sizes)


def _even(total: int, parts: int) -> np.ndarray:
    """``total`` cut into ``parts`` integers that differ by at most one."""
    return np.full(parts, total // parts, dtype=np.int64) + (np.arange(parts) < total % parts)


def layout(val_tokens: int, document_starts: np.ndarray, n_tokens: int) -> Spans:
    """The spans of ``n_tokens`` targets over a validation stream of ``val_tokens`` tokens
    whose documents start at ``document_starts`` (the first at 0).  A target is a stream
    position from 1 on (position 0 has nothing before it)."""
    if not 0 < n_tokens <= val_tokens - 1:
        raise ValueError(f"cannot score {n_tokens} targets of a validation split of "
                         f"{val_tokens} tokens")
    starts = np.asarray(document_starts, dtype=np.int64)
    ends = np.append(starts[1:], val_tokens)
    lows = np.maximum(starts, 1)  # the first target position of each document
    sizes = np.maximum(ends - lows, 0)
    first, length, document = [], [], []
    for d, share in enumerate(_shares(sizes, n_tokens)):
        if not share:
            continue
        pieces = -(-share // SPAN_TOKENS)
        lengths = _even(share, pieces)
        gaps = _even(sizes[d] - share, pieces)  # the text before each span, in its block
        block_ends = np.cumsum(gaps + lengths)
        for k in range(pieces):  # each span at the end of its block
            first.append(lows[d] + block_ends[k] - lengths[k] - 1)
            length.append(lengths[k])
            document.append(d)
    return Spans(np.asarray(first, dtype=np.int64), np.asarray(length, dtype=np.int64),
                 np.asarray(document, dtype=np.int64))


def compression(text: bytes) -> dict[str, float]:
    """Bits per byte that general-purpose compressors reach on ``text`` (the scored spans'
    bytes, one after another): zlib at level 9 and xz at preset 9 extreme.  A model that
    does no better than these has learned little a compressor could not."""
    n = max(1, len(text))
    return {"zlib": 8 * len(zlib.compress(text, 9)) / n,
            "xz": 8 * len(lzma.compress(text, preset=9 | lzma.PRESET_EXTREME)) / n}
