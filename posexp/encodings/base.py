"""What every positional encoding may do, so the model can ask without knowing which it holds.

An encoding can (1) give a vector per position to add to the token embeddings, (2) rotate
queries and keys, and (3) bias the attention scores through per-head slopes.  It also says
how far it can go: ``max_positions`` is ``None`` when any length works.
"""

from __future__ import annotations

import torch
from torch import nn


class PositionalEncoding(nn.Module):
    max_positions: int | None = None
    # Multiplier on the token embeddings, for encodings whose recipe sets one.
    token_scale: float = 1.0

    def embedding(self, seq_len: int, device: torch.device) -> torch.Tensor | None:
        """[seq_len, d_model] to add to the token embeddings, or None."""
        return None

    def rotary(
        self, seq_len: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(cos, sin), each [seq_len, d_head] in float32, shared by every layer; or None."""
        return None

    def attention_slopes(self) -> torch.Tensor | None:
        """[n_head] slopes m_h of the score bias -m_h * (i - j); or None."""
        return None
