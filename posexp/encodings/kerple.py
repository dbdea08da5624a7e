"""KERPLE (Chi et al., NeurIPS 2022): a conditionally positive definite kernel of |m - n| as
the score bias, with two learned positive parameters per head.

    log:    b_h(d) = -r1_h * log(1 + r2_h * d)       r1, r2 > 0
    power:  b_h(d) = -r1_h * d^r2_h                  r1 > 0, 0 < r2 <= 2

d = |m - n|, the distance from a query back to a key.  Initialisation and constraint are those
of the paper's code (github.com/chijames/KERPLE, megatron/mpu/layers.py, ParallelKerpleLog
and ParallelKerplePower): log: r1 ~ U(0, 2), r2 ~ U(0, 1); power: r1 ~ U(0, 1),
r2 ~ U(0, 2).  The code clamps the stored values in place before every use, to at least 1e-2
(and r2 of the power kernel to at most 2), so the gradient is taken at the clamped value and
a parameter pushed below the floor comes back to it.  posexp clamps at the start of every
forward pass, which is the same: within a pass the code's later clamps change nothing.  One
module serves every layer, as the paper's model passes its single KERPLE module to all of
them (gpt2_model.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from posexp.encodings.base import DistanceBias
from posexp.encodings.registry import EncodingSpec, ModelShape, register

EPS = 1e-2  # the official code's floor on r1 and r2


class Kerple(DistanceBias):
    def __init__(self, n_head: int, kernel: str) -> None:
        super().__init__()
        if kernel not in ("log", "power"):
            raise ValueError(f"KERPLE's kernel is log or power, got {kernel!r}")
        self.n_head, self.kernel = n_head, kernel
        # U(0, 2) for the log kernel's r1 and the power kernel's r2, U(0, 1) for the others
        self.r1 = nn.Parameter(torch.rand(n_head) * (2 if kernel == "log" else 1))
        self.r2 = nn.Parameter(torch.rand(n_head) * (1 if kernel == "log" else 2))

        _keep_constrain_eager()

    def constrain(self) -> None:
        """Clamp the stored r1 and r2 into their ranges, as the paper's code does at every
        forward (through .data: not a step autograd records)."""
        self.r1.data.clamp_(min=EPS)
        self.r2.data.clamp_(min=EPS, max=2.0 if self.kernel == "power" else None)

    def distance_bias(self, h: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        if self.kernel == "log":
            return -self.r1[h] * torch.log1p(self.r2[h] * distance)
        return -self.r1[h] * distance.float() ** self.r2[h]


@functools.cache
def _keep_constrain_eager() -> None:
    """Kerple.constrain runs eager, outside any compiled graph: compiled, the clamp becomes
    an in-place update of a tensor that the backward has saved; eager and through .data,
    autograd never sees it.  Applied when the first KERPLE model is built, not at import:
    torch.compiler.disable imports dynamo, seconds that every posexp process importing the
    encodings would pay (measured: 1.5-3.5 s a process)."""
    Kerple.constrain = torch.compiler.disable(Kerple.constrain)


@dataclass(frozen=True)
class KerpleLogConfig:
    def build(self, shape: ModelShape) -> Kerple:
        return Kerple(shape.n_head, "log")


@dataclass(frozen=True)
class KerplePowerConfig:
    def build(self, shape: ModelShape) -> Kerple:
        return Kerple(shape.n_head, "power")


CITATION = ("Chi et al., NeurIPS 2022, 'KERPLE: Kernelized Relative Positional Embedding for "
            "Length Extrapolation' (arXiv:2205.09921)")
register(EncodingSpec(
    name="kerple_log", label="KERPLE (log)", order=6, colour="#56B4E9", module=Kerple,
    config=KerpleLogConfig, citation=CITATION,
    summary="a learned score bias \u2212r₁·log(1 + r₂·(i\u2212j))",
    paper="Chi et al. 2022", reach="any length",
))
register(EncodingSpec(
    name="kerple_power", label="KERPLE (power)", order=7, colour="#882255", module=Kerple,
    config=KerplePowerConfig, citation=CITATION,
    summary="a learned score bias \u2212r₁·(i\u2212j)^r₂",
    paper="Chi et al. 2022", reach="any length",
))
