"""Corpora as token arrays: a train stream and a validation stream, memory-mapped from a cache.

Documents are split between train and validation by a hash of their name, so the split does
not depend on the order files are found in, and joined with a NUL byte, which text never
holds, as the document separator.  Tokens are bytes (vocabulary 256).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from omegaconf import DictConfig

from posexp.data.cache import cache_root, load_or_build
from posexp.errors import UsageError

SEPARATOR = b"\0"
VOCAB_SIZE = 256


@dataclass
class Corpus:
    name: str
    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    fingerprint: str
    documents: dict[str, int]  # split -> number of documents
    token_bytes: np.ndarray  # bytes each token id decodes to, for bits per byte

    def describe(self) -> dict:
        return {
            "name": self.name,
            "fingerprint": self.fingerprint,
            "tokenizer": "byte",
            "vocab_size": self.vocab_size,
            "train_tokens": int(self.train.size),
            "val_tokens": int(self.val.size),
            "documents": self.documents,
        }


def in_validation(name: str, val_fraction: float) -> bool:
    """The deterministic document-level split: a hash of the name, compared to the fraction."""
    h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return h / 2**64 < val_fraction


def split_documents(
    documents: Iterable[tuple[str, bytes]], val_fraction: float
) -> tuple[bytes, bytes, dict[str, int]]:
    """Join each split's documents.  A corpus of one document (a single file) is split
    inside it instead: the last ``val_fraction`` of it, from a line start, is validation."""
    docs = list(documents)
    if len(docs) == 1:
        text = docs[0][1]
        cut = int(len(text) * (1 - val_fraction))
        line_start = text.find(b"\n", cut) + 1
        cut = line_start if 0 < line_start < len(text) else cut
        return text[:cut], text[cut:], {"train": 1, "val": 1}
    parts: dict[str, list[bytes]] = {"train": [], "val": []}
    for name, text in docs:
        parts["val" if in_validation(name, val_fraction) else "train"].append(text)
    counts = {split: len(docs) for split, docs in parts.items()}
    return SEPARATOR.join(parts["train"]), SEPARATOR.join(parts["val"]), counts


def load_corpus(cfg: DictConfig) -> Corpus:
    """Token arrays for ``cfg`` (the ``data`` config group), built once and then memory-mapped."""
    if cfg.name == "stdlib":
        from posexp.data.stdlib import stdlib_documents

        documents, source = stdlib_documents(), "stdlib"
    elif cfg.name == "text":
        from posexp.data.text import text_documents

        documents, source = text_documents(cfg.path, cfg.glob, cache_root(cfg.cache_dir)), "text"
    else:
        raise UsageError(f"unknown data {cfg.name!r}; available: stdlib, text")
    train, val, counts = split_documents(documents, cfg.val_fraction)
    if not train or not val:
        raise UsageError(
            f"data: {source} corpus has {counts['train']} training and {counts['val']} "
            f"validation documents; both splits need at least one (data.val_fraction="
            f"{cfg.val_fraction})"
        )
    digest = hashlib.sha256()
    for split in (train, val):
        digest.update(hashlib.sha256(split).digest())
    fingerprint = digest.hexdigest()
    arrays = load_or_build(
        cache_root(cfg.cache_dir) / f"{source}-byte-{fingerprint[:16]}",
        {"train": np.frombuffer(train, dtype=np.uint8), "val": np.frombuffer(val, dtype=np.uint8)},
    )
    return Corpus(source, arrays["train"], arrays["val"], VOCAB_SIZE, fingerprint, counts,
                  token_bytes=np.ones(VOCAB_SIZE, dtype=np.int64))
