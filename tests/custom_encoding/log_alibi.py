"""A worked example of an encoding added from outside posexp (docs/encodings.md):
ALiBi's slopes on a logarithmic distance, b_h(i - j) = -m_h * log(1 + (i - j)).  It is a
toy, not a published encoding; it shows the whole interface in one file."""

from dataclasses import dataclass

import torch

from posexp.encodings.alibi import alibi_slopes
from posexp.encodings.base import DistanceBias
from posexp.encodings.registry import EncodingSpec, ModelShape, register


class LogALiBi(DistanceBias):  # a bias of i - j alone: posexp's blocked kernels apply it
    def __init__(self, n_head: int, scale: float) -> None:
        super().__init__()
        self.n_head = n_head
        slopes = torch.tensor(alibi_slopes(n_head)) * scale
        self.register_buffer("slopes", slopes, persistent=False)

    def distance_bias(self, h: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        return -self.slopes[h] * torch.log1p(distance.float())


@dataclass(frozen=True)
class LogALiBiConfig:  # its hyperparameters (encoding.hparams.*), with their defaults
    scale: float = 1.0

    def build(self, shape: ModelShape) -> LogALiBi:
        return LogALiBi(shape.n_head, self.scale)


register(EncodingSpec(
    name="log_alibi", label="log-ALiBi", order=100, colour="#44AA99", module=LogALiBi,
    config=LogALiBiConfig, citation="posexp's docs: a worked example, not a paper",
))
