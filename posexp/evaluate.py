"""Extrapolation curves: the same validation tokens scored with windows of every length.

The scored tokens are the last ``N = eval.tokens`` targets of the validation stream,
``first+1 .. first+N`` with ``first = len(val) - 1 - N``, whatever the lengths or mode, so
every point ever computed for a run (any lengths, both modes, any later `posexp eval`) is
measured on identical text.  A length L can be scored when every window fits in the stream:
``len(val) >= L + N + 1``.

A window of length L ending at stream position e reads tokens ``e-L .. e-1`` and predicts
``e-L+1 .. e``; it scores only its last ``c`` predictions.

* nonoverlapping: windows end at first+L, first+2L, ...; each scores all L tokens, so early
  positions in each window have little context (the "early token curse").
* sliding (stride S): windows end at first+S, first+2S, ...; each scores its last S tokens,
  so every token is scored once, with at least L-S tokens of context.

Nonoverlapping is sliding with S = L.  If S does not divide N, one last window ends at
first+N and scores the tokens not yet scored.
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
from posexp.model import GPT


@dataclass(frozen=True)
class Scoring:
    """How a curve is scored (eval.* of a corpus run): the mode, the sliding stride (None:
    half of each window), the scored tokens, the tokens of one forward pass, and the
    per-position buckets per doubling of position."""

    mode: str
    stride: int | None
    tokens: int
    batch_tokens: int
    per_position_buckets: int = 4

    @classmethod
    def of(cls, e) -> Scoring:
        """From a config's eval group."""
        return cls(str(getattr(e.mode, "value", e.mode)), e.stride, e.tokens, e.batch_tokens,
                   e.per_position_buckets)


def window_plan(first: int, n_tokens: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Window end positions and how many trailing predictions each window scores."""
    ends = np.arange(first + stride, first + n_tokens + 1, stride)
    counts = np.full(ends.shape, stride)
    if n_tokens % stride:
        ends = np.append(ends, first + n_tokens)
        counts = np.append(counts, n_tokens % stride)
    return ends, counts


def scored_region(val_tokens: int, n_tokens: int) -> tuple[int, int]:
    """(first, n): the scored targets are the last ``n`` of the validation stream,
    ``first+1 .. first+n``.  They depend on the split and eval.tokens only, never on the
    lengths, so every point ever computed for a run scores the same tokens."""
    return val_tokens - 1 - n_tokens, n_tokens


def needed_val_tokens(lengths: list[int], n_tokens: int) -> int:
    return max(lengths) + n_tokens + 1


def check_val_size(val_size: int, lengths: list[int], n_tokens: int) -> None:
    need = needed_val_tokens(lengths, n_tokens)
    if val_size < need:
        raise UsageError(
            f"the validation split has {val_size} tokens; evaluating eval.tokens={n_tokens} at "
            f"lengths up to {max(lengths)} needs {need}. Lower eval.tokens or eval.lengths, "
            "or raise data.val_fraction"
        )


def autocast(device: torch.device):
    """bf16 autocast on CUDA; plain fp32 on CPU (bf16 is far slower on AVX2 CPUs)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


@torch.no_grad()
def score_windows(
    model: GPT,
    val: np.ndarray,
    length: int,
    stride: int,
    first: int,
    n_tokens: int,
    batch_tokens: int,
    device: torch.device,
    buckets: tuple[np.ndarray, np.ndarray] | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, dict | None]:
    """The loss (nats) of each of the N scored targets, in stream order; and, when
    ``buckets`` (starts, ends) are given, each bucket's mean loss over the whole windows with
    its standard error across windows.  ``progress`` is called with each batch's window
    count."""
    ends, counts = window_plan(first, n_tokens, stride)
    offsets = np.arange(-length, 1)
    rows = max(1, batch_tokens // length)
    positions = torch.arange(length, device=device)
    target_loss = torch.zeros(n_tokens, dtype=torch.float64, device=device)
    if buckets is not None:
        starts = torch.from_numpy(buckets[0]).to(device)
        stops = torch.from_numpy(buckets[1]).to(device)
        bucket_sum = torch.zeros(len(starts), dtype=torch.float64, device=device)
        bucket_sq = torch.zeros_like(bucket_sum)
    windows = 0
    for start in range(0, len(ends), rows):
        e, c = ends[start : start + rows], counts[start : start + rows]
        tokens = torch.from_numpy(val[e[:, None] + offsets].astype(np.int64)).to(device)
        with autocast(device):
            losses = model.token_losses(tokens[:, :-1], tokens[:, 1:]).double()
        # window ending at stream position e predicts targets e-L+1 .. e: index e-L-first+p
        index = torch.from_numpy(e - length - first).to(device)[:, None] + positions
        scored = positions[None, :] >= length - torch.from_numpy(c).to(device)[:, None]
        target_loss[index[scored]] = losses[scored]
        if buckets is not None:
            full = losses[torch.from_numpy(c == length).to(device)]
            cum = torch.nn.functional.pad(full.cumsum(1), (1, 0))
            means = (cum[:, stops] - cum[:, starts]) / (stops - starts)
            bucket_sum += means.sum(0)
            bucket_sq += (means**2).sum(0)
            windows += len(full)
        if progress is not None:
            progress(len(e))
    by_bucket = None
    if buckets is not None and windows:
        mean = bucket_sum / windows
        se = (((bucket_sq - windows * mean**2).clamp_min(0) / (windows - 1)) / windows).sqrt() \
            if windows > 1 else None
        by_bucket = {"windows": windows, "loss": mean.cpu().tolist(),
                     "loss_se": se.cpu().tolist() if se is not None else [None] * len(mean)}
    return target_loss.cpu().numpy(), by_bucket


def bucket_edges(length: int, per_doubling: int) -> tuple[np.ndarray, np.ndarray]:
    """Buckets of window positions (0-based starts, exclusive ends) whose edges are the same
    for every run: the 1-based positions 2^(k/per_doubling), rounded, so early positions --
    where the early-token curse lives -- keep their detail, late ones average many, and a
    run trained at 64 is bucketed exactly as one evaluated at 1024 up to position 64."""
    k = np.arange(0, int(per_doubling * math.log2(max(length, 1))) + 2)
    cuts = np.unique(np.round(2.0 ** (k / per_doubling)).astype(np.int64))
    ends = np.append(cuts[(cuts > 0) & (cuts < length)], length)
    return np.concatenate([[0], ends[:-1]]), ends


def point(mode: str, length: int, stride: int, first: int, n_tokens: int,
          rope_scaling: dict | None = None) -> dict:
    return {
        "mode": mode,
        "length": length,
        "stride": stride,
        "first_token": first,
        "tokens": n_tokens,
        "rope_scaling": rope_scaling,
        "applicable": True,
        "reason": None,
        "loss": None,
        "ppl": None,
        "bits_per_token": None,
        "bits_per_byte": None,
        "seconds": None,
    }


def extrapolation_curve(
    model: GPT,
    val: np.ndarray,
    lengths: list[int],
    scoring: Scoring,
    device: torch.device,
    token_bytes: np.ndarray | None = None,
    progress: Callable[[int], None] | None = None,
    rope_scaling: dict | None = None,
) -> tuple[list[dict], dict | None]:
    """One point per length, and the per-position loss at the longest applicable length
    (``scoring.per_position_buckets`` buckets per doubling of position, see bucket_edges).
    ``rope_scaling`` is the record (posexp/scaling.py) of the RoPE scaling the model scores
    with, written into each point; per-position loss is recorded for the model as trained
    only (None).

    Each point carries its uncertainty (posexp/stats.py): the summed loss of each block of
    the scored targets (``block_loss``, ``block_tokens``; the same blocks at every length)
    and the bootstrap interval of its perplexity (``ppl_low``, ``ppl_high``).
    ``token_bytes[id]`` is how many bytes token ``id`` decodes to (None: one byte each), so
    that bits per byte compare runs with different tokenizers.  ``progress`` is called with
    the number of windows each batch scored (count_windows gives the total).
    """
    n_tokens = scoring.tokens
    check_val_size(len(val), lengths, n_tokens)
    first, _ = scored_region(len(val), n_tokens)
    targets = np.asarray(val[first + 1 : first + n_tokens + 1], dtype=np.int64)
    n_bytes = int(token_bytes[targets].sum()) if token_bytes is not None else n_tokens
    limit = model.max_positions
    applicable = applicable_lengths(lengths, limit)
    longest = max(applicable, default=None) if rope_scaling is None else None
    model.eval()
    curve, per_position = [], None
    for length in sorted(lengths):
        s = window_stride(length, scoring.mode, scoring.stride)
        p = point(scoring.mode, length, s, first, n_tokens, rope_scaling)
        if length not in applicable:
            p["applicable"] = False
            p["reason"] = (
                f"{model.cfg.encoding} positions stop at {limit}; there is no position "
                f"{limit} or beyond to evaluate {length} tokens"
            )
            curve.append(p)
            continue
        edges = bucket_edges(length, scoring.per_position_buckets) \
            if length == longest and s == length else None
        by_bucket = _score_point(p, model, val, scoring, device, edges, progress, n_bytes)
        curve.append(p)
        if by_bucket is not None:
            per_position = per_position_record(length, first, n_tokens, edges, by_bucket)
    if per_position is None and longest is not None:
        # sliding mode scores only the tail of each window; the per-position curve needs
        # whole windows, so it takes one nonoverlapping pass at the longest length
        edges = bucket_edges(longest, scoring.per_position_buckets)
        _, by_bucket = score_windows(model, val, longest, longest, first, n_tokens,
                                     scoring.batch_tokens, device, edges, progress)
        if by_bucket is not None:
            per_position = per_position_record(longest, first, n_tokens, edges, by_bucket)
    return curve, per_position


def _score_point(p: dict, model: GPT, val: np.ndarray, scoring: Scoring, device: torch.device,
                 edges: tuple[np.ndarray, np.ndarray] | None,
                 progress: Callable[[int], None] | None, n_bytes: int) -> dict | None:
    """Score point ``p`` (its length, stride and region) in place: its loss, perplexity,
    bits, block sums and interval; returns the per-position buckets when ``edges`` ask."""
    t0 = time.perf_counter()
    losses, by_bucket = score_windows(model, val, p["length"], p["stride"], p["first_token"],
                                      p["tokens"], scoring.batch_tokens, device, edges,
                                      progress)
    p["seconds"] = round(time.perf_counter() - t0, 3)
    total = float(losses.sum())
    p["loss"] = total / p["tokens"]
    p["ppl"] = math.exp(p["loss"])
    p["bits_per_token"] = p["loss"] / math.log(2)
    p["bits_per_byte"] = total / n_bytes / math.log(2)
    p["block_loss"], p["block_tokens"] = stats.block_sums(losses)
    p["ppl_low"], p["ppl_high"] = stats.ppl_interval(p)
    return by_bucket


def applicable_lengths(lengths: list[int], max_positions: int | None) -> list[int]:
    return [L for L in lengths if max_positions is None or max_positions >= L]


def count_windows(lengths: list[int], scoring: Scoring, max_positions: int | None = None,
                  per_position: bool = True) -> int:
    """How many windows ``extrapolation_curve`` scores (a progress bar's total): every
    applicable length, and in sliding mode the nonoverlapping pass at the longest one
    (unless not ``per_position``: a RoPE scaling has none)."""
    lengths = applicable_lengths(lengths, max_positions)
    mode, stride, n_tokens = scoring.mode, scoring.stride, scoring.tokens
    total = sum(len(window_plan(0, n_tokens, window_stride(L, mode, stride))[0])
                for L in lengths)
    longest = max(lengths, default=None) if per_position else None
    if longest is not None and window_stride(longest, mode, stride) != longest:
        total += len(window_plan(0, n_tokens, longest)[0])
    return total


def window_stride(length: int, mode: str, stride: int | None) -> int:
    return length if mode == "nonoverlapping" else (stride or max(1, length // 2))


def per_position_record(length: int, first: int, n_tokens: int,
                        edges: tuple[np.ndarray, np.ndarray], by_bucket: dict) -> dict:
    """The per-position loss of whole nonoverlapping windows: each bucket of positions
    ``position`` .. ``position_end`` - 1 (0-based) with its mean loss and the standard error
    of that mean across windows (null for one window)."""
    return {
        "mode": "nonoverlapping",
        "length": length,
        "first_token": first,
        "tokens": n_tokens,
        "windows": by_bucket["windows"],
        "position": edges[0].tolist(),
        "position_end": edges[1].tolist(),
        "loss": by_bucket["loss"],
        "loss_se": by_bucket["loss_se"],
    }
