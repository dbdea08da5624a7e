"""CoPE, contextual position encoding (Golovneva et al., 2024, "Contextual Position Encoding:
Learning to Count What's Important", arXiv:2405.18719): a position that counts what the
query's gates open on, not tokens.

Query i gates each key j <= i by g_ij = sigmoid(z_ij), z_ij = q_i . k_j / sqrt(d) its
attention logit, and places key j at

    p_ij = sum_{k = j .. i} g_ik,   clamped to npos_max,

a fractional position (every gate at 1: p_ij = i - j + 1).  Each layer holds a table e of
npos_max + 1 vectors of the head's size, shared by its heads, and adds to z_ij the logit of
p_ij interpolated between its two integer neighbours:

    (1 - w) q_i . e[floor p_ij] + w q_i . e[ceil p_ij],   w = p_ij - floor p_ij,

divided by sqrt(d) like the attention logit (the paper's q_i . (k_j + e[p_ij]); the reference
code, facebookresearch/RAM ``projects/cope``, divides their sum).  The gradient reaches the
gates through w only, as there.  Defaults, as the reference code's: npos_max the training
length (its ``block_size + 1`` rows), e starting at 0.  x-transformers' ``CoPE`` adds q . e
undivided: the same function with e scaled by 1/sqrt(d).

The positions need every logit of a query, so CoPE holds a [heads x queries x keys] block
by construction: posexp/attention.py computes one block of queries at a time
(``contextual_bias``), bounded at evaluation, on SDPA's math only (no fused kernel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from posexp.encodings.base import PositionalEncoding
from posexp.encodings.registry import EncodingSpec, ModelShape, register, require


def cope_positions(scores: torch.Tensor, npos_max: int) -> torch.Tensor:
    """p_ij = sum_{k = j..i} sigmoid(z_ik), clamped to npos_max, for logits z [..., queries,
    keys] that are -inf on keys after their query (whose gates are then 0)."""
    gates = torch.sigmoid(scores)
    return gates.flip(-1).cumsum(-1).flip(-1).clamp(max=npos_max)


class ContextualPositions(PositionalEncoding):
    bias_kernels = ("sdpa",)
    reads_scores = True

    def __init__(self, shape: ModelShape, npos_max: int) -> None:
        super().__init__()
        self.npos_max = npos_max
        self.table = nn.Parameter(torch.zeros(shape.n_layer, npos_max + 1, shape.d_head))

    def contextual_bias(self, layer: int, q: torch.Tensor, scores: torch.Tensor
                        ) -> torch.Tensor:
        """The logit of each key's position for queries q [batch, heads, queries, d] and
        their logits z [batch, heads, queries, keys] (already / sqrt(d), -inf after the
        query), in the logits' dtype."""
        positions = cope_positions(scores, self.npos_max)
        at_integers = q.to(scores.dtype) @ self.table[layer].to(scores.dtype).T
        low = positions.floor()
        w = positions - low
        low, high = low.long(), positions.ceil().long()
        logit = (at_integers.gather(-1, low) * (1 - w) + at_integers.gather(-1, high) * w)
        return logit / math.sqrt(q.shape[-1])


@dataclass(frozen=True)
class CopeConfig:
    # the largest position: the training length by default (configs/encoding/cope.yaml),
    # the reference code's block_size + 1 rows
    npos_max: int = 128

    def __post_init__(self) -> None:
        require(1 <= self.npos_max <= 1 << 20, "npos_max", "an integer in [1, 1048576]",
                self.npos_max)

    def build(self, shape: ModelShape) -> ContextualPositions:
        return ContextualPositions(shape, self.npos_max)


register(EncodingSpec(
    name="cope", label="CoPE", order=13, colour="#994F00",
    module=ContextualPositions, config=CopeConfig, reads_positions=False,
    citation="Golovneva et al. 2024, 'Contextual Position Encoding: Learning to Count What's "
             "Important' (arXiv:2405.18719); reference code facebookresearch/RAM projects/cope",
    summary="contextual positions: each query counts the keys its gates \u03c3(q·k) open on, "
            "and adds a learned logit of that count to each score",
    paper="Golovneva et al. 2024", reach="any length (counts clamp at `npos_max`)",
))
