"""Rotary position embeddings (Su et al., RoFormer), in the rotate-half layout.

Layout: dimension j of a head is paired with j + d_head/2 (GPT-NeoX / LLaMA), not with its
neighbour j + 1 (the interleaved layout of the RoFormer paper and GPT-J).  The two are the
same rotation up to a fixed permutation of dimensions.  Pair i turns by pos * theta_i with
theta_i = base^(-2i/d_head), so q_m . k_n depends only on m - n.

cos and sin are computed once per forward pass (not per layer) in float32 and cached; the
cache grows when a longer input arrives.

A context-extension scaling (``rope_scaling.py``: PI, NTK-aware, dynamic NTK, YaRN, Llama 3)
can be switched on or off at any time with ``set_scaling``, without touching the weights:
evaluation scores a trained run with it, and a fine-tune trains with it.  Self-Extend and
ReRoPE keep the frequencies and give, at evaluation, the rotations of the keys beyond their
window (``extension``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posexp.encodings.base import Extension, PositionalEncoding, Rotation
from posexp.encodings.registry import EncodingSpec, ModelShape, register, require
from posexp.encodings.rope_scaling import far_positions, rope_frequencies
from posexp.scaling import RopeScaling


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., seq, d_head] by cos/sin [seq, d_head]; the math runs in float32 at
    least (a float64 model's in float64, with the float32 tables)."""
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    return (xf * cos + rotate_half(xf) * sin).to(x.dtype)


class RotaryPositions(PositionalEncoding):
    rope_scalable = True

    def __init__(
        self,
        d_head: int,
        base: float = 10000.0,
        scaling: RopeScaling | None = None,
        original_len: int | None = None,
    ) -> None:
        super().__init__()
        if d_head % 2:
            raise ValueError(f"rope needs an even head dimension, got {d_head}")
        self.d_head, self.base = d_head, base
        self.set_scaling(scaling, original_len)

    def set_scaling(self, scaling: RopeScaling | None, original_len: int | None = None) -> None:
        """Scale RoPE for context extension (None: plain RoPE).

        original_len is the length the weights were first trained at (train.seq_len; for a
        fine-tune, its parent's), the L of every formula in rope_scaling.py.
        """
        # raises here, not at the first forward, on a scaling that cannot be computed
        rope_frequencies(self.d_head, self.base, scaling, original_len, original_len)
        self.scaling, self.original_len = scaling, original_len
        self.register_buffer("cos", torch.empty(0, self.d_head), persistent=False)
        self.register_buffer("sin", torch.empty(0, self.d_head), persistent=False)
        # The window length the cached table was built for, when its frequencies depend on it
        # (dynamic NTK above the training length); None when any prefix of it is valid.
        self._cached_window: int | None = None

    def rotary(self, seq_len: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        follows = self.scaling is not None and self.scaling.follows_window
        window = seq_len if follows and seq_len > self.original_len else None
        stale = self.cos.shape[0] < seq_len or self.cos.device != device
        if stale or window != self._cached_window:
            inv_freq, scale = rope_frequencies(
                self.d_head, self.base, self.scaling, self.original_len, seq_len
            )
            positions = torch.arange(seq_len, device=device, dtype=torch.float64)
            self.cos, self.sin = _table(positions, inv_freq, scale)
            self._cached_window = window
        return self.cos[:seq_len], self.sin[:seq_len]

    def extension(self, seq_len: int, device: torch.device) -> Extension | None:
        far = far_positions(self.scaling, self.original_len, seq_len)
        if far is None:
            return None
        inv_freq, _ = rope_frequencies(self.d_head, self.base)
        q_scale = None if far.q_scale is None else far.q_scale.to(device)[:, None]
        return Extension(far.window, _table(far.q.to(device), inv_freq),
                         _table(far.k.to(device), inv_freq), q_scale)


def _table(positions: torch.Tensor, inv_freq: torch.Tensor, scale: float = 1.0) -> Rotation:
    """(cos, sin) [len, d_head] float32 at these positions (float64, not necessarily whole).
    inv_freq is rounded to float32 (as transformers keeps it); angles are float64.  YaRN's
    temperature ``scale`` multiplies cos and sin, so q.k by scale^2 (transformers'
    attention_scaling); for every other method it is 1.0, a no-op."""
    angles = positions[:, None] * inv_freq.float().to(positions.device, torch.float64)
    angles = torch.cat((angles, angles), dim=-1)
    return (angles.cos() * scale).float(), (angles.sin() * scale).float()


@dataclass(frozen=True)
class RopeConfig:
    base: float = 10000.0  # encoding.base: theta_i = base^(-2i/d_head)

    def __post_init__(self) -> None:
        require(self.base > 1.0, "base", "above 1", self.base)

    def build(self, shape: ModelShape) -> RotaryPositions:
        return RotaryPositions(shape.d_head, self.base)


register(EncodingSpec(
    name="rope", label="RoPE", order=3, colour="#0072B2", module=RotaryPositions, config=RopeConfig,
    citation="Su et al., Neurocomputing 2024, 'RoFormer: Enhanced Transformer with Rotary "
             "Position Embedding' (arXiv:2104.09864)",
    summary="rotates queries and keys by their positions",
    paper="Su et al. (RoFormer)", reach="any length",
))
