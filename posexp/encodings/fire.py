"""FIRE (Li et al., ICLR 2024, "Functional Interpolation for Relative Positions Improves Long
Context Transformers"): the score bias is a small MLP of a normalised log distance,

    b(i, j) = f_theta( psi(i - j) / psi(max(L, i)) ),     psi(x) = log(c * x + 1),

f_theta: 1 -> hidden (32) -> ReLU -> n_head, one output per head.  Dividing by psi(max(L, i))
is the "progressive interpolation": the MLP's input stays in [0, 1] however long the
sequence.  The threshold L keeps short prefixes from being stretched: for i <= L the
normaliser is fixed and the bias is a function of i - j alone (so a model trained on windows
shorter than L sees inputs up to psi(L_train)/psi(L) only, and the rest of [0, 1] first at
evaluation).  c and L are learned.  All of it follows the PyTorch listing in the paper's
appendix: c starts at 0.1; L = |L_multiplier * init_L|, L_multiplier a learned scalar that
starts at 1, init_L 512 in the listing, at or below the lengths the paper trains at, so that
the MLP's input covers [0, 1] in training.  configs/encoding/fire.yaml starts it at the run's
own training length (train.seq_len), which keeps that so at any L: at L = 128 a start at 512
left every input above psi(127)/psi(512) = 0.66 unseen until evaluation.  |c * x| inside
the logs; 1e-6 added to the normaliser; the MLP's layers start as torch.nn.Linear's do,
U(-1/sqrt(fan_in), 1/sqrt(fan_in)).

Each layer has its own MLP, c and L.  The bias depends on i through the normaliser, so it is
built block by block of queries, and within a block in chunks of rows, so that the MLP's
hidden activations stay bounded at any length.  It has no FlexAttention form (an MLP per
score): it runs on the blocked SDPA path everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posexp.encodings.base import PositionalEncoding
from posexp.encodings.registry import EncodingSpec, ModelShape, register, require

EPS = 1e-6  # added to the normaliser, as the paper's listing does
HIDDEN_ELEMENTS = 1 << 24  # floats of MLP activations per chunk of rows: 64 MiB


def _linear_params(fan_in: int, fan_out: int) -> tuple[nn.Parameter, nn.Parameter]:
    bound = 1 / math.sqrt(fan_in)  # torch.nn.Linear's default initialisation
    weight = nn.Parameter(torch.empty(fan_out, fan_in).uniform_(-bound, bound))
    return weight, nn.Parameter(torch.empty(fan_out).uniform_(-bound, bound))


class FireLayer(nn.Module):
    """One layer's FIRE: the MLP, c and L.  Plain parameters, so that the model's own
    initialisation (of every nn.Linear) leaves the paper's alone."""

    def __init__(self, n_head: int, hidden: int, init_c: float, init_L: float) -> None:
        super().__init__()
        self.w1, self.b1 = _linear_params(1, hidden)
        self.w2, self.b2 = _linear_params(hidden, n_head)
        self.c = nn.Parameter(torch.tensor(init_c))
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))
        self.init_L = init_L

    def normalized_distance(self, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        """psi(i - j) / psi(max(L, i)) for query positions i and key positions j <= i."""
        threshold = (self.L_multiplier * self.init_L).abs()
        normaliser = torch.maximum(i.float(), threshold)
        distance = torch.log((self.c * (i - j)).abs() + 1)
        return distance / (torch.log((self.c * normaliser).abs() + 1) + EPS)

    def forward(self, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        """[n_head, len(i), len(j)] bias for query positions i [q, 1] and key positions j [k];
        [batch, n_head, q, k] for i [batch, q, 1] and j [batch, 1, k]."""
        # ReLU in place: the hidden layer is the largest tensor FIRE makes
        hidden = F.linear(self.normalized_distance(i, j)[..., None], self.w1, self.b1).relu_()
        # heads before the (query, key) dimensions, also with a batch in front
        return F.linear(hidden, self.w2, self.b2).movedim(-1, -3)


class Fire(PositionalEncoding):
    bias_kernels = ("sdpa",)

    def __init__(self, n_head: int, n_layer: int, hidden: int, init_c: float,
                 init_L: float) -> None:
        super().__init__()
        self.hidden = hidden
        self.layers = nn.ModuleList(
            FireLayer(n_head, hidden, init_c, init_L) for _ in range(n_layer))

    def score_bias(
        self, layer: int, q_start: int, q_len: int, k_len: int, device: torch.device
    ) -> torch.Tensor:
        j = torch.arange(k_len, device=device)
        rows = max(1, HIDDEN_ELEMENTS // (self.hidden * k_len))
        chunks = []
        for start in range(q_start, q_start + q_len, rows):
            i = torch.arange(start, min(start + rows, q_start + q_len), device=device)[:, None]
            chunks.append(self.layers[layer](i, j).float().masked_fill(j > i, float("-inf")))
        return chunks[0] if len(chunks) == 1 else torch.cat(chunks, dim=1)


    def position_bias(self, layer: int, positions: torch.Tensor) -> torch.Tensor:
        i, j = positions[:, :, None], positions[:, None, :]
        return self.layers[layer](i, j).float().masked_fill((j > i)[:, None], float("-inf"))


@dataclass(frozen=True)
class FireConfig:
    hidden: int = 32  # width of the MLP's hidden layer
    init_c: float = 0.1  # c of psi(x) = log(c x + 1), learned from here
    # threshold L of the normaliser, learned from here (as a multiplier): the listing's 512;
    # configs/encoding/fire.yaml gives the run's training length
    init_L: float = 512.0

    def __post_init__(self) -> None:
        require(1 <= self.hidden <= 4096, "hidden", "in [1, 4096]", self.hidden)
        require(0 < self.init_c < math.inf, "init_c", "positive", self.init_c)
        require(0 < self.init_L < math.inf, "init_L", "positive", self.init_L)

    def build(self, shape: ModelShape) -> Fire:
        return Fire(shape.n_head, shape.n_layer, self.hidden, self.init_c, self.init_L)


register(EncodingSpec(
    name="fire", label="FIRE", order=8, colour="#999933", module=Fire, config=FireConfig,
    citation="Li et al., ICLR 2024, 'Functional Interpolation for Relative Positions Improves "
             "Long Context Transformers' (arXiv:2310.04418)",
    summary="a score bias from an MLP of a normalised log distance",
    paper="Li et al. 2024", reach="any length",
))
