"""Learned absolute positions (BERT, GPT-2): a trained row per position, added to embeddings.

The table has ``max_positions`` rows and nothing past them.  The model refuses longer
inputs; the evaluator reports those lengths as not applicable instead of clamping.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from posexp.encodings.base import PositionalEncoding
from posexp.encodings.registry import EncodingSpec, ModelShape, register, require


class LearnedPositions(PositionalEncoding):
    def __init__(self, max_positions: int, d_model: int, std: float | None = 0.02) -> None:
        super().__init__()
        self.max_positions = max_positions
        self.table = nn.Embedding(max_positions, d_model)  # N(0, 1): PyTorch's default
        if std is not None:  # as the token embeddings start (model.init)
            nn.init.normal_(self.table.weight, std=std)

    def embedding(self, seq_len: int, device: torch.device) -> torch.Tensor:
        if seq_len > self.max_positions:
            raise ValueError(
                f"learned positions have {self.max_positions} rows; got {seq_len} positions"
            )
        return self.table.weight[:seq_len]


@dataclass(frozen=True)
class LearnedConfig:
    max_positions: int  # encoding.max_positions: rows in the table (default train.seq_len)

    def __post_init__(self) -> None:
        require(self.max_positions > 0, "max_positions", "positive", self.max_positions)

    def build(self, shape: ModelShape) -> LearnedPositions:
        return LearnedPositions(self.max_positions, shape.d_model,
                                0.02 if shape.init == "gpt2" else None)


register(EncodingSpec(
    name="learned", label="learned", order=1, colour="#E69F00",
    module=LearnedPositions, config=LearnedConfig,
    position_table=True,
    citation="Devlin et al., NAACL 2019 (BERT); Radford et al. 2019 (GPT-2): a trained "
             "table of absolute positions",
    summary="a trained table of positions, added to the token embeddings",
    paper="Devlin et al. 2019; Radford et al. 2019", reach="no: reported as n/a",
))
