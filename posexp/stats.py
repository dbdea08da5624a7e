"""How sure a figure is: intervals over the scored documents and over seeds, and the
one-sided p-values that claims are corrected with.

**Within one run** (no extra training): a curve point scores the spans of posexp/spans.py,
which lie in every validation document; eval.json keeps each document's summed loss and
target count (``block_loss``, ``block_tokens``: the *clusters*).  A point's interval is a
percentile cluster bootstrap (Davison & Hinkley 1997, §3.8; Field & Welsh 2007): resample
documents with replacement, recompute perplexity as exp(sum of losses / sum of targets).
Resampling whole documents keeps every dependence inside a document -- its topic, its
style, its neighbouring tokens -- so the interval says how the number would move with other
documents of the same kind, not only with other stretches of one file.  Every point of one
layout has the same documents, so two points -- one run at two lengths, or two runs on the
same text -- are compared *paired*: each resample draws the same documents for both, and the
text's own difficulty cancels out of a ratio.  The resampling is seeded, so the same
eval.json always gives the same interval.  (Points written before posexp spread its spans
hold 64 contiguous blocks of one stretch instead; they resample the same way, as blocks.)

**Over seeds and documents together** (``over_seeds``): a statistic -- a perplexity, or a
ratio of them -- is computed per seed, on the log scale.  Its centre is the mean over seeds
(the geometric mean).  Its variance adds what varies between seeds (their spread over the
same documents, divided by their number: seeds - 1 degrees of freedom) to what varies
between documents (the cluster bootstrap's variance of the seed-mean, every seed's documents
drawn alike: the degrees of freedom of ``document_df``, fewer than the documents when a few
of them hold most targets).  The interval is Student-t with the Welch-Satterthwaite degrees
of freedom of that sum (``satterthwaite``): near seeds - 1 when the seeds' spread dominates,
near the documents' when theirs does -- a t quantile of seeds - 1 degrees of freedom on the
documents' share would make the interval far too wide there (simulated coverage 0.999 for
0.95).  With two or three seeds the degrees of freedom are optimistic when the seeds' spread
is most of the variance but the documents' is not negligible (the seeds' variance, often
small by chance, then lets the degrees of freedom rise just when the interval is already too
narrow: 0.93 simulated), so the interval is never narrower than either part's own t
interval; with that floor it covers 0.95-0.96 whichever part dominates
(tests/unit/test_stats.py).
Counting the seed-by-document interaction in both terms makes it a little conservative.  One
seed has no seed term: the cluster bootstrap alone, which says how sure that run's number is
but not how another seed would have trained.

**p-values** (``Interval.p_value``): the one-sided p-value of "the statistic lies below
(above) a bound", from the same t distribution or bootstrap resamples as the interval, so
that a 95% interval clear of a bound and p < 0.025 agree.  Claims correct them for
multiplicity with Holm's step-down rule (``holm``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

LEVEL = 0.95      # every interval posexp prints
BLOCKS = 64       # blocks of a stretch scored before posexp spread its spans
RESAMPLES = 2000  # bootstrap resamples
SEED = 0          # the resampling is deterministic


@dataclass(frozen=True)
class Interval:
    """A value with its ``LEVEL`` interval; ``low``/``high`` are None when there is none
    (one seed without recorded documents).  ``method`` says where the interval comes from,
    for tables and verdicts; ``tail(bound, below)`` gives one-sided p-values where known."""

    value: float
    low: float | None
    high: float | None
    n: int
    method: str
    tail: Callable[[float, bool], float] | None = field(default=None, compare=False,
                                                        repr=False)

    def text(self, digits: int = 2) -> str:
        if self.low is None or self.high is None:
            return f"{self.value:.{digits}f}"
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"

    def p_value(self, bound: float, below: bool) -> float | None:
        """The one-sided p-value of "the statistic lies below ``bound``" (``below``) or
        above it: small when the data say so; None without an interval."""
        return None if self.tail is None else self.tail(bound, below)


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


def cluster_sums(target_losses: np.ndarray, spans) -> tuple[list[float], list[int]]:
    """(summed loss, target count) of each document that ``spans`` (posexp/spans.Spans)
    lie in, in document order; ``target_losses`` are the spans' targets, span after span."""
    losses = np.asarray(target_losses, dtype=np.float64)
    per_target = np.repeat(spans.document, spans.length)
    documents, which = np.unique(per_target, return_inverse=True)
    sums = np.bincount(which, weights=losses, minlength=len(documents))
    counts = np.bincount(which, minlength=len(documents))
    return sums.tolist(), counts.tolist()


@functools.lru_cache(maxsize=8)
def _weights(n_blocks: int, resamples: int = RESAMPLES) -> np.ndarray:
    """How often each cluster is drawn in each resample: (resamples, n_blocks) counts."""
    rng = np.random.default_rng(SEED)
    return rng.multinomial(n_blocks, np.full(n_blocks, 1 / n_blocks), size=resamples)


def _blocks(point: dict) -> tuple[np.ndarray, np.ndarray]:
    loss, tokens = point.get("block_loss"), point.get("block_tokens")
    if not loss or not tokens or len(loss) != len(tokens):
        raise ValueError("the point has no block losses (eval.json written before posexp "
                         "recorded them: `posexp eval RUN` scores it again)")
    return np.asarray(loss, dtype=np.float64), np.asarray(tokens, dtype=np.float64)


def clusters_text(point: dict) -> str:
    """What a point's bootstrap resamples: its documents, or blocks of one stretch."""
    n = len(point.get("block_loss") or ())
    return f"{n} documents" if point.get("spans") else f"{n} blocks of one stretch"


def resampled_loss(point: dict) -> np.ndarray:
    """The point's mean loss (nats) under each bootstrap resample of its clusters."""
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


def same_clusters(num: dict, den: dict) -> bool:
    """Whether two points scored the same text in the same clusters (so they pair)."""
    return (num.get("spans"), num.get("first_token"), num["tokens"], num.get("block_tokens")) \
        == (den.get("spans"), den.get("first_token"), den["tokens"], den.get("block_tokens"))


def ratio_samples(num: dict, den: dict) -> np.ndarray:
    """ppl(num) / ppl(den) under each resample, the same clusters drawn for both: the two
    points must score the same tokens in the same clusters."""
    if not same_clusters(num, den):
        raise ValueError("a paired comparison needs two points scored on the same tokens")
    return np.exp(resampled_loss(num) - resampled_loss(den))


def ratio_interval(num: dict, den: dict) -> Interval:
    """ppl(num) / ppl(den) with its paired bootstrap interval."""
    samples = ratio_samples(num, den)
    low, high = percentile_interval(samples)
    return Interval(num["ppl"] / den["ppl"], low, high, 1,
                    f"cluster bootstrap over {clusters_text(num)}", _bootstrap_tail(samples))


def _bootstrap_tail(samples: np.ndarray) -> Callable[[float, bool], float]:
    def tail(bound: float, below: bool) -> float:
        wrong = np.count_nonzero(samples >= bound if below else samples <= bound)
        return (wrong + 1) / (len(samples) + 1)
    return tail


def _t_tail(centre: float, se: float, df: float,
            log: bool = True) -> Callable[[float, bool], float]:
    """One-sided p-values from a t distribution around ``centre`` (on the log scale of the
    statistic when ``log``)."""
    from scipy import stats as sps

    def tail(bound: float, below: bool) -> float:
        at = math.log(bound) if log else bound
        if se == 0:  # every seed and resample alike: the value is on its side or it is not
            return 0.0 if (centre < at if below else centre > at) else 1.0
        z = (at - centre) / se
        return float(sps.t.sf(z if below else -z, df))
    return tail


class DifferentText(Exception):
    """Points of different scored text (or clusters) read together as if paired."""


# A statistic of one seed's points: given how to read a point's perplexity (a float, or an
# array of its bootstrap resamples), its value.  ``lookup`` reads a seed's point by key.
Statistic = Callable[[Callable[..., object]], object]


def over_seeds(statistic: Statistic, lookups: Sequence[Callable[..., dict]],
               level: float = LEVEL) -> Interval:
    """``statistic`` (positive: a perplexity or a ratio of them) over the seeds whose points
    ``lookups`` read, with its interval over seeds and documents together (module doc).
    Points without recorded clusters give a Student-t interval over the seeds alone (none
    for one seed), and the method says so."""
    logs = np.array([math.log(float(statistic(lambda *k, look=look: look(*k)["ppl"])))
                     for look in lookups])
    first = lookups[0](*_first_key(statistic, lookups[0]))

    def resampled(point: dict) -> np.ndarray:
        if not same_clusters(point, first):  # a caller's mistake, never silently unpaired
            raise DifferentText("a statistic over seeds reads points of different text")
        return np.exp(resampled_loss(point))

    try:
        samples = np.stack([np.log(np.asarray(statistic(
            lambda *k, look=look: resampled(look(*k))), dtype=np.float64))
            for look in lookups], axis=1)  # [resamples, seeds]
        clusters = clusters_text(first)
    except ValueError:  # points without recorded clusters
        samples, clusters = None, None
    n = len(logs)
    centre = float(logs.mean())
    if n == 1:
        if samples is None:
            return Interval(math.exp(centre), None, None, 1, "one seed, no clusters recorded")
        low, high = percentile_interval(samples[:, 0], level)
        return Interval(math.exp(centre), math.exp(low), math.exp(high), 1,
                        f"one seed: cluster bootstrap over {clusters}",
                        _bootstrap_tail(np.exp(samples[:, 0])))
    return _seeds_and_documents(logs, samples, first, clusters, level)


def _seeds_and_documents(logs: np.ndarray, samples: np.ndarray | None, first: dict,
                         clusters: str | None, level: float) -> Interval:
    """Two or more seeds: the t interval of the mean log value, its variance the seeds'
    plus (where clusters are recorded) the documents', its degrees of freedom
    Welch-Satterthwaite's for that sum (module doc)."""
    from scipy import stats as sps

    n = len(logs)
    centre = float(logs.mean())
    variances, dfs = [float(logs.var(ddof=1) / n)], [float(n - 1)]
    method = f"t over {n} seeds"
    if samples is not None:
        variances.append(float(samples.mean(axis=1).var(ddof=1)))
        dfs.append(document_df(first))
        method += f" + cluster bootstrap over {clusters}"
    df = satterthwaite(variances, dfs)
    q = float(sps.t.ppf((1 + level) / 2, df))
    # never narrower than either part's own t interval: the sum is at least as uncertain as
    # each part, and the floor mends Welch-Satterthwaite's optimism with so few seeds (above)
    half = max(q * math.sqrt(sum(variances)),
               *(float(sps.t.ppf((1 + level) / 2, d)) * math.sqrt(v)
                 for v, d in zip(variances, dfs, strict=True)))
    se = half / q  # the scale whose tails agree with the interval at ``level``
    return Interval(math.exp(centre), math.exp(centre - half), math.exp(centre + half), n,
                    f"{method} (log scale)", _t_tail(centre, se, df))


def satterthwaite(variances: Sequence[float], dfs: Sequence[float]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of independent variance estimates,
    each with its own degrees of freedom (Satterthwaite, Biometrics Bull. 1946): the df of
    the scaled chi-square that matches the sum's mean and variance.  All zero (identical
    seeds on text whose difficulty cancels): the smallest df, though the width is zero
    whatever it is."""
    spread = sum(v * v / d for v, d in zip(variances, dfs, strict=True))
    return sum(variances) ** 2 / spread if spread > 0 else min(dfs)


def document_df(point: dict) -> float:
    """Degrees of freedom of the cluster bootstrap's variance of a point's mean loss.  That
    variance is, to first order, sum_d w_d^2 (y_d - y)^2 over the documents' mean losses
    y_d, each weighted by its share w_d of the targets: with documents alike but for their
    size, a chi-square of (sum w^2)^2 / sum w^4 degrees of freedom, less the one the mean
    y takes.  Equal documents give clusters - 1; a layout where a few documents hold most
    targets gives far fewer, as it should (a bootstrap over them knows little more than
    those few)."""
    w = np.asarray(point["block_tokens"], dtype=np.float64)
    w2 = (w / w.sum()) ** 2
    return max(1.0, float(w2.sum() ** 2 / (w2 * w2).sum()) - 1)


def _first_key(statistic: Statistic, lookup: Callable[..., dict]) -> tuple:
    """The key of the first point ``statistic`` reads (to name its clusters)."""
    keys: list[tuple] = []

    def record(*k: object) -> float:
        keys.append(k)
        return lookup(*k)["ppl"]
    statistic(record)
    return keys[0]


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
    se = float(x.std(ddof=1) / math.sqrt(len(x)))
    half = float(sps.t.ppf((1 + level) / 2, len(x) - 1)) * se
    return Interval(float(back(mean)), float(back(mean - half)), float(back(mean + half)),
                    len(x), f"t over {len(x)} seeds{scale}", _t_tail(mean, se, len(x) - 1, log))


def holm(p_values: Sequence[float | None], alpha: float = (1 - LEVEL) / 2) -> list[bool | None]:
    """Holm's step-down rule (Scand. J. Statist. 1979): which hypotheses are rejected at
    family-wise level ``alpha`` (one-sided, matching a 95% interval clear of its bound).
    None p-values (not measured) take no part and get None."""
    ranked = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m, out = len(ranked), [None if p is None else False for p in p_values]
    for k, (p, i) in enumerate(ranked):
        if p > alpha / (m - k):
            break
        out[i] = True
    return out
