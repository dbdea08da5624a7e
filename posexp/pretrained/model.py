"""A Hugging Face causal LM, loaded and called the way posexp's evaluation calls a model.

``describe`` reads what a run records from config.json alone (its positions, the length it
was trained at, its shape); ``load`` builds the model -- fp32 on the CPU, bf16 on CUDA,
attention through SDPA (flash-attn's kernel with attention=flash) -- and ``PretrainedLM``
gives posexp/evaluate/windows.py what it calls on posexp's own GPT: ``token_losses(inputs,
targets)``, ``max_positions``, ``eval()``.  Its losses come from the model's own hidden states
and output layer, chunked over positions so that a 32k-token window never holds
[batch, window, vocabulary] logits at once.

transformers is imported here only: posexp runs without it unless a pretrained model is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from posexp.errors import PosexpError, UsageError, first_line
from posexp.pretrained.source import Source

ROPE, LEARNED, OTHER = "rope", "learned", "other"
# model types whose positions are a learned table added to the token embeddings
LEARNED_TYPES = ("gpt2", "gpt_neo", "opt", "biogpt", "xglm", "gpt_bigcode", "codegen")
ATTENTION = {"auto": "sdpa", "sdpa": "sdpa", "flash": "flash_attention_2",
             "flex": "flex_attention"}


def transformers():
    """transformers, quiet: no progress bars or advice on stderr (posexp prints its own)."""
    try:
        import transformers as hf
    except ImportError:
        raise UsageError("pretrained models need transformers: pip install 'posexp[hf]'"
                         ) from None
    hf.utils.logging.set_verbosity_error()
    hf.utils.logging.disable_progress_bar()
    return hf


@dataclass(frozen=True)
class Described:
    """What config.json says about a model: its class, how it knows positions (rope,
    learned or other), the length it was trained at (RoPE scaling's L), a learned table's
    size, RoPE's base and rotary dimension, and its shape."""

    architecture: str
    positions: str
    context: int
    max_positions: int | None
    base: float | None
    rotary_dim: int | None
    d_model: int
    n_layer: int
    n_head: int
    d_ff: int
    tie_weights: bool


def hf_config(path: Path):
    try:
        return transformers().AutoConfig.from_pretrained(path, local_files_only=True,
                                                         trust_remote_code=False)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"{path}: transformers cannot read this model's config.json "
                         f"({first_line(e)[:200]}); posexp runs no model code from the hub"
                         ) from None


def rope_parameters(config) -> dict | None:
    params = getattr(config, "rope_parameters", None)
    return dict(params) if isinstance(params, dict) and "rope_theta" in params else None


def original_length(config) -> int:
    """The length the model was trained at: its RoPE's original_max_position_embeddings
    when it has one (a model that ships scaled), else max_position_embeddings."""
    params = rope_parameters(config) or {}
    for value in (params.get("original_max_position_embeddings"),
                  getattr(config, "max_position_embeddings", None),
                  getattr(config, "n_positions", None), getattr(config, "n_ctx", None)):
        if isinstance(value, int) and value > 0:
            return value
    raise UsageError(f"{type(config).__name__} names no context length "
                     "(max_position_embeddings)")


def describe(config) -> Described:
    params = rope_parameters(config)
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if params is not None:
        positions = ROPE
    elif config.model_type in LEARNED_TYPES:
        positions = LEARNED
    else:
        positions = OTHER
    context = original_length(config)
    d_ff = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) \
        or getattr(config, "ffn_dim", None) or 4 * config.hidden_size
    return Described(
        architecture=(config.architectures or [type(config).__name__])[0], positions=positions,
        context=context, max_positions=context if positions == LEARNED else None,
        base=float(params["rope_theta"]) if params else None,
        rotary_dim=int(head * params.get("partial_rotary_factor", 1.0)) if params else None,
        d_model=config.hidden_size, n_layer=config.num_hidden_layers,
        n_head=config.num_attention_heads, d_ff=int(d_ff),
        tie_weights=bool(getattr(config, "tie_word_embeddings", False)))


def dtype_for(device: torch.device) -> torch.dtype:
    """bf16 on CUDA (its tensor cores, half the memory of long windows); fp32 elsewhere."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def load(source: Source, device: torch.device, attention: str = "auto"):
    """The model in eval mode on ``device``: safetensors only, no code from the hub."""
    hf = transformers()
    kernel = ATTENTION[attention]
    if kernel == "flash_attention_2":
        try:
            import flash_attn  # noqa: F401
        except ImportError:
            raise UsageError("attention=flash needs the flash-attn package (pip install "
                             "flash-attn); attention=auto runs SDPA, flash on a GPU") from None
    try:
        model = hf.AutoModelForCausalLM.from_pretrained(
            source.path, dtype=dtype_for(device), attn_implementation=kernel,
            local_files_only=True, trust_remote_code=False, use_safetensors=True)
    except Exception as e:
        raise PosexpError(f"cannot load {source.id} ({source.path}) with transformers: "
                          f"{first_line(e)[:200]}") from None
    return model.to(device).eval()


class PretrainedLM:
    """A causal LM as posexp's evaluation calls a model (posexp.model.GPT's interface):
    ``token_losses``, ``max_positions`` (a learned table's rows; None: any length) and
    ``cfg.encoding`` (the name an n/a point gives).  ``rope`` (posexp/pretrained/rope.py)
    rescales its rotary positions."""

    def __init__(self, model, described: Described, name: str) -> None:
        self.model = model
        self.described = described
        self.cfg = SimpleNamespace(encoding=name)
        self.max_positions = described.max_positions
        self.rope = None  # set by rope.Rescaler

    def eval(self) -> PretrainedLM:
        self.model.eval()
        return self

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output layer on final hidden states, with the scaling or soft cap some
        architectures put after it (Cohere, Granite, Gemma 2), in float32."""
        c = self.model.config
        logits = self.model.get_output_embeddings()(hidden).float()
        if getattr(c, "logit_scale", None):
            logits = logits * c.logit_scale
        if getattr(c, "logits_scaling", None):
            logits = logits / c.logits_scaling
        if getattr(c, "final_logit_softcapping", None):
            logits = torch.tanh(logits / c.final_logit_softcapping) * c.final_logit_softcapping
        return logits

    @torch.no_grad()
    def token_losses(self, idx: torch.Tensor, targets: torch.Tensor,
                     chunk_tokens: int = 1 << 14) -> torch.Tensor:
        """Per-token loss [batch, seq] in float32, at positions 0..seq-1 of each row; the
        output layer runs over chunks of positions (bounded memory at any window)."""
        if self.rope is not None:
            self.rope.before(idx.shape[1])
        hidden = self.model.base_model(input_ids=idx, use_cache=False).last_hidden_state
        step = max(1, chunk_tokens // hidden.shape[0])
        return torch.cat([F.cross_entropy(self.logits(hidden[:, s:s + step]).transpose(1, 2),
                                           targets[:, s:s + step], reduction="none")
                          for s in range(0, hidden.shape[1], step)], dim=1)
