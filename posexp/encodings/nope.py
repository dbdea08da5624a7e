"""No positional encoding: the control.  Only the causal mask tells positions apart."""

from __future__ import annotations

from dataclasses import dataclass

from posexp.encodings.base import PositionalEncoding
from posexp.encodings.registry import EncodingSpec, ModelShape, register


class NoPE(PositionalEncoding):
    pass


@dataclass(frozen=True)
class NoPEConfig:
    def build(self, shape: ModelShape) -> NoPE:
        return NoPE()


register(EncodingSpec(
    name="nope", label="NoPE", order=0, colour="#000000",
    module=NoPE, config=NoPEConfig, reads_positions=False,
    citation="Haviv et al., Findings of EMNLP 2022, 'Transformer Language Models without "
             "Positional Encodings Still Learn Positional Information' (arXiv:2203.16634)",
    summary="no position signal; order leaks only through the causal mask",
    paper="Haviv et al. 2022", reach="any length",
))
