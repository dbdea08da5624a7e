"""What every positional encoding may do, so the model can ask without knowing which it holds.

An encoding can (1) give a vector per position to add to the token embeddings, (2) rotate
queries and keys (the same table for both, or one each), and (3) add a bias to the attention
scores.  It also says how far it can go: ``max_positions`` is ``None`` when any length works.

The score bias comes in the forms the kernels of posexp/attention.py take: ``score_bias``, a
block of it with the causal mask, for SDPA one block of queries at a time (never heads x L x L
at once); ``score_mod``, the same bias as FlexAttention's score function, where it has a
closed form; ``attention_slopes``, ALiBi's slopes for flash-attn.  ``bias_kernels`` lists
which of these an encoding has.  A bias of the distance i - j alone is a ``DistanceBias``:
one block of it serves every block of queries.  A bias that depends on what a layer reads
(FoX's forget gates) is bound to that layer's input by ``at_layer``, and the bias it returns
is ``batched``: one per sequence of the batch.  A bias that depends on the attention logits
themselves (CoPE's positions count gates of q . k) ``reads_scores``: the kernel computes a
block of logits and asks ``contextual_bias`` for the bias to add to it.

At evaluation, a RoPE run scored with Self-Extend or ReRoPE (posexp/scaling.py's ``attention``
methods) also gives an ``Extension``: the keys at least a window back are scored with the
queries and keys rotated at other positions, and the queries may be scaled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

# FlexAttention's score_mod: (score, batch, head, q_idx, kv_idx) -> score
ScoreMod = Callable[..., torch.Tensor]
# (cos, sin), each [seq_len, d_head] in float32
Rotation = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Extension:
    """What a training-free extension changes in attention at evaluation: keys j <= i -
    ``window`` are scored with the queries rotated by ``far_q`` and the keys by ``far_k``
    (Self-Extend, ReRoPE; None: none are), and ``q_scale`` [seq, 1] (or None) multiplies
    every query first (ReRoPE's log n; a temperature, the model's own)."""

    window: int | None = None
    far_q: Rotation | None = None
    far_k: Rotation | None = None
    q_scale: torch.Tensor | None = None


class ScoreBias:
    """A score bias in the forms posexp/attention.py applies.  Every encoding is one (with no
    kernels when it has no bias); FoX's forget gates bound to one layer's input are another."""

    # The kernels that can apply its score bias: "sdpa" (blocked, always), "flex" (it has a
    # score_mod), "flash" (ALiBi's slopes); empty when it has no score bias.
    bias_kernels: tuple[str, ...] = ()
    # Whether its score_bias is [batch, n_head, q_len, k_len], one per sequence (a bias
    # at_layer bound to a layer's input), rather than [n_head, q_len, k_len] for every one.
    batched: bool = False
    # Whether its bias is a function of each block's logits (contextual_bias), not of the
    # positions alone: the kernel then writes the logits out (CoPE).
    reads_scores: bool = False

    def contextual_bias(self, layer: int, q: torch.Tensor, scores: torch.Tensor
                        ) -> torch.Tensor:
        """[batch, n_head, q_len, k_len] bias of layer ``layer`` for a block of queries q
        [batch, n_head, q_len, d_head] whose logits q . k / sqrt(d) are ``scores`` (-inf on
        keys after their query), where ``reads_scores``."""
        raise NotImplementedError(f"{type(self).__name__} reads no scores")

    def score_bias(
        self, layer: int, q_start: int, q_len: int, k_len: int, device: torch.device
    ) -> torch.Tensor:
        """[n_head, q_len, k_len] float32 bias of layer ``layer`` for queries q_start.. and
        keys 0..k_len-1, -inf on keys after their query (the causal mask): SDPA's attn_mask
        ([batch, n_head, q_len, k_len] when ``batched``).  Differentiable in the encoding's
        parameters."""
        raise NotImplementedError(f"{type(self).__name__} has no score bias")

    def score_mod(self, layer: int) -> ScoreMod:
        """The bias of layer ``layer`` as FlexAttention's score_mod (when "flex" is one of
        its bias_kernels)."""
        raise NotImplementedError(f"{type(self).__name__} has no FlexAttention score_mod")

    def attention_slopes(self) -> torch.Tensor | None:
        """[n_head] slopes m_h of the score bias -m_h * (i - j) (ALiBi); or None."""
        return None

    def key_bias(self) -> torch.Tensor | None:
        """[batch, n_head, seq] b_j where the score bias is b_j plus a constant per query,
        which softmax ignores (FoX's c_i - c_j); or None.  Blocked SDPA then carries it in
        one more dimension of the keys and runs the causal kernel with no mask."""
        return None

    def position_bias(self, layer: int, positions: torch.Tensor) -> torch.Tensor:
        """[batch, n_head, seq, seq] float32 score bias of layer ``layer`` between these
        positions, -inf on keys after their query: SDPA's attn_mask."""
        raise NotImplementedError(f"{type(self).__name__} has no score bias")


class PositionalEncoding(nn.Module, ScoreBias):
    max_positions: int | None = None
    # Multiplier on the token embeddings, for encodings whose recipe sets one.
    token_scale: float = 1.0
    # The token embeddings' initial standard deviation, for encodings whose recipe sets one;
    # None: GPT-2's 0.02, as every other weight.
    token_std: float | None = None
    # Whether RoPE context extension (posexp/scaling.py) applies to it: it has set_scaling.
    rope_scalable: bool = False

    def layer_encoding(self, layer: int) -> PositionalEncoding:
        """The encoding layer ``layer`` uses: itself, but in a hybrid (an encoding per
        layer, posexp/encodings/hybrid.py).  Its rotation and score bias are that layer's."""
        return self

    def at_layer(self, layer: int, x: torch.Tensor) -> ScoreBias:
        """The score bias layer ``layer`` applies, given that layer's input x [batch, seq,
        d_model] (after its norm): the encoding itself, for every bias of positions alone;
        FoX returns its forget gates' bias, computed from x."""
        return self

    def set_scaling(self, scaling: object, original_len: int | None = None) -> None:
        """Score or train with RoPE's frequencies rescaled (rope_scalable encodings only)."""
        raise NotImplementedError(f"{type(self).__name__} takes no RoPE scaling")

    def constrain(self) -> None:
        """Bring learned parameters back into their allowed range (KERPLE's clamp).  The model
        calls it at the start of every forward pass; most encodings have nothing to do."""

    def embedding(self, seq_len: int, device: torch.device) -> torch.Tensor | None:
        """[seq_len, d_model] to add to the token embeddings, or None."""
        return None

    def rotary(self, seq_len: int, device: torch.device) -> Rotation | None:
        """(cos, sin), each [seq_len, d_head] in float32, for queries and keys alike, shared
        by every layer; or None."""
        return None

    def rotary_qk(self, seq_len: int, device: torch.device) -> tuple[Rotation, Rotation] | None:
        """The rotations the model applies: (cos, sin) for the queries and for the keys.
        Both are ``rotary`` unless the encoding treats them apart (xPos)."""
        shared = self.rotary(seq_len, device)
        return None if shared is None else (shared, shared)

    def extension(self, seq_len: int, device: torch.device) -> Extension | None:
        """The Self-Extend or ReRoPE it is scored with over seq_len positions, or None."""
        return None

    # --- randomized positions (Ruoss et al., ACL 2023): training reads, for each sequence,
    # positions [batch, seq] (sorted, distinct) instead of 0..seq-1.  The tables of a length
    # that covers them are read at those rows; a score bias is built from their differences.
    def embedding_at(self, positions: torch.Tensor) -> torch.Tensor | None:
        """[batch, seq, d_model] for these positions, or None."""
        table = self.embedding(int(positions.max()) + 1, positions.device)
        return None if table is None else table[positions]

    def rotary_qk_at(self, positions: torch.Tensor) -> tuple[Rotation, Rotation] | None:
        """rotary_qk at these positions: each of cos and sin [batch, 1, seq, d_head], so that
        they broadcast over the heads of [batch, heads, seq, d_head]."""
        qk = self.rotary_qk(int(positions.max()) + 1, positions.device)
        if qk is None:
            return None
        return tuple((cos[positions][:, None], sin[positions][:, None]) for cos, sin in qk)


class DistanceBias(PositionalEncoding):
    """A score bias b_h(i - j) of the distance alone, the same in every layer (ALiBi, T5,
    KERPLE).  A subclass writes ``distance_bias`` once, elementwise; it serves both the
    blocked SDPA path and FlexAttention."""

    bias_kernels = ("sdpa", "flex")
    n_head: int

    def distance_bias(self, h: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        """b_h(d) for head indices h and distances d >= 0 (integer tensors that broadcast)."""
        raise NotImplementedError

    def score_bias(
        self, layer: int, q_start: int, q_len: int, k_len: int, device: torch.device
    ) -> torch.Tensor:
        h = torch.arange(self.n_head, device=device)[:, None, None]
        distance = (torch.arange(q_start, q_start + q_len, device=device)[:, None]
                    - torch.arange(k_len, device=device))
        # distances clamped at 0 above the diagonal, so that no NaN (log or power of a
        # negative number) reaches the gradient through the mask
        bias = self.distance_bias(h, distance.clamp(min=0)).float()
        return bias.masked_fill(distance < 0, float("-inf"))

    def position_bias(self, layer: int, positions: torch.Tensor) -> torch.Tensor:
        h = torch.arange(self.n_head, device=positions.device)[None, :, None, None]
        distance = (positions[:, :, None] - positions[:, None, :])[:, None]
        bias = self.distance_bias(h, distance.clamp(min=0)).float()
        return bias.masked_fill(distance < 0, float("-inf"))

    def score_mod(self, layer: int) -> ScoreMod:
        def add_bias(score, b, h, q_idx, kv_idx):
            return score + self.distance_bias(h, (q_idx - kv_idx).clamp(min=0))

        return add_bias
