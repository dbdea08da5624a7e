"""Tokenizers: bytes (the default), a byte-level BPE trained on the training split, or any
``tokenizer.json`` of the ``tokenizers`` library.

Each has a fingerprint (a hash of what defines it), which keys the token cache and goes into
every run, and ``token_bytes``: how many bytes of text each token id stands for, so that bits
per byte compare runs with different tokenizers.

The NUL between documents is one token for every tokenizer (``separator_id``), as the spans
of posexp/spans.py count it.  Byte and byte-level tokenizers encode it as one; a Metaspace
tokenizer (Llama 2's, SentencePiece's) prepends its ``\u2581`` and gives two, and posexp takes
its byte-fallback ``<0x00>`` alone; a tokenizer that drops control characters (WordPiece's
normaliser) gives none, and posexp takes its own end-of-document token ([SEP], </s>,
<|endoftext|>).  The separator counts as the one byte it stands for.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterable, Iterator
from enum import Enum
from pathlib import Path

import numpy as np

from posexp.data.stitch import stitched
from posexp.errors import UsageError


class TokenizerKind(str, Enum):
    """data.tokenizer."""

    byte = "byte"  # one token per byte, vocabulary 256
    bpe = "bpe"  # byte-level BPE trained on the training split
    file = "file"  # a tokenizer.json of the `tokenizers` library


BYTE_FALLBACK = re.compile(r"<0x[0-9A-Fa-f]{2}>")
NUL_FALLBACK = "<0x00>"
# a tokenizer's own end of a document, in the order looked for, where NUL has no token
DOCUMENT_ENDS = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "[SEP]", "<|eot_id|>")


class ByteTokenizer:
    name = "byte"
    vocab_size = 256
    fingerprint = hashlib.sha256(b"byte").hexdigest()
    token_bytes = np.ones(256, dtype=np.int64)
    definition = None  # nothing to save
    separator_id = 0  # NUL is byte 0

    def encode_document(self, blocks: Iterable[bytes]) -> Iterator[np.ndarray]:
        """A document of several blocks: bytes need no stitching."""
        for block in blocks:
            yield np.frombuffer(block, dtype=np.uint8)

    def encode_batch(self, blocks: list[bytes]) -> list[np.ndarray]:
        return [np.frombuffer(block, dtype=np.uint8) for block in blocks]


class JsonTokenizer:
    """A ``tokenizers`` tokenizer, defined by its JSON; encodes blocks in parallel batches."""

    def __init__(self, name: str, definition: str) -> None:
        from tokenizers import Tokenizer

        self.name = name
        self.definition = definition
        self.fingerprint = hashlib.sha256(definition.encode()).hexdigest()
        self.tokenizer = Tokenizer.from_str(definition)
        vocab = self.tokenizer.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values()) + 1
        self.token_bytes = self._token_bytes(vocab)
        self.separator_id = self._separator(vocab)
        self.token_bytes[self.separator_id] = 1  # it stands for the one NUL byte
        if self.tokenizer.encode("\0", add_special_tokens=False).ids != [self.separator_id]:
            # its streams differ from those posexp wrote before it made the separator one
            # token: another fingerprint, so that no cache or run record of those is read
            self.fingerprint = hashlib.sha256(definition.encode() + b"\0one-token-separator"
                                              ).hexdigest()

    def _separator(self, vocab: dict[str, int]) -> int:
        """The one token of the NUL between documents: its encoding where that is one token;
        else the token among them that decodes to NUL alone (a byte fallback's <0x00>);
        else the tokenizer's own end-of-document token."""
        ids = self.tokenizer.encode("\0", add_special_tokens=False).ids
        if len(ids) == 1 and self.tokenizer.decode(ids) == "\0":
            return ids[0]
        if NUL_FALLBACK in vocab and vocab[NUL_FALLBACK] in ids:
            return vocab[NUL_FALLBACK]
        for token in DOCUMENT_ENDS:
            if token in vocab:
                return vocab[token]
        raise UsageError(f"tokenizer {self.name}: the NUL between documents encodes as "
                         f"{len(ids)} tokens {ids}, none of them NUL alone, and it has no "
                         f"end-of-document token ({', '.join(DOCUMENT_ENDS)}); posexp needs "
                         "one token between documents")

    def _token_bytes(self, vocab: dict[str, int]) -> np.ndarray:
        """Exact for byte-level tokenizers (each character of a token stands for one byte);
        otherwise the UTF-8 length of each token decoded alone.  Special tokens are 0."""
        decoder = json.loads(self.definition).get("decoder") or {}
        special = {t.content for t in self.tokenizer.get_added_tokens_decoder().values()
                   if t.special}
        lengths = np.zeros(self.vocab_size, dtype=np.int64)
        for token, i in vocab.items():
            if token in special:
                continue
            if decoder.get("type") == "ByteLevel":
                lengths[i] = len(token)
            elif BYTE_FALLBACK.fullmatch(token):
                lengths[i] = 1
            else:
                lengths[i] = len(self.tokenizer.decode([i]).encode())
        return lengths

    def encode_batch(self, blocks: list[bytes]) -> list[np.ndarray]:
        texts = [b.decode("utf-8", errors="replace") for b in blocks]
        encodings = self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int64) for e in encodings]

    def encode_document(self, blocks: Iterable[bytes]) -> Iterator[np.ndarray]:
        """A document of several blocks, as the tokenizer encodes the whole document, in
        pieces (posexp/data/stitch.py)."""
        def encode(text: str) -> tuple[list[int], list[tuple[int, int]]]:
            e = self.tokenizer.encode(text, add_special_tokens=False)
            return e.ids, e.offsets

        texts = (b.decode("utf-8", errors="replace") for b in blocks)
        for ids in stitched(encode, texts):
            yield np.asarray(ids, dtype=np.int64)


def train_bpe(texts: Iterable[str], vocab_size: int) -> str:
    """A byte-level BPE (GPT-2's pre-tokenization, all 256 bytes in the vocabulary, so any
    text encodes without unknown tokens); returns its JSON."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=sys.stderr.isatty(),
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer.to_str()


def tokenizer_file(path: str) -> JsonTokenizer:
    file = Path(path).expanduser()
    if file.exists() and not file.is_file():  # a FIFO or /dev/zero would be read forever
        raise UsageError(f"data.tokenizer_path {path!r} is not a regular file")
    if not file.exists():
        raise UsageError(f"data.tokenizer_path {path!r} does not exist")
    try:
        definition = file.read_text()
        return JsonTokenizer("file", definition)
    except OSError as e:
        raise UsageError(f"data.tokenizer_path: cannot read {path!r}: {e.strerror}") from None
    except Exception as e:  # tokenizers raises a bare Exception for a malformed file
        raise UsageError(f"data.tokenizer_path: {path!r} is not a tokenizer.json of the "
                         f"tokenizers library ({str(e).splitlines()[0]})") from None
