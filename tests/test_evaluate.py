import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from posexp.errors import UsageError
from posexp.evaluate import bucket, check_val_size, extrapolation_curve, window_plan
from posexp.model import GPT, GPTConfig


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
    alone, _ = extrapolation_curve(model, val, [32], "nonoverlapping", None, **args)
    wide, _ = extrapolation_curve(model, val, [32, 256, 1024], "nonoverlapping", None, **args)
    assert alone[0]["first_token"] == wide[0]["first_token"] == 3000 - 1 - 300
    assert alone[0]["loss"] == wide[0]["loss"]
    slid, _ = extrapolation_curve(model, val, [32, 2048], "sliding", 8, **args)
    assert {p["first_token"] for p in slid} == {3000 - 1 - 300}


def test_bucket_means():
    # ends at 8^(1/4), 8^(2/4), 8^(3/4), 8 rounded: 2, 3, 5, 8
    starts, ends, means = bucket(np.arange(8, dtype=float), 4)
    assert starts == [0, 2, 3, 5] and ends == [2, 3, 5, 8]
    assert means == [0.5, 2.0, 3.5, 6.0]
    starts, ends, _ = bucket(np.zeros(1024), 64)
    assert ends[-1] == 1024 and starts[:4] == [0, 1, 2, 3] and len(starts) <= 64


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
    curve, per_pos = extrapolation_curve(model, val, [32, 64], "nonoverlapping", None, n,
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
    # per-position curve at the longest length (64): 4 windows, 8 geometric buckets
    assert per_pos["length"] == 64 and per_pos["windows"] == 4
    assert per_pos["position"] == [0, 2, 3, 5, 8, 13, 23, 38]
    assert per_pos["position_end"] == [2, 3, 5, 8, 13, 23, 38, 64]
    with torch.no_grad():
        x = windows[:-1].view(4, 64)
        y = windows[1:].view(4, 64)
        by_position = F.cross_entropy(model.head(model.hidden(x)).transpose(1, 2), y,
                                      reduction="none").mean(0)
    expected = [by_position[s:e].mean().item()
                for s, e in zip(per_pos["position"], per_pos["position_end"], strict=True)]
    assert per_pos["loss"] == pytest.approx(expected, rel=1e-5)


def test_sliding_equals_nonoverlapping_when_stride_is_window():
    model = _model("alibi")
    val = np.random.default_rng(1).integers(0, 256, 3000).astype(np.uint8)
    args = dict(n_tokens=500, batch_tokens=100, per_position_buckets=4,
                device=torch.device("cpu"))
    non, _ = extrapolation_curve(model, val, [40], "nonoverlapping", None, **args)
    sli, _ = extrapolation_curve(model, val, [40], "sliding", 40 - 1, **args)
    same, _ = extrapolation_curve(model, val, [40], "sliding", None, **args)
    assert non[0]["stride"] == 40 and same[0]["stride"] == 20
    assert sli[0]["tokens"] == non[0]["tokens"] == 500
    assert sli[0]["loss"] != pytest.approx(non[0]["loss"], rel=1e-6)


def test_bits_per_byte_counts_the_bytes_of_the_scored_tokens():
    model = _model()
    val = np.random.default_rng(3).integers(0, 256, 2000).astype(np.uint8)
    token_bytes = np.where(np.arange(256) % 2 == 0, 1, 3)  # odd ids stand for 3 bytes
    curve, _ = extrapolation_curve(model, val, [32], "nonoverlapping", None, 320, 320, 4,
                                   torch.device("cpu"), token_bytes)
    n_bytes = token_bytes[val[-320:]].sum()
    assert curve[0]["bits_per_byte"] == pytest.approx(
        curve[0]["loss"] * 320 / n_bytes / math.log(2))
    assert curve[0]["bits_per_byte"] < curve[0]["bits_per_token"]


def test_learned_is_not_applicable_past_its_table():
    model = _model("learned", max_positions=32)
    val = np.random.default_rng(2).integers(0, 256, 2000).astype(np.uint8)
    curve, per_pos = extrapolation_curve(model, val, [32, 64, 128], "nonoverlapping", None,
                                         256, 256, 4, torch.device("cpu"))
    assert [p["applicable"] for p in curve] == [True, False, False]
    assert curve[1]["loss"] is None and "stop at 32" in curve[1]["reason"]
    assert per_pos["length"] == 32
