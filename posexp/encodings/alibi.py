"""ALiBi (Press et al., ICLR 2022): no embedding; head h adds -m_h * (i - j) to its scores.

Slopes form a geometric sequence that starts at 2^(-8/n) and has that same ratio, for n
heads a power of two: 8 heads give 1/2, 1/4, ..., 1/256.  For other head counts the paper
takes the slopes of the nearest smaller power of two, 2^k, and adds every other slope of
the sequence for 2^(k+1) heads until there are n.  (Some write-ups print the first slope as
2^(-8/i); that is wrong.)
"""

import math

import torch

from posexp.encodings.base import PositionalEncoding


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


def alibi_bias(slopes: torch.Tensor, q_start: int, q_len: int, k_len: int) -> torch.Tensor:
    """[n_head, q_len, k_len] float32 bias for queries q_start.. and keys 0..k_len-1.

    -m_h * (i - j) where key j is at or before query i, and -inf after it (the causal mask).
    """
    i = torch.arange(q_start, q_start + q_len, device=slopes.device)[:, None]
    j = torch.arange(k_len, device=slopes.device)[None, :]
    distance = (i - j).float()
    bias = -slopes.float()[:, None, None] * distance
    return bias.masked_fill(j > i, float("-inf"))


class ALiBi(PositionalEncoding):
    def __init__(self, n_head: int) -> None:
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_head)), persistent=False)

    def attention_slopes(self) -> torch.Tensor:
        return self.slopes
