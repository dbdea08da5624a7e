import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from posexp.errors import UsageError
from posexp.evaluate.windows import (
    Scoring,
    bucket_edges,
    check_val_size,
    count_windows,
    scored_spans,
    span_windows,
    window_plan,
)
from posexp.model import GPT, GPTConfig
from posexp.spans import Spans, layout
from tests.conftest import score_curve
from tests.unit.test_spans import STARTS, VAL


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


@pytest.mark.parametrize("stride", [1, 7, 64, 5000])
def test_span_windows_score_every_target_of_every_span_once(stride):
    spans = layout(VAL, STARTS, 2_345)
    windows = span_windows(spans, stride)
    targets = spans.targets()
    scored = np.zeros(spans.tokens, dtype=np.int64)
    for e, c, t in zip(windows.ends, windows.counts, windows.target, strict=True):
        # the window's last c predictions are the targets t .. t+c-1, stream e-c+1 .. e
        assert (targets[t : t + c] == np.arange(e - c + 1, e + 1)).all()
        scored[t : t + c] += 1
    assert (scored == 1).all()


# --- curves --------------------------------------------------------------------------------
def _model(encoding="rope", max_positions=32):
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=256, d_model=32, n_layer=2, n_head=4, d_ff=64,
                         encoding=encoding, max_positions=max_positions))


def test_every_point_of_a_run_scores_the_same_spans():
    """A point at L is the same number whichever other lengths and mode are scored with it:
    the spans depend on the split and eval.tokens, never on the lengths asked for."""
    model = _model("alibi")
    val = np.random.default_rng(4).integers(0, 256, 3000).astype(np.uint8)
    docs = [0, 700, 1500, 2200]
    args = dict(n_tokens=300, batch_tokens=256, per_position_buckets=4,
                device=torch.device("cpu"), documents=docs)
    spans = scored_spans(3000, np.array(docs), 300)
    alone, _ = score_curve(model, val, [32], "nonoverlapping", None, **args)
    wide, _ = score_curve(model, val, [32, 256, 1024], "nonoverlapping", None, **args)
    slid, _ = score_curve(model, val, [32, 2048], "sliding", 256, **args)
    for p in alone + wide + slid:
        assert (p["spans"], p["tokens"], p["documents"]) == (spans.id, 300, 4)
        assert p["first_token"] is None and len(p["block_tokens"]) == 4
        assert p["block_tokens"] == alone[0]["block_tokens"]
    assert alone[0]["loss"] == wide[0]["loss"]


def test_count_windows_is_what_gets_scored():
    model = _model("learned", max_positions=32)
    val = np.random.default_rng(5).integers(0, 256, 3000).astype(np.uint8)
    spans = scored_spans(3000, np.array([0, 1000, 1100, 2500]), 300)
    for mode, stride in (("nonoverlapping", None), ("sliding", 8), ("sliding", None)):
        seen = []
        score_curve(model, val, [16, 32, 64], mode, stride, 300, 256, 4,
                    torch.device("cpu"), progress=seen.append, spans=spans)
        assert sum(seen) == count_windows([16, 32, 64], Scoring(mode, stride, 300, 256), spans,
                                          32)


def test_val_size_check_names_the_numbers():
    """Any length can be scored (a window longer than the text before a span is clipped);
    only eval.tokens must fit in the targets of the split's documents with text."""
    check_val_size(100, np.array([0]), 99)
    with pytest.raises(UsageError, match=r"has 100 tokens, 99 targets in documents with text; "
                                         r"scoring eval\.tokens=100 targets needs 1 more"):
        check_val_size(100, np.array([0]), 100)
    # an empty document (its separator alone, at 50) holds no target
    check_val_size(100, np.array([0, 50, 51]), 98)
    with pytest.raises(UsageError, match=r"98 targets in documents with text; scoring "
                                         r"eval\.tokens=99 targets needs 1 more"):
        check_val_size(100, np.array([0, 50, 51]), 99)


def _direct(model, val, spans, length):
    """The loss of each target of ``spans``, and the whole windows' losses, computed window by
    window as the module doc lays nonoverlapping windows over each span (first, n): windows of
    ``length`` from first on, and one more ending at first+n for the targets left over."""
    tokens = torch.from_numpy(val.astype(np.int64))
    per_target, whole = [], []
    with torch.no_grad():
        for f, n in zip(spans.first.tolist(), spans.length.tolist(), strict=True):
            for s in range(f, f + n - length + 1, length):
                x, y = tokens[s : s + length], tokens[s + 1 : s + length + 1]
                loss = F.cross_entropy(model.head(model.hidden(x[None]))[0], y,
                                       reduction="none")
                per_target.append(loss)
                whole.append(loss)
            if n % length:
                e = f + n  # the last target; the window is the length tokens before it
                x, y = tokens[max(0, e - length) : e], tokens[max(1, e - length + 1) : e + 1]
                loss = F.cross_entropy(model.head(model.hidden(x[None]))[0], y,
                                       reduction="none")
                per_target.append(loss[-(n % length):])
    return torch.cat(per_target), whole


def test_curve_matches_direct_loss():
    """The nonoverlapping point at L equals the plain cross-entropy of the same windows over
    the spans; its documents' sums add up to it; the per-position curve is that of the whole
    windows at the longest length."""
    model = _model()
    val = np.random.default_rng(0).integers(0, 256, 2001).astype(np.uint8)
    docs = np.array([0, 501, 1001, 1501])  # four documents of 500 targets: 64 scored in each
    spans = scored_spans(len(val), docs, 256)
    assert spans.length.tolist() == [64] * 4
    curve, per_pos = score_curve(model, val, [32, 64], "nonoverlapping", None, 256,
                                 batch_tokens=64, per_position_buckets=8,
                                 device=torch.device("cpu"), documents=docs)
    direct, _ = _direct(model, val, spans, 32)
    assert curve[0]["length"] == 32 and curve[0]["tokens"] == 256
    assert curve[0]["spans"] == curve[1]["spans"] == spans.id
    assert curve[0]["documents"] == 4
    assert curve[0]["loss"] == pytest.approx(direct.mean().item(), rel=1e-5)
    assert curve[0]["ppl"] == pytest.approx(math.exp(curve[0]["loss"]))
    assert curve[0]["bits_per_token"] == pytest.approx(curve[0]["loss"] / math.log(2))
    assert curve[0]["bits_per_byte"] == pytest.approx(curve[0]["bits_per_token"])
    # each document's sums add up to the point, and are the same documents at every length
    assert curve[0]["block_tokens"] == curve[1]["block_tokens"] == [64] * 4
    assert sum(curve[0]["block_loss"]) == pytest.approx(direct.sum().item(), rel=1e-5)
    assert curve[0]["block_loss"] == pytest.approx(
        direct.view(4, 64).sum(1).tolist(), rel=1e-5)
    assert curve[0]["ppl_low"] < curve[0]["ppl"] < curve[0]["ppl_high"]
    # per-position curve at the longest length (64): 4 windows, 8 buckets per doubling
    assert per_pos["length"] == 64 and per_pos["windows"] == 4
    assert per_pos["mode"] == "nonoverlapping" and per_pos["spans"] == spans.id
    assert per_pos["first_token"] is None and per_pos["tokens"] == 256
    assert per_pos["position_end"] == bucket_edges(64, 8)[1].tolist()
    _, whole = _direct(model, val, spans, 64)
    by_window = torch.stack(whole)
    buckets = torch.stack([by_window[:, s:e].mean(1) for s, e in
                           zip(per_pos["position"], per_pos["position_end"], strict=True)], 1)
    assert per_pos["loss"] == pytest.approx(buckets.mean(0).tolist(), rel=1e-5)
    # standard error of each bucket's mean across the 4 windows
    assert per_pos["loss_se"] == pytest.approx((buckets.std(0) / 2).tolist(), rel=1e-4)


def test_spans_shorter_than_the_window_and_not_a_multiple_of_it():
    """A span shorter than L is one window ending at its end; a span of n not a multiple of L
    ends with a window scoring the n % L targets left over, with the text before them."""
    model = _model("alibi")
    val = np.random.default_rng(6).integers(0, 256, 3000).astype(np.uint8)
    docs = np.array([0, 900, 920, 2000])  # the second short: shares are capped alike
    spans = scored_spans(len(val), docs, 301)
    assert sorted(set((spans.length % 32).tolist())) != [0]
    assert spans.length.min() < 32 < spans.length.max()
    curve, _ = score_curve(model, val, [32], "nonoverlapping", None, 301, spans=spans)
    direct, _ = _direct(model, val, spans, 32)
    assert curve[0]["loss"] == pytest.approx(direct.mean().item(), rel=1e-5)
    assert "clipped" not in curve[0]


def test_a_window_longer_than_the_text_before_its_span_starts_at_the_stream_start():
    model = _model("alibi")
    val = np.random.default_rng(7).integers(0, 256, 1200).astype(np.uint8)
    docs = np.array([0, 400, 800])
    spans = scored_spans(len(val), docs, 90)
    assert spans.length.tolist() == [30] * 3 and spans.first[0] + 30 < 512 < spans.first[1]
    curve, _ = score_curve(model, val, [32, 512], "nonoverlapping", None, 90, spans=spans)
    assert "clipped" not in curve[0]
    assert curve[1]["clipped"] == 30  # the first document's span: 369 tokens before it
    end = int(spans.first[0]) + 30
    with torch.no_grad():
        x = torch.from_numpy(val[: end + 1].astype(np.int64))[None]
        first = F.cross_entropy(model.head(model.hidden(x[:, :-1]))[0], x[0, 1:],
                                reduction="none")[-30:]
    assert curve[1]["block_loss"][0] == pytest.approx(first.sum().item(), rel=1e-5)


def test_sliding_equals_nonoverlapping_when_stride_is_window():
    model = _model("alibi")
    val = np.random.default_rng(1).integers(0, 256, 3000).astype(np.uint8)
    args = dict(n_tokens=500, batch_tokens=100, per_position_buckets=4,
                device=torch.device("cpu"), documents=[0, 600, 1700, 1750, 2600])
    non, _ = score_curve(model, val, [40], "nonoverlapping", None, **args)
    same, _ = score_curve(model, val, [40], "sliding", 40, **args)
    assert same[0]["stride"] == non[0]["stride"] == 40
    assert same[0]["tokens"] == non[0]["tokens"] == 500 and same[0]["spans"] == non[0]["spans"]
    assert same[0]["loss"] == non[0]["loss"]
    assert same[0]["block_loss"] == non[0]["block_loss"]
    # another stride scores the same targets with other context: another number
    less, _ = score_curve(model, val, [40], "sliding", 40 - 1, **args)
    half, _ = score_curve(model, val, [40], "sliding", None, **args)
    assert half[0]["stride"] == 20 and less[0]["spans"] == non[0]["spans"]
    assert less[0]["loss"] != pytest.approx(non[0]["loss"], rel=1e-6)


def test_recorded_spans_score_again_bit_identically():
    """The spans eval.json records (Spans.record, by id) are the spans: scored again from the
    record, a point is the same number to the last bit."""
    model = _model("alibi")
    val = np.random.default_rng(8).integers(0, 256, 4000).astype(np.uint8)
    spans = scored_spans(len(val), np.array([0, 300, 1800, 3100]), 700)
    curve, per_pos = score_curve(model, val, [32, 64], "nonoverlapping", None, 700,
                                 batch_tokens=128, spans=spans)
    written = json.loads(json.dumps({"curve": curve, "per_position": [per_pos],
                                     "spans": {spans.id: spans.record()}}))
    [name] = written["spans"]
    again = Spans.from_record(written["spans"][name])
    assert again.id == name == curve[0]["spans"]
    rescored, per_again = score_curve(model, val, [32, 64], "nonoverlapping", None, 700,
                                      batch_tokens=128, spans=again)
    for old, new in zip(written["curve"], rescored, strict=True):
        assert {k: v for k, v in old.items() if k != "seconds"} == \
            {k: v for k, v in new.items() if k != "seconds"}
    assert written["per_position"] == [per_again]


def test_bits_per_byte_counts_the_bytes_of_the_scored_tokens():
    model = _model()
    val = np.random.default_rng(3).integers(0, 256, 2000).astype(np.uint8)
    token_bytes = 1 + np.arange(256) % 5  # ids stand for 1 to 5 bytes
    docs = np.array([0, 500, 1200])
    curve, _ = score_curve(model, val, [32], "nonoverlapping", None, 320, 320, 4,
                           torch.device("cpu"), token_bytes, documents=docs)
    n_bytes = token_bytes[val[scored_spans(2000, docs, 320).targets()]].sum()
    assert n_bytes != token_bytes[val[-320:]].sum()  # the spans, not the stream's tail
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
    assert curve[1]["spans"] == curve[0]["spans"]  # a point not applicable names its spans
    assert per_pos["length"] == 32


def _window_positions(spans, length, stride):
    """Each target's 0-based position in the window that scores it, and whether that window
    is a span's last one scoring fewer than ``stride`` -- as the module doc tiles a span
    (first, n): windows end at first+S, first+2S, ..., and a last one at first+n."""
    positions, remainder = [], []
    for f, n in zip(spans.first.tolist(), spans.length.tolist(), strict=True):
        whole = n // stride * stride
        for j in range(1, n + 1):  # the target f+j
            end = f + (-(-j // stride) * stride if j <= whole else n)
            positions.append(min(length, end) - 1 - (end - (f + j)))
            remainder.append(j > whole)
    return np.array(positions), np.array(remainder)


@pytest.mark.parametrize("mode,stride", [("nonoverlapping", None), ("sliding", 12),
                                         ("sliding", None)])
def test_points_record_the_remainder_and_its_context(mode, stride):
    """Every point says how many targets a span's last, short window scored, and the mean
    position of its targets in their windows: a whole nonoverlapping window's average
    (L-1)/2 only where no remainder pulls it up."""
    model = _model("alibi", max_positions=None)
    val = np.random.default_rng(9).integers(0, 256, 6000).astype(np.uint8)
    spans = scored_spans(len(val), np.array([0, 1500, 1530, 3000, 4500]), 400)
    assert (spans.length % 32 != 0).any() and spans.length.min() < 32
    curve, _ = score_curve(model, val, [16, 32, 128, 2048], mode, stride, 400, spans=spans)
    for p in curve:
        positions, remainder = _window_positions(spans, p["length"], p["stride"])
        assert p["remainder"] == remainder.sum() > 0
        assert p["mean_context"] == pytest.approx(positions.mean(), abs=0.01)
    assert curve[-1]["clipped"] > 0  # the first span's window begins at the stream's start
    if mode == "nonoverlapping":  # longer than every span: each scored by its tail alone
        assert curve[0]["mean_context"] > (16 - 1) / 2 and curve[-1]["remainder"] == 400
    whole = scored_spans(len(val), np.array([0, 3000]), 256)  # two spans of 128
    [p], _ = score_curve(model, val, [32], "nonoverlapping", None, 256, spans=whole)
    assert (p["remainder"], p["mean_context"]) == (0, (32 - 1) / 2)


def test_per_position_loss_is_at_the_longest_length_a_span_holds_a_window_of():
    """Spans of 30 targets: a window of 64 or 128 scores only their tails, so the per-position
    loss is that of the whole windows of 16, the longest length that fits a span -- in
    either mode, the sliding one's extra pass counted; none when no length fits."""
    model = _model("alibi", max_positions=None)
    val = np.random.default_rng(10).integers(0, 256, 1200).astype(np.uint8)
    spans = scored_spans(len(val), np.array([0, 400, 800]), 90)
    assert spans.length.tolist() == [30] * 3
    for mode in ("nonoverlapping", "sliding"):
        seen = []
        _, per_pos = score_curve(model, val, [16, 64, 128], mode, None, 90, spans=spans,
                                 progress=seen.append)
        assert (per_pos["length"], per_pos["windows"]) == (16, 3)
        assert sum(seen) == count_windows([16, 64, 128], Scoring(mode, None, 90, 32_768), spans)
    _, none = score_curve(model, val, [64, 128], "nonoverlapping", None, 90, spans=spans)
    assert none is None
