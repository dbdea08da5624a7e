"""How a claim is judged: its tests, each a statistic compared with a threshold, measured per
seed on the curves the claim names, with a 95% interval.

* the statistic (a ratio of perplexities) is computed per seed and reported with its
  interval: Student-t over the seeds on the log scale (the centre is the geometric mean) when
  there are two or more, else the paired bootstrap over the scored text's blocks
  (posexp/stats.py), which says how sure one run's number is but not how another seed would
  have trained;
* the verdict is *holds* when the whole interval lies on the claim's side of the threshold,
  *does not hold* when it lies wholly on the other side, and *inconclusive* when it straddles
  the threshold; *not measured* when a curve it needs is missing.

A claim never compares points scored on different validation tokens, or in different modes.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import astuple, dataclass

import numpy as np

from posexp import stats
from posexp.report.series import Series, build_series, curve_name, region_text
from posexp.runs import Region, RunResult
from posexp.scaling import Key as Scaling

NONOVERLAPPING, SLIDING = "nonoverlapping", "sliding"
HOLDS, FAILS, INCONCLUSIVE, UNMEASURED = "holds", "does not hold", "inconclusive", "not measured"
VARIANT_KEYS = ("train.random_positions",)  # identity keys a claim may compare runs on
TRAIN_SPEED = "training speed"  # the "length" at which a curve holds its training speed


@dataclass(frozen=True)
class CurveRef:
    """A curve a claim compares: an encoding trained at ``train_len`` (from scratch, or a
    fine-tune of a run trained at ``fine_tune[0]`` with its training-time scaling), scored in
    ``mode`` as trained or with RoPE ``scaling``; ``variant`` the values of VARIANT_KEYS that
    set its runs apart from the plain runs of their encoding."""

    encoding: str
    train_len: int
    mode: str = NONOVERLAPPING
    scaling: Scaling = None
    fine_tune: tuple | None = None
    variant: tuple = ()

    @property
    def text(self) -> str:
        """How a verdict names the curve (report.curve_name)."""
        return " ".join([curve_name(self.encoding, self.train_len, self.scaling,
                                    self.fine_tune),
                         *(f"{k}={v}" for k, v in self.variant)])


# ppl(curve, evaluation length): one seed's perplexity, or the bootstrap resamples of it (an
# array; every point's blocks drawn alike).  At the length TRAIN_SPEED, the run's training
# tokens per second.
Lookup = Callable[..., "float | np.ndarray"]


@dataclass(frozen=True)
class Test:
    """One comparison of a claim: ``statistic`` (op) ``threshold``."""

    label: str
    statistic: Callable[[Lookup], float | np.ndarray]
    op: str  # "<=" or ">="
    threshold: float
    speed: bool = False  # a ratio of training speeds: no bootstrap interval for one seed


@dataclass(frozen=True)
class Claim:
    number: int
    text: str
    source: str
    why: str  # why this threshold
    needs: list  # the curves (CurveRef) or, for a task claim, the arms (tasks.Arm)
    tests: list  # Test, or tasks.AccuracyTest


@dataclass
class Verdict:
    claim: str
    source: str
    threshold: str
    measured: str
    verdict: str  # holds | does not hold | inconclusive | not measured
    interval: str  # where the intervals come from


def threshold_text(claim: Claim) -> str:
    return "; ".join(f"{t.label} {t.op} {t.threshold:g}" for t in claim.tests) + \
        f" ({claim.why})"


def variant_of(run: RunResult) -> tuple:
    return tuple((k, run.identity[k]) for k in VARIANT_KEYS if run.identity.get(k) is not None)


def randomized(encoding: str, train_len: int, positions: int) -> CurveRef:
    """The curve of ``encoding`` trained at ``train_len`` on random positions below
    ``positions`` (train.random_positions)."""
    return CurveRef(encoding, train_len, variant=(("train.random_positions", positions),))


def speed_point(run: RunResult) -> dict:
    """The run's training speed as a point a claim can read (a speed has no blocks, so one
    seed gives it no interval)."""
    speed = run.info.get("tok_per_s")
    ok = isinstance(speed, int | float) and not isinstance(speed, bool) and speed > 0
    return {"ppl": float(speed) if ok else None, "applicable": ok}


class Missing(Exception):
    """A claim needs a point its runs do not hold."""


class Curves:
    """The preset's completed runs as series, for claims to look up by curve, every curve of
    one claim on one scored region."""

    def __init__(self, runs: list[RunResult], n_tokens: int) -> None:
        self.series = build_series(runs)[0]
        self.n_tokens = n_tokens

    def measure(self, needs: list[CurveRef]) -> dict[CurveRef, dict[int, dict]] | str:
        """seed -> length -> point of each needed curve, all on one region of eval.tokens
        tokens, or why there is none.  eval.tokens puts its region at the end of the
        validation split, so of the regions every curve holds, the one that starts latest
        is the preset's own; older runs may hold points on other regions beside it."""
        found: dict[CurveRef, dict[Region, Series]] = {}
        for need in needs:
            by_region: dict[Region, Series] = {}
            for s in self.series:
                if (s.encoding, s.train_len, s.mode, s.scaling, s.fine_tune,
                        variant_of(s.members[0])) != astuple(need):
                    continue
                if s.region in by_region:
                    return (f"two configs of {need.text}: {by_region[s.region].label} "
                            f"and {s.label}")
                by_region[s.region] = s
            if not by_region:
                return f"no completed run of {need.text} with {need.mode} points"
            found[need] = by_region
        common = set.intersection(*(set(by_region) for by_region in found.values()))
        common = {region for region in common if region[1] == self.n_tokens}
        if not common:
            held = "; ".join(f"{need.text} {need.mode}: "
                             + ", ".join(region_text(r) for r in sorted(found[need]))
                             for need in needs)
            return f"no scored region of {self.n_tokens} tokens common to its runs ({held})"
        region = max(common)
        return {need: {r.seed: {**r.points(need.mode, region, need.scaling),
                                TRAIN_SPEED: speed_point(r)}
                       for r in found[need][region].members} for need in needs}


def decide(interval: stats.Interval, op: str, threshold: float) -> str:
    """holds, does not hold or inconclusive: where the interval lies against the threshold."""
    if interval.low is None or interval.high is None:
        return INCONCLUSIVE
    on_side = operator.le if op == "<=" else operator.ge
    if on_side(interval.low, threshold) and on_side(interval.high, threshold):
        return HOLDS
    if not on_side(interval.low, threshold) and not on_side(interval.high, threshold):
        return FAILS
    return INCONCLUSIVE


def combined(decisions: list[str]) -> str:
    """A claim's verdict from its tests': all hold: holds; one wholly on the wrong side: does
    not hold; otherwise inconclusive."""
    return FAILS if FAILS in decisions else HOLDS if all(
        d == HOLDS for d in decisions) else INCONCLUSIVE


def judge(claim: Claim, curves: Curves) -> Verdict:
    """The claim's verdict: every test's statistic with its interval, combined."""
    def unmeasured(reason: str) -> Verdict:
        return Verdict(f"{claim.number}. {claim.text}", claim.source, threshold_text(claim),
                       f"not measured: {reason}", UNMEASURED, "")

    got = curves.measure(claim.needs)
    if isinstance(got, str):
        return unmeasured(got)
    seeds = sorted(set.intersection(*(set(by_seed) for by_seed in got.values())))
    if not seeds:
        return unmeasured("its runs share no seed")

    def point(seed: int, need: CurveRef, length: object) -> dict:
        p = got[need][seed].get(length)
        if length == TRAIN_SPEED and not p["applicable"]:
            raise Missing(f"{need.text} (seed {seed}) recorded no training speed")
        if p is None or not p["applicable"]:
            raise Missing(f"{need.text} has no {need.mode} point at {length}")
        return p

    try:
        if len(seeds) > 1:
            intervals = [stats.t_interval([
                float(t.statistic(lambda need, length, s=s: point(s, need, length)["ppl"]))
                for s in seeds], log=True) for t in claim.tests]
            method = f"Student-t over seeds {', '.join(map(str, seeds))} (log scale)"
        else:
            intervals = [_bootstrap(t, lambda need, length: point(seeds[0], need, length))
                         for t in claim.tests]
            method = f"one seed ({seeds[0]}): bootstrap over the scored text's blocks"
    except Missing as e:
        return unmeasured(str(e))
    verdict = combined([decide(i, t.op, t.threshold)
                        for i, t in zip(intervals, claim.tests, strict=True)])
    measured = "; ".join(
        f"{t.label} = {i.text(3)}" if i.low is not None else
        f"{t.label} = {i.value:.3f} (no interval: " + (
            "a speed has none from one seed)" if t.speed else "rescore with posexp eval RUN)")
        for t, i in zip(claim.tests, intervals, strict=True))
    return Verdict(f"{claim.number}. {claim.text}", claim.source, threshold_text(claim),
                   measured, verdict, method)


def _bootstrap(test: Test, point: Callable[..., dict]) -> stats.Interval:
    """One seed: the statistic on the measured perplexities, and its percentile interval over
    bootstrap resamples of the scored blocks (the same blocks for every point)."""
    value = float(test.statistic(lambda need, length: point(need, length)["ppl"]))
    if test.speed:
        return stats.Interval(value, None, None, 1, "no interval")
    try:
        samples = test.statistic(
            lambda need, length: np.exp(stats.resampled_loss(point(need, length))))
    except ValueError:  # points written before posexp recorded block losses
        return stats.Interval(value, None, None, 1, "no interval")
    low, high = stats.percentile_interval(np.asarray(samples))
    return stats.Interval(value, low, high, 1, "bootstrap")


def degradation(need: CurveRef, m: int) -> Callable[[Lookup], object]:
    """ppl(mL) / ppl(L) of a curve trained at L."""
    return lambda ppl: ppl(need, m * need.train_len) / ppl(need, need.train_len)


def ratio_of(a: Callable, b: Callable) -> Callable[[Lookup], object]:
    return lambda ppl: a(ppl) / b(ppl)


def at(a: CurveRef, length_a: int, b: CurveRef, length_b: int) -> Callable[[Lookup], object]:
    """ppl of ``a`` at ``length_a`` over ppl of ``b`` at ``length_b``."""
    return lambda ppl: ppl(a, length_a) / ppl(b, length_b)
