"""Hybrid layers: an encoding per layer, from a pattern of registered encodings repeated over
the layers.  The default, [rope, rope, rope, nope], is Llama 4's: RoPE with no positional
encoding in every fourth layer (transformers' Llama4 config, ``no_rope_layer_interval=4``:
layer l is NoPE when (l + 1) % 4 == 0), and Yang et al. 2025's RNoPE ("Rope to Nope and
Back Again: A New Hybrid Attention Strategy"), which interleaves NoPE and RoPE layers.

Layer l uses ``pattern[l % len(pattern)]``, each encoding built once, with its paper's
defaults (its config's) and the run's encoding.base, for the whole model (a layer-indexed
encoding such as FIRE keeps a part per layer and uses its own layer's).  Only encodings
that act inside attention take part -- rotations, score biases, FoX's gates, or none: an
encoding that adds to the token embeddings (learned, sinusoidal) does so once, before every
layer, and has no per-layer form.

RoPE scaling (PI, NTK, YaRN; posexp/scaling.py) applies to every RoPE-family layer of the
pattern, as Llama 4 applies its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from posexp.encodings.base import PositionalEncoding
from posexp.encodings.registry import (
    ENCODINGS,
    EncodingSpec,
    ModelShape,
    build_encoding,
    register,
    require,
)

LLAMA4 = ("rope", "rope", "rope", "nope")


class HybridLayers(PositionalEncoding):
    def __init__(self, pattern: Sequence[str], shape: ModelShape, base: float) -> None:
        super().__init__()
        self.pattern = tuple(pattern)
        # one module per encoding named, shared by the layers that use it
        self.parts = nn.ModuleDict({name: build_encoding(name, shape, base=base)
                                    for name in dict.fromkeys(self.pattern)})
        limits = [p.max_positions for p in self.parts.values() if p.max_positions is not None]
        self.max_positions = min(limits) if limits else None

    @property
    def rope_scalable(self) -> bool:
        return any(part.rope_scalable for part in self.parts.values())

    def layer_encoding(self, layer: int) -> PositionalEncoding:
        return self.parts[self.pattern[layer % len(self.pattern)]]

    def constrain(self) -> None:
        for part in self.parts.values():
            part.constrain()

    def set_scaling(self, scaling: object, original_len: int | None = None) -> None:
        for part in self.parts.values():
            if part.rope_scalable:
                part.set_scaling(scaling, original_len)


def embeds(name: str) -> bool:
    """Whether encoding ``name`` adds to the token embeddings (its module says so)."""
    return ENCODINGS[name].module.embedding is not PositionalEncoding.embedding


@dataclass(frozen=True)
class HybridConfig:
    base: float = 10000.0  # encoding.base: the frequency base of the RoPE-family layers
    pattern: tuple[str, ...] = LLAMA4  # layer l: pattern[l % len(pattern)]

    def __post_init__(self) -> None:
        names = self.pattern
        require(isinstance(names, Sequence) and not isinstance(names, str) and len(names) > 0
                and all(isinstance(n, str) for n in names), "pattern",
                "a non-empty list of encoding names, e.g. [rope,rope,rope,nope]", names)
        object.__setattr__(self, "pattern", tuple(names))
        inside = ", ".join(n for n in sorted(ENCODINGS) if n != "hybrid" and not embeds(n))
        for name in self.pattern:
            require(name in ENCODINGS and name != "hybrid", "pattern",
                    f"a list of encodings that act inside attention ({inside})", list(names))
            require(not embeds(name), "pattern", f"a list of encodings that act inside "
                    f"attention ({inside}): {name} adds to the token embeddings, once for "
                    "every layer", list(names))
        require(self.base > 1.0, "base", "above 1", self.base)

    @property
    def rope_scalable(self) -> bool:
        """Whether RoPE scaling applies: some layer of the pattern rotates by RoPE's."""
        return any(ENCODINGS[name].module.rope_scalable for name in self.pattern)

    @property
    def bias_kernels(self) -> tuple[str, ...]:
        """The kernels every biased layer of the pattern can run on."""
        kernels = [ENCODINGS[n].module.bias_kernels for n in self.pattern
                   if ENCODINGS[n].module.bias_kernels]
        return tuple(k for k in kernels[0] if all(k in ks for ks in kernels)) if kernels \
            else ()

    def build(self, shape: ModelShape) -> HybridLayers:
        return HybridLayers(self.pattern, shape, self.base)


register(EncodingSpec(
    name="hybrid", label="hybrid layers", order=12, colour="#88CCEE",
    module=HybridLayers, config=HybridConfig,
    citation="Meta 2025, Llama 4 (RoPE with NoPE every fourth layer: transformers' Llama4 "
             "no_rope_layer_interval); Yang et al. 2025, 'Rope to Nope and Back Again: A New "
             "Hybrid Attention Strategy' (arXiv:2501.18795)",
    summary="an encoding per layer from a pattern, by default Llama 4's RoPE with NoPE "
            "every fourth layer",
    paper="Meta 2025 (Llama 4); Yang et al. 2025", reach="as its layers' encodings",
))
