"""How a claim is judged: its tests, each a statistic of the curves it names with its 95%
interval, read against the region its kind and margin declare.

* Every statistic is a ratio of perplexities (or, for a task claim, a difference of
  accuracies), computed per seed; its interval is over seeds and documents together
  (stats.over_seeds): Student-t with the seeds' variance and the documents' cluster-bootstrap
  variance added, at the Welch-Satterthwaite degrees of freedom of the sum, or for one seed
  the cluster bootstrap alone.
* Each test declares its **kind** (``Kind``): *superiority* (the statistic lies beyond a
  bound: better, or worse, by more than the margin), *non-inferiority* (it is not worse --
  or not better -- by more than the margin) or *equivalence* (within the margin both ways).
  The margin and its reason are fixed in the preset (``Margin``) before anything trains.
  One rule for every kind: the test **holds** when the whole interval lies inside the
  kind's region, **does not hold** when it lies wholly outside, and is **inconclusive**
  otherwise.  A claim holds when all its tests hold, does not hold when one does not.
* Holm's rule in both directions: a claim's p-value tests what its verdict asserts
  (``claim_p``).  That it holds: each test's one-sided p-value of "inside the region" (the
  largest over the region's bounds), the largest over its tests (an intersection-union
  test).  That it does not hold: each test's p-value of "outside the region" (the opposite
  tail at the bound it lies beyond), the smallest over its tests times their number
  (Bonferroni's union-intersection test: any one test outside makes the claim fail).  An
  inconclusive claim carries the nearer of the two.  ``correct`` applies Holm's rule to
  these within the suite: a claim that holds, or does not hold, only uncorrected reads
  "inconclusive" in the Holm column.  A claim without a p-value (not measured; intervals
  that give none) is outside the family, and its verdict says why (``Verdict.tested``).
* Values shown ``beside`` a claim (the degradation ratio beside a claim about perplexity
  far past L) are measured the same way and judged by nothing.

A claim never compares points scored on different validation tokens, or in different modes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import astuple, dataclass, field, replace

from posexp import stats
from posexp.claims.gate import Bar, unlearned
from posexp.claims.sources import Paper, Scale
from posexp.report.curves import models_of
from posexp.report.series import Series, build_series, curve_name
from posexp.runs import Region, RunResult, is_spread, region_text
from posexp.scaling import CONSECUTIVE
from posexp.scaling import Key as Scaling
from posexp.scaling import key as scaling_key

NONOVERLAPPING, SLIDING = "nonoverlapping", "sliding"
HOLDS, FAILS, INCONCLUSIVE, UNMEASURED = "holds", "does not hold", "inconclusive", "not measured"
VARIANT_KEYS = ("train.random_positions", "model.ssmax")  # identity keys a claim may compare
# runs on: a run that leaves one at its default (unset, false) is of no variant of it
SUPERIORITY, NON_INFERIORITY, EQUIVALENCE = "superiority", "non-inferiority", "equivalence"


@dataclass(frozen=True)
class Margin:
    """A margin as a preset fixes it: its size and why that size."""

    margin: float
    reason: str


@dataclass(frozen=True)
class Kind:
    """What a test asks of its statistic: that it lies in (low, high), either end open."""

    name: str  # superiority | non-inferiority | equivalence
    low: float | None
    high: float | None
    margin: float  # as declared, for the verdict table
    scale: str = "ratio"  # ratio (margins are relative) or difference (absolute)

    @property
    def text(self) -> str:
        region = " and ".join([*([f"> {self.low:.4g}"] if self.low is not None else []),
                               *([f"< {self.high:.4g}"] if self.high is not None else [])])
        size = f"{self.margin:.0%}" if self.scale == "ratio" else f"{self.margin:g}"
        return f"{self.name}, margin {size} ({region})"


# Kinds of a ratio of perplexities (lower is better), margins relative: 0.05 is 5%.
def lower(margin: float = 0.0) -> Kind:
    """Superiority: lower than 1 by more than the margin."""
    return Kind(SUPERIORITY, None, 1 / (1 + margin), margin)


def higher(margin: float = 0.0) -> Kind:
    """Superiority: higher than 1 by more than the margin."""
    return Kind(SUPERIORITY, 1 + margin, None, margin)


def no_higher(margin: float) -> Kind:
    """Non-inferiority: not higher than 1 by the margin or more."""
    return Kind(NON_INFERIORITY, None, 1 + margin, margin)


def no_lower(margin: float) -> Kind:
    """Non-inferiority the other way: not lower than 1 by the margin or more."""
    return Kind(NON_INFERIORITY, 1 / (1 + margin), None, margin)


def same(margin: float) -> Kind:
    """Equivalence: within the margin of 1 both ways (symmetric on the log scale)."""
    return Kind(EQUIVALENCE, 1 / (1 + margin), 1 + margin, margin)


def decide(interval: stats.Interval, kind: Kind) -> str:
    """holds, does not hold or inconclusive: where the interval lies against the region."""
    if interval.low is None or interval.high is None:
        return INCONCLUSIVE
    above_low = kind.low is None or interval.low > kind.low
    below_high = kind.high is None or interval.high < kind.high
    if above_low and below_high:
        return HOLDS
    if (kind.low is not None and interval.high <= kind.low) or \
            (kind.high is not None and interval.low >= kind.high):
        return FAILS
    return INCONCLUSIVE


def p_value(interval: stats.Interval, kind: Kind) -> float | None:
    """The one-sided p-value of "the statistic lies in the region": the largest over its
    bounds (an intersection-union test); None without an interval."""
    tails = [interval.p_value(bound, below) for bound, below in
             ((kind.low, False), (kind.high, True)) if bound is not None]
    return None if None in tails or not tails else max(tails)


def fail_p_value(interval: stats.Interval, kind: Kind) -> float | None:
    """The one-sided p-value of "the statistic lies outside the region": the opposite tail
    at each bound, the smaller of the two -- an interval can lie clear of only one bound, and
    FAILS (``decide``) asks no more than that; None without an interval."""
    tails = [interval.p_value(bound, below) for bound, below in
             ((kind.low, True), (kind.high, False)) if bound is not None]
    return None if None in tails or not tails else min(tails)


OUTSIDE = "outside the Holm family"


def claim_p(intervals: list[stats.Interval], kinds: list[Kind],
            verdict: str) -> tuple[float | None, str]:
    """(the claim's p-value, the hypothesis it tests: HOLDS or FAILS) -- or (None, why the
    claim is outside the Holm family).  HOLDS: the largest of the tests' p-values of "inside";
    FAILS: the smallest of "outside", times the number of tests (any one test outside fails
    the claim, so the claim's test is the union of theirs); an inconclusive claim carries the
    nearer of the two (it never reaches the 2.5% of a 95% interval clear of a bound)."""
    inside = [p_value(i, k) for i, k in zip(intervals, kinds, strict=True)]
    outside = [fail_p_value(i, k) for i, k in zip(intervals, kinds, strict=True)]
    if None in inside or None in outside:
        return None, f"{OUTSIDE}: its intervals ({intervals[0].method}) give no p-value"
    holds, fails = max(inside), min(1.0, len(outside) * min(outside))
    if verdict == HOLDS or (verdict != FAILS and holds <= fails):
        return holds, HOLDS
    return fails, FAILS


def combined(decisions: list[str]) -> str:
    """A claim's verdict from its tests': all hold: holds; one wholly on the wrong side: does
    not hold; otherwise inconclusive."""
    return FAILS if FAILS in decisions else HOLDS if all(
        d == HOLDS for d in decisions) else INCONCLUSIVE


@dataclass(frozen=True)
class CurveRef:
    """A curve a claim compares: an encoding trained at ``train_len`` (from scratch, or a
    fine-tune ``(root length, training-time scaling, tokens)`` of a run trained at the root
    length), scored in ``mode`` as trained or with RoPE ``scaling``; ``variant`` the values of
    VARIANT_KEYS that set its runs apart from the plain runs of their encoding."""

    encoding: str
    train_len: int
    mode: str = NONOVERLAPPING
    scaling: Scaling = None
    fine_tune: tuple | None = None
    variant: tuple = ()

    @property
    def text(self) -> str:
        """How a verdict names the curve (report.curve_name)."""
        tokens = [f"on {self.fine_tune[2]:,} tokens"] if self.fine_tune else []
        return " ".join([curve_name(self.encoding, self.train_len, self.scaling,
                                    self.fine_tune), *tokens,
                         *(f"{k}={v}" for k, v in self.variant)])


# ppl(curve, evaluation length): one seed's perplexity, or the bootstrap resamples of it (an
# array; every point's documents drawn alike).
Lookup = Callable[..., "float | object"]


@dataclass(frozen=True)
class Test:
    """One comparison of a claim: ``statistic`` read against ``kind``; ``paper``, the
    cited paper's own figure for it, where the paper gives one (shown, judged by nothing)."""

    label: str
    statistic: Callable[[Lookup], object]
    kind: Kind
    paper: Paper | None = None


@dataclass(frozen=True)
class Shown:
    """A value shown beside a claim's verdict, judged by nothing."""

    label: str
    statistic: Callable[[Lookup], object]


@dataclass
class Claim:
    text: str
    source: str
    # the paper's scale, beside this run's in the verdict table; a claim set of one's own may
    # give it as text (its training tokens then read as not recorded)
    scope: Scale | str
    why: str  # why this kind and margin
    needs: list  # the curves (CurveRef) or, for a task claim, the arms (tasks.Arm)
    tests: list  # Test, or tasks.AccuracyTest
    beside: list = field(default_factory=list)  # Shown
    # judged only on arms that learned at L (claims/gate.py): a claim about behaviour past
    # L; false for a claim about quality at L, whose answer is the measurement
    gated: bool = True
    # how the claim was changed after its suite's data were seen, with the commit: printed in
    # bold beside it wherever its verdict is (a reader weighs such a claim accordingly)
    respecified: str | None = None

    def title(self, number: int) -> str:
        """The claim as its verdict names it: its number, text and any re-specification."""
        flag = (f" **[re-specified after the data: {self.respecified}]**"
                if self.respecified else "")
        return f"{number}. {self.text}{flag}"


@dataclass
class Verdict:
    claim: str
    source: str
    kind: str  # each test's kind and margin, and why
    scope: str  # the paper's training tokens beside this run's, then the rest of each scale
    measured: str
    verdict: str  # holds | does not hold | inconclusive | not measured
    interval: str  # where the intervals come from
    p: float | None = None  # one-sided, of the hypothesis ``tested`` (claim_p)
    holm: str = UNMEASURED  # the verdict after Holm's correction within the suite
    tested: str = f"{OUTSIDE}: not measured"  # what p tests, or why there is no p
    # the verdict of the same claim on the suite's runs at another training budget, when
    # the preset has budgets: "stable" or "budget-dependent" beside it (claims/budgets.py)
    budget: str | None = None
    paper: str = "\u2014"  # the paper's own figures for its tests, each with its place


def paper_text(claim: Claim) -> str:
    """The paper's figure for each of the claim's tests that has one, with its place."""
    figures = [f"{t.label} = {t.paper.value:.3g} ({t.paper.place})"
               for t in claim.tests if getattr(t, "paper", None) is not None]
    return "; ".join(figures) or "\u2014"


def kind_text(claim: Claim) -> str:
    return "; ".join(f"{t.label}: {t.kind.text}" for t in claim.tests) + f" ({claim.why})"


def variant_of(run: RunResult) -> tuple:
    return variant({k: run.identity.get(k) for k in VARIANT_KEYS})


def variant(values: dict) -> tuple:
    """The (key, value) pairs of VARIANT_KEYS that set a run apart: those not left at their
    default (None, or false for a switch)."""
    return tuple((k, values[k]) for k in VARIANT_KEYS if values.get(k) not in (None, False))


def consecutive_only(what: str) -> str:
    """Why a randomized arm scored at consecutive positions alone carries no verdict."""
    return (f"{what} was scored at consecutive positions only, which it was not trained at; "
            "it is scored at sorted random positions, as Ruoss et al. score it, when trained "
            "again (its record holds no weights)")


def randomized(encoding: str, train_len: int, positions: int) -> CurveRef:
    """The curve of ``encoding`` trained at ``train_len`` on random positions below
    ``positions`` (train.random_positions)."""
    return CurveRef(encoding, train_len, variant=(("train.random_positions", positions),))


class Missing(Exception):
    """A claim needs a point its runs do not hold."""


class Curves:
    """The preset's completed runs as series, for claims to look up by curve, every curve of
    one claim on one scored region: spans of ``n_tokens`` targets over the validation
    split (points scored on one stretch before posexp spread them are not used)."""

    def __init__(self, runs: list[RunResult], n_tokens: int, bar: Bar | None = None) -> None:
        self.series = build_series(runs)[0]
        self.n_tokens = n_tokens
        self.bar = bar  # the learning gate's (claims/gate.py), where the preset states one
        self.models = models_of(self.series)

    def unlearned(self, claim: Claim, series: dict) -> str | None:
        """Why the claim's arms carry no verdict (the learning gate), or None."""
        if self.bar is None or not claim.gated:
            return None
        return unlearned(self.bar, series, self.models)

    def find(self, need: CurveRef) -> dict[Region, Series] | str:
        by_region: dict[Region, Series] = {}
        for s in self.series:
            if (s.encoding, s.train_len, s.mode, s.scaling, s.fine_tune,
                    variant_of(s.members[0])) != astuple(need):
                continue
            if s.region in by_region:
                return f"two configs of {need.text}: {by_region[s.region].label} and {s.label}"
            by_region[s.region] = s
        if by_region:
            return by_region
        variant = astuple(replace(need, scaling=scaling_key(None, CONSECUTIVE)))
        if any((s.encoding, s.train_len, s.mode, s.scaling, s.fine_tune,
                variant_of(s.members[0])) == variant for s in self.series):
            return consecutive_only(need.text)
        return f"no completed run of {need.text} with {need.mode} points"

    def measure(self, needs: list[CurveRef]) -> tuple[dict, list[RunResult], dict] | str:
        """(seed -> length -> point of each needed curve, all on one region; the runs read;
        each need's series there), or why there is none."""
        found: dict[CurveRef, dict[Region, Series]] = {}
        for need in needs:
            got = self.find(need)
            if isinstance(got, str):
                return got
            found[need] = got
        common = set.intersection(*(set(by_region) for by_region in found.values()))
        common = {g for g in common if g[1] == self.n_tokens and is_spread(g)}
        if len(common) != 1:
            held = "; ".join(f"{need.text} {need.mode}: "
                             + ", ".join(region_text(r) for r in sorted(found[need]))
                             for need in needs)
            what = "no" if not common else "more than one"
            return (f"{what} layout of {self.n_tokens:,} spread validation tokens common to "
                    f"its runs ({held}; `posexp eval RUN` scores an older run on them)")
        region = common.pop()
        runs = [r for need in needs for r in found[need][region].members]
        return ({need: {r.seed: r.points(need.mode, region, need.scaling)
                        for r in found[need][region].members} for need in needs}, runs,
                {need: found[need][region] for need in needs})


def scope_text(claim: Claim, runs: list[RunResult]) -> str:
    """Like beside like: the tokens the paper's models trained on beside the tokens these
    runs trained on (with tokens per parameter), then the rest of each scale -- the paper's
    models, corpus and lengths; these runs' parameters and training length.  ``runs``: the
    runs read (none when the claim was not measured)."""
    params = sorted({r.info.get("n_params") for r in runs if r.info.get("n_params")})
    tokens = sorted({r.info.get("tokens_trained") for r in runs if r.info.get("tokens_trained")})
    lengths = sorted({r.train_len for r in runs})
    scale = claim.scope if isinstance(claim.scope, Scale) else Scale(str(claim.scope))
    paper = f"paper: {scale.setting}"
    if not tokens:
        return f"training tokens: paper {scale.tokens}; {paper}"
    per = f" ({tokens[-1] / params[-1]:.1f} per parameter)" if params else ""
    here = f"{_span(params, 1e6, 'M')} parameters, " if params else ""
    return (f"training tokens: paper {scale.tokens}, here {_span(tokens, 1e6, 'M')}"
            f"{per}; {paper}; here: {here}L = {', '.join(map(str, lengths))}")


def _span(values: list, unit: float, suffix: str) -> str:
    low, high = values[0] / unit, values[-1] / unit
    return f"{low:.2f}{suffix}" if low == high else f"{low:.2f}-{high:.2f}{suffix}"


def judge(claim: Claim, curves: Curves, number: int) -> Verdict:
    """The claim's verdict: every test's statistic with its interval, combined, with the
    paper's own figures beside."""
    return replace(_judged(claim, curves, number), paper=paper_text(claim))


def _judged(claim: Claim, curves: Curves, number: int) -> Verdict:
    name = claim.title(number)
    got = curves.measure(claim.needs)
    if isinstance(got, str):
        return Verdict(name, claim.source, kind_text(claim), scope_text(claim, []),
                       f"not measured: {got}", UNMEASURED, "")
    points, runs, series = got
    gated = curves.unlearned(claim, series)
    if gated is not None:
        return Verdict(name, claim.source, kind_text(claim), scope_text(claim, runs),
                       f"not measured: {gated}", UNMEASURED, "")
    seeds = sorted(set.intersection(*(set(by_seed) for by_seed in points.values())))

    def lookup(seed: int) -> Callable[..., dict]:
        def point(need: CurveRef, length: int) -> dict:
            p = points[need][seed].get(length)
            if p is None or not p["applicable"]:
                raise Missing(f"{need.text} has no {need.mode} point at {length}")
            return p
        return point

    try:
        if not seeds:
            raise Missing("its runs share no seed")
        looks = [lookup(s) for s in seeds]
        intervals = [stats.over_seeds(t.statistic, looks) for t in claim.tests]
        shown = [(b.label, stats.over_seeds(b.statistic, looks)) for b in claim.beside]
    except Missing as e:
        return Verdict(name, claim.source, kind_text(claim), scope_text(claim, runs),
                       f"not measured: {e}", UNMEASURED, "")
    verdict = combined([decide(i, t.kind) for i, t in zip(intervals, claim.tests, strict=True)])
    p, tested = claim_p(intervals, [t.kind for t in claim.tests], verdict)
    measured = "; ".join(
        [f"{t.label} = {i.text(3)}" for t, i in zip(claim.tests, intervals, strict=True)]
        + [f"beside: {label} = {i.text(3)}" for label, i in shown])
    return Verdict(name, claim.source, kind_text(claim), scope_text(claim, runs), measured,
                   verdict, intervals[0].method, p, tested=tested)


def correct(rows: list[Verdict]) -> list[Verdict]:
    """Holm's step-down rule over the suite's claims that have a p-value (stats.holm), in
    both directions (claim_p): a claim that holds, or does not hold, keeps its verdict only
    if Holm rejects the p-value of what it asserts, and reads "inconclusive" otherwise --
    also when it has no p-value to correct; inconclusive and unmeasured claims keep theirs."""
    rejected = stats.holm([v.p if v.verdict != UNMEASURED else None for v in rows])
    return [replace(v, holm=INCONCLUSIVE if v.verdict in (HOLDS, FAILS) and not ok
                    else v.verdict)
            for v, ok in zip(rows, rejected, strict=True)]


def degradation(need: CurveRef, m: int) -> Callable[[Lookup], object]:
    """ppl(mL) / ppl(L) of a curve trained at L."""
    return lambda ppl: ppl(need, m * need.train_len) / ppl(need, need.train_len)


def ratio_of(a: Callable, b: Callable) -> Callable[[Lookup], object]:
    return lambda ppl: a(ppl) / b(ppl)


def at(a: CurveRef, length_a: int, b: CurveRef, length_b: int) -> Callable[[Lookup], object]:
    """ppl of ``a`` at ``length_a`` over ppl of ``b`` at ``length_b``."""
    return lambda ppl: ppl(a, length_a) / ppl(b, length_b)
