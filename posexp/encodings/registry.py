"""The registry of encodings: what each one is called, shown as, cited to, and built from.

Each encoding module registers one ``EncodingSpec`` (two for KERPLE's two kernels): its
metadata, its module class and its config, a frozen dataclass of the paper's hyperparameters
(with their defaults) whose ``build(shape)`` makes the module.  ``posexp.encodings`` imports
every module of the package, so an encoding is one module here plus one YAML file under
``configs/encoding/``; nothing else names it.

A config's fields come from ``encoding.hparams`` in the YAML; ``encoding.base`` and
``encoding.max_positions``, top-level keys of every encoding's config, fill the fields of
those names (the frequency base of rope, xpos and sinusoidal; learned's rows).
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from posexp.encodings.base import PositionalEncoding

# Keys of the encoding schema itself that a config may declare as its fields.
TOP_LEVEL = ("base", "max_positions")


@dataclass(frozen=True)
class ModelShape:
    """What an encoding may read of the model it is built for."""

    d_model: int
    n_head: int
    n_layer: int
    init: str = "gpt2"  # model.init: how the model's own weights start (gpt2 | torch)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head


@dataclass(frozen=True)
class EncodingSpec:
    name: str  # encoding=<name>, configs/encoding/<name>.yaml
    label: str  # how plots and tables show it
    order: int  # its place in plots, tables and sweeps: the control first
    citation: str  # the paper (and code) whose math the module follows
    colour: str  # its colour in every figure, distinct from every other encoding's
    module: type[PositionalEncoding]  # what it can do: its class attributes and methods
    config: type  # frozen dataclass of its hyperparameters, with build(shape) -> module
    reads_positions: bool = True  # False where there is no position signal (NoPE, FoX)
    # a trained table of positions (learned's): encoding.max_positions rows of d_model
    # parameters, and no position past it -- what the checks and reports read, not its name
    position_table: bool = False
    # the README's row of it (posexp/encodings/tables.py writes the table): what it does in
    # one line, its paper in short, and how far past the training length it runs
    summary: str = ""
    paper: str = ""
    reach: str = "any length"


ENCODINGS: dict[str, EncodingSpec] = {}


def register(spec: EncodingSpec) -> EncodingSpec:
    if spec.name in ENCODINGS:
        raise ValueError(f"two encodings are called {spec.name!r}")
    for what, of in (("colour", lambda s: s.colour.lower()), ("order", lambda s: s.order),
                     ("label", lambda s: s.label)):  # each its own in figures and tables
        taken = {of(other): other.name for other in ENCODINGS.values()}
        if of(spec) in taken:
            raise ValueError(f"{spec.name} and {taken[of(spec)]} have the same {what} "
                             f"{getattr(spec, what)}")
    ENCODINGS[spec.name] = spec
    return spec


def in_order() -> list[str]:
    """Every encoding's name, in the order plots and tables show them."""
    return sorted(ENCODINGS, key=lambda name: ENCODINGS[name].order)


def spec_of(name: str) -> EncodingSpec:
    if name not in ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}; available: {', '.join(sorted(ENCODINGS))}")
    return ENCODINGS[name]


def require(ok: bool, key: str, rule: str, value: object) -> None:
    """For configs' checks: raise unless ``ok``, naming the key as the user writes it."""
    if not ok:
        where = key if key in TOP_LEVEL else f"hparams.{key}"
        raise ValueError(f"encoding.{where} must be {rule}, got {value!r}")


def _typed(key: str, kind: object, value: object) -> object:
    """``value`` as the field's type (int, float or bool); YAML and the command line give
    ints for whole floats."""
    is_bool = isinstance(value, bool)
    if kind is bool:
        require(is_bool, key, "true or false", value)
    elif kind is int:
        require(isinstance(value, int) and not is_bool, key, "an integer", value)
    elif kind is float:
        require(isinstance(value, (int, float)) and not is_bool, key, "a number", value)
        return float(value)
    return value


def encoding_config(
    name: str,
    hparams: Mapping[str, Any] | None = None,
    base: float | None = None,
    max_positions: int | None = None,
) -> Any:
    """The config of encoding ``name``: its paper's defaults, overridden by ``hparams`` and,
    for the configs that have those fields, by encoding.base and encoding.max_positions.
    Raises ValueError on an unknown key or a value out of range."""
    spec = spec_of(name)
    kinds = typing.get_type_hints(spec.config)
    fields = [f.name for f in dataclasses.fields(spec.config)]
    hparams = dict(hparams or {})
    known = [f for f in fields if f not in TOP_LEVEL]
    for key in hparams:
        if key in TOP_LEVEL and key in fields:
            raise ValueError(f"{name}'s {key} is encoding.{key}, not encoding.hparams.{key}")
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = (f"did you mean '{close[0]}'?" if close else
                    f"its hyperparameters: {', '.join(known)}" if known else "it has none")
            raise ValueError(f"{name} has no hyperparameter encoding.hparams.{key}; {hint}")
    top = {"base": base, "max_positions": max_positions}
    values = {k: v for k, v in top.items() if k in fields and v is not None} | hparams
    return spec.config(**{k: _typed(k, kinds[k], v) for k, v in values.items()})


def capability(name: str, hparams: Mapping[str, Any] | None, attribute: str) -> Any:
    """What encoding ``name``'s module can do -- ``bias_kernels``, ``rope_scalable`` -- as
    its class says, or its config where that depends on the hyperparameters (a hybrid's
    pattern)."""
    spec = spec_of(name)
    if hasattr(spec.config, attribute):
        return getattr(encoding_config(name, hparams), attribute)
    return getattr(spec.module, attribute)


def build_encoding(
    name: str,
    shape: ModelShape,
    hparams: Mapping[str, Any] | None = None,
    base: float | None = None,
    max_positions: int | None = None,
) -> PositionalEncoding:
    return encoding_config(name, hparams, base, max_positions).build(shape)
