"""The scored text: a fixed set of spans spread over every validation document with text.

A curve point scores ``eval.tokens`` targets of the validation stream.  They are not one
stretch at its end -- that is one file, and which file decides the number -- but spans in
every document with text, and inside a document spread out: its share is cut into spans of
at most ``SPAN_TOKENS`` targets, each at the end of an equal block of the document, so that
a span has text of its own document before it -- but for a span that begins at its
document's first token (a short document scored whole), whose first target is predicted
from the previous document's separator and text.  A span's targets are its document's alone.

A document's targets are its text and the separator after it (the stream's first token,
which has nothing before it, is no target).  A document with no text (an empty file: only
its separator) gets no span: its one target would be a separator predicted after another.
The separator is one token of one byte for every tokenizer (posexp/data/tokenizer.py's
``separator_id``: a Metaspace tokenizer's byte-fallback <0x00> alone, a WordPiece's [SEP]).

Each document's share is proportional to its length, capped: no document holds more than
1/``EFFECTIVE_DOCUMENTS`` of the targets, what the cap takes from a long document goes to the
others in proportion to their lengths, and no document holds more targets than it has
(water-filling).  Intervals resample documents (posexp/stats.py), and shares proportional to
length gave the stdlib split's largest file 23% of 131,072 targets and its three largest 47%:
its 38 documents counted as 9 (the effective count 1/sum(w^2) of the shares w).  Shares of at
most 1/25 make sum(w^2) at most 1/25: the effective count is at least 25 wherever the
documents can hold the targets so.  Where they cannot -- fewer than 25 documents, or short
ones -- the cap is the smallest at which they can: every document shorter than it is scored
(nearly) whole and the rest at the cap, the largest effective count any layout of these
documents has (23.1 of the stdlib split's 35 documents with text at 131,072 targets: 18 of
them hold fewer than 1/25 of the targets).  A fixed cap, rather than the smallest one that
reaches a count, leaves a split of many documents of like size as proportional as it was.
Every document with text gets at least one target when there are that many.

The layout depends on the validation split (its length and where its documents start) and
on eval.tokens, never on the lengths asked for: every point of a run, at any length, in
either mode, is scored on the same targets.  Each span belongs to its document, so the
intervals say how the number would move with other text of the same kind, not only with
other stretches of one file.

A span is (first, length): it scores the targets first+1 .. first+length.
"""

from __future__ import annotations

import codecs
import hashlib
import lzma
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

SPAN_TOKENS = 4096  # the longest span; a longer share of a document is cut into several
EFFECTIVE_DOCUMENTS = 25  # no document holds more than 1/25 of the targets, where it can be
SPACE_RUN = re.compile(r"\s+")  # lm-evaluation-harness's word boundary (Task.count_words)


@dataclass(frozen=True, eq=False)
class Spans:
    first: np.ndarray  # int64 [spans]: a span scores targets first+1 .. first+length
    length: np.ndarray  # int64 [spans]
    document: np.ndarray  # int64 [spans]: the validation document it lies in
    text_documents: int | None = None  # the split's documents with text (None: not known)
    # whole documents (lm-eval's protocol, whole_documents): each span is one document's text
    # after a prefix token, first = its first token - 1; None: the spans of ``layout``.
    # ``asked`` is the eval.tokens they were drawn for; ``words`` and ``bytes`` each
    # document's, as lm-evaluation-harness counts them (count_text)
    whole: dict | None = None

    @property
    def tokens(self) -> int:
        return int(self.length.sum())

    @property
    def documents(self) -> int:
        """How many documents hold at least one span."""
        return len(np.unique(self.document))

    @property
    def effective_documents(self) -> float:
        """1 / sum(w^2) over the documents' shares w of the targets: how many documents of
        equal share the intervals' resampling of documents is worth."""
        share = np.bincount(self.document, weights=self.length) / self.tokens
        return float(1 / np.square(share).sum())

    @property
    def id(self) -> str:
        """Twelve hex digits naming this layout: points of one id scored the same targets."""
        digest = hashlib.sha256()
        for array in (self.first, self.length, self.document):
            digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
        if self.whole is not None:
            digest.update(b"whole")
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
        """The layout as eval.json records it (``from_record`` reads it back), with its
        effective document count and, where known, the split's documents with text; layouts
        written before posexp recorded these lack them."""
        record = {"first": self.first.tolist(), "length": self.length.tolist(),
                  "document": self.document.tolist(),
                  "effective_documents": round(self.effective_documents, 3)}
        if self.text_documents is not None:
            record["text_documents"] = self.text_documents
        if self.whole is not None:
            record["whole_documents"] = self.whole
        return record

    @classmethod
    def from_record(cls, record: dict) -> Spans:
        return cls(*(np.asarray(record[k], dtype=np.int64)
                     for k in ("first", "length", "document")),
                   text_documents=record.get("text_documents"),
                   whole=record.get("whole_documents"))


def _cap(sizes: np.ndarray, n_tokens: int) -> int:
    """The most targets one document may hold: 1/EFFECTIVE_DOCUMENTS of them, or, where the
    documents cannot hold every target so, the smallest cap at which they can."""
    def fits(cap: int) -> bool:
        return int(np.minimum(sizes, cap).sum()) >= n_tokens

    low, high = n_tokens // EFFECTIVE_DOCUMENTS, n_tokens
    if fits(low):
        return low
    while high - low > 1:  # fits(high), not fits(low)
        middle = (low + high) // 2
        low, high = (low, middle) if fits(middle) else (middle, high)
    return high


def _water_fill(weights: np.ndarray, limits: np.ndarray, total: float) -> np.ndarray:
    """``total`` shared in proportion to ``weights``, no share above its limit: a share that
    would pass its limit is held at it and the rest is shared again among the others."""
    share = np.zeros(len(weights))
    free = weights > 0
    while total > 0 and free.any():
        level = total / weights[free].sum()
        held = free & (weights * level >= limits)
        if not held.any():
            share[free] = weights[free] * level
            break
        share[held] = limits[held]
        total -= float(limits[held].sum())
        free &= ~held
    return share


def _shares(sizes: np.ndarray, n_tokens: int) -> np.ndarray:
    """Each document's targets: at least one for every document with targets (when there
    are enough), the rest water-filled in proportion to size under the cap, whole numbers
    by largest remainder -- at most the cap and the document's size."""
    limits = np.minimum(sizes, _cap(sizes, n_tokens))
    share = np.zeros(len(sizes), dtype=np.int64)
    if n_tokens >= (sizes > 0).sum():
        share[sizes > 0] = 1
    exact = share + _water_fill(sizes - share, limits - share, n_tokens - int(share.sum()))
    share = np.minimum(np.floor(exact).astype(np.int64), limits)
    room = np.flatnonzero(share < limits)
    order = room[np.argsort(-(exact - share)[room], kind="stable")]
    share[order[: n_tokens - int(share.sum())]] += 1
    return share


def _even(total: int, parts: int) -> np.ndarray:
    """``total`` cut into ``parts`` integers that differ by at most one."""
    return np.full(parts, total // parts, dtype=np.int64) + (np.arange(parts) < total % parts)


def document_targets(val_tokens: int, document_starts: np.ndarray) -> tuple[np.ndarray,
                                                                            np.ndarray]:
    """Each document's first target position and how many targets it holds: its text and
    the separator after it, none for a document with no text."""
    starts = np.asarray(document_starts, dtype=np.int64)
    ends = np.append(starts[1:], val_tokens)
    # every document but the last ends with its separator, one token
    text = ends - starts - (np.arange(len(starts)) < len(starts) - 1)
    lows = np.maximum(starts, 1)  # the stream's first token is no target
    return lows, np.where(text > 0, np.maximum(ends - lows, 0), 0)


def held_targets(val_tokens: int, document_starts: np.ndarray) -> int:
    """How many targets the split's documents with text hold: the most a layout scores."""
    return int(document_targets(val_tokens, document_starts)[1].sum())


def layout(val_tokens: int, document_starts: np.ndarray, n_tokens: int) -> Spans:
    """The spans of ``n_tokens`` targets over a validation stream of ``val_tokens`` tokens
    whose documents start at ``document_starts`` (the first at 0).  A target is a stream
    position from 1 on (position 0 has nothing before it)."""
    lows, sizes = document_targets(val_tokens, document_starts)
    if not 0 < n_tokens <= sizes.sum():
        held = "" if sizes.sum() == val_tokens - 1 else \
            f" whose documents with text hold {sizes.sum()} targets"
        raise ValueError(f"cannot score {n_tokens} targets of a validation split of "
                         f"{val_tokens} tokens{held}")
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
                 np.asarray(document, dtype=np.int64), int((sizes > 0).sum()))


def document_text(val_tokens: int, document_starts: np.ndarray) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """Where each document starts and how many tokens of text it has (its separator not)."""
    starts = np.asarray(document_starts, dtype=np.int64)
    return starts, np.append(starts[1:] - 1, val_tokens) - starts


def whole_documents(val_tokens: int, document_starts: np.ndarray, n_tokens: int,
                    count: Callable[[np.ndarray], tuple[list[int], list[int]]]) -> Spans:
    """Whole validation documents holding at least ``n_tokens`` targets, for lm-eval's
    protocol: documents with text taken in one fixed order (a permutation seeded 0, so they
    spread over the split) until their text tokens reach ``n_tokens``, then laid out in split
    order.  A document's targets are its text alone (not the separator after it), each span
    ``first`` its first token - 1: it is scored after a prefix token, not after the stream
    before it.  ``count(documents)`` gives each one's words and bytes (count_text)."""
    starts, text = document_text(val_tokens, document_starts)
    if not 0 < n_tokens <= text.sum():
        raise ValueError(f"cannot score {n_tokens} targets of a validation split whose "
                         f"documents hold {int(text.sum())} tokens of text")
    order = [d for d in np.random.default_rng(0).permutation(len(starts)) if text[d] > 0]
    taken = int(np.searchsorted(np.cumsum(text[order]), n_tokens)) + 1
    chosen = np.sort(np.asarray(order[:taken], dtype=np.int64))
    words, n_bytes = count(chosen)
    return Spans(starts[chosen] - 1, text[chosen], chosen, int((text > 0).sum()),
                 whole={"asked": n_tokens, "words": list(words), "bytes": list(n_bytes)})


def count_text(texts: Iterable[Iterable[bytes]], documents: np.ndarray
               ) -> tuple[list[int], list[int]]:
    """The words and bytes of each of ``documents`` (indices into ``texts``, the split's
    documents as blocks of text) as lm-evaluation-harness counts a document: words
    ``len(re.split(r"\\s+", text))`` (one more than its runs of whitespace), bytes its UTF-8
    length.  Streamed block by block: a run of whitespace across a block's end is one run, a
    character across it one character."""
    wanted = {int(d): i for i, d in enumerate(documents)}
    words, n_bytes = [0] * len(wanted), [0] * len(wanted)
    for d, blocks in enumerate(texts):
        if (i := wanted.get(d)) is None:
            continue
        runs, size, after_space = 0, 0, False
        decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
        for block in [*blocks, b""]:  # b"": the decoder's end
            piece = decode(block, final=not block)
            size += len(block)
            runs += len(SPACE_RUN.findall(piece))
            runs -= after_space and SPACE_RUN.match(piece) is not None  # one run, cut
            if piece:  # a block may end inside a character: nothing decoded yet
                after_space = SPACE_RUN.match(piece[-1]) is not None
        words[i], n_bytes[i] = runs + 1, size
    return words, n_bytes


def compression(text: bytes) -> dict[str, float]:
    """Bits per byte that general-purpose compressors reach on ``text`` (the scored spans'
    bytes, one after another): zlib at level 9 and xz at preset 9 extreme.  A model that
    does no better than these has learned little a compressor could not."""
    n = max(1, len(text))
    return {"zlib": 8 * len(zlib.compress(text, 9)) / n,
            "xz": 8 * len(lzma.compress(text, preset=9 | lzma.PRESET_EXTREME)) / n}
