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
from contextlib import nullcontext

import numpy as np
import torch

from posexp.errors import UsageError
from posexp.model import GPT


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
    per_position: bool = False,
) -> tuple[float, np.ndarray | None]:
    """Summed loss (nats) over the N scored tokens, and the per-position mean loss over the
    full windows when asked."""
    ends, counts = window_plan(first, n_tokens, stride)
    offsets = np.arange(-length, 1)
    rows = max(1, batch_tokens // length)
    positions = torch.arange(length, device=device)
    total = torch.zeros((), dtype=torch.float64, device=device)
    pos_sum = torch.zeros(length, dtype=torch.float64, device=device)
    pos_windows = 0
    for start in range(0, len(ends), rows):
        e, c = ends[start : start + rows], counts[start : start + rows]
        tokens = torch.from_numpy(val[e[:, None] + offsets].astype(np.int64)).to(device)
        with autocast(device):
            losses = model.token_losses(tokens[:, :-1], tokens[:, 1:])
        scored = positions[None, :] >= length - torch.from_numpy(c).to(device)[:, None]
        total += (losses * scored).sum(dtype=torch.float64)
        if per_position:
            full = torch.from_numpy(c == length).to(device)
            pos_sum += losses[full].sum(0, dtype=torch.float64)
            pos_windows += int(full.sum())
    pos_mean = (pos_sum / pos_windows).cpu().numpy() if per_position and pos_windows else None
    return float(total), pos_mean


def bucket(values: np.ndarray, n_buckets: int) -> tuple[list[int], list[int], list[float]]:
    """Mean of ``values`` over at most n_buckets runs of positions whose ends grow
    geometrically (1, 2, 3, 5, ... up to the window), so early positions -- where the
    early-token curse lives -- keep their detail and late ones average many positions.
    Returns (first positions, ends (exclusive), means)."""
    n = len(values)
    ends = sorted({max(1, round(n ** (i / n_buckets))) for i in range(1, n_buckets + 1)})
    starts = [0, *ends[:-1]]
    return starts, ends, [float(values[s:e].mean()) for s, e in zip(starts, ends, strict=True)]


def point(mode: str, length: int, stride: int, first: int, n_tokens: int) -> dict:
    return {
        "mode": mode,
        "length": length,
        "stride": stride,
        "first_token": first,
        "tokens": n_tokens,
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
    mode: str,
    stride: int | None,
    n_tokens: int,
    batch_tokens: int,
    per_position_buckets: int,
    device: torch.device,
    token_bytes: np.ndarray | None = None,
) -> tuple[list[dict], dict | None]:
    """One point per length, and the per-position loss at the longest applicable length.

    ``token_bytes[id]`` is how many bytes token ``id`` decodes to (None: one byte each), so
    that bits per byte compare runs with different tokenizers.
    """
    check_val_size(len(val), lengths, n_tokens)
    first, _ = scored_region(len(val), n_tokens)
    targets = np.asarray(val[first + 1 : first + n_tokens + 1], dtype=np.int64)
    n_bytes = int(token_bytes[targets].sum()) if token_bytes is not None else n_tokens
    limit = model.max_positions
    applicable = [L for L in lengths if limit is None or limit >= L]
    longest = max(applicable, default=None)
    model.eval()
    curve, per_position = [], None
    for length in sorted(lengths):
        s = length if mode == "nonoverlapping" else (stride or max(1, length // 2))
        p = point(mode, length, s, first, n_tokens)
        if length not in applicable:
            p["applicable"] = False
            p["reason"] = (
                f"{model.cfg.encoding} positions stop at {limit}; there is no position "
                f"{limit} or beyond to evaluate {length} tokens"
            )
            curve.append(p)
            continue
        want_positions = length == longest and mode == "nonoverlapping"
        t0 = time.perf_counter()
        total, pos_mean = score_windows(
            model, val, length, s, first, n_tokens, batch_tokens, device, want_positions
        )
        p["seconds"] = round(time.perf_counter() - t0, 3)
        p["loss"] = total / n_tokens
        p["ppl"] = math.exp(p["loss"])
        p["bits_per_token"] = p["loss"] / math.log(2)
        p["bits_per_byte"] = total / n_bytes / math.log(2)
        curve.append(p)
        if pos_mean is not None:
            per_position = per_position_record(length, first, n_tokens, pos_mean,
                                               per_position_buckets)
    if per_position is None and longest is not None:
        # sliding mode scores only the tail of each window; the per-position curve needs
        # whole windows, so it takes one nonoverlapping pass at the longest length
        _, pos_mean = score_windows(
            model, val, longest, longest, first, n_tokens, batch_tokens, device, True
        )
        if pos_mean is not None:
            per_position = per_position_record(longest, first, n_tokens, pos_mean,
                                               per_position_buckets)
    return curve, per_position


def per_position_record(
    length: int, first: int, n_tokens: int, pos_mean: np.ndarray, n_buckets: int
) -> dict:
    starts, ends, means = bucket(pos_mean, n_buckets)
    return {
        "length": length,
        "first_token": first,
        "tokens": n_tokens,
        "windows": n_tokens // length,
        "position": starts,
        "position_end": ends,
        "loss": means,
    }
