"""Corpora as token arrays: a train stream and a validation stream, memory-mapped from a cache.

A source (the stdlib, local text, enwik8, a hub dataset) gives each split as a stream of
documents, joined with a NUL byte, which text never holds, as the document separator.
Loading streams the corpus once to fingerprint it (a SHA-256 of each split's joined bytes);
the token cache is keyed by that fingerprint and the tokenizer's, and built once: the corpus
is streamed again, tokenized in parallel batches and appended to the cache files, so no
split is ever held in memory.  Its meta.json records each file's size and SHA-256, checked
before every use.  A BPE tokenizer is trained on the training split once per
corpus and vocabulary size, and cached too.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import pkgutil
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from posexp.data.cache import build_once, cache_root, open_tokens, token_dtype, write_meta
from posexp.data.checks import data_source
from posexp.data.kinds import KINDS
from posexp.data.source import SEPARATOR, SPLITS, Document, Source, in_validation
from posexp.data.tokenizer import (
    ByteTokenizer,
    JsonTokenizer,
    TokenizerKind,
    tokenizer_file,
    train_bpe,
)
from posexp.errors import UsageError

__all__ = ["SEPARATOR", "Corpus", "TokenizerKind", "in_validation", "load_corpus"]

# every module of this package that registers a corpus kind, found as encodings are: a new
# kind is a module of posexp/data (kinds.py) and its YAML
for _module in pkgutil.iter_modules(__path__):
    if not _module.ispkg:
        importlib.import_module(f"{__name__}.{_module.name}")

# Text per encode_batch call: 16 blocks, encoded in parallel.  A tokenizers Encoding costs
# about 70 bytes of memory per byte of text, so this bounds the peak near 150 MB.
BATCH_BYTES = 2 << 20

Tokenizer = ByteTokenizer | JsonTokenizer


@dataclass
class Corpus:
    name: str
    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    fingerprint: str
    documents: dict[str, int]  # split -> number of documents
    token_bytes: np.ndarray  # bytes each token id decodes to, for bits per byte
    tokenizer: str
    tokenizer_fingerprint: str
    text_bytes: dict[str, int]  # split -> bytes of text, separators included
    # where each validation document starts in ``val`` (after a separator; 0 for the first)
    val_documents: np.ndarray
    separator_id: int = 0  # the token between documents (tokenizer.py)
    # the validation split's documents as text again, blocks of bytes each, in ``val``'s
    # order (lm_eval mode counts their words and bytes: evaluate/rolling.py)
    val_texts: Callable[[], Iterator[Document]] | None = None

    def describe(self) -> dict:
        return {
            "name": self.name,
            "fingerprint": self.fingerprint,
            "tokenizer": self.tokenizer,
            "tokenizer_fingerprint": self.tokenizer_fingerprint,
            "vocab_size": self.vocab_size,
            "train_tokens": int(self.train.size),
            "val_tokens": int(self.val.size),
            "bytes": self.text_bytes,
            "documents": self.documents,
        }


@dataclass
class Scan:
    fingerprint: str
    bytes: dict[str, int]
    documents: dict[str, int]


@dataclass
class Long:
    """A document of more than one block, its blocks as they stream in: encoded as a whole
    (Tokenizer.encode_document), never block by block, whose cuts would change its tokens."""

    blocks: Iterator[bytes]


def joined(documents: Iterable[Document]) -> Iterator[bytes | Long]:
    """A split's documents with the separator between them (empty ones too): a document of
    one block as that block, a longer one as a Long of its blocks."""
    for i, document in enumerate(documents):
        if i:
            yield SEPARATOR
        blocks = iter(document)
        first = next(blocks, None)
        second = next(blocks, None)
        if second is None:
            if first is not None:
                yield first
            continue
        yield Long(itertools.chain((first, second), blocks))


def scan(source: Source) -> Scan:
    """Stream every split once: its size, its documents, and the corpus fingerprint."""
    digest = hashlib.sha256()
    sizes, counts = {}, {}
    for split in SPLITS:
        h, size, count = hashlib.sha256(), 0, 0
        for count, document in enumerate(source.splits[split](), 1):
            if count > 1:
                h.update(SEPARATOR)
                size += len(SEPARATOR)
            for block in document:
                h.update(block)
                size += len(block)
        digest.update(h.digest())
        sizes[split], counts[split] = size, count
    return Scan(digest.hexdigest(), sizes, counts)


def open_source(cfg: DictConfig) -> Source:
    """The corpus of the data group ``cfg``, by its kind's reader (kinds.py)."""
    return KINDS[data_source(cfg)].open(cfg)


def bpe_tokenizer(source: Source, fingerprint: str, vocab_size: int, root: Path) -> JsonTokenizer:
    """The BPE trained on this corpus's training split, trained once and cached."""
    directory = root / "tokenizers" / f"{source.name}-{fingerprint[:16]}-bpe{vocab_size}"

    def build(tmp: Path) -> None:
        texts = (block.decode("utf-8", errors="replace")
                 for document in source.splits["train"]() for block in document)
        (tmp / "tokenizer.json").write_text(train_bpe(texts, vocab_size))

    build_once(directory, build)
    return JsonTokenizer("bpe", (directory / "tokenizer.json").read_text())


def make_tokenizer(cfg: DictConfig, source: Source, fingerprint: str, root: Path) -> Tokenizer:
    kind = TokenizerKind(cfg.tokenizer)
    if kind == TokenizerKind.bpe:
        return bpe_tokenizer(source, fingerprint, cfg.vocab_size, root)
    if kind == TokenizerKind.file:
        return tokenizer_file(cfg.tokenizer_path)
    return ByteTokenizer()


def batches(blocks: Iterable[bytes | Long]) -> Iterator[list[bytes] | Long]:
    """Blocks in batches of about BATCH_BYTES to encode in parallel; a Long alone, in its
    place in the stream."""
    batch, size = [], 0
    for block in blocks:
        if isinstance(block, Long):
            if batch:
                yield batch
                batch, size = [], 0
            yield block
            continue
        batch.append(block)
        size += len(block)
        if size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def encoded(batch: list[bytes] | Long, tokenizer: Tokenizer
            ) -> Iterator[tuple[bytes | None, np.ndarray, int]]:
    """(the block, or None for a piece of a Long; its ids; the bytes it stands for) of each
    block of ``batch``, the separator one token (Tokenizer.separator_id)."""
    if isinstance(batch, Long):
        read: list[int] = []  # the bytes of the blocks read since the last piece

        def counted() -> Iterator[bytes]:
            for block in batch.blocks:
                read.append(len(block))
                yield block

        for ids in tokenizer.encode_document(counted()):
            yield None, ids, sum(read)
            read.clear()
        return
    for block, ids in zip(batch, tokenizer.encode_batch(batch), strict=True):
        if block == SEPARATOR:  # one token, whatever the tokenizer makes of it
            ids = np.asarray([tokenizer.separator_id])
        yield block, ids, len(block)


def write_tokens(directory: Path, source: Source, tokenizer: Tokenizer, scanned: Scan) -> None:
    """Each split's tokens ({split}.bin) and where each of its documents starts in them
    ({split}.docs.npy: the token index after each separator, 0 for the first), then
    meta.json."""
    from tqdm.auto import tqdm  # here, not at the top: a tenth of a second of every start-up

    dtype = token_dtype(tokenizer.vocab_size)
    tokens = {}
    for split in SPLITS:
        n, starts = 0, [0]
        with (directory / f"{split}.bin").open("wb") as f, tqdm(
            total=scanned.bytes[split], unit="B", unit_scale=True, disable=None,
            desc=f"tokenizing {source.name} {split} ({tokenizer.name})", file=sys.stderr,
        ) as bar:
            for batch in batches(joined(source.splits[split]())):
                for block, ids, size in encoded(batch, tokenizer):
                    # f.write, not ndarray.tofile: tofile reports a full disk without errno
                    f.write(ids.astype(dtype, copy=False))
                    n += ids.size
                    if block == SEPARATOR:  # text never holds it: a document starts here
                        starts.append(n)
                    bar.update(size)
        np.save(directory / f"{split}.docs.npy", np.asarray(starts, dtype=np.int64))
        tokens[split] = n
    if tokenizer.definition is not None:
        (directory / "tokenizer.json").write_text(tokenizer.definition)
    write_meta(directory, {
        "corpus": source.name, "fingerprint": scanned.fingerprint,
        "tokenizer": tokenizer.name, "tokenizer_fingerprint": tokenizer.fingerprint,
        "vocab_size": tokenizer.vocab_size, "dtype": dtype.name,
        "tokens": tokens, "bytes": scanned.bytes, "documents": scanned.documents,
    })


def load_corpus(cfg: DictConfig) -> Corpus:
    """Token arrays for ``cfg`` (the ``data`` config group), built once and then memory-mapped."""
    source = open_source(cfg)
    scanned = scan(source)
    if not all(scanned.bytes.values()):
        counts = scanned.documents
        raise UsageError(
            f"data: {source.name} corpus has {counts['train']} training and {counts['val']} "
            f"validation documents; both splits need at least one (data.val_fraction="
            f"{cfg.val_fraction})"
        )
    root = cache_root(cfg.cache_dir)
    tokenizer = make_tokenizer(cfg, source, scanned.fingerprint, root)
    # a tokenizers tokenizer's streams encode each document whole (posexp/data/stitch.py)
    # since 2026-12-07: its caches are named apart from those of block-by-block streams
    stream = "-whole" if isinstance(tokenizer, JsonTokenizer) else ""
    directory = root / (f"{source.name}-{scanned.fingerprint[:16]}-"
                        f"{tokenizer.name}-{tokenizer.fingerprint[:16]}{stream}")
    arrays = open_tokens(directory, SPLITS,
                         lambda tmp: write_tokens(tmp, source, tokenizer, scanned))
    return Corpus(source.name, arrays["train"], arrays["val"], tokenizer.vocab_size,
                  scanned.fingerprint, scanned.documents, tokenizer.token_bytes,
                  tokenizer.name, tokenizer.fingerprint, scanned.bytes,
                  np.load(directory / "val.docs.npy"), tokenizer.separator_id,
                  source.splits["val"])
