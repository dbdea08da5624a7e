"""Causal attention kernels, chosen by what the encoding needs.

* No score bias (every encoding but ALiBi): ``scaled_dot_product_attention(is_causal=True)``,
  which runs a fused flash / memory-efficient kernel wherever torch has one.
* ALiBi's bias ``-m_h * (i - j)``, one of three kernels (``attention=`` in the config):

  - ``flash``: flash-attn's ``flash_attn_func(causal=True, alibi_slopes=...)``; CUDA, fp16/bf16,
    when the flash-attn package is installed.
  - ``flex``: FlexAttention, compiled, with the bias as a ``score_mod`` and a causal block
    mask (built once per length and device, then cached), so blocks above the diagonal are
    skipped and no score matrix is ever stored.
  - ``sdpa``: SDPA with an additive bias, one block of queries at a time, so memory is
    ``heads x block x L`` instead of ``heads x L x L``.  The bias of query ``i`` and key ``j``
    depends only on ``i - j``, so every block reads a slice of one bias, built once per call.

  ``auto`` takes flash, then flex on CUDA, and sdpa on the CPU, where it measured fastest.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from posexp.config import Attention, flash_attn_installed
from posexp.encodings.alibi import alibi_bias

# Elements of one (heads x queries x keys) bias block: 2^24 floats = 64 MiB per batch row.
BIAS_BLOCK_ELEMENTS = 1 << 24


def alibi_kernel(requested: Attention | str, q: torch.Tensor, dropout_p: float) -> Attention:
    """The kernel ALiBi attention runs on for these queries."""
    requested = Attention(requested)
    if requested != Attention.auto:
        return requested
    if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and flash_attn_installed():
        return Attention.flash
    if q.is_cuda and dropout_p == 0.0:
        return Attention.flex
    return Attention.sdpa


def causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slopes: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    kernel: Attention | str = Attention.auto,
) -> torch.Tensor:
    """q, k, v: [batch, heads, seq, d_head] -> [batch, heads, seq, d_head]."""
    if slopes is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    chosen = alibi_kernel(kernel, q, dropout_p)
    if chosen == Attention.flash:
        return _flash_alibi(q, k, v, slopes, dropout_p)
    if chosen == Attention.flex:
        if dropout_p:
            raise ValueError("FlexAttention has no dropout; use attention=sdpa or flash")
        return _flex_alibi(q, k, v, slopes)
    return _sdpa_alibi(q, k, v, slopes, dropout_p)


def _sdpa_alibi(q, k, v, slopes, dropout_p):
    n_head, seq_len = q.shape[1], q.shape[2]
    block = min(seq_len, max(1, BIAS_BLOCK_ELEMENTS // (n_head * seq_len)))
    # The bias of the last block of queries and every key.  It depends only on i - j, so
    # every other block reads a slice of it.  4-d, so that torch's fused CPU kernel takes it
    # (a 3-d mask falls back to the unfused math path, measured 3x slower at 16k).
    bias = alibi_bias(slopes, seq_len - block, block, seq_len).to(q.dtype)[None]
    first = seq_len - block
    out = []
    for start in range(0, seq_len, block):
        stop = min(start + block, seq_len)
        # Queries start..stop-1 see keys 0..stop-1 (later keys are masked anyway).  Their
        # bias is the template's rows and keys shifted by first - start, in whichever
        # direction keeps them inside it (only a short last block has start > first).
        rows, keys = max(0, start - first), max(0, first - start)
        out.append(
            F.scaled_dot_product_attention(
                q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop],
                attn_mask=bias[:, :, rows : rows + stop - start, keys : keys + stop],
                dropout_p=dropout_p,
            )
        )
    return out[0] if len(out) == 1 else torch.cat(out, dim=2)


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


def _flex_alibi(q, k, v, slopes):
    slopes = slopes.float()

    def alibi(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    # inside a compiled model flex_attention is compiled with the rest of the graph
    kernel = flex_attention if torch.compiler.is_compiling() else _compiled_flex()
    return kernel(q, k, v, score_mod=alibi, block_mask=causal_block_mask(q.shape[2], q.device))


def _flash_alibi(q, k, v, slopes, dropout_p):
    from flash_attn import flash_attn_func  # optional: pip install flash-attn

    # flash-attn adds -m_h * |i - j|, which is ALiBi's bias below the diagonal; [b, t, h, d]
    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                          dropout_p=dropout_p, causal=True, alibi_slopes=slopes.float())
    return out.transpose(1, 2)
