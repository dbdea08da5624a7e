"""FoX, forgetting attention (Lin et al., ICLR 2025, "Forgetting Transformer: Softmax
Attention with a Forget Gate"): no position signal at all; each head forgets at a rate it
reads from the text.

Head h of layer l computes from that layer's input x_t (after the layer's norm) a forget gate

    f_t = sigmoid(w_h . x_t + b_h),

and adds to the score of query i and key j <= i

    D_ij = sum_{k = j+1 .. i} log f_k = c_i - c_j,      c_i = sum_{k <= i} log f_k,

0 on the diagonal.  With every gate at 1 it is NoPE; with a constant gate f it is ALiBi's
bias of slope -log f.  The logits are taken to float32 before the log-sigmoid and the
cumulative sum, as the reference code does (zhixuan-lin/forgetting-transformer, ops and
``ForgettingAttentionLayer`` with ``fgate_type="full"``); at 64k tokens c_i reaches about
-4.5e4, where float32 resolves differences of 4e-3.

Initialisation, as the reference code's: the gate's projection is an nn.Linear(d_model,
n_head) drawn as the model draws its linears (gpt2: N(0, 0.02); torch: nn.Linear's
default), and its bias starts at 0 (``bias_init``; the reference zeroes every linear bias),
so every gate starts near sigmoid(0) = 1/2: a bias of about -0.69 a token of distance at the
first step.  x-transformers' ``DataDependentAlibi`` starts the bias at 5 instead (f = 0.993).
The weights are matrices (weight decay, as every linear's), the biases vectors (none).

The bias depends on the batch: ``at_layer`` binds one layer's c to the model's input, and
the bound bias is what posexp/attention.py applies.  On SDPA it is its ``key_bias`` -c_j
(c_i is one constant per query, which softmax ignores), carried in one more dimension of the
keys, so the causal kernel runs with no mask; on CUDA, FlexAttention's score_mod over the
captured c.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posexp.encodings.base import PositionalEncoding, ScoreBias, ScoreMod
from posexp.encodings.registry import EncodingSpec, ModelShape, register, require


class ForgetBias(ScoreBias):
    """One layer's forget-gate bias over one batch: c [batch, n_head, seq] float32, the
    cumulative log forget gates.  A plain object, not a module: one is made per layer and
    forward pass, inside compiled graphs too."""

    bias_kernels = ("sdpa", "flex")
    batched = True

    def __init__(self, cumulative: torch.Tensor) -> None:
        self.cumulative = cumulative

    def score_bias(
        self, layer: int, q_start: int, q_len: int, k_len: int, device: torch.device
    ) -> torch.Tensor:
        """[batch, n_head, q_len, k_len]: c_i - c_j, -inf on keys after their query."""
        c = self.cumulative
        rows = torch.arange(q_start, q_start + q_len, device=device)
        bias = c[:, :, q_start:q_start + q_len, None] - c[:, :, None, :k_len]
        return bias.masked_fill(rows[:, None] < torch.arange(k_len, device=device), -math.inf)

    def key_bias(self) -> torch.Tensor:
        """-c_j: c_i is the same for every key of query i, and softmax ignores it."""
        return -self.cumulative

    def position_bias(self, layer: int, positions: torch.Tensor) -> torch.Tensor:
        """FoX reads no positions: at any, its bias over the sequence."""
        seq_len = positions.shape[1]
        return self.score_bias(layer, 0, seq_len, seq_len, positions.device)

    def score_mod(self, layer: int) -> ScoreMod:
        c = self.cumulative

        def forget(score, b, h, q_idx, kv_idx):
            return score + c[b, h, q_idx] - c[b, h, kv_idx]

        return forget


class ForgetGates(nn.Module):
    """One layer's gates: weight [n_head, d_model], bias [n_head].  Plain parameters, so
    that the model's initialisation of its own linears leaves the bias at bias_init."""

    def __init__(self, d_model: int, n_head: int, init: str, bias_init: float) -> None:
        super().__init__()
        linear = nn.Linear(d_model, n_head)  # torch's default draw, kept under init=torch
        weight = linear.weight.detach()
        if init == "gpt2":
            nn.init.normal_(weight, std=0.02)
        self.weight = nn.Parameter(weight.clone())
        self.bias = nn.Parameter(torch.full((n_head,), bias_init))

    def cumulative(self, x: torch.Tensor) -> torch.Tensor:
        """c [batch, n_head, seq] for the layer's input x [batch, seq, d_model]."""
        logits = F.linear(x, self.weight, self.bias)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # float32 at least
        return F.logsigmoid(logits).transpose(1, 2).cumsum(dim=-1)


class ForgettingAttention(PositionalEncoding):
    bias_kernels = ("sdpa", "flex")

    def __init__(self, shape: ModelShape, bias_init: float) -> None:
        super().__init__()
        self.n_head = shape.n_head
        self.gates = nn.ModuleList(ForgetGates(shape.d_model, shape.n_head, shape.init,
                                               bias_init) for _ in range(shape.n_layer))

    def at_layer(self, layer: int, x: torch.Tensor) -> ForgetBias:
        return ForgetBias(self.gates[layer].cumulative(x))


@dataclass(frozen=True)
class FoxConfig:
    # b_h's start: 0, the reference code's (every gate near 1/2); x-transformers starts at 5
    bias_init: float = 0.0

    def __post_init__(self) -> None:
        require(math.isfinite(self.bias_init) and abs(self.bias_init) <= 30.0, "bias_init",
                "a number in [-30, 30] (a gate of sigmoid(bias_init) at the start)",
                self.bias_init)

    def build(self, shape: ModelShape) -> ForgettingAttention:
        return ForgettingAttention(shape, self.bias_init)


register(EncodingSpec(
    name="fox", label="FoX", order=11, colour="#CC6677",
    module=ForgettingAttention, config=FoxConfig, reads_positions=False,
    citation="Lin et al., ICLR 2025, 'Forgetting Transformer: Softmax Attention with a Forget "
             "Gate' (openreview q2Lnyegkr8); reference code zhixuan-lin/forgetting-transformer",
    summary="forgetting attention: each head adds the log forget gates, read from the "
            "text, between key and query to its scores",
    paper="Lin et al. 2025", reach="any length",
))
