"""Learned absolute positions (BERT, GPT-2): a trained row per position, added to embeddings.

The table has ``max_positions`` rows and nothing past them.  The model refuses longer
inputs; the evaluator reports those lengths as not applicable instead of clamping.
"""

import torch
from torch import nn

from posexp.encodings.base import PositionalEncoding


class LearnedPositions(PositionalEncoding):
    def __init__(self, max_positions: int, d_model: int) -> None:
        super().__init__()
        self.max_positions = max_positions
        self.table = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def embedding(self, seq_len: int, device: torch.device) -> torch.Tensor:
        if seq_len > self.max_positions:
            raise ValueError(
                f"learned positions have {self.max_positions} rows; got {seq_len} positions"
            )
        return self.table.weight[:seq_len]
