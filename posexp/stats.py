"""How sure a figure is: intervals within one run and across seeds.

**Within one run** (no extra training): the scored region of a curve point -- the last
``eval.tokens`` targets of the validation stream, the same at every length -- is cut into
``BLOCKS`` contiguous blocks, and eval.json keeps each block's summed loss.  A point's
interval is a percentile bootstrap over blocks (Efron & Tibshirani 1993, ch. 13): resample
blocks with replacement, recompute perplexity as exp(sum of losses / sum of tokens).
Contiguous blocks of hundreds of tokens keep the dependence between neighbouring tokens
inside a block (a block bootstrap, Künsch 1989).  Because every point of a region has the
same blocks, two points -- one run at two lengths, or two runs on the same text -- are
compared *paired*: each resample draws the same blocks for both, so the text's own
difficulty cancels out of a ratio.  The resampling is seeded, so the same eval.json always
gives the same interval.

**Across seeds**: the mean of the per-seed values with a Student-t interval, which is exact
for normal values and honest (wide) for the 2-5 seeds a small study runs.  Perplexities and
their ratios are positive and multiplicative, so they take the interval on the log scale
(``log=True``): the centre is the geometric mean, and the interval never reaches below zero
as a plain t interval of two or three spread-out perplexities would.  One seed has no seed
interval; the claim suite then falls back on the bootstrap over blocks and says so.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95      # every interval posexp prints
BLOCKS = 64       # blocks of the scored region (fewer when it holds fewer tokens)
RESAMPLES = 2000  # bootstrap resamples
SEED = 0          # the resampling is deterministic


@dataclass(frozen=True)
class Interval:
    """A value with its ``LEVEL`` interval; ``low``/``high`` are None when there is none
    (one seed).  ``method`` says where the interval comes from, for tables and verdicts."""

    value: float
    low: float | None
    high: float | None
    n: int
    method: str

    def text(self, digits: int = 2) -> str:
        if self.low is None or self.high is None:
            return f"{self.value:.{digits}f}"
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def difference_interval(a: tuple[float, float, float],
                        b: tuple[float, float, float]) -> Interval:
    """a - b for two independent estimates, each (value, low, high) with its own 95%
    interval, and the interval of the difference by Newcombe's rule (Statistics in Medicine
    1998, method 10): the distances from each value to its limits, added in quadrature."""
    (va, la, ha), (vb, lb, hb) = a, b
    d = va - vb
    return Interval(d, d - math.hypot(va - la, hb - vb), d + math.hypot(ha - va, vb - lb), 1,
                    "Newcombe")


def block_sums(target_losses: np.ndarray, n_blocks: int = BLOCKS) -> tuple[list[float], list[int]]:
    """(summed loss, token count) of each of ``min(n_blocks, N)`` contiguous blocks of the
    scored targets, in order; block sizes differ by at most one token."""
    parts = np.array_split(np.asarray(target_losses, dtype=np.float64),
                           min(n_blocks, len(target_losses)))
    return [float(p.sum()) for p in parts], [len(p) for p in parts]


@functools.lru_cache(maxsize=8)
def _weights(n_blocks: int, resamples: int = RESAMPLES) -> np.ndarray:
    """How often each block is drawn in each resample: (resamples, n_blocks) counts."""
    rng = np.random.default_rng(SEED)
    return rng.multinomial(n_blocks, np.full(n_blocks, 1 / n_blocks), size=resamples)


def _blocks(point: dict) -> tuple[np.ndarray, np.ndarray]:
    loss, tokens = point.get("block_loss"), point.get("block_tokens")
    if not loss or not tokens or len(loss) != len(tokens):
        raise ValueError("the point has no block losses (eval.json written before posexp "
                         "recorded them: `posexp eval RUN` scores it again)")
    return np.asarray(loss, dtype=np.float64), np.asarray(tokens, dtype=np.float64)


def resampled_loss(point: dict) -> np.ndarray:
    """The point's mean loss (nats) under each bootstrap resample of its blocks."""
    loss, tokens = _blocks(point)
    w = _weights(len(loss))
    return (w @ loss) / (w @ tokens)


def percentile_interval(samples: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The central ``level`` interval of bootstrap ``samples``."""
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


def ppl_interval(point: dict) -> tuple[float, float]:
    """The ``LEVEL`` bootstrap interval of the point's perplexity."""
    low, high = percentile_interval(resampled_loss(point))
    return math.exp(low), math.exp(high)


def ratio_samples(num: dict, den: dict) -> np.ndarray:
    """ppl(num) / ppl(den) under each resample, the same blocks drawn for both: the two
    points must score the same tokens in the same blocks."""
    if (num["first_token"], num["tokens"]) != (den["first_token"], den["tokens"]) or \
            num.get("block_tokens") != den.get("block_tokens"):
        raise ValueError("a paired comparison needs two points scored on the same tokens")
    return np.exp(resampled_loss(num) - resampled_loss(den))


def ratio_interval(num: dict, den: dict) -> Interval:
    """ppl(num) / ppl(den) with its paired bootstrap interval."""
    low, high = percentile_interval(ratio_samples(num, den))
    n = len(num["block_loss"])
    return Interval(num["ppl"] / den["ppl"], low, high, 1, f"bootstrap over {n} blocks")


def t_interval(values: Sequence[float], level: float = LEVEL, log: bool = False) -> Interval:
    """Mean of ``values`` (one per seed) with its Student-t interval; none for one value.
    Identical values give an interval of zero width.  ``log``: the interval of the mean log
    value, taken back by exp (for perplexities and their ratios)."""
    from scipy import stats as sps  # slow to import; only intervals over seeds need it

    x = np.asarray(values, dtype=np.float64)
    if len(x) == 0:
        raise ValueError("no values")
    if log:
        if (x <= 0).any() or not np.isfinite(x).all():
            raise ValueError("a log-scale interval needs positive finite values")
        x = np.log(x)
    back = np.exp if log else (lambda v: v)
    mean = float(x.mean())
    scale = " (log scale)" if log else ""
    if len(x) == 1:
        return Interval(float(back(mean)), None, None, 1, "one seed")
    half = float(sps.t.ppf((1 + level) / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return Interval(float(back(mean)), float(back(mean - half)), float(back(mean + half)),
                    len(x), f"t over {len(x)} seeds{scale}")
