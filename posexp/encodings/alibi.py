"""ALiBi (Press et al., ICLR 2022): no embedding; head h adds -m_h * (i - j) to its scores.

Slopes form a geometric sequence that starts at 2^(-8/n) and has that same ratio, for n
heads a power of two: 8 heads give 1/2, 1/4, ..., 1/256.  For other head counts the paper
takes the slopes of the nearest smaller power of two, 2^k, and adds every other slope of
the sequence for 2^(k+1) heads until there are n.  (Some write-ups print the first slope as
2^(-8/i); that is wrong.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posexp.encodings.base import DistanceBias
from posexp.encodings.registry import EncodingSpec, ModelShape, register


def _geometric(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)
    return [start ** (i + 1) for i in range(n)]


def alibi_slopes(n_head: int) -> list[float]:
    if n_head < 1:
        raise ValueError(f"ALiBi needs at least one head, got {n_head}")
    if math.log2(n_head).is_integer():
        return _geometric(n_head)
    closest = 2 ** math.floor(math.log2(n_head))
    return _geometric(closest) + _geometric(2 * closest)[0::2][: n_head - closest]


class ALiBi(DistanceBias):
    # flash-attn adds -m_h * |i - j| from the slopes alone
    bias_kernels = ("sdpa", "flex", "flash")

    def __init__(self, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_head)), persistent=False)

    def distance_bias(self, h: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        return -self.slopes[h] * distance

    def attention_slopes(self) -> torch.Tensor:
        return self.slopes


@dataclass(frozen=True)
class ALiBiConfig:
    def build(self, shape: ModelShape) -> ALiBi:
        return ALiBi(shape.n_head)


register(EncodingSpec(
    name="alibi", label="ALiBi", order=4, colour="#D55E00", module=ALiBi, config=ALiBiConfig,
    citation="Press et al., ICLR 2022, 'Train Short, Test Long: Attention with Linear Biases "
             "Enables Input Length Extrapolation' (arXiv:2108.12409)",
    summary="adds \u2212m_h·(i\u2212j) to the attention scores of head h",
    paper="Press et al. 2022", reach="any length",
))
