"""The counting task of Golovneva et al. 2024 (CoPE, "Contextual Position Encoding: Learning
to Count What's Important"), after the generator of their code (facebookresearch/RAM,
projects/cope/scripts/count_data_gen.py), read and written anew in posexp's vocabulary.

A program of n statements over a few variables; each statement sets a variable to 0, adds
one to a variable already set, or does nothing, drawn 1 : 7 : 50 as the reference weighs
them; a variable never passes 10 (an increment that would is drawn again, as one with no
variable set yet is).  The question names a variable that was set; the answer is its value:
the increments since its last setting, among many statements that are not -- counting what
matters, which positions alone cannot do.  A program in which no variable is ever set has no
question: it is drawn again, as the reference draws its sample again.

Every statement is two tokens, so an instance of n statements has a fixed size:
``a 0`` sets a to 0, ``a +`` adds one to it, ``the sky`` does nothing; the question is ``?
a`` and the answer two digits (``0 3``, ``1 0``).  n=4: ``a 0 the sky a + a + ? a | 0 2 .``
The reference draws the program's length; here it is the task's length, as every task's is.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from posexp.data.tasks import formats  # noqa: F401 -- the tasks and formats register first
from posexp.data.tasks.base import Instance, Task, make_instance
from posexp.data.tasks.registry import register_task
from posexp.data.tasks.vocab import DIGIT0, LETTER0, PLUS, QUERY, VOCAB

SET, INCREMENT, PASS = "set", "increment", "pass"
WEIGHTS = {SET: 1, INCREMENT: 7, PASS: 50}  # the reference's OP_WEIGHTS
MAX_VALUE = 10  # the reference's MAX_VAL: no variable counts past it
NOTHING = (VOCAB.index("the"), VOCAB.index("sky"))  # the statement that does nothing
TRIES = 1000  # programs drawn before giving up (the reference's limit too)


class CountTask(Task):
    """Length n: n statements over ``n_vars`` variables (the reference's default 3), then
    the question; the answer is the queried variable's value, two digits."""

    name, task_id, length_unit = "count", 13, "statements"
    description = "say how often the queried variable was incremented since it was set"
    # the reference's shortest program; below it a program seldom sets any variable (1 in
    # 58 statements does), and TRIES draws could all fail
    min_length = 3

    def __init__(self, n_vars: int = 3) -> None:
        self.n_vars = n_vars

    def tokens_for(self, length: int) -> int:
        return 2 * length + 6

    def make(self, statements: Sequence[tuple[str, int]], query: int) -> Instance:
        """``statements``: (SET | INCREMENT | PASS, variable index); ``query`` a variable
        that was set.  Checks the program as the generator would have drawn it."""
        values: dict[int, int] = {}
        prompt: list[int] = []
        for op, var in statements:
            if op == SET:
                values[var] = 0
            elif op == INCREMENT:
                if values.get(var, MAX_VALUE) >= MAX_VALUE:
                    raise ValueError(f"count: variable {var} is not set or would pass "
                                     f"{MAX_VALUE}")
                values[var] += 1
            prompt += list(NOTHING) if op == PASS else [
                LETTER0 + var, DIGIT0 if op == SET else PLUS]
        if query not in values:
            raise ValueError(f"count: the query {query} was never set")
        value = values[query]
        return make_instance([*prompt, QUERY, LETTER0 + query],
                             [DIGIT0 + value // 10, DIGIT0 + value % 10], len(statements))

    def _draw(self, rng: np.random.Generator, length: int, depth: float | None) -> Instance:
        ops, weights = list(WEIGHTS), np.array(list(WEIGHTS.values()), dtype=float)
        for _ in range(TRIES):
            values: dict[int, int] = {}
            statements = [self._statement(rng, ops, weights / weights.sum(), values)
                          for _ in range(length)]
            if values:
                return self.make(statements, int(rng.choice(sorted(values))))
        raise ValueError(f"count: no program of {length} statements set a variable in "
                         f"{TRIES} draws")

    def _statement(self, rng: np.random.Generator, ops: list[str], p: np.ndarray,
                   values: dict[int, int]) -> tuple[str, int]:
        """One statement: an operation drawn by weight, again while it cannot apply."""
        while True:
            op = ops[rng.choice(len(ops), p=p)]
            if op == PASS:
                return PASS, 0
            if op == SET:
                var = int(rng.integers(self.n_vars))
                values[var] = 0
                return SET, var
            if values:
                var = int(rng.choice(sorted(values)))
                if values[var] < MAX_VALUE:
                    values[var] += 1
                    return INCREMENT, var


register_task(CountTask())
