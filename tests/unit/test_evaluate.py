import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from posexp.errors import UsageError
from posexp.evaluate import (
    Scoring,
    bucket_edges,
    check_val_size,
    count_windows,
    window_plan,
)
from posexp.model import GPT, GPTConfig
from tests.conftest import score_curve


def scored_targets(first, n, length, stride):
    """Stream positions each window scores, and the context each scored token had."""
    ends, counts = window_plan(first, n, stride)
    targets, context = [], []
    for e, c in zip(ends, counts, strict=True):
        assert e - length >= 0
        for t in range(e - c + 1, e + 1):
            targets.append(t)
            context.append(t - (e - length + 1))  # tokens before t inside the window
    return targets, context


@pytest.mark.parametrize("length,stride,n", [(16, 16, 160), (16, 16, 170), (32, 8, 100),
                                              (64, 63, 1000), (8, 1, 50)])
def test_every_token_scored_exactly_once(length, stride, n):
    first = 64
    targets, context = scored_targets(first, n, length, stride)
    assert sorted(targets) == list(range(first + 1, first + n + 1))
    if stride < length:  # sliding: at least L - S tokens of context for every token
        assert min(context) >= length - stride


def test_same_tokens_at_every_length():
    first, n = 256, 1000
    sets = {L: sorted(scored_targets(first, n, L, L)[0]) for L in (16, 64, 256)}
    assert sets[16] == sets[64] == sets[256]


def test_scored_region_does_not_depend_on_the_lengths():
    """A point at L is the same number whichever other lengths are scored with it: the scored
    region is the last eval.tokens targets of the stream, not a function of max(lengths)."""
    model = _model("alibi")
    val = np.random.default_rng(4).integers(0, 256, 3000).astype(np.uint8)
    args = dict(n_tokens=300, batch_tokens=256, per_position_buckets=4,
                device=torch.device("cpu"))
    alone, _ = score_curve(model, val, [32], "nonoverlapping", None, **args)
    wide, _ = score_curve(model, val, [32, 256, 1024], "nonoverlapping", None, **args)
    assert alone[0]["first_token"] == wide[0]["first_token"] == 3000 - 1 - 300
    assert alone[0]["loss"] == wide[0]["loss"]
    slid, _ = score_curve(model, val, [32, 2048], "sliding", 8, **args)
    assert {p["first_token"] for p in slid} == {3000 - 1 - 300}


def test_bucket_edges_are_shared_by_every_length():
    # 1-based positions cut at round(2^(k/4)) = 1, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6, 7, 8, 10, ...
    starts, ends = bucket_edges(16, 4)
    assert ends.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 16]
    assert starts.tolist() == [0, *ends[:-1].tolist()]
    long_starts, long_ends = bucket_edges(1024, 4)
    assert long_ends[-1] == 1024 and len(long_ends) == 36
    # the same edges up to the shorter window, whatever the window
    assert long_ends[: len(ends) - 1].tolist() == ends[:-1].tolist()
    assert (np.diff(long_ends) > 0).all() and (long_starts < long_ends).all()
    assert bucket_edges(1, 4)[1].tolist() == [1]


def test_count_windows_is_what_gets_scored():
    model = _model("learned", max_positions=32)
    val = np.random.default_rng(5).integers(0, 256, 3000).astype(np.uint8)
    for mode, stride in (("nonoverlapping", None), ("sliding", 8), ("sliding", None)):
        seen = []
        score_curve(model, val, [16, 32, 64], mode, stride, 300, 256, 4,
                            torch.device("cpu"), progress=seen.append)
        assert sum(seen) == count_windows([16, 32, 64], Scoring(mode, stride, 300, 256), 32)


def test_val_size_check_names_the_numbers():
    with pytest.raises(UsageError, match=r"has 100 tokens.*needs 1089"):
        check_val_size(100, [64, 1024], 64)


def _model(encoding="rope", max_positions=32):
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=256, d_model=32, n_layer=2, n_head=4, d_ff=64,
                         encoding=encoding, max_positions=max_positions))


def test_curve_matches_direct_loss():
    """The nonoverlapping point at L equals the plain cross-entropy of the same windows."""
    model = _model()
    rng = np.random.default_rng(0)
    val = rng.integers(0, 256, 2000).astype(np.uint8)
    n, L = 256, 32
    first = len(val) - 1 - n  # the last n targets of the stream are scored
    curve, per_pos = score_curve(model, val, [32, 64], "nonoverlapping", None, n,
                                         batch_tokens=64, per_position_buckets=8,
                                         device=torch.device("cpu"))
    windows = torch.from_numpy(val[first : first + n + 1].astype(np.int64))
    losses = []
    with torch.no_grad():
        for s in range(0, n, L):
            x, y = windows[s : s + L][None], windows[s + 1 : s + L + 1][None]
            losses.append(F.cross_entropy(model.head(model.hidden(x))[0], y[0], reduction="none"))
    direct = torch.cat(losses)
    assert curve[0]["length"] == 32 and curve[0]["tokens"] == n
    assert curve[0]["first_token"] == curve[1]["first_token"] == first
    assert curve[0]["loss"] == pytest.approx(direct.mean().item(), rel=1e-5)
    assert curve[0]["ppl"] == pytest.approx(math.exp(curve[0]["loss"]))
    assert curve[0]["bits_per_token"] == pytest.approx(curve[0]["loss"] / math.log(2))
    assert curve[0]["bits_per_byte"] == pytest.approx(curve[0]["bits_per_token"])
    # the blocks of the scored tokens add up to the point, and are the same at every length
    assert sum(curve[0]["block_tokens"]) == n and len(curve[0]["block_tokens"]) == 64
    assert curve[0]["block_tokens"] == curve[1]["block_tokens"]
    assert sum(curve[0]["block_loss"]) == pytest.approx(direct.sum().item(), rel=1e-5)
    assert curve[0]["block_loss"][0] == pytest.approx(direct[:4].sum().item(), rel=1e-5)
    assert curve[0]["ppl_low"] < curve[0]["ppl"] < curve[0]["ppl_high"]
    # per-position curve at the longest length (64): 4 windows, 8 buckets per doubling
    assert per_pos["length"] == 64 and per_pos["windows"] == 4
    assert per_pos["mode"] == "nonoverlapping"
    assert per_pos["position_end"] == bucket_edges(64, 8)[1].tolist()
    with torch.no_grad():
        x = windows[:-1].view(4, 64)
        y = windows[1:].view(4, 64)
        by_window = F.cross_entropy(model.head(model.hidden(x)).transpose(1, 2), y,
                                    reduction="none")
    buckets = torch.stack([by_window[:, s:e].mean(1) for s, e in
                           zip(per_pos["position"], per_pos["position_end"], strict=True)], 1)
    assert per_pos["loss"] == pytest.approx(buckets.mean(0).tolist(), rel=1e-5)
    # standard error of each bucket's mean across the 4 windows
    assert per_pos["loss_se"] == pytest.approx((buckets.std(0) / 2).tolist(), rel=1e-4)


def test_sliding_equals_nonoverlapping_when_stride_is_window():
    model = _model("alibi")
    val = np.random.default_rng(1).integers(0, 256, 3000).astype(np.uint8)
    args = dict(n_tokens=500, batch_tokens=100, per_position_buckets=4,
                device=torch.device("cpu"))
    non, _ = score_curve(model, val, [40], "nonoverlapping", None, **args)
    sli, _ = score_curve(model, val, [40], "sliding", 40 - 1, **args)
    same, _ = score_curve(model, val, [40], "sliding", None, **args)
    assert non[0]["stride"] == 40 and same[0]["stride"] == 20
    assert sli[0]["tokens"] == non[0]["tokens"] == 500
    assert sli[0]["loss"] != pytest.approx(non[0]["loss"], rel=1e-6)


def test_bits_per_byte_counts_the_bytes_of_the_scored_tokens():
    model = _model()
    val = np.random.default_rng(3).integers(0, 256, 2000).astype(np.uint8)
    token_bytes = np.where(np.arange(256) % 2 == 0, 1, 3)  # odd ids stand for 3 bytes
    curve, _ = score_curve(model, val, [32], "nonoverlapping", None, 320, 320, 4,
                                   torch.device("cpu"), token_bytes)
    n_bytes = token_bytes[val[-320:]].sum()
    assert curve[0]["bits_per_byte"] == pytest.approx(
        curve[0]["loss"] * 320 / n_bytes / math.log(2))
    assert curve[0]["bits_per_byte"] < curve[0]["bits_per_token"]


def test_learned_is_not_applicable_past_its_table():
    model = _model("learned", max_positions=32)
    val = np.random.default_rng(2).integers(0, 256, 2000).astype(np.uint8)
    curve, per_pos = score_curve(model, val, [32, 64, 128], "nonoverlapping", None,
                                         256, 256, 4, torch.device("cpu"))
    assert [p["applicable"] for p in curve] == [True, False, False]
    assert curve[1]["loss"] is None and "stop at 32" in curve[1]["reason"]
    assert per_pos["length"] == 32
