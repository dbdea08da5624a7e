"""Extrapolation curves: the same validation tokens scored with windows of every length.

The scored targets are the spans of posexp/spans.py, spread over every validation document
with text and fixed by the split and eval.tokens alone, so every point ever computed for a run (any
lengths, both modes, any later `posexp eval`) is measured on identical text.

A window of length L ending at stream position e reads tokens ``e-L .. e-1`` and predicts
``e-L+1 .. e``; it scores only its last ``c`` predictions.  Windows are laid over each span
(first, n) the same way at every length:

* nonoverlapping: windows end at first+L, first+2L, ...; each scores all L tokens, so early
  positions in each window have little context (the "early token curse").  A span shorter
  than L is scored by one window that ends at its end, with the text before it as context.
* sliding (stride S): windows end at first+S, first+2S, ...; each scores its last S tokens,
  so every token is scored once, with at least L-S tokens of context.

Nonoverlapping is sliding with S = L.  If S does not divide n, one last window ends at
first+n and scores the tokens not yet scored.  A window that would begin before the stream
does begins at its start, shorter (``clipped`` counts the targets so scored); the layout
leaves text before every span, so this happens only for windows longer than that.

That last window scores fewer than S targets and reads the whole length: its targets have
more context than the tiling gives the others -- in nonoverlapping mode a whole window
scores its targets at window positions 0 .. L-1, the last one its c targets at L-c .. L-1.
Every point records how many targets were so scored (``remainder``) and the mean window
position of its targets (``mean_context``, 0-based: (L-1)/2 for whole nonoverlapping
windows).  The spans are not cut to
fit the windows: they are fixed before any length is asked for, so that every point scores
the same targets, and a window longer than its span can only read the text before the span
-- as here -- or score it at the window's early positions alone, never running the model at
its length.  On the stdlib split (131,072 targets) the remainder is 4% of the targets at
128, 10% at 1,024, 41% at 2,048 and all of them from 4,096 on, where no span holds a whole
window.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from posexp import stats
from posexp.errors import UsageError
from posexp.evaluate.positions import PLAIN, EvalPositions
from posexp.model import GPT
from posexp.spans import Spans, document_text, held_targets, layout


@dataclass(frozen=True)
class Scoring:
    """How a curve is scored (eval.* of a corpus run): the mode, the sliding stride (None:
    half of each window), the scored tokens, the tokens of one forward pass, and the
    per-position buckets per doubling of position, and the positions it is scored at
    (evaluate/positions.py)."""

    mode: str
    stride: int | None
    tokens: int
    batch_tokens: int
    per_position_buckets: int = 4
    positions: EvalPositions = PLAIN
    prefix: int | None = None  # lm_eval mode: the token before each document (rolling.py)

    @classmethod
    def of(cls, e) -> Scoring:
        """From a config's eval group, at consecutive positions (a randomized run's scoring
        replaces ``positions``: run/workloads.py)."""
        return cls(str(getattr(e.mode, "value", e.mode)), e.stride, e.tokens, e.batch_tokens,
                   e.per_position_buckets)


@dataclass(frozen=True)
class Windows:
    """Where windows of one length end, how many trailing predictions each scores, and the
    index (among all the spans' targets) of each one's first scored target."""

    ends: np.ndarray
    counts: np.ndarray
    target: np.ndarray


def window_plan(first: int, n_tokens: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Window end positions and how many trailing predictions each window scores, over the
    targets first+1 .. first+n_tokens."""
    ends = np.arange(first + stride, first + n_tokens + 1, stride)
    counts = np.full(ends.shape, stride)
    if n_tokens % stride:
        ends = np.append(ends, first + n_tokens)
        counts = np.append(counts, n_tokens % stride)
    return ends, counts


def span_windows(spans: Spans, stride: int) -> Windows:
    """The windows of ``stride`` over every span, span after span."""
    ends, counts, target = [], [], []
    for f, n, o in zip(spans.first, spans.length, spans.offset, strict=True):
        e, c = window_plan(int(f), int(n), min(stride, int(n)))
        ends.append(e)
        counts.append(c)
        target.append(o + e - c - f)  # the window's first scored target, e-c+1, in the span
    return Windows(*(np.concatenate(a).astype(np.int64) for a in (ends, counts, target)))


def scored_spans(val_tokens: int, documents: np.ndarray, n_tokens: int) -> Spans:
    """The spans a run scores (posexp/spans.py); a UsageError when the split is too short."""
    try:
        return layout(val_tokens, documents, n_tokens)
    except ValueError as e:
        raise UsageError(f"{e}: lower eval.tokens, or raise data.val_fraction") from None


def check_val_size(val_tokens: int, document_starts: np.ndarray, n_tokens: int,
                   mode: str = "nonoverlapping") -> None:
    """eval.tokens fits the split before anything is trained: a UsageError when its documents
    with text hold fewer targets (every token but the first, less empty documents'; in
    lm_eval mode their text alone, the separators not)."""
    if mode == "lm_eval":
        text = int(document_text(val_tokens, document_starts)[1].sum())
        if n_tokens > text:
            raise UsageError(f"the validation split's documents hold {text} tokens of text; "
                             f"eval.mode=lm_eval scores whole documents holding "
                             f"eval.tokens={n_tokens}: lower eval.tokens, or raise "
                             "data.val_fraction")
    held = held_targets(val_tokens, document_starts)
    if n_tokens > held:
        raise UsageError(
            f"the validation split has {val_tokens} tokens, {held} targets in documents with "
            f"text; scoring eval.tokens={n_tokens} targets needs {n_tokens - held} more. "
            "Lower eval.tokens, or raise data.val_fraction")


def autocast(device: torch.device):
    """bf16 autocast on CUDA; plain fp32 on CPU (bf16 is far slower on AVX2 CPUs)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


class Buckets:
    """Per-position loss over whole windows: each bucket's mean loss per window, summed."""

    def __init__(self, edges: tuple[np.ndarray, np.ndarray], device: torch.device) -> None:
        self.starts = torch.from_numpy(edges[0]).to(device)
        self.stops = torch.from_numpy(edges[1]).to(device)
        self.sum = torch.zeros(len(self.starts), dtype=torch.float64, device=device)
        self.sq = torch.zeros_like(self.sum)
        self.windows = 0

    def add(self, full: torch.Tensor) -> None:
        cum = torch.nn.functional.pad(full.cumsum(1), (1, 0))
        means = (cum[:, self.stops] - cum[:, self.starts]) / (self.stops - self.starts)
        self.sum += means.sum(0)
        self.sq += (means**2).sum(0)
        self.windows += len(full)

    def result(self) -> dict | None:
        n = self.windows
        if not n:
            return None
        mean = self.sum / n
        se = (((self.sq - n * mean**2).clamp_min(0) / (n - 1)) / n).sqrt() if n > 1 else None
        return {"windows": n, "loss": mean.cpu().tolist(),
                "loss_se": se.cpu().tolist() if se is not None else [None] * len(mean)}


@torch.no_grad()
def score_windows(
    model: GPT,
    val: np.ndarray,
    length: int,
    windows: Windows,
    n_tokens: int,
    batch_tokens: int,
    device: torch.device,
    buckets: tuple[np.ndarray, np.ndarray] | None = None,
    progress: Callable[[int], None] | None = None,
    at: EvalPositions = PLAIN,
) -> tuple[np.ndarray, dict | None, int]:
    """The loss (nats) of each of the ``n_tokens`` targets of ``windows``, in target order;
    with ``buckets`` (starts, ends), each bucket's mean loss over the whole windows with its
    standard error across windows; and how many targets a clipped window scored.
    ``progress`` is called with each batch's window count; each window is scored at the
    positions ``at`` draws for it (by its end)."""
    target_loss = torch.zeros(n_tokens, dtype=torch.float64, device=device)
    whole = Buckets(buckets, device) if buckets is not None else None
    clipped = windows.ends < length  # would begin before the stream: one at a time, shorter
    offsets = np.arange(-length, 1)
    rows = max(1, batch_tokens // length)
    positions = torch.arange(length, device=device)
    full_idx = np.flatnonzero(~clipped)
    for start in range(0, len(full_idx), rows):
        i = full_idx[start : start + rows]
        e, c, t = windows.ends[i], windows.counts[i], windows.target[i]
        tokens = torch.from_numpy(val[e[:, None] + offsets].astype(np.int64)).to(device)
        with autocast(device):
            losses = _token_losses(model, tokens, at.at(length, e, device))
        # scored: the last c predictions, the targets t .. t+c-1
        keep = positions[None, :] >= length - torch.from_numpy(c).to(device)[:, None]
        index = torch.from_numpy(t - length + c).to(device)[:, None] + positions
        target_loss[index[keep]] = losses[keep]
        if whole is not None:
            whole.add(losses[torch.from_numpy(c == length).to(device)])
        if progress is not None:
            progress(len(e))
    for i in np.flatnonzero(clipped):
        e, c, t = int(windows.ends[i]), int(windows.counts[i]), int(windows.target[i])
        tokens = torch.from_numpy(val[: e + 1].astype(np.int64)).to(device)[None]
        with autocast(device):
            losses = _token_losses(model, tokens, at.at(e, np.asarray([e]), device))[0]
        target_loss[t : t + c] = losses[-c:]
        if progress is not None:
            progress(1)
    return target_loss.cpu().numpy(), whole.result() if whole else None, \
        int(windows.counts[clipped].sum())


def _token_losses(model: GPT, tokens: torch.Tensor,
                  positions: torch.Tensor | None) -> torch.Tensor:
    """Float64 losses of the predictions of ``tokens`` [rows, n + 1], at ``positions``
    [rows, n] (None: 0..n-1; a pretrained model is only ever scored so)."""
    if positions is None:
        return model.token_losses(tokens[:, :-1], tokens[:, 1:]).double()
    return model.token_losses(tokens[:, :-1], tokens[:, 1:], positions=positions).double()


def bucket_edges(length: int, per_doubling: int) -> tuple[np.ndarray, np.ndarray]:
    """Buckets of window positions (0-based starts, exclusive ends) whose edges are the same
    for every run: the 1-based positions 2^(k/per_doubling), rounded, so early positions --
    where the early-token curse lives -- keep their detail, late ones average many, and a
    run trained at 64 is bucketed exactly as one evaluated at 1024 up to position 64."""
    k = np.arange(0, int(per_doubling * math.log2(max(length, 1))) + 2)
    cuts = np.unique(np.round(2.0 ** (k / per_doubling)).astype(np.int64))
    ends = np.append(cuts[(cuts > 0) & (cuts < length)], length)
    return np.concatenate([[0], ends[:-1]]), ends


def point(mode: str, length: int, stride: int, spans: Spans,
          rope_scaling: dict | None = None, at: EvalPositions = PLAIN) -> dict:
    whole = {} if spans.whole is None else {  # lm_eval mode's (rolling.py)
        "eval_tokens": spans.whole["asked"], "prefix_token": None, "words": None,
        "bytes": None, "word_perplexity": None, "byte_perplexity": None}
    return {
        "mode": mode,
        "length": length,
        "stride": stride,
        "first_token": None,
        "tokens": spans.tokens,
        "spans": spans.id,
        "documents": spans.documents,
        "rope_scaling": rope_scaling,
        **at.record(),
        "remainder": None,
        "mean_context": None,
        "applicable": True,
        "reason": None,
        "loss": None,
        "ppl": None,
        "bits_per_token": None,
        "bits_per_byte": None,
        "seconds": None,
        **whole,
    }


def curve_windows(wanted: list[tuple[dict | None, list[int]]], scoring: Scoring, spans: Spans,
                  max_positions: int | None) -> int:
    """The windows ``score_curves`` scores for ``wanted``: a progress bar's total."""
    return sum(count_windows(lengths, scoring, spans, max_positions,
                             per_position=record is None) for record, lengths in wanted)


def score_curves(model: GPT, val: np.ndarray, wanted: list[tuple[dict | None, list[int]]],
                 scoring: Scoring, spans: Spans, device: torch.device,
                 token_bytes: np.ndarray | None,
                 rescale: Callable[[dict | None], None],
                 write: Callable[[dict | None, list[dict], dict | None], None],
                 progress: Callable[[int], None] | None = None) -> list[dict]:
    """The curve of each RoPE scaling of ``wanted`` -- (record, lengths), None the model as
    it is -- on ``spans``: ``rescale(record)`` makes the model score with it, and
    ``write(record, points, per_position)`` keeps each scaling's points as soon as they are
    scored.  The one scoring loop of a trained run and of a pretrained model; the caller
    puts the model back afterwards."""
    curve = []
    for record, lengths in wanted:
        rescale(record)
        if not lengths:
            continue
        points, per_position = extrapolation_curve(
            model, val, lengths, scoring, spans, device, token_bytes, progress=progress,
            rope_scaling=record)
        write(record, points, per_position)
        curve += points
    return curve


def extrapolation_curve(
    model: GPT,
    val: np.ndarray,
    lengths: list[int],
    scoring: Scoring,
    spans: Spans,
    device: torch.device,
    token_bytes: np.ndarray | None = None,
    progress: Callable[[int], None] | None = None,
    rope_scaling: dict | None = None,
) -> tuple[list[dict], dict | None]:
    """One point per length on ``spans``, and the per-position loss at the longest
    applicable length that a span holds a whole window of (per_position_length; None when
    no span is that long), ``scoring.per_position_buckets`` buckets per doubling of position
    (bucket_edges).  ``rope_scaling`` is the record (posexp/scaling.py) of the RoPE
    scaling the model scores with, written into each point; per-position loss is recorded
    for the model as trained only (None).

    Each point carries its uncertainty (posexp/stats.py): the summed loss and the targets of
    each document the spans lie in (``block_loss``, ``block_tokens``; the same documents at
    every length) and the bootstrap interval of its perplexity over documents (``ppl_low``,
    ``ppl_high``).  ``token_bytes[id]`` is how many bytes token ``id`` decodes to (None: one
    byte each), so that bits per byte compare runs with different tokenizers.  ``progress``
    is called with the number of windows each batch scored (count_windows gives the total).
    """
    targets = np.asarray(val[spans.targets()], dtype=np.int64)
    n_bytes = int(token_bytes[targets].sum()) if token_bytes is not None else spans.tokens
    at = scoring.positions
    applicable = scored_lengths(lengths, model.max_positions, at)
    # the per-position loss is the model's as trained: none for a scaling or a variant
    longest = per_position_length(applicable, spans) \
        if rope_scaling is None and not at.consecutive and spans.whole is None else None
    model.eval()
    curve, per_position = [], None
    for length in sorted(lengths):
        s = window_stride(length, scoring.mode, scoring.stride)
        p = point(scoring.mode, length, s, spans, rope_scaling, at)
        if length not in applicable:
            p["applicable"] = False
            p["reason"] = why_not(model, length, at)
            curve.append(p)
            continue
        edges = bucket_edges(length, scoring.per_position_buckets) \
            if length == longest and s == length else None
        by_bucket = _score_point(p, model, val, spans, scoring, device, edges, progress,
                                 n_bytes)
        curve.append(p)
        if by_bucket is not None:
            per_position = per_position_record(length, spans, edges, by_bucket, at)
    if per_position is None and longest is not None:
        # sliding mode scores only the tail of each window; the per-position curve needs
        # whole windows, so it takes one nonoverlapping pass at the longest length
        edges = bucket_edges(longest, scoring.per_position_buckets)
        _, by_bucket, _ = score_windows(model, val, longest, span_windows(spans, longest),
                                        spans.tokens, scoring.batch_tokens, device, edges,
                                        progress, at)
        per_position = per_position_record(longest, spans, edges, by_bucket, at)
    return curve, per_position


def per_position_length(lengths: list[int], spans: Spans) -> int | None:
    """The length whose whole windows the per-position loss averages: the longest of
    ``lengths`` that a span holds a whole window of -- a longer window scores only the tail
    of every span, so its early positions are never scored -- or None when every span is
    shorter than every length."""
    longest_span = int(spans.length.max())
    return max((n for n in lengths if n <= longest_span), default=None)


def _score_point(p: dict, model: GPT, val: np.ndarray, spans: Spans, scoring: Scoring,
                 device: torch.device, edges: tuple[np.ndarray, np.ndarray] | None,
                 progress: Callable[[int], None] | None, n_bytes: int) -> dict | None:
    """Score point ``p`` (its length and stride) in place: its loss, perplexity, bits, the
    sums of each document and the interval; returns the per-position buckets when ``edges``
    ask."""
    t0 = time.perf_counter()
    if spans.whole is not None:  # rolling.py imports this module
        from posexp.evaluate.rolling import lm_eval_numbers, score_documents

        losses, context = score_documents(model, val, spans, p["length"], scoring.prefix,
                                          scoring.batch_tokens, device, progress)
        p["seconds"] = round(time.perf_counter() - t0, 3)
        total = float(losses.sum())
        p.update(_perplexities(total, p["tokens"], n_bytes, losses, spans), **context,
                 prefix_token=scoring.prefix, **lm_eval_numbers(total, spans))
        return None
    windows = span_windows(spans, p["stride"])
    losses, by_bucket, clipped = score_windows(
        model, val, p["length"], windows, spans.tokens, scoring.batch_tokens, device, edges,
        progress, scoring.positions)
    p["seconds"] = round(time.perf_counter() - t0, 3)
    p.update(_perplexities(float(losses.sum()), p["tokens"], n_bytes, losses, spans))
    p.update(window_context(windows, p["length"], p["stride"]))
    if clipped:
        p["clipped"] = clipped
    return by_bucket


def _perplexities(total: float, tokens: int, n_bytes: int, losses: np.ndarray,
                  spans: Spans) -> dict:
    """A point's loss, perplexity and bits from its summed loss ``total``, with the sums of
    each document and the interval."""
    p = {"loss": total / tokens}
    p["ppl"] = math.exp(p["loss"])
    p["bits_per_token"] = p["loss"] / math.log(2)
    p["bits_per_byte"] = total / n_bytes / math.log(2)
    p["block_loss"], p["block_tokens"] = stats.cluster_sums(losses, spans)
    p["ppl_low"], p["ppl_high"] = stats.ppl_interval(p)
    return p


def window_context(windows: Windows, length: int, stride: int) -> dict:
    """``remainder``: the targets scored by windows that score fewer than ``stride`` (a
    span's last window, or its only one); ``mean_context``: the mean window position (0-based)
    of the targets -- a window of r predictions (``length``, or fewer when clipped) scores
    its last c at positions r-c .. r-1."""
    reads = np.minimum(windows.ends, length)
    c = windows.counts
    total = float((c * reads - c * (c + 1) / 2).sum())
    return {"remainder": int(c[c < stride].sum()),
            "mean_context": round(total / int(c.sum()), 2)}


def scored_lengths(lengths: list[int], max_positions: int | None,
                   at: EvalPositions = PLAIN) -> list[int]:
    """The lengths a model with ``max_positions`` can be scored at, at positions ``at``."""
    return [L for L in lengths if (max_positions is None or max_positions >= L)
            and at.why_not(L, L) is None]


def why_not(model: GPT, length: int, at: EvalPositions) -> str:
    """Why ``model`` cannot be scored at ``length`` (scored_lengths left it out)."""
    limit = model.max_positions
    if limit is not None and length > limit:
        return (f"{model.cfg.encoding} positions stop at {limit}; there is no position "
                f"{limit} or beyond to evaluate {length} tokens")
    return at.why_not(length, length)


def count_windows(lengths: list[int], scoring: Scoring, spans: Spans,
                  max_positions: int | None = None, per_position: bool = True) -> int:
    """How many windows ``extrapolation_curve`` scores (a progress bar's total): every
    applicable length, and in sliding mode the nonoverlapping pass for the per-position loss
    (per_position_length; unless not ``per_position``: a RoPE scaling has none)."""
    lengths = scored_lengths(lengths, max_positions, scoring.positions)
    mode, stride = scoring.mode, scoring.stride
    if spans.whole is not None:  # rolling.py imports this module
        from posexp.evaluate.rolling import count_document_windows

        return sum(count_document_windows(spans, L) for L in lengths)
    total = sum(len(span_windows(spans, window_stride(L, mode, stride)).ends)
                for L in lengths)
    per_position = per_position and not scoring.positions.consecutive
    longest = per_position_length(lengths, spans) if per_position else None
    if longest is not None and window_stride(longest, mode, stride) != longest:
        total += len(span_windows(spans, longest).ends)
    return total


def window_stride(length: int, mode: str, stride: int | None) -> int:
    return (stride or max(1, length // 2)) if mode == "sliding" else length


def per_position_record(length: int, spans: Spans, edges: tuple[np.ndarray, np.ndarray],
                        by_bucket: dict, at: EvalPositions = PLAIN) -> dict:
    """The per-position loss of whole nonoverlapping windows: each bucket of window
    positions ``position`` .. ``position_end`` - 1 (0-based; of a randomized run, the
    index in the window, whichever position it was drawn at) with its mean loss and the
    standard error of that mean across windows (null for one window)."""
    return {
        "mode": "nonoverlapping",
        "length": length,
        "first_token": None,
        "tokens": spans.tokens,
        "spans": spans.id,
        "windows": by_bucket["windows"],
        "position": edges[0].tolist(),
        "position_end": edges[1].tolist(),
        "loss": by_bucket["loss"],
        "loss_se": by_bucket["loss_se"],
        **at.record(),
    }
