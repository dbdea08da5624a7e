"""What every task is: a Task draws an Instance of a given length, ``prompt SEP answer EOS``.
The tasks themselves are in generators.py; registry.py registers them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from posexp.data.tasks.vocab import EOS, SEP


# eq=False: a generated __eq__ would compare the token arrays elementwise and fail.
@dataclass(frozen=True, eq=False)
class Instance:
    """One example.  ``tokens`` is prompt + SEP + answer + EOS (read-only); the answer
    starts at ``answer_start``, just after SEP; ``length`` is the task's length parameter;
    ``depth`` is where the passkey sits (None for other tasks)."""

    tokens: np.ndarray
    answer_start: int
    length: int
    depth: float | None = None

    @property
    def prompt(self) -> np.ndarray:
        return self.tokens[: self.answer_start - 1]

    @property
    def answer(self) -> np.ndarray:
        """The scored tokens: the answer and its EOS."""
        return self.tokens[self.answer_start:]


def make_instance(prompt: Sequence[int], answer: Sequence[int], length: int,
              depth: float | None = None) -> Instance:
    tokens = np.concatenate([np.asarray(prompt, dtype=np.int64), [SEP],
                             np.asarray(answer, dtype=np.int64), [EOS]])
    tokens.setflags(write=False)
    return Instance(tokens, len(prompt) + 1, length, depth)


class Task(ABC):
    """A task's lengths are a range: from ``min_length`` up to a limit, if it has one.
    ``sample`` raises ValueError with ``why_not``'s reason outside it, so a caller asks
    ``why_not`` first and reports n/a."""

    name: str  # task=<name>, configs/task/<name>.yaml
    description: str
    task_id: int  # part of every held-out seed: fixed forever, never reused
    length_unit: str  # what its length counts, as figures and tables say it
    min_length: int = 1
    takes_depth: bool = False

    def why_not(self, length: int) -> str | None:
        """None when the task has instances of ``length``, else the one-line reason."""
        if length < self.min_length:
            return f"{self.name}: length {length} is below the minimum {self.min_length}"
        return None

    @abstractmethod
    def tokens_for(self, length: int) -> int:
        """Tokens in an instance of ``length``; every task's count is fixed by the length."""

    def sample(self, rng: np.random.Generator, length: int,
               depth: float | None = None) -> Instance:
        if (reason := self.why_not(length)) is not None:
            raise ValueError(reason)
        if depth is not None and not self.takes_depth:
            raise ValueError(f"{self.name}: takes no depth (got depth={depth})")
        return self._draw(rng, length, depth)

    @abstractmethod
    def _draw(self, rng: np.random.Generator, length: int, depth: float | None) -> Instance:
        ...
