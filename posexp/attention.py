"""Causal attention kernels, chosen by what the encoding needs.

* No score bias: ``scaled_dot_product_attention(is_causal=True)``, which runs a fused flash /
  memory-efficient kernel wherever torch has one.
* A score bias (alibi, t5, kerple_*, fire, fox; posexp/encodings/base.py), one of three kernels
  (``attention=`` in the config), among those the encoding lists in its ``bias_kernels``:

  - ``flash``: flash-attn's ``flash_attn_func(causal=True, alibi_slopes=...)``; ALiBi only,
    CUDA, fp16/bf16, when the flash-attn package is installed.
  - ``flex``: FlexAttention, compiled, with the encoding's ``score_mod`` and a causal block
    mask (built once per length and device, then cached), so blocks above the diagonal are
    skipped and no score matrix is ever stored.  For biases with a closed form: ALiBi, T5's
    bucket table, KERPLE's kernels.
  - ``sdpa``: SDPA with an additive bias, one block of queries at a time, so memory is
    ``heads x block x L`` instead of ``heads x L x L``.  A bias of the distance i - j alone
    (``DistanceBias``) is built once per call, for the last block, and every other block
    reads a slice of it; FIRE's, which depends on i, is built block by block, and so is
    FoX's, which depends on the batch (its forget gates read the layer's input).

  ``auto`` takes flash, then flex on CUDA where the encoding has them, and sdpa on the CPU,
  where it measured fastest; FIRE runs on sdpa everywhere.
* A bias of the logits themselves (CoPE, ``reads_scores``): the logits of one block of
  queries are written out, the encoding adds its bias to them, and softmax runs in float32
  at least (``_contextual``): no fused kernel, and a block of at most BIAS_BLOCK_ELEMENTS / 4
  logits, since about eight tensors of its size live at once.
* Self-Extend or ReRoPE at evaluation (``far``): two scores for every pair, one from the
  queries and keys as rotated and one from their far rotations, merged by distance before
  the softmax (``_rectified``), one block of queries at a time.  No fused kernel takes two
  scores, so this path writes them out: about 3x a score block of memory, and the time of
  the unfused math path.
"""

from __future__ import annotations

import functools
import importlib.util
import math

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from posexp.encodings.base import DistanceBias, ScoreBias, ScoreMod

# Elements of one (heads x queries x keys) bias block: 2^24 floats = 64 MiB per batch row.
BIAS_BLOCK_ELEMENTS = 1 << 24
KERNELS = ("auto", "sdpa", "flex", "flash")  # attention= (config.schema.Attention)


def flash_attn_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def bias_kernel(requested: str, q: torch.Tensor, dropout_p: float,
                bias: ScoreBias) -> str:
    """The kernel that applies ``bias``'s score bias to these queries."""
    requested = str(getattr(requested, "value", requested))
    if requested not in KERNELS:
        raise ValueError(f"unknown attention kernel {requested!r}; the kernels: "
                         f"{', '.join(KERNELS)}")
    kernels = bias.bias_kernels
    if requested != "auto":
        if requested not in kernels:
            raise ValueError(f"attention={requested} cannot apply the score bias of "
                             f"{type(bias).__name__}; it runs on {', '.join(kernels)}")
        return requested
    half = q.dtype in (torch.float16, torch.bfloat16)
    if "flash" in kernels and q.is_cuda and half and flash_attn_installed():
        return "flash"
    if "flex" in kernels and q.is_cuda and dropout_p == 0.0:
        return "flex"
    return "sdpa"


def causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: ScoreBias | None = None,
    layer: int = 0,
    dropout_p: float = 0.0,
    kernel: str = "auto",
    positions: torch.Tensor | None = None,
    far: tuple[torch.Tensor, torch.Tensor, int] | None = None,
) -> torch.Tensor:
    """q, k, v: [batch, heads, seq, d_head] -> [batch, heads, seq, d_head].  ``bias`` is the
    encoding whose score bias (of layer ``layer``) to add, or None.  ``positions`` [batch,
    seq]: randomized positions in training, whose bias (of their differences, one per
    sequence) is built whole, at a training length, and applied by SDPA.  ``far`` (far_q,
    far_k, window): keys j <= i - window are scored by far_q_i . far_k_j instead (Self-Extend,
    ReRoPE; evaluation only)."""
    if far is not None and far[2] < q.shape[2]:
        if bias is not None or positions is not None or dropout_p:
            raise ValueError("Self-Extend and ReRoPE apply to RoPE at evaluation: no score "
                             "bias, randomized positions or dropout")
        return _rectified(q, k, v, *far)
    if bias is None:
        if _long_inference(q):
            return _causal_blocked(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    if bias.reads_scores:  # of the logits alone: positions change nothing
        bias_kernel(kernel, q, dropout_p, bias)  # refuses a kernel that cannot apply it
        return _contextual(q, k, v, bias, layer, dropout_p)
    if positions is not None:
        mask = bias.position_bias(layer, positions).to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    chosen = bias_kernel(kernel, q, dropout_p, bias)
    if chosen == "sdpa" and (key_bias := bias.key_bias()) is not None:
        return _causal_key_bias(q, k, v, key_bias, dropout_p)
    if chosen == "flash":
        return _flash_alibi(q, k, v, bias.attention_slopes(), dropout_p)
    if chosen == "flex":
        if dropout_p:
            raise ValueError("FlexAttention has no dropout; use attention=sdpa or flash")
        return _flex(q, k, v, bias.score_mod(layer))
    return _sdpa_blocked(q, k, v, bias, layer, dropout_p)


# One causal kernel call over a long window runs for minutes on a CPU (200k tokens: one
# call per layer), and a signal is handled only between two calls: posexp eval would
# ignore SIGTERM and Ctrl-C that long.  Past this much work (batch x heads x T^2/2 x d_head,
# about a second of one core) inference attends one block of queries at a time, each call
# at most CAUSAL_BLOCK_WORK: the same result to float rounding, in about 1.5-1.8x the time.
CAUSAL_WORK = 1 << 34
CAUSAL_BLOCK_WORK = 1 << 31


def _long_inference(q: torch.Tensor) -> bool:
    b, h, t, d = q.shape
    return q.device.type == "cpu" and not torch.is_grad_enabled() and b * h * t * t * d // 2 \
        > CAUSAL_WORK


def _causal_key_bias(q, k, v, key_bias, dropout_p):
    """softmax_j(q_i . k_j / sqrt(d) + b_j) over keys j <= i, with no mask: b rides in one
    more dimension, 1 in the queries and b_j * sqrt(d) in the keys (in float32 at least),
    and the causal kernel runs at the head's own scale 1 / sqrt(d).  The values get a zero
    dimension too, so that queries, keys and values share a head size, which torch's fused
    CPU kernel needs (measured 1.6x faster than without, and than a mask)."""
    d, given = q.shape[-1], q.dtype
    dtype = torch.promote_types(given, torch.float32)  # b_j * sqrt(d) grows with j
    q = torch.cat((q.to(dtype), q.new_ones(*q.shape[:-1], 1, dtype=dtype)), dim=-1)
    k = torch.cat((k.to(dtype), (key_bias * math.sqrt(d)).to(dtype)[..., None]), dim=-1)
    v = torch.cat((v.to(dtype), v.new_zeros(*v.shape[:-1], 1, dtype=dtype)), dim=-1)
    if _long_inference(q):
        out = _causal_blocked(q, k, v, scale=d ** -0.5)
    else:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p,
                                             scale=d ** -0.5)
    return out[..., :d].to(given)


def _rectified(q, k, v, far_q, far_k, window: int):
    """softmax_j(s_ij / sqrt(d)) v_j over keys j <= i, where s_ij = q_i . k_j for i - j <
    window and far_q_i . far_k_j beyond: as Self-Extend's and ReRoPE's reference code, whose
    scores are in the model's precision and whose softmax is in float32.  One block of
    queries at a time, the last first (as _sdpa_blocked), each score at most
    BIAS_BLOCK_ELEMENTS."""
    b, h, seq_len, d = q.shape
    block = max(1, min(seq_len, BIAS_BLOCK_ELEMENTS // (b * h * seq_len)))
    keys = torch.arange(seq_len, device=q.device)
    softmax_dtype = torch.promote_types(q.dtype, torch.float32)
    out = []
    for start in reversed(range(0, seq_len, block)):
        stop = min(start + block, seq_len)
        distance = torch.arange(start, stop, device=q.device)[:, None] - keys[:stop]
        near = q[:, :, start:stop] @ k[:, :, :stop].transpose(-1, -2)
        scores = torch.where(distance < window, near,
                             far_q[:, :, start:stop] @ far_k[:, :, :stop].transpose(-1, -2))
        scores = (scores / math.sqrt(d)).to(softmax_dtype).masked_fill(distance < 0,
                                                                       float("-inf"))
        out.append(scores.softmax(-1).to(v.dtype) @ v[:, :, :stop])
    return torch.cat(out[::-1], dim=2)


def _contextual(q, k, v, bias: ScoreBias, layer: int, dropout_p: float):
    """softmax_j(z_ij + b_ij) v_j over keys j <= i, z = q . k / sqrt(d) and b the
    encoding's contextual_bias of z: one block of queries at a time, the last first (as
    _sdpa_blocked), in float32 at least."""
    b, h, seq_len, d = q.shape
    block = max(1, min(seq_len, BIAS_BLOCK_ELEMENTS // 4 // (b * h * seq_len)))
    dtype = torch.promote_types(q.dtype, torch.float32)
    keys = torch.arange(seq_len, device=q.device)
    out = []
    for start in reversed(range(0, seq_len, block)):
        stop = min(start + block, seq_len)
        later = keys[:stop] > torch.arange(start, stop, device=q.device)[:, None]
        scores = (q[:, :, start:stop] @ k[:, :, :stop].transpose(-1, -2)).to(dtype)
        scores = (scores / math.sqrt(d)).masked_fill(later, float("-inf"))
        weights = (scores + bias.contextual_bias(layer, q[:, :, start:stop], scores)
                   ).softmax(-1)
        weights = F.dropout(weights, dropout_p) if dropout_p else weights
        out.append(weights.to(v.dtype) @ v[:, :, :stop])
    return torch.cat(out[::-1], dim=2)


def _causal_blocked(q, k, v, scale=None):
    """Causal SDPA one block of queries at a time: queries start..stop-1 see keys 0..stop-1,
    the later ones of the last block masked by a slice of one boolean template (as
    _sdpa_blocked slices its bias), at most BIAS_BLOCK_ELEMENTS of it."""
    b, h, seq_len, d = q.shape
    block = max(1, min(seq_len, BIAS_BLOCK_ELEMENTS // seq_len,
                       CAUSAL_BLOCK_WORK // max(1, b * h * seq_len * d)))
    first = seq_len - block
    template = torch.arange(seq_len, device=q.device)[None, :] \
        <= torch.arange(first, seq_len, device=q.device)[:, None]
    out = []
    for start in reversed(range(0, seq_len, block)):
        stop = min(start + block, seq_len)
        rows, keys = max(0, start - first), max(0, first - start)
        out.append(F.scaled_dot_product_attention(
            q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop],
            attn_mask=template[None, None, rows: rows + stop - start, keys: keys + stop],
            scale=scale))
    return torch.cat(out[::-1], dim=2)


def _sdpa_blocked(q, k, v, bias: ScoreBias, layer: int, dropout_p: float):
    n_head, seq_len = q.shape[1], q.shape[2]
    rows = q.shape[0] if bias.batched else 1  # a bias per sequence (FoX's) or one for all
    block = min(seq_len, max(1, BIAS_BLOCK_ELEMENTS // (rows * n_head * seq_len)))
    first = seq_len - block
    # Masks are 4-d, so that torch's fused CPU kernel takes them (a 3-d mask falls back to
    # the unfused math path, measured 3x slower at 16k).  Queries start..stop-1 see keys
    # 0..stop-1 (later keys are masked anyway).
    if isinstance(bias, DistanceBias):
        # The bias of the last block of queries and every key.  It depends only on i - j,
        # so every other block reads a slice of it: the template's rows and keys shifted by
        # first - start, in whichever direction keeps them inside it (only a short last
        # block has start > first).
        template = bias.score_bias(layer, first, block, seq_len, q.device).to(q.dtype)[None]

        def block_bias(start: int, stop: int) -> torch.Tensor:
            rows, keys = max(0, start - first), max(0, first - start)
            return template[:, :, rows : rows + stop - start, keys : keys + stop]
    else:
        def block_bias(start: int, stop: int) -> torch.Tensor:
            block = bias.score_bias(layer, start, stop - start, stop, q.device).to(q.dtype)
            return block if bias.batched else block[None]

    # The last block first: each block's tensors are then no larger than the last block's,
    # whose freed memory they reuse.  In the other order each block asks for a little more
    # than any freed, and the CPU allocator's heap grows by gigabytes at 64k (FIRE).
    out = []
    for start in reversed(range(0, seq_len, block)):
        stop = min(start + block, seq_len)
        out.append(F.scaled_dot_product_attention(
            q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop],
            attn_mask=block_bias(start, stop), dropout_p=dropout_p))
    return out[0] if len(out) == 1 else torch.cat(out[::-1], dim=2)


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


@functools.lru_cache(maxsize=32)
def _cached_block_mask(length: int, device: torch.device) -> BlockMask:
    return create_block_mask(_causal, None, None, length, length, device=device)


def causal_block_mask(length: int, device: torch.device) -> BlockMask:
    """FlexAttention's causal block mask for one length, built once per (length, device)."""
    if torch.compiler.is_compiling():  # inside a compiled model the graph builds it
        return create_block_mask(_causal, None, None, length, length, device=device)
    return _cached_block_mask(length, device)


@functools.cache
def _compiled_flex():
    # compiled on first use, not at import: torch.compile pulls in dynamo, which costs every
    # posexp command about 2.5 s of start-up
    return torch.compile(flex_attention)


def _flex(q, k, v, score_mod: ScoreMod):
    # inside a compiled model flex_attention is compiled with the rest of the graph
    kernel = flex_attention if torch.compiler.is_compiling() else _compiled_flex()
    return kernel(q, k, v, score_mod=score_mod,
                  block_mask=causal_block_mask(q.shape[2], q.device))


def _flash_alibi(q, k, v, slopes, dropout_p):
    from flash_attn import flash_attn_func  # optional: pip install flash-attn

    # flash-attn adds -m_h * |i - j|, which is ALiBi's bias below the diagonal; [b, t, h, d]
    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                          dropout_p=dropout_p, causal=True, alibi_slopes=slopes.float())
    return out.transpose(1, 2)
