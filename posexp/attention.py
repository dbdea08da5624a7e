"""Causal attention kernels, chosen by what the encoding needs.

* No score bias: ``scaled_dot_product_attention(is_causal=True)``, which runs a fused
  kernel (flash / memory-efficient) wherever torch has one.
* ALiBi slopes: SDPA with an additive bias.  The bias is built per block of queries, so
  memory is ``heads x block x L`` instead of ``heads x L x L`` at long lengths.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posexp.encodings.alibi import alibi_bias

# Elements of one (heads x queries x keys) bias block: 2^24 floats = 64 MiB per batch row.
BIAS_BLOCK_ELEMENTS = 1 << 24


def causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slopes: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """q, k, v: [batch, heads, seq, d_head] -> [batch, heads, seq, d_head]."""
    if slopes is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    n_head, seq_len = q.shape[1], q.shape[2]
    block = max(1, BIAS_BLOCK_ELEMENTS // (n_head * seq_len))
    if block >= seq_len:
        bias = alibi_bias(slopes, 0, seq_len, seq_len).to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p)
    out = []
    for start in range(0, seq_len, block):
        stop = min(start + block, seq_len)
        # queries start..stop-1 see keys 0..stop-1; later keys are masked anyway
        bias = alibi_bias(slopes, start, stop - start, stop).to(q.dtype)
        out.append(
            F.scaled_dot_product_attention(
                q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop],
                attn_mask=bias, dropout_p=dropout_p,
            )
        )
    return torch.cat(out, dim=2)
