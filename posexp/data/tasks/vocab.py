"""The one vocabulary every task shares, so a model can be trained on any task unchanged.

A token decodes to a short word; ``decode`` joins them with spaces and ``encode`` reads
that back, so an instance prints as ``c a b | c a b .`` and a test can write one by hand.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

LETTERS = "abcdefghijklmnopqrstuvwxyz"
# Mohtashami & Jaggi's filler repeats "The grass is green. The sky is blue. The sun is
# yellow."; a fixed pattern carries no information, so the key is the only thing to find.
FILLER = ("the", "grass", "is", "green", "the", "sky", "is", "blue", "the", "sun", "is", "yellow")

# PAD is never a target; SEP ends every prompt; EOS ends every answer and is scored, so a
# model must learn to stop.  QUERY asks for a recall key's value or for the passkey.
# Index hints (Zhou et al. 2024): marker tokens #0 .. #(HINTS-1) placed before each symbol or
# digit, so that a model can align an answer with its prompt by content, not by position.
HINTS = 128
VOCAB: tuple[str, ...] = (
    "_", "|", ".", "?", "+", "key",
    *"0123456789", *LETTERS, *dict.fromkeys(FILLER), *(f"#{i}" for i in range(HINTS)),
)
PAD, SEP, EOS, QUERY, PLUS, KEY = range(6)
DIGIT0 = VOCAB.index("0")  # digit d is DIGIT0 + d
LETTER0 = VOCAB.index("a")  # the symbol alphabet: LETTER0 .. LETTER0 + len(LETTERS) - 1
FILLER_PATTERN = np.array([VOCAB.index(w) for w in FILLER], dtype=np.int64)
HINT0 = VOCAB.index("#0")  # hint i is HINT0 + i
VOCAB_SIZE = len(VOCAB)


def given_away(tokens: np.ndarray) -> np.ndarray:
    """Which of ``tokens`` a format gives away: its index hints, which an answer writes in
    the order the prompt shows them (each the one before plus or minus one), so that
    predicting them shows nothing of the task.  Token accuracy and its chance level count
    the other answer tokens (a hinted answer is half hints: counted, they inflate both)."""
    return (tokens >= HINT0) & (tokens < HINT0 + HINTS)

_IDS = {word: i for i, word in enumerate(VOCAB)}


def decode(tokens: Iterable[int]) -> str:
    return " ".join(VOCAB[int(t)] for t in tokens)


def encode(text: str) -> np.ndarray:
    """The tokens of ``decode``'s output, words separated by whitespace."""
    return np.array([_IDS[word] for word in text.split()], dtype=np.int64)
