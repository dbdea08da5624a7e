"""The positions a run is scored at.  A run trained at positions 0..n-1 is scored at them; a
run trained on randomized positions (train.random_positions=M; Ruoss et al., ACL 2023) is
scored as it was trained and as the paper's reference code scores it
(google-deepmind/randomized_positional_encodings, which samples them at evaluation too): each
window or instance of n tokens at a sorted random subset of n distinct positions below M.

The draws are posexp's own, fixed by SEED (recorded in every point as ``positions_seed``),
the length and the window's end in the validation stream (an instance's index among the
held-out ones and its eval seed): the same at any batch size, on any device, in any later
``posexp eval``.  A length past M cannot be so scored: n/a.  ``eval.positions=consecutive``
scores a randomized run at 0..n-1 instead, a variant beside it that judges no claim (the
model never saw those positions together)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from posexp.scaling import CONSECUTIVE

SAMPLED = "sampled"
SEED = 0  # the one seed of evaluation draws: every run's points are drawn alike
STREAM = 0x504F53  # keeps these draws apart from any other generator seeded by the same key


@dataclass(frozen=True)
class EvalPositions:
    """How a run is scored: ``limit`` M of a randomized run (None for a run trained at
    consecutive positions), ``consecutive`` its variant at 0..n-1."""

    limit: int | None = None
    consecutive: bool = False

    @classmethod
    def of(cls, random_positions: int | None, positions: str | None) -> EvalPositions:
        """From train.random_positions and eval.positions (config/check_eval.py has checked
        that a run trained at consecutive positions asks for no variant)."""
        return cls(random_positions, positions == CONSECUTIVE)

    @property
    def sampled(self) -> bool:
        return self.limit is not None and not self.consecutive

    def record(self) -> dict:
        """What a point says of its positions: nothing for a run trained at consecutive
        positions (its points are as they always were), else how it was scored."""
        if self.limit is None:
            return {}
        if self.consecutive:
            return {"positions": CONSECUTIVE}
        return {"positions": SAMPLED, "positions_seed": SEED}

    def why_not(self, length: int, inputs: int) -> str | None:
        """Why ``inputs`` positions cannot be drawn for ``length``; None when they can."""
        if self.sampled and inputs > self.limit:
            return (f"trained on random positions below {self.limit}: {inputs} input tokens of "
                    f"length {length} have no {inputs} distinct positions to be scored at "
                    "(eval.positions=consecutive scores them at 0..n-1)")
        return None

    def draw(self, n: int, keys: np.ndarray) -> np.ndarray:
        """[len(keys), n] positions: row r sorted, distinct and below M, drawn by (SEED, n,
        keys[r]) alone.  A row's key is a window's end in the stream (an instance's index and
        eval seed, ``task_key``)."""
        rows = []
        for key in np.atleast_1d(keys):
            rng = np.random.default_rng([SEED, STREAM, n, *np.atleast_1d(key).tolist()])
            rows.append(np.sort(rng.choice(self.limit, n, replace=False)))
        return np.stack(rows).astype(np.int64)

    def at(self, n: int, keys: np.ndarray, device: torch.device) -> torch.Tensor | None:
        """The positions ``draw`` gives on ``device``; None to score at 0..n-1."""
        if not self.sampled:
            return None
        return torch.from_numpy(self.draw(n, keys)).to(device)

    def padded(self, lengths: list[int], width: int, keys: np.ndarray,
               device: torch.device) -> torch.Tensor | None:
        """[rows, width] positions for right-padded rows of ``lengths`` inputs: each row's own
        ``draw`` of its length, the padding at the row's last position (a causal model reads
        the padding from no scored token).  None to score at 0..n-1."""
        if not self.sampled:
            return None
        out = np.zeros((len(lengths), width), dtype=np.int64)
        for row, (n, key) in enumerate(zip(lengths, keys, strict=True)):
            out[row, :n] = self.draw(n, np.asarray([key]))[0]
            out[row, n:] = out[row, n - 1]
        return torch.from_numpy(out).to(device)


def task_keys(eval_seed: int, first: int, count: int) -> np.ndarray:
    """The draw keys of held-out instances first .. first+count-1 of ``eval_seed``: each
    instance is at the same positions at every point that scores it."""
    return np.stack([np.full(count, eval_seed), np.arange(first, first + count)], axis=1)


PLAIN = EvalPositions()  # a run trained at consecutive positions
