"""The tasks: each draws an instance of a given length, or builds one from given values.

Every instance is ``prompt SEP answer EOS``.  ``make`` builds an instance from chosen
values, so a test can check one by hand; ``sample`` draws the values from a generator and
calls ``make``.  The length a task takes is its own (symbols, bits, digits, pairs, context
tokens); ``tokens_for`` converts it to a token count.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

import numpy as np

from posexp.data.tasks.base import Instance, Task, make_instance
from posexp.data.tasks.registry import register_task
from posexp.data.tasks.vocab import (
    DIGIT0,
    FILLER_PATTERN,
    KEY,
    LETTER0,
    LETTERS,
    PLUS,
    QUERY,
)

KEY_DIGITS = 5  # the passkey's digits, as in Mohtashami & Jaggi


def _digits(x: int, width: int) -> list[int]:
    return [DIGIT0 + int(c) for c in f"{x:0{width}d}"]


class _SymbolTask(Task):
    """n letters in, n letters out; the subclasses differ only in ``transform``."""

    def tokens_for(self, length: int) -> int:
        return 2 * length + 2

    def make(self, symbols: Sequence[int]) -> Instance:
        symbols = np.asarray(symbols, dtype=np.int64)
        return make_instance(symbols, self.transform(symbols), len(symbols))

    def _draw(self, rng: np.random.Generator, length: int, depth: float | None) -> Instance:
        return self.make(rng.integers(LETTER0, LETTER0 + len(LETTERS), length))

    @staticmethod
    @abstractmethod
    def transform(symbols: np.ndarray) -> np.ndarray:
        ...


class CopyTask(_SymbolTask):
    """Length n: n letters drawn uniformly, with repeats; the answer repeats them.
    n=3: ``c a b | c a b .``"""

    name, task_id, length_unit = "copy", 1, "letters"
    description = "repeat the n letters of the prompt"

    @staticmethod
    def transform(symbols: np.ndarray) -> np.ndarray:
        return symbols


class ReverseTask(_SymbolTask):
    """Length n: n letters; the answer is them in reverse order.  n=3: ``c a b | b a c .``"""

    name, task_id, length_unit = "reverse", 2, "letters"
    description = "write the n letters of the prompt backwards"

    @staticmethod
    def transform(symbols: np.ndarray) -> np.ndarray:
        return symbols[::-1]


class SortTask(_SymbolTask):
    """Length n: n letters; the answer is them in alphabetical order, repeats kept.
    n=4: ``c a b a | a a b c .``"""

    name, task_id, length_unit = "sort", 3, "letters"
    description = "write the n letters of the prompt in alphabetical order"

    @staticmethod
    def transform(symbols: np.ndarray) -> np.ndarray:
        return np.sort(symbols)


class ParityTask(Task):
    """Length n: n bits (the digits 0 and 1); the answer is one bit, their sum mod 2.
    n=4: ``1 0 1 1 | 1 .``"""

    name, task_id, length_unit = "parity", 4, "bits"
    description = "say whether the n bits hold an odd number of ones"

    def tokens_for(self, length: int) -> int:
        return length + 3

    def make(self, bits: Sequence[int]) -> Instance:
        bits = np.asarray(bits, dtype=np.int64)
        return make_instance(DIGIT0 + bits, [DIGIT0 + int(bits.sum()) % 2], len(bits))

    def _draw(self, rng: np.random.Generator, length: int, depth: float | None) -> Instance:
        return self.make(rng.integers(0, 2, length))


class AdditionTask(Task):
    """Length n: two n-digit operands, ``a + b``; the answer is their sum.

    Operands are uniform in [0, 10^n) and written zero-padded to n digits; the sum is
    written with n + 1 digits, most significant first (the plain order, as people write
    it).  Fixed widths give every instance of length n the same 3n + 4 tokens, whatever the
    carries.  Past ``max_digits`` the task says n/a: it is the range the task is declared
    on, so an evaluation grid that runs past it records why instead of growing silently.
    n=2: ``5 7 + 6 8 | 1 2 5 .``; n=3: ``0 1 2 + 3 4 5 | 0 3 5 7 .``"""

    name, task_id, length_unit = "addition", 5, "digits per operand"
    description = "add two n-digit numbers"

    def __init__(self, max_digits: int = 20) -> None:
        self.max_digits = max_digits

    def why_not(self, length: int) -> str | None:
        if length > self.max_digits:
            return f"addition: {length} digits is past the {self.max_digits}-digit limit"
        return super().why_not(length)

    def tokens_for(self, length: int) -> int:
        return 3 * length + 4

    def make(self, a: int, b: int, n: int) -> Instance:
        if not (0 <= a < 10**n and 0 <= b < 10**n):
            raise ValueError(f"addition: operands {a} and {b} do not have {n} digits")
        return make_instance([*_digits(a, n), PLUS, *_digits(b, n)], _digits(a + b, n + 1), n)

    def _draw(self, rng: np.random.Generator, length: int, depth: float | None) -> Instance:
        # digit by digit, so that no length overflows a fixed-width integer
        a, b = (int("".join(map(str, rng.integers(0, 10, length)))) for _ in range(2))
        return self.make(a, b, length)


class RecallTask(Task):
    """Associative recall (Ba et al. 2016).  Length n: n key-value pairs (a letter, then a
    digit), QUERY and a key; the answer is the value last bound to that key.

    Keys are drawn with replacement and a later pair overrides an earlier one (as a
    dictionary built in order would read them), so the answer is unique at every length;
    distinct keys would stop the task at 26 pairs, and length extrapolation needs lengths
    past any such cap.  The query is the key of a uniformly drawn pair.
    n=3: ``c 9 k 8 c 3 ? c | 3 .``"""

    name, task_id, length_unit = "recall", 6, "key-value pairs"
    description = "give the digit last paired with the queried letter"

    def tokens_for(self, length: int) -> int:
        return 2 * length + 5

    def make(self, keys: Sequence[int], values: Sequence[int], query: int) -> Instance:
        """``keys`` and ``query`` are letter tokens; ``values`` are digits 0-9."""
        bound = dict(zip(keys, values, strict=True))
        if query not in bound:
            raise ValueError(f"recall: the query {query} is none of the keys")
        pairs = np.stack([np.asarray(keys), DIGIT0 + np.asarray(values)], axis=1).ravel()
        return make_instance([*pairs, QUERY, query], [DIGIT0 + bound[query]], len(keys))

    def _draw(self, rng: np.random.Generator, length: int, depth: float | None) -> Instance:
        keys = rng.integers(LETTER0, LETTER0 + len(LETTERS), length)
        values = rng.integers(0, 10, length)
        return self.make(keys.tolist(), values.tolist(), int(keys[rng.integers(length)]))


class PasskeyTask(Task):
    """Passkey retrieval (Mohtashami & Jaggi 2023).  Length n: n tokens of context, filler
    but for the key block (``key`` and 5 digits) at depth d; then QUERY; the answer is the
    5 digits.

    The block starts at context position round(d * (n - 6)): depth 0 puts it first, depth 1
    last.  The filler is ``FILLER_PATTERN`` repeated from the start of the context and
    continued after the block, so without the block the context is the pattern unbroken.
    ``sample`` draws d uniformly from [0, 1) when none is given.
    n=12, d=0.5: ``the grass is key 7 1 4 3 2 green the sky ? | 7 1 4 3 2 .``"""

    name, task_id, length_unit = "passkey", 7, "tokens of context"
    description = "find the 5-digit key hidden in filler and repeat it"
    min_length = 1 + KEY_DIGITS
    takes_depth = True

    def why_not(self, length: int) -> str | None:
        if length < self.min_length:
            return (f"passkey: a context of {length} tokens cannot hold the "
                    f"{self.min_length}-token key block")
        return None

    def tokens_for(self, length: int) -> int:
        return length + KEY_DIGITS + 3

    def make(self, key: Sequence[int], length: int, depth: float) -> Instance:
        """``key``: KEY_DIGITS digits 0-9; ``depth`` in [0, 1]."""
        if len(key) != KEY_DIGITS or not 0 <= depth <= 1:
            raise ValueError(f"passkey: needs {KEY_DIGITS} key digits and a depth in [0, 1], "
                             f"got {len(key)} digits and depth {depth}")
        if (reason := self.why_not(length)) is not None:
            raise ValueError(reason)
        room = length - self.min_length
        at = round(depth * room)
        filler = np.resize(FILLER_PATTERN, room)
        block = [KEY, *(DIGIT0 + np.asarray(key))]
        context = [*filler[:at], *block, *filler[at:]]
        return make_instance([*context, QUERY], DIGIT0 + np.asarray(key), length, float(depth))

    def _draw(self, rng: np.random.Generator, length: int, depth: float | None) -> Instance:
        depth = rng.uniform() if depth is None else depth
        return self.make(rng.integers(0, 10, KEY_DIGITS).tolist(), length, depth)


for _task in (CopyTask(), ReverseTask(), SortTask(), ParityTask(), AdditionTask(), RecallTask(),
              PasskeyTask()):
    register_task(_task)
