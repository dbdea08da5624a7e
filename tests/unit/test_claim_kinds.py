"""Each kind of claim on hand-built numbers at, inside and outside its margin; p-values that
agree with the intervals; Holm's correction of a suite."""

import math

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
    Verdict,
    correct,
    decide,
    higher,
    lower,
    no_higher,
    no_lower,
    p_value,
    same,
)


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
])
def test_the_p_value_agrees_with_the_interval(values, kind):
    """A 95% interval inside the region and a one-sided p below 2.5% are the same finding."""
    interval = stats.t_interval(values, log=True)
    p = p_value(interval, kind)
    assert (decide(interval, kind) == HOLDS) == (p < 0.025)


def verdict(p: float | None, outcome: str) -> Verdict:
    return Verdict("c", "s", "k", "scope", "m", outcome, "i", p)


def test_holm_keeps_only_the_claims_the_family_supports():
    # four measured claims that hold uncorrected (p < 0.025) and one that does not; Holm at
    # 2.5% one-sided: 0.001 < 0.025/5, 0.004 < 0.025/4, 0.008 < 0.025/3, then 0.02 > 0.025/2
    rows = [verdict(0.008, HOLDS), verdict(0.001, HOLDS), verdict(0.02, HOLDS),
            verdict(0.004, HOLDS), verdict(0.6, FAILS), verdict(None, UNMEASURED)]
    assert [v.holm for v in correct(rows)] == [HOLDS, HOLDS, INCONCLUSIVE, HOLDS, FAILS,
                                               UNMEASURED]


def test_holm_on_a_known_example():
    # Holm (1979) at 5%: sorted 0.005 < 0.05/4, 0.01 < 0.05/3, then 0.03 > 0.05/2: stop
    assert stats.holm([0.01, 0.04, 0.03, 0.005], alpha=0.05) == [True, False, False, True]
    assert stats.holm([None, 0.001], alpha=0.05) == [None, True]
