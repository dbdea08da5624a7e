"""Partial rotary embeddings: RoPE on a fraction p of each head's frequency pairs, the other
pairs passed through unrotated (a position-free channel of the head).  Two variants differ
in which pairs they keep:

* ``keep: highest`` -- p-RoPE (Barbero et al., ICLR 2025, "Round and Round We Go! What makes
  Rotary Positional Encodings useful?"): RoPE's own frequencies theta_i = base^(-2i/d_head)
  for the first round(p * d_head/2) pairs, the highest; the lowest-frequency pairs, which
  turn too slowly to tell positions apart and act as semantic channels, are dropped.
* ``keep: first`` -- GPT-J's partial rotary (x-transformers ``rotary_emb_dim``, litgpt
  ``rotary_percentage``, GPT-NeoX ``rotary_pct``): the first r = 2 * round(p * d_head/2)
  dimensions rotated with frequencies base^(-2i/r) -- RoPE's whole spectrum, over fewer
  dimensions -- and the rest of the head unrotated.

Both in posexp's rotate-half layout (pair i is dimensions i and i + d_head/2, as rope.py):
an unrotated pair has cos 1 and sin 0, so at p = 1 p-RoPE is RoPE and at p = 0 either
variant is NoPE, bit for bit.  The layout of x-transformers (pairs 2i, 2i + 1 within the
first r dimensions) is the same rotation up to a fixed permutation of a head's dimensions,
which the trained projections absorb.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posexp.encodings.base import PositionalEncoding, Rotation
from posexp.encodings.registry import EncodingSpec, ModelShape, register, require
from posexp.encodings.rope_scaling import plain_inv_freq

KEEPS = ("highest", "first")


def rotated_pairs(fraction: float, d_head: int) -> int:
    """The number of frequency pairs a fraction p of a head rotates: p * d_head/2, to the
    nearest whole pair (half up)."""
    return int(fraction * (d_head // 2) + 0.5)


def partial_inv_freq(d_head: int, base: float, pairs: int, keep: str) -> torch.Tensor:
    """float64 [pairs]: the inverse frequencies of the rotated pairs."""
    if keep == "highest":
        return plain_inv_freq(d_head, base)[:pairs]
    return plain_inv_freq(2 * pairs, base) if pairs else torch.zeros(0, dtype=torch.float64)


class PartialRotary(PositionalEncoding):
    def __init__(self, d_head: int, base: float, fraction: float, keep: str) -> None:
        super().__init__()
        if d_head % 2:
            raise ValueError(f"partial_rope needs an even head dimension, got {d_head}")
        self.d_head, self.base, self.keep = d_head, base, keep
        self.pairs = rotated_pairs(fraction, d_head)
        self.register_buffer("cos", torch.empty(0, d_head), persistent=False)
        self.register_buffer("sin", torch.empty(0, d_head), persistent=False)

    def rotary(self, seq_len: int, device: torch.device) -> Rotation:
        if self.cos.shape[0] < seq_len or self.cos.device != device:
            half = self.d_head // 2
            # rope.py's rounding: inv_freq to float32 (as transformers keeps it), angles in
            # float64; the unrotated pairs turn by 0
            inv_freq = torch.zeros(half, dtype=torch.float64)
            inv_freq[:self.pairs] = partial_inv_freq(self.d_head, self.base, self.pairs,
                                                     self.keep)
            positions = torch.arange(seq_len, device=device, dtype=torch.float64)
            angles = positions[:, None] * inv_freq.float().to(device, torch.float64)
            angles = torch.cat((angles, angles), dim=-1)
            self.cos, self.sin = angles.cos().float(), angles.sin().float()
        return self.cos[:seq_len], self.sin[:seq_len]


@dataclass(frozen=True)
class PartialRopeConfig:
    base: float = 10000.0  # encoding.base: theta_i = base^(-2i/d) of the rotated pairs
    fraction: float = 0.75  # p: the share of each head's frequency pairs rotated
    keep: str = "highest"  # highest (p-RoPE, Barbero et al.) | first (GPT-J's partial rotary)

    def __post_init__(self) -> None:
        require(self.base > 1.0, "base", "above 1", self.base)
        require(0.0 <= self.fraction <= 1.0, "fraction", "in [0, 1]", self.fraction)
        require(self.keep in KEEPS, "keep", " or ".join(KEEPS), self.keep)

    def build(self, shape: ModelShape) -> PartialRotary:
        return PartialRotary(shape.d_head, self.base, self.fraction, self.keep)


register(EncodingSpec(
    name="partial_rope", label="partial RoPE", order=10, colour="#DDCC77",
    module=PartialRotary, config=PartialRopeConfig,
    citation="Barbero et al., ICLR 2025, 'Round and Round We Go! What makes Rotary "
             "Positional Encodings useful?' (arXiv:2410.06205); the first-dimensions variant: "
             "Wang and Komatsuzaki 2021, GPT-J",
    summary="RoPE on a fraction of each head's frequency pairs: the highest (p-RoPE) or "
            "the first dimensions (GPT-J's)",
    paper="Barbero et al. 2025", reach="any length",
))
