"""Sinusoidal positions (Vaswani et al. 2017), added to the token embeddings.

PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d)); 10000 is
``encoding.base``, as for RoPE.
Each (sin, cos) pair turns by a fixed angle per step, so PE(pos + k) is a fixed rotation of
PE(pos) and PE(a) . PE(b) = sum_i cos((a - b) * w_i) depends only on a - b.

The sines are added to the token embeddings as they are: under posexp's initialisation policy
(model.init=torch) the tokens start at unit scale, N(0, 1), as the sines are.  With small
token embeddings (model.init=gpt2: std 0.02) the unit-size sines would drown them; the paper
multiplies the token embeddings by sqrt(d_model) before the table is added (``scale_tokens``),
and its code (tensor2tensor) draws them with std d_model^-1/2 (``unit_tokens``), so that they
enter at unit scale.  Other recipes leave the tokens alone and shrink the table instead
(``table_scale``), optionally as a trained scalar (``learn_scale``; x-transformers'
ScaledSinusoidalEmbedding, Hua et al. 2022).  The policy was measured, not guessed:
docs/encodings.md, "Fair baselines".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from posexp.encodings.base import PositionalEncoding
from posexp.encodings.registry import EncodingSpec, ModelShape, register, require


def sinusoidal_table(
    seq_len: int, d_model: int, device: torch.device | None = None, base: float = 10000.0
) -> torch.Tensor:
    """[seq_len, d_model] in float32, sin on even and cos on odd dimensions."""
    two_i = torch.arange(0, d_model, 2, device=device, dtype=torch.float64)
    inv_freq = base ** (-two_i / d_model)
    angles = torch.arange(seq_len, device=device, dtype=torch.float64)[:, None] * inv_freq
    table = torch.empty(seq_len, d_model, device=device, dtype=torch.float64)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles.cos()[:, : d_model // 2]
    return table.float()


class SinusoidalPositions(PositionalEncoding):
    def __init__(self, d_model: int, scale_tokens: bool = False, table_scale: float = 1.0,
                 learn_scale: bool = False, base: float = 10000.0,
                 unit_tokens: bool = False) -> None:
        super().__init__()
        self.d_model, self.base = d_model, base
        self.token_scale = math.sqrt(d_model) if scale_tokens else 1.0
        self.token_std = d_model ** -0.5 if unit_tokens else None
        scale = torch.tensor(float(table_scale))
        if learn_scale:
            self.scale = nn.Parameter(scale)
        else:
            self.register_buffer("scale", scale, persistent=False)
        self.register_buffer("table", torch.empty(0, d_model), persistent=False)

    def embedding(self, seq_len: int, device: torch.device) -> torch.Tensor:
        if self.table.shape[0] < seq_len or self.table.device != device:
            self.table = sinusoidal_table(seq_len, self.d_model, device, self.base)
        return self.table[:seq_len] * self.scale


@dataclass(frozen=True)
class SinusoidalConfig:
    scale_tokens: bool = False  # multiply token embeddings by sqrt(d_model), as Vaswani et al.
    table_scale: float = 1.0  # multiply the sines and cosines by this
    learn_scale: bool = False  # ... as a trained scalar that starts there
    base: float = 10000.0  # encoding.base: the wavelengths run from 2*pi to 2*pi*base
    unit_tokens: bool = False  # token embeddings drawn with std d^-1/2 (tensor2tensor)

    def __post_init__(self) -> None:
        require(self.base > 1.0, "base", "above 1", self.base)
        require(math.isfinite(self.table_scale) and self.table_scale > 0, "table_scale",
                "a positive number", self.table_scale)

    def build(self, shape: ModelShape) -> SinusoidalPositions:
        return SinusoidalPositions(shape.d_model, self.scale_tokens, self.table_scale,
                                   self.learn_scale, self.base, self.unit_tokens)


register(EncodingSpec(
    name="sinusoidal", label="sinusoidal", order=2, colour="#009E73", module=SinusoidalPositions,
    config=SinusoidalConfig,
    citation="Vaswani et al., NeurIPS 2017, 'Attention Is All You Need', sec. 3.5",
    summary="fixed sines and cosines, added to the token embeddings",
    paper="Vaswani et al. 2017", reach="any length",
))
