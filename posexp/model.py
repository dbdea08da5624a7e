"""A GPT-style pre-LayerNorm decoder that asks its positional encoding for what it needs."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from posexp.attention import causal_attention
from posexp.encodings import ModelShape, PositionalEncoding, build_encoding
from posexp.encodings.base import Extension, Rotation
from posexp.encodings.rope import apply_rotary
from posexp.encodings.rope_scaling import query_scale
from posexp.scaling import TEMPERATURE, RopeScaling


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    d_model: int
    n_layer: int
    n_head: int
    d_ff: int
    encoding: str
    max_positions: int  # encoding.max_positions: learned's rows; other encodings ignore it
    base: float = 10000.0  # encoding.base: the frequency base of rope, xpos and sinusoidal
    dropout: float = 0.0
    tie_weights: bool = True
    init: str = "gpt2"  # model.init: gpt2 | torch (config/schema.py Init)
    attention: str = "auto"  # the score bias's kernel: auto | sdpa | flex | flash (attention.py)
    # model.ssmax: SSMax's s_h, learned per head and layer, starting at this value; None:
    # softmax
    ssmax_init: float | None = None
    # encoding.hparams: the encoding's own hyperparameters; the paper's defaults where absent
    encoding_hparams: Mapping[str, Any] = field(default_factory=dict)


def ssmax_scale(s: torch.Tensor, seq_len: int) -> torch.Tensor:
    """SSMax's factor on the queries (Nakanishi 2025, eq. 2), [heads, seq_len, 1]: s_h log n,
    where query i attends to n = i + 1 keys.  Multiplying each query by it multiplies its
    logits z_ij by s_h log n, so that softmax reads n^(s_h z_ij): the largest weight no longer
    fades as n grows.  In float32 at least: log n of a long window in bf16 rounds by 2^-5."""
    dtype = torch.promote_types(s.dtype, torch.float32)
    n = torch.arange(1, seq_len + 1, device=s.device, dtype=dtype)
    return s.to(dtype)[:, None, None] * n.log()[:, None]


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int) -> None:
        super().__init__()
        self.n_head, self.layer = cfg.n_head, layer
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.dropout = cfg.dropout
        self.kernel = cfg.attention
        if cfg.ssmax_init is not None:  # SSMax: s_h log n on each head's logits
            self.ssmax = nn.Parameter(torch.full((cfg.n_head,), float(cfg.ssmax_init)))

    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[Rotation, Rotation] | None,
        bias: PositionalEncoding | None,
        positions: torch.Tensor | None = None,
        extension: Extension | None = None,
    ) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_head, d // self.n_head).permute(2, 0, 3, 1, 4)
        far = None
        if hasattr(self, "ssmax"):
            q = q * ssmax_scale(self.ssmax, t).to(q.dtype)
        if extension is not None and extension.q_scale is not None:  # a temperature
            q = q * extension.q_scale.to(q.dtype)
        if extension is not None and extension.window is not None:  # Self-Extend, ReRoPE:
            far = (apply_rotary(q, *extension.far_q),  # far keys read other rotations
                   apply_rotary(k, *extension.far_k), extension.window)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary[0]), apply_rotary(k, *rotary[1])
        if bias is not None:
            bias = bias.at_layer(self.layer, x)
        y = causal_attention(q, k, v, bias, self.layer, self.dropout if self.training else 0.0,
                             self.kernel, positions, far)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg, layer)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ff, bias=False),
            nn.GELU(),
            nn.Linear(cfg.d_ff, cfg.d_model, bias=False),
        )
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, rotary, bias, positions=None, extension=None):
        x = x + self.drop(self.attn(self.ln1(x), rotary, bias, positions, extension))
        return x + self.drop(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        # The encoding initialises its own parameters, as its paper does.  The bias encodings
        # hold plain Parameters, which _init_weights below (nn.Linear, nn.Embedding) leaves
        # alone; learned's table is an nn.Embedding, drawn again there from the same normal.
        self.encoding: PositionalEncoding = build_encoding(
            cfg.encoding, ModelShape(cfg.d_model, cfg.n_head, cfg.n_layer, cfg.init),
            cfg.encoding_hparams, cfg.base, cfg.max_positions,
        )
        self.drop = nn.Dropout(cfg.dropout)
        self.temperature: tuple[RopeScaling, int | None] | None = None  # set_rope_scaling's
        self.blocks = nn.ModuleList(Block(cfg, layer) for layer in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.head.weight = self.tok_emb.weight
        if cfg.init == "gpt2":  # else PyTorch's defaults, as the modules were built
            self.apply(self._init_weights)
        if self.encoding.token_std is not None:
            nn.init.normal_(self.tok_emb.weight, std=self.encoding.token_std)
        if cfg.init == "gpt2":  # GPT-2 scales the residual projections by 1/sqrt(2 * n_layer)
            for name, p in self.named_parameters():
                if name.endswith(("attn.proj.weight", "mlp.2.weight")):
                    nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    @property
    def max_positions(self) -> int | None:
        return self.encoding.max_positions

    def set_rope_scaling(
        self, scaling: RopeScaling | None, original_len: int | None = None
    ) -> None:
        """Score or fine-tune with RoPE scaled for context extension, or score with a
        temperature on the queries (any encoding); None restores the model as trained.

        original_len is the length the weights were first trained at (train.seq_len; for a
        fine-tune, its parent's).  Only cos and sin change (posexp/encodings/rope_scaling.py),
        or the queries are scaled; the weights and the checkpoint do not.
        """
        temperature = scaling is not None and scaling.kind == TEMPERATURE
        if scaling is not None and not temperature and not self.encoding.rope_scalable:
            raise ValueError(f"RoPE scaling needs encoding=rope, not {self.cfg.encoding}")
        if self.encoding.rope_scalable:
            self.encoding.set_scaling(None if temperature else scaling, original_len)
        query_scale(scaling, original_len, 1)  # raises here on one that cannot be computed
        self.temperature = (scaling, original_len) if temperature else None

    def _temperature(self, seq_len: int, device: torch.device) -> Extension | None:
        """The temperature it is scored with over seq_len queries, as an Extension."""
        if self.temperature is None:
            return None
        return Extension(q_scale=query_scale(*self.temperature, seq_len).to(device)[:, None])

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def hidden(self, idx: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Final-norm hidden states [batch, seq, d_model] for token ids [batch, seq], at
        positions 0..seq-1, or at ``positions`` [batch, seq] (randomized positions in
        training: sorted and distinct in each row)."""
        seq_len = idx.shape[1]
        self.encoding.constrain()
        x = self.tok_emb(idx)
        if self.encoding.token_scale != 1.0:
            x = x * self.encoding.token_scale
        pe = (self.encoding.embedding(seq_len, idx.device) if positions is None
              else self.encoding.embedding_at(positions))
        if pe is not None:
            x = x + pe
        x = self.drop(x)
        # one per encoding: its rotations, and at evaluation its Self-Extend or ReRoPE, or
        # the model's temperature
        rotations: dict[int, tuple[tuple[Rotation, Rotation] | None, Extension | None]] = {}
        temperature = self._temperature(seq_len, idx.device)
        for layer, block in enumerate(self.blocks):
            encoding = self.encoding.layer_encoding(layer)
            if id(encoding) not in rotations:
                rotations[id(encoding)] = (
                    (encoding.rotary_qk(seq_len, idx.device),
                     temperature or encoding.extension(seq_len, idx.device))
                    if positions is None else (encoding.rotary_qk_at(positions), None))
            bias = encoding if encoding.bias_kernels else None
            x = block(x, rotations[id(encoding)][0], bias, positions, rotations[id(encoding)][1])
        return self.ln_f(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [batch, seq, vocab] for token ids [batch, seq]; given ``targets``, the mean
        cross-entropy (nats per token) instead; at ``positions`` (see hidden)."""
        logits = self.head(self.hidden(idx, positions))
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    def token_losses(
        self, idx: torch.Tensor, targets: torch.Tensor, chunk_tokens: int = 1 << 16,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-token loss [batch, seq] in float32, at ``positions`` (see hidden).

        The output layer runs over chunks of positions so that [batch, seq, vocab] logits
        never exist at once, which keeps long windows and large vocabularies in bounded memory.
        """
        h = self.hidden(idx, positions)
        step = max(1, chunk_tokens // h.shape[0])
        losses = []
        for start in range(0, h.shape[1], step):
            logits = self.head(h[:, start : start + step]).float()
            losses.append(
                F.cross_entropy(
                    logits.transpose(1, 2), targets[:, start : start + step], reduction="none"
                )
            )
        return torch.cat(losses, dim=1)
