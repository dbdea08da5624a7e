import json
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
    scored_spans,
    span_windows,
    window_plan,
)
from posexp.model import GPT, GPTConfig
from posexp.spans import SPAN_TOKENS, Spans, layout
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


# --- the scored spans ----------------------------------------------------------------------
# a validation split of 20,000 tokens in documents of very different sizes: one empty (two
# separators in a row), one of a single token, one much longer than a span
STARTS = np.array([0, 3000, 3000, 3001, 3500, 9000, 9100, 19000], dtype=np.int64)
VAL = 20_000


def documents_of(targets: np.ndarray, starts: np.ndarray = STARTS) -> np.ndarray:
    """The document each stream position lies in (the last that starts at or before it)."""
    return np.searchsorted(starts, targets, side="right") - 1


@pytest.mark.parametrize("n_tokens", [7, 100, 2_345, 12_000, VAL - 1])
def test_spans_cover_every_document_with_unique_targets_in_proportion(n_tokens):
    spans = layout(VAL, STARTS, n_tokens)
    targets = spans.targets()
    assert spans.tokens == len(targets) == n_tokens
    assert len(np.unique(targets)) == n_tokens and targets.min() >= 1 and targets.max() < VAL
    # each span lies in its own document, with a token of it before the span unless the
    # whole document is scored
    ends = np.append(STARTS[1:], VAL)
    sizes = ends - np.maximum(STARTS, 1)
    share = np.bincount(spans.document, weights=spans.length, minlength=len(STARTS))
    for f, n, d in zip(spans.first, spans.length, spans.document, strict=True):
        assert STARTS[d] <= f or share[d] == sizes[d]
        assert f + n < ends[d] and 0 < n <= SPAN_TOKENS
    assert (documents_of(targets) == np.repeat(spans.document, spans.length)).all()
    # every document that is not empty holds a target, and the rest of the targets are
    # shared in proportion to what is left of each (largest remainder: within one)
    nonempty = np.flatnonzero(sizes > 0)
    assert spans.documents == len(nonempty) == 7
    assert sorted(set(spans.document.tolist())) == nonempty.tolist()
    assert (share[nonempty] >= 1).all() and (share <= sizes).all()
    k = len(nonempty)
    rest = np.maximum(sizes - 1, 0) * (n_tokens - k) / (sizes.sum() - k)
    assert np.abs(share[nonempty] - 1 - rest[nonempty]).max() < 1
    # a share longer than SPAN_TOKENS is cut into several spans, spread over the document
    if n_tokens == VAL - 1:
        assert (spans.document == 7).sum() == 1 and (spans.document == 6).sum() == 3


def test_fewer_targets_than_documents_and_a_split_too_short():
    spans = layout(VAL, STARTS, 3)
    assert spans.tokens == 3 and len(np.unique(spans.targets())) == 3
    with pytest.raises(ValueError, match="cannot score 20000 targets"):
        layout(VAL, STARTS, VAL)
    with pytest.raises(UsageError, match=r"cannot score 101 targets of a validation split of "
                                         r"100 tokens: lower eval\.tokens"):
        scored_spans(100, np.array([0]), 101)


def test_one_document_is_scored_on_its_last_targets():
    spans = layout(2000, np.array([0]), 256)
    assert (spans.first.tolist(), spans.length.tolist()) == ([2000 - 1 - 256], [256])


def test_a_layout_is_named_by_what_it_scores_and_reads_back_from_its_record():
    spans = layout(VAL, STARTS, 2_345)
    again = layout(VAL, STARTS, 2_345)
    assert spans.id == again.id and len(spans.id) == 12 and int(spans.id, 16) >= 0
    assert layout(VAL, STARTS, 2_346).id != spans.id
    assert layout(VAL, STARTS[[0, 1, 3, 4, 5, 6, 7]], 2_345).id != spans.id
    back = Spans.from_record(json.loads(json.dumps(spans.record())))
    assert back.id == spans.id and (back.targets() == spans.targets()).all()


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
    only eval.tokens must fit in the split."""
    check_val_size(100, 99)
    with pytest.raises(UsageError, match=r"has 100 tokens; scoring eval\.tokens=100 targets "
                                         r"needs one more"):
        check_val_size(100, 100)


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
    docs = np.array([0, 900, 1000, 2000])
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
    token_bytes = np.where(np.arange(256) % 2 == 0, 1, 3)  # odd ids stand for 3 bytes
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
