"""The intervals posexp prints: each checked against a case whose answer is known."""
import math

import numpy as np
import pytest
from scipy import stats as sps

from posexp import stats
from posexp.spans import Spans, layout


def point(losses: np.ndarray, first: int = 0) -> dict:
    """A point of a stretch of the stream (as posexp scored before it spread its spans):
    64 contiguous blocks."""
    block_loss, block_tokens = stats.block_sums(losses)
    loss = float(losses.mean())
    return {"first_token": first, "tokens": len(losses), "loss": loss, "ppl": math.exp(loss),
            "block_loss": block_loss, "block_tokens": block_tokens}


def spread(losses: np.ndarray, spans: Spans) -> dict:
    """A point on ``spans`` (the losses of their targets, span after span): the sums of each
    document, as evaluate.extrapolation_curve writes them."""
    block_loss, block_tokens = stats.cluster_sums(losses, spans)
    loss = float(np.mean(losses))
    return {"spans": spans.id, "first_token": None, "tokens": spans.tokens,
            "documents": spans.documents, "loss": loss, "ppl": math.exp(loss),
            "block_loss": block_loss, "block_tokens": block_tokens}


def documents(n: int, rng: np.random.Generator, tokens: int) -> Spans:
    """Spans of ``tokens`` targets over ``n`` documents of very different sizes."""
    sizes = rng.integers(20, 400, n)
    return layout(int(sizes.sum()), np.concatenate([[0], np.cumsum(sizes)[:-1]]), tokens)


def clustered(spans: Spans, rng: np.random.Generator, mean: float, between: float,
              within: float) -> np.ndarray:
    """Target losses with a random effect per document: mean + u_document + e_target."""
    effect = rng.normal(0.0, between, spans.document.max() + 1)
    per_target = np.repeat(spans.document, spans.length)
    return mean + effect[per_target] + rng.normal(0.0, within, spans.tokens)


def test_blocks_cover_every_token_once():
    losses = np.arange(1000, dtype=float)
    sums, counts = stats.block_sums(losses, 64)
    assert len(sums) == 64 and sum(counts) == 1000 and max(counts) - min(counts) <= 1
    assert sum(sums) == losses.sum() and sums[0] == losses[: counts[0]].sum()
    assert stats.block_sums(losses[:10], 64)[1] == [1] * 10  # fewer tokens than blocks


def test_bootstrap_interval_covers_the_true_perplexity_at_its_level():
    """A stretch's block losses drawn from a known distribution: the 95% interval of
    exp(mean loss) covers exp(true mean) in about 95% of 300 independent samples (binomial
    sd 1.3%)."""
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


def test_cluster_sums_are_each_documents_loss_and_targets():
    spans = Spans(np.array([10, 40, 90, 200]), np.array([5, 3, 4, 2]), np.array([0, 0, 2, 5]))
    losses = np.arange(14, dtype=float)
    sums, counts = stats.cluster_sums(losses, spans)
    # documents 0 (spans 1, 2), 2 and 5, in order; documents without a span have no cluster
    assert counts == [8, 4, 2]
    assert sums == [sum(range(8)), sum(range(8, 12)), 12 + 13]


def test_cluster_bootstrap_covers_the_true_perplexity_at_its_level():
    """Forty documents of very different sizes, each with its own difficulty (a random effect
    per document) on top of token noise: the 95% interval of perplexity, resampling
    documents, covers exp(true mean) in at least 90% of 300 independent samples, where
    resampling tokens as if independent covers far fewer (it ignores the documents)."""
    rng = np.random.default_rng(12)  # about 93% over many seeds (binomial sd here 1.4%)
    spans = documents(40, rng, 2000)
    assert spans.documents == 40 and len(set(spans.length.tolist())) > 10
    true_mean, covered, naive, trials = 1.5, 0, 0, 300
    for _ in range(trials):
        losses = clustered(spans, rng, true_mean, between=0.3, within=1.0)
        p = spread(losses, spans)
        low, high = stats.ppl_interval(p)
        covered += low <= math.exp(true_mean) <= high
        tokens = dict(p, block_loss=losses.tolist(), block_tokens=[1] * len(losses))
        low, high = stats.ppl_interval(tokens)
        naive += low <= math.exp(true_mean) <= high
    assert 0.90 <= covered / trials <= 0.99
    assert naive / trials < 0.8


def test_paired_ratio_cancels_the_texts_difficulty():
    """Two points on the same spans whose losses differ by a constant: the ratio is exactly
    exp(constant) in every resample, however hard each document, so its interval has zero
    width; unpaired, the documents' variation would make it wide."""
    rng = np.random.default_rng(3)
    spans = documents(30, rng, 4096)
    text = clustered(spans, rng, 2.0, between=0.5, within=1.0)
    r = stats.ratio_interval(spread(text + 0.1, spans), spread(text, spans))
    assert r.value == pytest.approx(math.exp(0.1))
    assert r.low == pytest.approx(math.exp(0.1)) and r.high == pytest.approx(math.exp(0.1))
    assert r.method == "cluster bootstrap over 30 documents"
    noisy = stats.ratio_interval(spread(text + rng.normal(0, 0.5, 4096), spans),
                                 spread(text, spans))
    assert noisy.low < noisy.value < noisy.high
    # a point of one stretch (eval.json written before posexp spread its spans): its blocks
    tail = rng.gamma(2.0, 1.0, 4096)
    r = stats.ratio_interval(point(tail + 0.1), point(tail))
    assert r.low == pytest.approx(math.exp(0.1)) and r.high == pytest.approx(math.exp(0.1))
    assert r.method == "cluster bootstrap over 64 blocks of one stretch"


def test_ratio_refuses_points_on_different_tokens():
    losses = np.ones(256)
    with pytest.raises(ValueError, match="same tokens"):
        stats.ratio_interval(point(losses, first=0), point(losses, first=1))
    rng = np.random.default_rng(6)
    a, b = documents(10, rng, 256), documents(10, rng, 256)
    assert a.id != b.id
    assert stats.same_clusters(spread(losses, a), spread(losses + 1, a))
    assert not stats.same_clusters(spread(losses, a), spread(losses, b))
    assert not stats.same_clusters(spread(losses, a), point(losses))
    with pytest.raises(ValueError, match="same tokens"):
        stats.ratio_interval(spread(losses, a), spread(losses, b))
    with pytest.raises(ValueError, match="no block losses"):
        stats.ppl_interval({"first_token": 0, "tokens": 1, "loss": 1.0, "ppl": math.e})


def test_p_values_agree_with_the_interval():
    """A 95% interval clear of a bound and a one-sided p-value under 0.025 say the same."""
    rng = np.random.default_rng(7)
    spans = documents(30, rng, 3000)
    text = clustered(spans, rng, 2.0, between=0.3, within=1.0)
    r = stats.ratio_interval(spread(text + rng.normal(0.05, 0.3, 3000), spans),
                             spread(text, spans))
    for bound in (r.low * 0.99, r.low * 1.01, r.high * 0.99, r.high * 1.01):
        assert (r.p_value(bound, below=True) < 0.025) == (r.high < bound)
        assert (r.p_value(bound, below=False) < 0.025) == (r.low > bound)
    t = stats.t_interval([1.1, 1.2, 1.15], log=True)
    for bound in (t.low * 0.99, t.low * 1.01, t.high * 0.99, t.high * 1.01):
        assert (t.p_value(bound, below=True) < 0.025) == (t.high < bound)
        assert (t.p_value(bound, below=False) < 0.025) == (t.low > bound)
    assert stats.t_interval([4.0]).p_value(1.0, below=True) is None


def test_holm_rejects_step_down_on_a_known_example():
    """p = 0.01, 0.04, 0.03, 0.005 at family-wise 0.05: sorted, 0.005 <= 0.05/4 and
    0.01 <= 0.05/3 are rejected; 0.03 > 0.05/2 stops, so 0.04 is kept although it is under
    0.05/1 (and Bonferroni, 0.05/4 for each, would reject only 0.005)."""
    assert stats.holm([0.01, 0.04, 0.03, 0.005], alpha=0.05) == [True, False, False, True]
    # a p-value not measured takes no part: three hypotheses, not four, so 0.03 <= 0.05/1
    assert stats.holm([0.01, None, 0.03, 0.005], alpha=0.05) == [True, None, True, True]
    # the default level is one-sided, matching a 95% interval clear of its bound
    # (0.025: two p-values under it alone, but 0.013 > 0.025/2)
    assert stats.holm([0.013, 0.02]) == [False, False]
    assert stats.holm([0.024, 0.012]) == [True, True]
    assert stats.holm([]) == [] and stats.holm([None]) == [None]


def test_over_seeds_with_one_seed_is_the_cluster_bootstrap():
    rng = np.random.default_rng(8)
    spans = documents(25, rng, 2500)
    base = spread(clustered(spans, rng, 2.0, between=0.3, within=1.0), spans)
    long = spread(clustered(spans, rng, 2.2, between=0.3, within=1.0), spans)
    ppl = stats.over_seeds(lambda ppl: ppl(0), [lambda _: base])
    assert ppl.value == pytest.approx(base["ppl"]) and ppl.n == 1
    assert (ppl.low, ppl.high) == pytest.approx(stats.ppl_interval(base), rel=1e-12)
    assert ppl.method == "one seed: cluster bootstrap over 25 documents"
    pair = (long, base)
    ratio = stats.over_seeds(lambda ppl: ppl(0) / ppl(1), [lambda i: pair[i]])
    paired = stats.ratio_interval(long, base)
    assert ratio.value == pytest.approx(paired.value)
    # the same percentiles of the same resamples, interpolated on the log scale
    assert (ratio.low, ratio.high) == pytest.approx((paired.low, paired.high), rel=1e-6)
    assert ratio.p_value(1.0, below=False) == paired.p_value(1.0, below=False)
    # without clusters recorded, one seed has no interval
    bare = {k: v for k, v in base.items() if not k.startswith("block")}
    alone = stats.over_seeds(lambda ppl: ppl(0), [lambda _: bare])
    assert (alone.low, alone.high, alone.method) == (None, None,
                                                     "one seed, no clusters recorded")


def test_over_seeds_adds_what_varies_between_seeds_to_what_varies_between_documents():
    rng = np.random.default_rng(9)
    spans = documents(25, rng, 2500)
    text = clustered(spans, rng, 2.0, between=0.3, within=1.0)
    noise = [rng.normal(0.0, 0.2, spans.tokens) for _ in range(3)]

    def interval(shifts):
        seeds = [spread(text + e + s, spans) for e, s in zip(noise, shifts, strict=True)]
        return stats.over_seeds(lambda ppl: ppl(0), [lambda _, p=p: p for p in seeds]), seeds

    agree, seeds = interval([0.0, 0.0, 0.0])
    disagree, _ = interval([-0.2, 0.0, 0.2])
    assert agree.n == disagree.n == 3
    assert agree.method == "t over 3 seeds + cluster bootstrap over 25 documents (log scale)"
    # the centre is the geometric mean; seeds that disagree widen the interval
    assert agree.value == pytest.approx(math.exp(np.mean([math.log(p["ppl"]) for p in seeds])))
    assert disagree.value == pytest.approx(agree.value, rel=1e-12)
    assert math.log(disagree.high / disagree.low) > 1.5 * math.log(agree.high / agree.low)
    # the variance is the seeds' (sd^2 / n, 2 df) plus the bootstrap's of the seeds' mean
    # (df from the documents' shares of the targets), t with Welch-Satterthwaite's df; never
    # narrower than either part's own t interval
    logs = np.log([p["ppl"] for p in seeds])
    boot = np.mean([stats.resampled_loss(p) for p in seeds], axis=0)
    v_seeds, v_docs = logs.var(ddof=1) / 3, boot.var(ddof=1)
    w2 = (np.bincount(spans.document, spans.length)[np.unique(spans.document)]
          / spans.tokens) ** 2
    df_docs = w2.sum() ** 2 / (w2 ** 2).sum() - 1
    df = (v_seeds + v_docs) ** 2 / (v_seeds ** 2 / 2 + v_docs ** 2 / df_docs)
    assert 2 < df < 2 + df_docs  # no more than the two together
    half = max(sps.t.ppf(0.975, df) * math.sqrt(v_seeds + v_docs),
               sps.t.ppf(0.975, 2) * math.sqrt(v_seeds),
               sps.t.ppf(0.975, df_docs) * math.sqrt(v_docs))
    assert (math.log(agree.low), math.log(agree.high)) == pytest.approx(
        (logs.mean() - half, logs.mean() + half), rel=1e-9)
    # the seeds alone (no clusters recorded): the plain t interval of the log perplexities
    bare = [{k: v for k, v in p.items() if not k.startswith("block")} for p in seeds]
    t_only = stats.over_seeds(lambda ppl: ppl(0), [lambda _, p=p: p for p in bare])
    t = stats.t_interval([p["ppl"] for p in seeds], log=True)
    assert (t_only.value, t_only.low, t_only.high) == pytest.approx((t.value, t.low, t.high))
    assert t_only.method == "t over 3 seeds (log scale)"
    assert t_only.high / t_only.low < agree.high / agree.low  # the documents' share is gone


# A layout where a few documents hold most of the targets, as in the real validation split
# (38 documents whose shares give an effective count 1 / sum(w^2) of about 25): six
# documents four times the size of 32 others, effective count 56^2 / 128 = 24.5.
DOMINANT = np.array([4] * 6 + [1] * 32) * 500


def test_satterthwaite_and_the_documents_degrees_of_freedom_on_known_cases():
    # Welch's two equal variances of 4 df each pool to 8; one variance alone keeps its df
    assert stats.satterthwaite([1.0, 1.0], [4.0, 4.0]) == pytest.approx(8.0)
    assert stats.satterthwaite([2.0, 0.0], [2.0, 30.0]) == pytest.approx(2.0)
    assert stats.satterthwaite([0.0, 0.0], [2.0, 30.0]) == 2.0
    # 40 equal documents: 39 df; 6 documents four times the size of 32 others: fewer
    assert stats.document_df({"block_tokens": [100] * 40}) == pytest.approx(39.0)
    # shares w = size / 56: (sum w^2)^2 / sum w^4 = 128^2 / (6 * 4^4 + 32) = 10.45, less 1
    assert stats.document_df({"block_tokens": DOMINANT.tolist()}) == pytest.approx(
        128 ** 2 / (6 * 4 ** 4 + 32) - 1)


def seed_points(rng: np.random.Generator, effects: np.ndarray, between_seeds: float,
                seeds: int = 3) -> list[dict]:
    """Each seed's point on DOMINANT's documents: the documents' own difficulty (shared by
    every seed), a seed effect, and token noise averaged over each document."""
    points = []
    for _ in range(seeds):
        loss = 2.0 + effects + rng.normal(0, between_seeds) + rng.normal(
            0, 1.0, len(DOMINANT)) / np.sqrt(DOMINANT)
        mean = float((loss * DOMINANT).sum() / DOMINANT.sum())
        points.append({"spans": 1, "first_token": None, "tokens": int(DOMINANT.sum()),
                       "block_loss": (loss * DOMINANT).tolist(),
                       "block_tokens": DOMINANT.tolist(), "ppl": math.exp(mean)})
    return points


@pytest.mark.parametrize("between_docs,between_seeds", [
    (0.3, 0.02),  # the documents dominate: a t(2) quantile on their variance covered 0.999
    (0.3, 0.1),   # both matter about equally
    (0.05, 0.1),  # the seeds dominate, the documents not negligible: 0.93 without the floor
])
def test_over_seeds_covers_at_its_level_whichever_part_dominates(between_docs, between_seeds):
    """Three seeds on a layout of unequal documents, each replicate a new draw of documents
    (their difficulty) and seeds: the 95% interval covers the true perplexity 93-97% of
    2000 replicates (binomial sd 0.5%; 0.961, 0.956 and 0.946 here)."""
    rng = np.random.default_rng(21)
    covered, replicates = 0, 2000
    for _ in range(replicates):
        effects = rng.normal(0, between_docs, len(DOMINANT))
        points = seed_points(rng, effects, between_seeds)
        i = stats.over_seeds(lambda ppl: ppl(0), [lambda _, p=p: p for p in points])
        covered += i.low <= math.exp(2.0) <= i.high
    assert 0.93 <= covered / replicates <= 0.97


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
