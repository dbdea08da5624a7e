"""xPos (Sun et al., ACL 2023, "A Length-Extrapolatable Transformer"): RoPE whose rotation
also scales queries up and keys down by position, so that attention decays with distance.

Pair i of a head (i = 0 .. d/2 - 1) has the scale zeta_i = (2i/d + gamma) / (1 + gamma),
gamma = 0.4.  The query at position n is rotated as RoPE does and multiplied by
zeta_i^(n/B), the key at position m is rotated and multiplied by zeta_i^(-m/B), B = 512
(scale_base), so q_n . k_m carries zeta_i^((n - m)/B): it depends on n - m only and, as
zeta_i < 1, shrinks with distance, faster for the low-frequency pairs (small i).  With
gamma -> infinity every zeta_i -> 1 and xPos is RoPE.

As torchscale's XPOS (the paper's code), the exponents use positions centred on the window,
n - ceil(T/2) for a window of T tokens: the shift cancels in q . k, and it halves the largest
exponent, which would otherwise leave float32 within a few thousand tokens.  Even centred,
zeta_0^(T/2B) leaves float32's range near T = 68k with the defaults; ``max_positions`` is
where the largest scale, or its inverse, would pass 2^120, and the evaluator reports longer
windows as not applicable.

Layout: torchscale interleaves the pairs (rotate_every_two); posexp keeps RoPE's rotate-half
layout (rope.py), pair i being dimensions i and i + d/2, both scaled by zeta_i.  The two are
the same up to a fixed permutation of the head's dimensions.  The tables are computed in
float64 and stored in float32, as RoPE's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posexp.encodings.base import PositionalEncoding, Rotation
from posexp.encodings.registry import EncodingSpec, ModelShape, register, require
from posexp.encodings.rope_scaling import plain_inv_freq

LARGEST_SCALE_LOG = 120 * math.log(2)  # scales within [2^-120, 2^120]: float32 with room
NO_LIMIT = 2.0**62  # a window past this many positions is no limit (and keeps to an int64)


class XPos(PositionalEncoding):
    def __init__(self, d_head: int, base: float, gamma: float, scale_base: float) -> None:
        super().__init__()
        if d_head % 2:
            raise ValueError(f"xpos needs an even head dimension, got {d_head}")
        self.d_head, self.base, self.gamma, self.scale_base = d_head, base, gamma, scale_base
        # the widest centred window whose largest exponent, ceil(T/2)/B * log(1/zeta_0),
        # stays within LARGEST_SCALE_LOG; none when zeta_0 rounds to 1 (a gamma so large
        # that xPos is RoPE) or the window is past any length (a huge B): the division and
        # the floor would otherwise raise, where a config should get one line or a run
        log_inv_zeta0 = math.log((1 + gamma) / gamma)
        half = LARGEST_SCALE_LOG * scale_base / log_inv_zeta0 if log_inv_zeta0 > 0 else math.inf
        self.max_positions = 2 * math.floor(half) if half < NO_LIMIT else None
        self._cached: tuple[int, torch.device, tuple[Rotation, Rotation]] | None = None

    def scale(self, positions: torch.Tensor) -> torch.Tensor:
        """zeta^(n/B) [len(positions), d_head] in float64 for (centred) positions n."""
        zeta = (torch.arange(0, self.d_head, 2, dtype=torch.float64) / self.d_head
                + self.gamma) / (1 + self.gamma)
        zeta = torch.cat((zeta, zeta)).to(positions.device)
        return zeta ** (positions.double()[:, None] / self.scale_base)

    def rotary_qk(self, seq_len: int, device: torch.device) -> tuple[Rotation, Rotation]:
        if self.max_positions is not None and seq_len > self.max_positions:
            raise ValueError(f"xpos's scale leaves float32 past {self.max_positions} "
                             f"positions; got {seq_len}")
        if self._cached is not None and self._cached[:2] == (seq_len, device):
            return self._cached[2]
        positions = torch.arange(seq_len, device=device, dtype=torch.float64)
        # inv_freq rounded to float32 as rope.py keeps it, so that xPos at zeta = 1 is RoPE
        inv_freq = plain_inv_freq(self.d_head, self.base).float().to(device, torch.float64)
        angles = positions[:, None] * inv_freq
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos(), angles.sin()
        scale = self.scale(positions - (seq_len + 1) // 2)
        tables = (((cos * scale).float(), (sin * scale).float()),
                  ((cos / scale).float(), (sin / scale).float()))
        self._cached = (seq_len, device, tables)
        return tables


@dataclass(frozen=True)
class XPosConfig:
    base: float = 10000.0  # encoding.base: the rotation's theta_i = base^(-2i/d_head)
    gamma: float = 0.4  # zeta_i = (2i/d + gamma) / (1 + gamma)
    scale_base: float = 512.0  # B: queries scale by zeta^(n/B), keys by zeta^(-m/B)

    def __post_init__(self) -> None:
        require(self.base > 1.0, "base", "above 1", self.base)
        require(0 < self.gamma < math.inf, "gamma", "positive", self.gamma)
        require(0 < self.scale_base < math.inf, "scale_base", "positive", self.scale_base)

    def build(self, shape: ModelShape) -> XPos:
        return XPos(shape.d_head, self.base, self.gamma, self.scale_base)


register(EncodingSpec(
    name="xpos", label="xPos", order=9, colour="#332288", module=XPos, config=XPosConfig,
    citation="Sun et al., ACL 2023, 'A Length-Extrapolatable Transformer' (arXiv:2212.10554); "
             "torchscale's XPOS",
    summary="RoPE with an exponential decay over distance",
    paper="Sun et al. 2023", reach="to 67,988 tokens",
))
