"""Each kind of claim on hand-built numbers at, inside and outside its margin; p-values that
agree with the intervals; Holm's correction of a suite."""

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest

from posexp import stats
from posexp.claims.base import (
    EQUIVALENCE,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NON_INFERIORITY,
    SUPERIORITY,
    UNMEASURED,
    Claim,
    Verdict,
    claim_p,
    correct,
    decide,
    fail_p_value,
    higher,
    lower,
    no_higher,
    no_lower,
    p_value,
    same,
    scope_text,
)
from posexp.claims.sources import PRESS_SCALE, VASWANI_SCALE


def iv(low: float, high: float) -> stats.Interval:
    return stats.Interval(math.sqrt(low * high), low, high, 3, "hand-built")


@pytest.mark.parametrize("kind,interval,verdict", [
    # non-inferiority, 5%: "no more than 5% worse"
    (no_higher(0.05), (0.90, 1.04), HOLDS),           # inside
    (no_higher(0.05), (0.90, 1.05), INCONCLUSIVE),    # reaches the margin
    (no_higher(0.05), (1.00, 1.10), INCONCLUSIVE),    # straddles it
    (no_higher(0.05), (1.05, 1.20), FAILS),           # from the margin out
    (no_higher(0.05), (1.06, 1.20), FAILS),           # outside
    # the other way: "not more than 2% better"
    (no_lower(0.02), (0.99, 1.10), HOLDS),
    (no_lower(0.02), (1 / 1.02, 1.10), INCONCLUSIVE),
    (no_lower(0.02), (0.90, 0.97), FAILS),
    # superiority, margin 0: "lower than 1"
    (lower(), (0.80, 0.99), HOLDS),
    (lower(), (0.80, 1.00), INCONCLUSIVE),
    (lower(), (1.00, 1.10), FAILS),
    # superiority with a margin: "more than doubles"
    (higher(1.0), (2.10, 3.00), HOLDS),
    (higher(1.0), (1.90, 2.50), INCONCLUSIVE),
    (higher(1.0), (1.50, 2.00), FAILS),
    # equivalence, 2% both ways
    (same(0.02), (0.99, 1.01), HOLDS),
    (same(0.02), (0.97, 1.01), INCONCLUSIVE),
    (same(0.02), (1.00, 1.02), INCONCLUSIVE),
    (same(0.02), (1.02, 1.10), FAILS),
    (same(0.02), (0.90, 0.98), FAILS),
])
def test_each_kind_at_inside_and_outside_its_margin(kind, interval, verdict):
    assert decide(iv(*interval), kind) == verdict


def test_kinds_name_themselves_and_their_region():
    assert no_higher(0.05).name == NON_INFERIORITY
    assert lower().name == higher(1.0).name == SUPERIORITY
    assert same(0.02).name == EQUIVALENCE
    assert no_higher(0.05).text == "non-inferiority, margin 5% (< 1.05)"
    assert same(0.02).text == "equivalence, margin 2% (> 0.9804 and < 1.02)"
    assert higher(1.0).text == "superiority, margin 100% (> 2)"


def test_no_interval_is_inconclusive_and_has_no_p_value():
    bare = stats.Interval(1.2, None, None, 1, "one seed, no clusters recorded")
    assert decide(bare, no_higher(0.05)) == INCONCLUSIVE
    assert p_value(bare, no_higher(0.05)) is None


@pytest.mark.parametrize("values,kind", [
    ([0.97, 0.99, 1.01], no_higher(0.05)),
    ([1.00, 1.04, 1.08], no_higher(0.05)),
    ([2.3, 2.5, 2.9], higher(1.0)),
    ([0.99, 1.0, 1.005], same(0.02)),
    ([0.95, 1.0, 1.03], same(0.02)),
    ([1.10, 1.12, 1.14], no_higher(0.05)),
    ([1.5, 1.6, 1.7], higher(1.0)),
    ([0.90, 0.91, 0.92], same(0.02)),
    ([1.05, 1.06, 1.07], same(0.02)),
])
def test_the_p_value_agrees_with_the_interval(values, kind):
    """A 95% interval inside the region and a one-sided p below 2.5% are the same finding;
    so are an interval wholly outside and the opposite tail's p below 2.5%."""
    interval = stats.t_interval(values, log=True)
    assert (decide(interval, kind) == HOLDS) == (p_value(interval, kind) < 0.025)
    assert (decide(interval, kind) == FAILS) == (fail_p_value(interval, kind) < 0.025)


def test_a_claims_p_value_tests_what_its_verdict_asserts():
    inside = stats.t_interval([1.00, 1.01, 1.02], log=True)   # holds no_higher(0.05)
    outside = stats.t_interval([1.10, 1.12, 1.14], log=True)  # does not hold it
    kind = no_higher(0.05)
    p_in, p_out = p_value(inside, kind), fail_p_value(outside, kind)
    assert p_out == outside.p_value(1.05, below=False) < 0.025
    assert claim_p([inside], [kind], HOLDS) == (p_in, HOLDS)
    assert claim_p([outside], [kind], FAILS) == (p_out, FAILS)
    # two tests: holds takes the largest "inside"; one test outside fails the claim, and its
    # p-value is the smallest "outside" times the number of tests (a union of two)
    assert claim_p([inside, inside], [kind, kind], HOLDS) == (p_in, HOLDS)
    assert claim_p([inside, outside], [kind, kind], FAILS) == (2 * p_out, FAILS)
    # inconclusive: the nearer of the two, never under 2.5%
    straddle = stats.t_interval([1.00, 1.05, 1.10], log=True)
    p, tested = claim_p([straddle], [kind], INCONCLUSIVE)
    assert p == min(p_value(straddle, kind), fail_p_value(straddle, kind)) and p > 0.025
    assert tested == (HOLDS if p == p_value(straddle, kind) else FAILS)
    # intervals without tails (one seed, no documents): outside the family, and why
    bare = stats.Interval(1.2, None, None, 1, "one seed, no clusters recorded")
    assert claim_p([bare], [kind], INCONCLUSIVE) == (
        None, "outside the Holm family: its intervals (one seed, no clusters recorded) give "
              "no p-value")


def verdict(p: float | None, outcome: str) -> Verdict:
    return Verdict("c", "s", "k", "scope", "m", outcome, "i", p)


def test_holm_corrects_both_directions_on_a_known_example():
    """Five claims with p-values, in a family at 2.5% one-sided (Holm 1979), worked by hand:
    sorted, 0.001 <= 0.025/5, 0.004 <= 0.025/4, 0.008 <= 0.025/3 are rejected; 0.02 >
    0.025/2 stops, so 0.02 and 0.3 are kept.  A claim that does not hold at p = 0.004 keeps
    its verdict; one that does not hold at p = 0.02 -- below 2.5% alone -- reads
    inconclusive after Holm, as a claim that holds would."""
    rows = [verdict(0.008, HOLDS), verdict(0.02, FAILS), verdict(0.001, HOLDS),
            verdict(0.3, INCONCLUSIVE), verdict(0.004, FAILS), verdict(None, UNMEASURED)]
    assert [v.holm for v in correct(rows)] == [HOLDS, INCONCLUSIVE, HOLDS, INCONCLUSIVE,
                                               FAILS, UNMEASURED]
    # the same p-values asserting "holds": the same decisions (one rule both ways)
    same_way = [replace(v, verdict=HOLDS) if v.verdict == FAILS else v for v in rows]
    assert [v.holm for v in correct(same_way)] == [HOLDS, INCONCLUSIVE, HOLDS, INCONCLUSIVE,
                                                   HOLDS, UNMEASURED]
    # the inconclusive claim counts in the family: without it 0.02 <= 0.025/1 is rejected
    assert correct([v for v in rows if v.verdict != INCONCLUSIVE])[1].holm == FAILS
    # a claim that does not hold without a p-value is outside the family: it cannot be
    # corrected, so it reads inconclusive, and the others' family stays the same
    outside = replace(verdict(None, FAILS), tested="outside the Holm family: Newcombe")
    assert [v.holm for v in correct([*rows, outside])][-1] == INCONCLUSIVE
    assert [v.holm for v in correct([*rows, outside])][:5] == [v.holm for v in correct(rows)][:5]
    assert verdict(None, UNMEASURED).tested == "outside the Holm family: not measured"


def test_holm_on_a_known_example():
    # Holm (1979) at 5%: sorted 0.005 < 0.05/4, 0.01 < 0.05/3, then 0.03 > 0.05/2: stop
    assert stats.holm([0.01, 0.04, 0.03, 0.005], alpha=0.05) == [True, False, False, True]
    assert stats.holm([None, 0.001], alpha=0.05) == [None, True]


def test_scope_sets_the_papers_training_tokens_beside_the_runs():
    """Like with like: tokens trained on, the paper's where it gives them and never a
    corpus's size in their place; the rest of each scale after them."""
    runs = [SimpleNamespace(info={"n_params": 820_000, "tokens_trained": 1_000_000},
                            train_len=64)]
    fair = Claim("c", "s", VASWANI_SCALE, "why", [], [])
    assert scope_text(fair, runs) == (
        "training tokens: paper about 2.5B target tokens (and as many source): 100,000 steps "
        "of about 25,000 of each, §5.1-5.2, here 1.00M (1.2 per parameter); paper: a "
        "65M-parameter encoder-decoder on WMT 2014 English-German; here: 0.82M parameters, "
        "L = 64")
    alibi = Claim("c", "s", PRESS_SCALE, "why", [], [])
    assert scope_text(alibi, []) == (
        "training tokens: paper not recorded (no figure confirmed from the paper); paper: "
        "247M parameters on WikiText-103 (a corpus of 103M tokens), L = 512-3072")
