"""Rotary position embeddings (Su et al., RoFormer), in the rotate-half layout.

Layout: dimension j of a head is paired with j + d_head/2 (GPT-NeoX / LLaMA), not with its
neighbour j + 1 (the interleaved layout of the RoFormer paper and GPT-J).  The two are the
same rotation up to a fixed permutation of dimensions.  Pair i turns by pos * theta_i with
theta_i = base^(-2i/d_head), so q_m . k_n depends only on m - n.

cos and sin are computed once per forward pass (not per layer) in float32 and cached; the
cache grows when a longer input arrives.
"""

import torch

from posexp.encodings.base import PositionalEncoding


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., seq, d_head] by cos/sin [seq, d_head]; the math runs in float32."""
    xf = x.float()
    return (xf * cos + rotate_half(xf) * sin).to(x.dtype)


class RotaryPositions(PositionalEncoding):
    def __init__(self, d_head: int, base: float = 10000.0) -> None:
        super().__init__()
        if d_head % 2:
            raise ValueError(f"rope needs an even head dimension, got {d_head}")
        self.base = base
        inv_freq = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)
        self.register_buffer("cos", torch.empty(0, d_head), persistent=False)
        self.register_buffer("sin", torch.empty(0, d_head), persistent=False)

    def rotary(self, seq_len: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cos.shape[0] < seq_len or self.cos.device != device:
            positions = torch.arange(seq_len, device=device, dtype=torch.float64)
            angles = positions[:, None] * self.inv_freq.to(device, torch.float64)
            angles = torch.cat((angles, angles), dim=-1)
            self.cos, self.sin = angles.cos().float(), angles.sin().float()
        return self.cos[:seq_len], self.sin[:seq_len]
