"""Task formats from the length-generalization literature, each a task of its own (one entry
of the registry and one config file), so that a run names its format as it names its task.

* ``addition_reversed`` -- Lee et al. 2023 ("Teaching Arithmetic to Small Transformers",
  the reversed format) and Zhou et al. 2024 write numbers least significant digit first, so
  that each digit of the sum depends on digits already seen: the algorithm is local.  Here
  both operands and the sum are reversed (Zhou et al.'s format; Lee et al. reverse the sum).
* ``copy_hints``, ``reverse_hints``, ``addition_hints`` -- index hints (Zhou et al. 2024,
  "Transformers Can Achieve Length Generalization But Not Robustly", §3; after Nogueira et
  al. 2021): a marker token before each symbol (digit), the same marker before the symbol
  it is copied to or added with, so a model can find its operand by content.  The markers
  are a run of consecutive hints #s .. #s+n-1 from a start s drawn uniformly at random (as
  Zhou et al. draw them), so that training reaches every hint a longer instance needs.
  ``addition_hints`` is reversed addition with hints, their strongest format.
* ``addition_carries`` -- reversed addition with a carry scratchpad (after Lee et al. 2023's
  simplified scratchpad): each digit of the sum is followed by the carry out of its
  position, so that the carry a digit needs is the token just written and every step of
  the algorithm is a lookup of three nearby digits.

Every format keeps its base task's length unit and its ``make``/``sample`` contract;
``tokens_for`` counts the hints.  A length whose hints would run past the last one is n/a.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from posexp.data.tasks.base import Instance, make_instance
from posexp.data.tasks.generators import AdditionTask, CopyTask, ReverseTask, _digits
from posexp.data.tasks.registry import register_task
from posexp.data.tasks.vocab import DIGIT0, HINT0, HINTS, LETTER0, LETTERS, PLUS


def interleave(hints: np.ndarray, symbols: Sequence[int]) -> list[int]:
    """``#h0 s0 #h1 s1 ...``: each symbol after its hint."""
    return np.stack([HINT0 + np.asarray(hints), np.asarray(symbols)], axis=1).ravel().tolist()


class ReversedAdditionTask(AdditionTask):
    """Length n: ``a + b`` with each number least significant digit first, operands n
    digits, the sum n + 1.  n=2, 57 + 68 = 125: ``7 5 + 8 6 | 5 2 1 .``"""

    name, task_id = "addition_reversed", 8
    description = "add two n-digit numbers written least significant digit first"

    def make(self, a: int, b: int, n: int) -> Instance:
        super().make(a, b, n)  # checks the operands
        return make_instance([*_digits(a, n)[::-1], PLUS, *_digits(b, n)[::-1]],
                             _digits(a + b, n + 1)[::-1], n)


class _Hinted:
    """A format that puts index hints before each symbol; ``hints_for(length)`` is how many
    hints an instance of that length uses."""

    hint_source = "Zhou et al. 2024"

    def hints_for(self, length: int) -> int:
        return length

    def why_not(self, length: int) -> str | None:
        if self.hints_for(length) > HINTS:
            return (f"{self.name}: length {length} needs {self.hints_for(length)} index "
                    f"hints, past the {HINTS} there are")
        return super().why_not(length)

    def start(self, rng: np.random.Generator, length: int) -> int:
        return int(rng.integers(0, HINTS - self.hints_for(length) + 1))


class HintedCopyTask(_Hinted, CopyTask):
    """Length n, hints from s: ``#s a #s+1 b | #s a #s+1 b .``"""

    name, task_id = "copy_hints", 9
    description = "repeat the n letters of the prompt, each after its index hint"

    def tokens_for(self, length: int) -> int:
        return 4 * length + 2

    def make(self, symbols: Sequence[int], start: int = 0) -> Instance:
        symbols = np.asarray(symbols, dtype=np.int64)
        hints = start + np.arange(len(symbols))
        out = self.transform(np.stack([hints, symbols], axis=1))
        return make_instance(interleave(hints, symbols), interleave(out[:, 0], out[:, 1]),
                             len(symbols))

    def _draw(self, rng: np.random.Generator, length: int, depth: float | None) -> Instance:
        start = self.start(rng, length)
        return self.make(rng.integers(LETTER0, LETTER0 + len(LETTERS), length), start)


class HintedReverseTask(HintedCopyTask, ReverseTask):
    """Length n, hints from s: ``#s a #s+1 b | #s+1 b #s a .``"""

    name, task_id = "reverse_hints", 10
    description = "write the n letters of the prompt backwards, each after its index hint"
    transform = staticmethod(ReverseTask.transform)


class HintedAdditionTask(_Hinted, ReversedAdditionTask):
    """Reversed addition with a hint before every digit, digit i of a, of b and of the sum
    under the same hint.  n=2, 57 + 68, s=0: ``#0 7 #1 5 + #0 8 #1 6 | #0 5 #1 2 #2 1 .``"""

    name, task_id = "addition_hints", 11
    description = ("add two n-digit numbers written least significant digit first, each "
                   "digit after its index hint")

    def hints_for(self, length: int) -> int:
        return length + 1  # the sum's extra digit

    def tokens_for(self, length: int) -> int:
        return 6 * length + 5

    def make(self, a: int, b: int, n: int, start: int = 0) -> Instance:
        plain = super().make(a, b, n)
        a_digits, b_digits = plain.prompt[:n], plain.prompt[n + 1:]
        hints = start + np.arange(n + 1)
        return make_instance([*interleave(hints[:n], a_digits), PLUS,
                              *interleave(hints[:n], b_digits)],
                             interleave(hints, plain.answer[:-1]), n)

    def _draw(self, rng: np.random.Generator, length: int, depth: float | None) -> Instance:
        start = self.start(rng, length)
        a, b = (int("".join(map(str, rng.integers(0, 10, length)))) for _ in range(2))
        return self.make(a, b, length, start)


class CarriesAdditionTask(ReversedAdditionTask):
    """Reversed addition whose answer writes, for each position i from the least
    significant, the sum digit s_i and then the carry c_i out of it; the last carry is the
    sum's top digit.  n=2, 57 + 68 = 125: ``7 5 + 8 6 | 5 1 2 1 .`` (7+8 = 15: 5 carry 1;
    5+6+1 = 12: 2 carry 1)."""

    name, task_id = "addition_carries", 12
    description = ("add two n-digit numbers written least significant digit first, each sum "
                   "digit followed by its carry")

    def tokens_for(self, length: int) -> int:
        return 4 * length + 3

    def make(self, a: int, b: int, n: int) -> Instance:
        plain = super().make(a, b, n)
        answer, carry = [], 0
        for x, y in zip(_digits(a, n)[::-1], _digits(b, n)[::-1], strict=True):
            carry, digit = divmod((x - DIGIT0) + (y - DIGIT0) + carry, 10)
            answer += [DIGIT0 + digit, DIGIT0 + carry]
        return make_instance(plain.prompt, answer, n)


for _task in (ReversedAdditionTask(), HintedCopyTask(), HintedReverseTask(),
              HintedAdditionTask(), CarriesAdditionTask()):
    register_task(_task)
