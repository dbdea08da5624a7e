"""RoPE scaling of a pretrained model through transformers' own rope settings.

A scaling record (posexp/scaling.py: method, factor, the method's parameters) becomes the
model's ``rope_parameters``, and the model's rotary embedding is built again from them by
its own class -- so the frequencies and YaRN's attention factor are exactly what the model
would compute if it had been loaded with those settings.  L, the length the model was
trained at, is read from its config (``original_max_position_embeddings``, else
``max_position_embeddings``):

| eval.rope_scaling | rope_parameters                                                      |
|-------------------|----------------------------------------------------------------------|
| linear            | rope_type linear, factor s                                           |
| ntk               | rope_type default, rope_theta x s^(d/(d-2)) (d: the rotary dimension) |
| dynamic           | rope_type dynamic, factor s; max_position_embeddings L               |
| yarn              | rope_type yarn, factor s, original L, beta_fast, beta_slow           |
| llama3            | rope_type llama3, factor s, original L, low/high_freq_factor         |
| longrope          | rope_type longrope, factor s, original L, the model's own factors    |

rope_theta and partial_rotary_factor stay the model's; a scaling replaces any the model
ships with (``plain`` is the model as published).  For yarn, llama3 and longrope
max_position_embeddings becomes s x L.  A model without rotary positions is refused.
"""

from __future__ import annotations

import copy

from posexp import scaling
from posexp.errors import UsageError
from posexp.pretrained.model import (
    LEARNED,
    ROPE,
    Described,
    PretrainedLM,
    original_length,
    rope_parameters,
)

KEEP = ("rope_theta", "partial_rotary_factor")


def rotary_modules(model) -> list[tuple[str, object]]:
    return [(name, m) for name, m in model.named_modules()
            if type(m).__name__.endswith("RotaryEmbedding")]


def check_positions(d: Described, name: str, rotary: bool = True) -> None:
    """A scaling needs rotary positions (config.json's rope settings and, once loaded,
    ``rotary`` embedding modules): one line when the model has none."""
    if d.positions != ROPE or not rotary:
        what = {LEARNED: "a learned table of absolute positions"}.get(d.positions,
                                                                      "no rotary positions")
        raise UsageError(f"eval.rope_scaling rescales rotary positions (RoPE), and {name} "
                         f"({d.architecture}) has {what}; score it as published "
                         "(eval.rope_scaling=plain, or leave it out)")


def check_scalings(config, d: Described, name: str, records: list[dict | None]) -> None:
    """Each scaling of ``records`` can be made of this model (before anything is loaded)."""
    for rec in filter(None, records):
        check_positions(d, name)
        scaled_config(config, rec)


def scaled_config(config, record: dict):
    """A copy of the model's config with ``record`` (a scaling) as its rope settings."""
    params = rope_parameters(config)
    method, s = record["method"], float(record["factor"])
    L = original_length(config)
    keep = {k: params[k] for k in KEEP if k in params}
    new = copy.deepcopy(config)
    m = scaling.METHODS[method]
    if m.hf_rope_type is None:  # NTK-aware: a larger base, RoPE otherwise as published
        head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        d = int(head * keep.get("partial_rotary_factor", 1.0))
        new.rope_parameters = {"rope_type": "default", **keep,
                               "rope_theta": keep["rope_theta"] * s ** (d / (d - 2))}
        return new
    rope = {"rope_type": m.hf_rope_type, "factor": s,
            **({"original_max_position_embeddings": L} if m.hf_original_len else {}), **keep,
            **{k: v for k, v in record.items() if k not in ("method", "factor")}}
    if m.model_factors:
        if "long_factor" not in params or "short_factor" not in params:
            raise UsageError(f"eval.rope_scaling={method} uses the long_factor and "
                             "short_factor the model supplies (as Phi-3 does); this "
                             "model's config has none")
        rope.update(long_factor=params["long_factor"], short_factor=params["short_factor"])
    # transformers' dynamic NTK reads L there; the others, the length they extend to
    new.max_position_embeddings = L if m.follows_window else round(L * s)
    new.rope_parameters = rope
    return new


class Rescaler:
    """Swaps an LM's rotary embeddings for ones built from scaled rope settings, and back.
    Dynamic NTK follows the window: its embedding is built afresh for each window length,
    so that its frequencies are those of that length whatever was scored before."""

    def __init__(self, lm: PretrainedLM) -> None:
        self.lm = lm
        self.original = dict(rotary_modules(lm.model))
        self.config = None
        self.window: int | None = None
        lm.rope = self

    def set(self, record: dict | None) -> None:
        """Score with ``record`` from now on; None: the model as published."""
        if record is None:
            self._install(self.original)
            self.config = None
            return
        check_positions(self.lm.described, self.lm.cfg.encoding,
                        bool(rotary_modules(self.lm.model)))
        self.config = scaled_config(self.lm.model.config, record)
        self.window = None
        self._install(self._built())

    def before(self, window: int) -> None:
        """Called before each forward pass over windows of ``window`` tokens."""
        follows = self.config is not None and self.config.rope_parameters.get(
            "rope_type") == "dynamic"
        if follows and window != self.window:
            self._install(self._built())
            self.window = window

    def _built(self) -> dict[str, object]:
        out = {}
        for name, module in self.original.items():
            try:
                out[name] = type(module)(self.config).to(module.inv_freq.device)
            except (TypeError, ValueError, KeyError) as e:
                raise UsageError(f"cannot rescale the rotary embedding of "
                                 f"{self.lm.described.architecture}: {e}") from None
        return out

    def _install(self, modules: dict[str, object]) -> None:
        for name, module in modules.items():
            parent, _, attr = name.rpartition(".")
            setattr(self.lm.model.get_submodule(parent) if parent else self.lm.model, attr,
                    module)
