"""The intervals posexp prints: each checked against a case whose answer is known."""
import math

import numpy as np
import pytest
from scipy import stats as sps

from posexp import stats


def point(losses: np.ndarray, first: int = 0) -> dict:
    block_loss, block_tokens = stats.block_sums(losses)
    loss = float(losses.mean())
    return {"first_token": first, "tokens": len(losses), "loss": loss, "ppl": math.exp(loss),
            "block_loss": block_loss, "block_tokens": block_tokens}


def test_blocks_cover_every_token_once():
    losses = np.arange(1000, dtype=float)
    sums, counts = stats.block_sums(losses, 64)
    assert len(sums) == 64 and sum(counts) == 1000 and max(counts) - min(counts) <= 1
    assert sum(sums) == losses.sum() and sums[0] == losses[: counts[0]].sum()
    assert stats.block_sums(losses[:10], 64)[1] == [1] * 10  # fewer tokens than blocks


def test_bootstrap_interval_covers_the_true_perplexity_at_its_level():
    """Block losses drawn from a known distribution: the 95% interval of exp(mean loss)
    covers exp(true mean) in about 95% of 300 independent samples (binomial sd 1.3%)."""
    rng = np.random.default_rng(1)
    true_mean, covered, trials = 1.5, 0, 300
    for _ in range(trials):
        losses = rng.gamma(shape=3.0, scale=true_mean / 3.0, size=64 * 32)
        low, high = stats.ppl_interval(point(losses))
        covered += low <= math.exp(true_mean) <= high
    assert 0.90 <= covered / trials <= 0.99


def test_bootstrap_interval_narrows_with_more_tokens_and_is_deterministic():
    rng = np.random.default_rng(2)
    small, large = rng.gamma(3.0, 0.5, 64 * 8), rng.gamma(3.0, 0.5, 64 * 512)
    w_small = np.subtract(*stats.ppl_interval(point(small))[::-1])
    w_large = np.subtract(*stats.ppl_interval(point(large))[::-1])
    assert w_large < w_small / 4  # about sqrt(64) narrower
    assert stats.ppl_interval(point(small)) == stats.ppl_interval(point(small))


def test_paired_ratio_cancels_the_texts_difficulty():
    """Two points on the same tokens whose losses differ by a constant: the ratio is exactly
    exp(constant) in every resample, however hard the text, so its interval has zero width;
    unpaired, the text's variation would make it wide."""
    rng = np.random.default_rng(3)
    text = rng.gamma(2.0, 1.0, 4096)
    r = stats.ratio_interval(point(text + 0.1), point(text))
    assert r.value == pytest.approx(math.exp(0.1))
    assert r.low == pytest.approx(math.exp(0.1)) and r.high == pytest.approx(math.exp(0.1))
    assert r.method == "bootstrap over 64 blocks"
    noisy = stats.ratio_interval(point(text + rng.normal(0, 0.5, 4096)), point(text))
    assert noisy.low < noisy.value < noisy.high


def test_ratio_refuses_points_on_different_tokens():
    losses = np.ones(256)
    with pytest.raises(ValueError, match="same tokens"):
        stats.ratio_interval(point(losses, first=0), point(losses, first=1))
    with pytest.raises(ValueError, match="no block losses"):
        stats.ppl_interval({"first_token": 0, "tokens": 1, "loss": 1.0, "ppl": math.e})


def test_seed_interval_of_identical_runs_has_zero_width():
    i = stats.t_interval([4.2, 4.2, 4.2])
    assert (i.value, i.low, i.high, i.n) == (4.2, 4.2, 4.2, 3)
    one = stats.t_interval([4.2])
    assert one.low is None and one.high is None and one.method == "one seed"
    assert one.text() == "4.20"


def test_seed_interval_is_student_t():
    values = [1.0, 2.0, 4.0]
    i = stats.t_interval(values)
    half = sps.t.ppf(0.975, 2) * np.std(values, ddof=1) / math.sqrt(3)
    assert i.value == pytest.approx(7 / 3)
    assert (i.low, i.high) == pytest.approx((7 / 3 - half, 7 / 3 + half))
    assert i.text() == f"2.33 [{7 / 3 - half:.2f}, {7 / 3 + half:.2f}]"


def test_seed_interval_covers_the_mean_at_its_level():
    """Three normal seeds at a time: the t interval covers the true mean about 95% of the
    time (a z interval would cover only about 76% with two degrees of freedom)."""
    rng = np.random.default_rng(4)
    hits = [(i.low <= 5.0 <= i.high) for i in
            (stats.t_interval(rng.normal(5.0, 0.3, 3)) for _ in range(2000))]
    assert 0.93 <= np.mean(hits) <= 0.97


def test_log_scale_seed_interval_stays_positive():
    """Two spread-out perplexities: a plain t interval reaches below zero, the log-scale one
    is the geometric mean with a positive interval, exp of the t interval of the logs."""
    plain = stats.t_interval([4.0, 6.0])
    assert plain.low < 0
    i = stats.t_interval([4.0, 6.0], log=True)
    assert i.value == pytest.approx(math.sqrt(24))
    logs = stats.t_interval([math.log(4.0), math.log(6.0)])
    assert (i.low, i.high) == pytest.approx((math.exp(logs.low), math.exp(logs.high)))
    assert i.low > 0 and i.method == "t over 2 seeds (log scale)"
    assert stats.t_interval([3.0, 3.0], log=True).low == pytest.approx(3.0)
    with pytest.raises(ValueError, match="positive"):
        stats.t_interval([1.0, -1.0], log=True)
