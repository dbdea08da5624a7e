"""RULER's synthetic retrieval, tracing and aggregation tasks (Hsieh et al. 2024, "RULER:
What's the Real Context Size of Your Long-Context Language Models?"), after the definitions
of their generators (NVIDIA/RULER, scripts/data/synthetic/niah.py, variable_tracking.py and
common_words_extraction.py), read and written anew in posexp's vocabulary, so that a
trained run is judged on retrieval beyond one passkey.  The needles' and the chain's
haystack is passkey's: the filler pattern, unbroken but for what is hidden in it, so only
what is hidden carries information; their lengths are tokens of context, as passkey's.

* ``niah_multikey`` (RULER's niah_multikey_1): four needles ``key K V`` -- K two letters, a
  key of its own each, V a 7-digit number (the first digit not 0, as RULER's numbers) -- the
  question names one key, the answer is its number.  The queried needle sits at depth d, as
  passkey's key block does; the three others, RULER's distractors, at places drawn uniformly.
* ``niah_multivalue`` (RULER's niah_multivalue): four needles of one key and four numbers;
  the answer is every number, in the order they stand (RULER scores them as a set).  The
  first sits at depth d, the others where drawn.
* ``variable_tracking`` (RULER's vt, one chain of four hops): ``key X1 V`` assigns a 5-digit
  number to X1 and ``key X2 X1`` ... ``key X5 X4`` each the variable before, at places of the
  filler drawn uniformly, in chain order; the question names the number, the answer is every
  variable assigned it, in chain order (RULER scores the names as a set; the order is the one
  they appear in, so the answer has one spelling).  RULER draws the places; this task has no
  depth.
* ``common_words`` (RULER's cwe): a shuffled list of ten words 30 times each and n words 3
  times each; the answer is the ten common words (RULER scores them as a set; here in the
  order each first stands).  Its lengths are RULER's long contexts: 600 tokens and more.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from posexp.data.tasks.base import Instance, Task, make_instance
from posexp.data.tasks.registry import register_task
from posexp.data.tasks.vocab import DIGIT0, FILLER_PATTERN, KEY, LETTER0, LETTERS, QUERY

NAME_LETTERS = 2  # a key or variable: two letters (RULER's are words or 5 capitals)


def _name(rng: np.random.Generator, taken: set[tuple[int, ...]]) -> tuple[int, ...]:
    """A name of NAME_LETTERS letters none of ``taken`` has."""
    while True:
        name = tuple(int(t) for t in rng.integers(LETTER0, LETTER0 + len(LETTERS),
                                                  NAME_LETTERS))
        if name not in taken:
            taken.add(name)
            return name


def _number(rng: np.random.Generator, digits: int) -> list[int]:
    """A number of ``digits`` digits, the first not 0, as digit tokens."""
    return [DIGIT0 + int(rng.integers(1, 10)),
            *(DIGIT0 + rng.integers(0, 10, digits - 1)).tolist()]


def _check_name(name: Sequence[int]) -> None:
    if len(name) != NAME_LETTERS or not all(LETTER0 <= t < LETTER0 + len(LETTERS)
                                            for t in name):
        raise ValueError(f"a name is {NAME_LETTERS} letter tokens, got {list(name)}")


def _check_number(number: Sequence[int], digits: int) -> None:
    if len(number) != digits or not all(DIGIT0 <= t < DIGIT0 + 10 for t in number) \
            or number[0] == DIGIT0:
        raise ValueError(f"a number is {digits} digit tokens, the first not 0, got "
                         f"{list(number)}")


def _hide(blocks: Sequence[Sequence[int]], offsets: Sequence[int], room: int) -> list[int]:
    """The filler pattern over ``room`` tokens with each block inserted before filler token
    ``offsets[i]`` (0 .. room), the blocks in the order given where offsets tie."""
    filler = np.resize(FILLER_PATTERN, room).tolist()
    order = sorted(range(len(blocks)), key=lambda i: offsets[i])
    context, at = [], 0
    for i in order:
        context += filler[at:offsets[i]] + list(blocks[i])
        at = offsets[i]
    return context + filler[at:]


class MultiKeyNeedleTask(Task):
    """Length n: n tokens of context, filler but for four needles ``key K1 K2 v1 .. v7``;
    then ``?`` and a key; the answer is that key's number.  The queried needle (the first of
    ``needles``) sits before filler token round(d * (n - 40)); depth 0 puts it first, 1 last.
    n=42, d=0, the others before filler tokens 2, 2, 1: ``key a b 1 2 3 4 5 6 7 the key g h
    3 3 3 3 3 3 3 grass key c d 9 8 7 6 5 4 3 key e f 2 2 2 2 2 2 2 ? a b | 1 2 3 4 5 6 7 .``"""

    name, task_id, length_unit = "niah_multikey", 14, "tokens of context"
    description = "find the number of the queried key among four hidden in filler"
    needles, digits = 4, 7  # RULER's niah_multikey_1: num_needle_k 4, 7-digit numbers
    takes_depth = True

    @property
    def block(self) -> int:
        return 1 + NAME_LETTERS + self.digits

    @property
    def min_length(self) -> int:  # the needles alone
        return self.needles * self.block

    def why_not(self, length: int) -> str | None:
        if length < self.min_length:
            return (f"{self.name}: a context of {length} tokens cannot hold its "
                    f"{self.needles} needles of {self.block} tokens")
        return None

    def tokens_for(self, length: int) -> int:
        return length + 1 + NAME_LETTERS + 1 + self.digits + 1

    def laid_out(self, needles: Sequence[tuple[Sequence[int], Sequence[int]]],
                 offsets: Sequence[int], length: int, depth: float) -> tuple[list, list]:
        """The context with ``needles`` -- (key, number) each, checked -- hidden in it, the
        first before filler token round(depth * room), the others at ``offsets`` (0 ..
        room); and the needles' indices in the order they stand."""
        if (reason := self.why_not(length)) is not None:
            raise ValueError(reason)
        room = length - self.min_length
        if len(needles) != self.needles or len(offsets) != self.needles - 1 \
                or not 0 <= depth <= 1 or not all(0 <= o <= room for o in offsets):
            raise ValueError(f"{self.name}: needs {self.needles} needles, "
                             f"{self.needles - 1} offsets in [0, {room}] and a depth in "
                             f"[0, 1], got {len(needles)}, {list(offsets)} and {depth}")
        for key, number in needles:
            _check_name(key)
            _check_number(number, self.digits)
        at = [round(depth * room), *offsets]
        blocks = [[KEY, *key, *number] for key, number in needles]
        order = sorted(range(self.needles), key=lambda i: at[i])  # as _hide lays them out
        return _hide(blocks, at, room), order

    def make(self, needles: Sequence[tuple[Sequence[int], Sequence[int]]],
             offsets: Sequence[int], length: int, depth: float) -> Instance:
        """``needles``: (key, number) each, the queried one first (laid_out)."""
        if len({tuple(key) for key, _ in needles}) != len(needles):
            raise ValueError("niah_multikey: every needle has a key of its own")
        context, _ = self.laid_out(needles, offsets, length, depth)
        key, number = needles[0]
        return make_instance([*context, QUERY, *key], number, length, float(depth))

    def _draw(self, rng: np.random.Generator, length: int, depth: float | None) -> Instance:
        depth = rng.uniform() if depth is None else depth
        taken: set[tuple[int, ...]] = set()
        needles = [(_name(rng, taken), _number(rng, self.digits)) for _ in range(self.needles)]
        room = length - self.min_length
        offsets = rng.integers(0, room + 1, self.needles - 1).tolist()
        return self.make(needles, offsets, length, depth)


class MultiValueNeedleTask(MultiKeyNeedleTask):
    """Length n: n tokens of context, filler but for four needles ``key K1 K2 v1 .. v7`` of
    one key and four numbers; then ``?`` and the key; the answer is its four numbers, in the
    order they stand.  The first of ``needles`` sits before filler token round(d * (n - 40)),
    the others where ``offsets`` say.  n=40, d=0: ``key a b 1 1 1 1 1 1 1 key a b 2 2 2 2 2 2
    2 key a b 3 3 3 3 3 3 3 key a b 4 4 4 4 4 4 4 ? a b | 1 1 1 1 1 1 1 2 2 ... 4 .``"""

    name, task_id = "niah_multivalue", 16
    description = "give every number of the queried key, four hidden in filler"

    def tokens_for(self, length: int) -> int:
        return length + 1 + NAME_LETTERS + 1 + self.needles * self.digits + 1

    def make(self, needles: Sequence[tuple[Sequence[int], Sequence[int]]],
             offsets: Sequence[int], length: int, depth: float) -> Instance:
        """``needles``: (key, number) each, one key for all, the first at depth ``depth``
        (laid_out); the answer is every number in the order they stand."""
        if len({tuple(key) for key, _ in needles}) != 1 \
                or len({tuple(number) for _, number in needles}) != len(needles):
            raise ValueError("niah_multivalue: one key, and a number of its own each needle")
        context, order = self.laid_out(needles, offsets, length, depth)
        answer = [t for i in order for t in needles[i][1]]
        return make_instance([*context, QUERY, *needles[0][0]], answer, length, float(depth))

    def _draw(self, rng: np.random.Generator, length: int, depth: float | None) -> Instance:
        depth = rng.uniform() if depth is None else depth
        key = _name(rng, set())
        numbers: list[list[int]] = []
        while len(numbers) < self.needles:  # numbers of their own
            if (number := _number(rng, self.digits)) not in numbers:
                numbers.append(number)
        offsets = rng.integers(0, length - self.min_length + 1, self.needles - 1).tolist()
        return self.make([(key, n) for n in numbers], offsets, length, depth)


class VariableTrackingTask(Task):
    """Length n: n tokens of context, filler but for one chain ``key X1 v1 .. v5``, ``key X2
    X1``, ..., ``key X5 X4`` at places drawn in chain order; then ``?`` and the number; the
    answer is X1 .. X5.  n=30, at filler tokens 0, 0, 1, 1, 2: ``key a b 1 2 3 4 5 key c d a b
    the key e f c d key g h e f grass key i j g h ? 1 2 3 4 5 | a b c d e f g h i j .``"""

    name, task_id, length_unit = "variable_tracking", 15, "tokens of context"
    description = "name every variable the chain of assignments gives the queried number"
    hops, digits = 4, 5  # RULER's vt: num_chains 1, num_hops 4; numbers 10000-99999

    @property
    def min_length(self) -> int:  # the chain alone
        return 1 + NAME_LETTERS + self.digits + self.hops * (1 + 2 * NAME_LETTERS)

    def why_not(self, length: int) -> str | None:
        if length < self.min_length:
            return (f"variable_tracking: a context of {length} tokens cannot hold its chain "
                    f"of {self.min_length} tokens")
        return None

    def tokens_for(self, length: int) -> int:
        return length + 1 + self.digits + 1 + (self.hops + 1) * NAME_LETTERS + 1

    def make(self, names: Sequence[Sequence[int]], number: Sequence[int],
             offsets: Sequence[int], length: int) -> Instance:
        """``names``: X1 .. X5; ``offsets``: the filler offset of each assignment, in chain
        order (non-decreasing, 0 .. room)."""
        if (reason := self.why_not(length)) is not None:
            raise ValueError(reason)
        room = length - self.min_length
        if len(names) != self.hops + 1 or len(offsets) != self.hops + 1 \
                or list(offsets) != sorted(offsets) or not all(0 <= o <= room for o in offsets):
            raise ValueError(f"variable_tracking: needs {self.hops + 1} names and as many "
                             f"non-decreasing offsets in [0, {room}], got {len(names)} and "
                             f"{list(offsets)}")
        for name in names:
            _check_name(name)
        _check_number(number, self.digits)
        if len({tuple(name) for name in names}) != len(names):
            raise ValueError("variable_tracking: every variable has a name of its own")
        blocks = [[KEY, *names[0], *number],
                  *([KEY, *names[i + 1], *names[i]] for i in range(self.hops))]
        context = _hide(blocks, offsets, room)
        return make_instance([*context, QUERY, *number], [t for n in names for t in n], length)

    def _draw(self, rng: np.random.Generator, length: int, depth: float | None) -> Instance:
        taken: set[tuple[int, ...]] = set()
        names = [_name(rng, taken) for _ in range(self.hops + 1)]
        room = length - self.min_length
        offsets = sorted(rng.integers(0, room + 1, self.hops + 1).tolist())
        return self.make(names, _number(rng, self.digits), offsets, length)


class CommonWordsTask(Task):
    """Length n: a list of words -- ten common words 30 times each and n uncommon words 3
    times each, every word two letters, shuffled -- then ``?``; the answer is the ten common
    words, in the order each first stands.  RULER asks for "the 10 most common words in the
    above list" (its numbered list is plain here: the words alone).  Every length is long:
    the common words alone are 300 words, 600 tokens."""

    name, task_id, length_unit = "common_words", 17, "uncommon words"
    description = "name the ten words the shuffled list holds 30 times each"
    common, common_freq, uncommon_freq = 10, 30, 3  # RULER's cwe: num_cw, freq_cw, freq_ucw

    def why_not(self, length: int) -> str | None:
        names = len(LETTERS) ** NAME_LETTERS
        if length < self.min_length or length > names - self.common:
            return (f"common_words: {length} uncommon words; there are {names} words of "
                    f"{NAME_LETTERS} letters, ten of them the common ones")
        return None

    def tokens_for(self, length: int) -> int:
        words = self.common * self.common_freq + self.uncommon_freq * length
        return NAME_LETTERS * words + 1 + 1 + NAME_LETTERS * self.common + 1

    def make(self, words: Sequence[Sequence[int]], length: int) -> Instance:
        """``words``: the shuffled list, each word NAME_LETTERS letter tokens, as the task
        defines it (ten words 30 times, ``length`` words 3 times)."""
        if (reason := self.why_not(length)) is not None:
            raise ValueError(reason)
        for word in words:
            _check_name(word)
        counts: dict[tuple[int, ...], int] = {}
        for word in words:
            counts[tuple(word)] = counts.get(tuple(word), 0) + 1
        common = [w for w, n in counts.items() if n == self.common_freq]
        if len(common) != self.common or len(counts) != self.common + length or any(
                n not in (self.common_freq, self.uncommon_freq) for n in counts.values()):
            raise ValueError(f"common_words: needs {self.common} words {self.common_freq} "
                             f"times and {length} words {self.uncommon_freq} times")
        return make_instance([t for w in words for t in w] + [QUERY],
                             [t for w in common for t in w], length)  # in first-seen order

    def _draw(self, rng: np.random.Generator, length: int, depth: float | None) -> Instance:
        taken: set[tuple[int, ...]] = set()
        common = [_name(rng, taken) for _ in range(self.common)]
        uncommon = [_name(rng, taken) for _ in range(length)]
        words = common * self.common_freq + uncommon * self.uncommon_freq
        return self.make([words[i] for i in rng.permutation(len(words))], length)


register_task(MultiKeyNeedleTask())
register_task(MultiValueNeedleTask())
register_task(VariableTrackingTask())
register_task(CommonWordsTask())
