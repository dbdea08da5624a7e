"""T5's relative position bias (Raffel et al., JMLR 2020, sec. 2.1), as in T5's decoder.

Each head learns one scalar per bucket of the distance d = i - j from query i back to key j
(``_relative_position_bucket`` of mesh-tensorflow and transformers, bidirectional=False):
with 32 buckets and max_distance 128, distances 0..15 have a bucket each, distances 16..127
share the other 16 buckets on a log scale,

    bucket(d) = 16 + floor(log(d / 16) / log(128 / 16) * 16),

and every distance from 128 on falls in the last bucket, 31: past max_distance the bias is
flat, which is what lets T5 run at any length.  The log is taken in float32, as both
reference implementations do, so the buckets are theirs exactly.

One table [num_buckets, n_head] serves every layer (T5 computes the bias in its first layer
and passes it down).  It is initialised as transformers' T5PreTrainedModel does:
normal(0, d_model^-0.5).  The bias is added to the attention logits; T5 folds no 1/sqrt(d)
into its scores, posexp does, and the bias is added after that scaling either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from posexp.encodings.base import DistanceBias
from posexp.encodings.registry import EncodingSpec, ModelShape, register, require


def relative_position_bucket(
    distance: torch.Tensor, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """T5's bucket of each distance d = i - j >= 0 (a key at or before its query)."""
    max_exact = num_buckets // 2
    # clamped so that the distances below max_exact, which keep their own bucket, take no
    # log(0); for the others the arithmetic is the reference's, operation for operation
    scaled = distance.float().clamp(min=max_exact) / max_exact
    log_bucket = max_exact + (
        torch.log(scaled) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).long()
    return torch.where(distance < max_exact, distance, log_bucket.clamp(max=num_buckets - 1))


class T5Bias(DistanceBias):
    def __init__(self, n_head: int, d_model: int, num_buckets: int, max_distance: int) -> None:
        super().__init__()
        self.n_head, self.num_buckets, self.max_distance = n_head, num_buckets, max_distance
        self.table = nn.Parameter(torch.empty(num_buckets, n_head))
        nn.init.normal_(self.table, std=d_model**-0.5)

    def distance_bias(self, h: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        bucket = relative_position_bucket(distance, self.num_buckets, self.max_distance)
        return self.table[bucket, h]


@dataclass(frozen=True)
class T5Config:
    num_buckets: int = 32
    max_distance: int = 128  # distances from here on share the last bucket

    def __post_init__(self) -> None:
        require(2 <= self.num_buckets <= 2**16, "num_buckets", "in [2, 65536]", self.num_buckets)
        require(self.num_buckets // 2 < self.max_distance <= 2**30, "max_distance",
                f"above num_buckets // 2 ({self.num_buckets // 2}) and at most 2**30",
                self.max_distance)

    def build(self, shape: ModelShape) -> T5Bias:
        return T5Bias(shape.n_head, shape.d_model, self.num_buckets, self.max_distance)


register(EncodingSpec(
    name="t5", label="T5 bias", order=5, colour="#CC79A7", module=T5Bias, config=T5Config,
    citation="Raffel et al., JMLR 2020, 'Exploring the Limits of Transfer Learning with a "
             "Unified Text-to-Text Transformer', sec. 2.1 (arXiv:1910.10683)",
    summary="a learned score bias per head and distance bucket",
    paper="Raffel et al. 2020", reach="any length",
))
