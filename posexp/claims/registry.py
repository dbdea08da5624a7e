"""The registry of claim sets.  A preset (configs/reproduce/*.yaml) names its set in
``claims:``; the set says which thresholds its presets hold (a dataclass: the preset is
checked against it, and its claim code is handed them as one), the sections of verdicts.md
with their claims, how its claims are judged, and what the verdicts note beside them.  A
claim set is a module of posexp/claims that registers one (found as encodings are: every
module of the package is imported); a claim is a function in its set's module and its
thresholds."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from posexp.claims.base import Claim, Curves, Verdict, judge
from posexp.runs import RunResult

Sections = list[tuple[str, list[Claim]]]


def numbered(sections: Sections) -> list[tuple[int, Claim]]:
    """Every claim of the suite with its number: 1, 2, ... in the order of its sections."""
    return list(enumerate((c for _, section in sections for c in section), 1))


def judge_curves(sections: Sections, runs: list[RunResult], preset: DictConfig, th: Any,
                 n_tokens: int) -> list[Verdict]:
    """Every claim judged on the runs' perplexity curves, on the layout of ``n_tokens``,
    behind the learning gate's bar where the thresholds have one (learned_bar)."""
    curves = Curves(runs, n_tokens, getattr(th, "learned_bar", None))
    return [judge(c, curves, n) for n, c in numbered(sections)]


def kind_of(field_type: object) -> type:
    """The type a threshold holds: X of ``X | None``."""
    args = [a for a in typing.get_args(field_type) if a is not type(None)]
    return (args[0] if args else field_type) if typing.get_origin(field_type) else field_type


def typed(schema: type, thresholds: Mapping) -> Any:
    """A preset's ``thresholds`` (checked against ``schema`` by claims/preset.py) as an
    instance of its dataclass: a margin or bar as its own dataclass, a float as a float
    (YAML's 2 is an int), lists and mappings as plain ones, an absent one its default."""
    hints = typing.get_type_hints(schema)
    values = {}
    for f in dataclasses.fields(schema):
        value = thresholds.get(f.name)
        if value is None:
            continue
        if isinstance(value, (DictConfig, ListConfig)):
            value = OmegaConf.to_container(value)
        kind = kind_of(hints[f.name])
        values[f.name] = kind(**value) if dataclasses.is_dataclass(kind) else (
            float(value) if kind is float else value)
    return schema(**values)


@dataclass(frozen=True)
class ClaimSet:
    """A claim set: its name (a preset's claims:), its thresholds' dataclass, and how its
    claim code builds the sections of claims, judges them and notes beside them -- each
    handed the preset and its thresholds typed (``typed``)."""

    name: str
    thresholds: type  # dataclass: each threshold, its type; a default makes it optional
    build: Callable[[DictConfig, Any], Sections]
    judged_by: Callable[[Sections, list[RunResult], DictConfig, Any, int],
                        list[Verdict]] = judge_curves
    # a section of verdicts.md after the verdicts, its heading and text: a property of what
    # was measured (not a claim), or the gate its claims passed
    noted_by: Callable[[list[RunResult], DictConfig, Any], str | None] | None = None

    def typed(self, preset: DictConfig) -> Any:
        return typed(self.thresholds, preset.thresholds)

    def sections(self, preset: DictConfig) -> Sections:
        return self.build(preset, self.typed(preset))

    def judge(self, sections: Sections, runs: list[RunResult], preset: DictConfig,
              n_tokens: int) -> list[Verdict]:
        return self.judged_by(sections, runs, preset, self.typed(preset), n_tokens)

    def note(self, runs: list[RunResult], preset: DictConfig) -> str | None:
        return None if self.noted_by is None else self.noted_by(runs, preset,
                                                                self.typed(preset))


CLAIM_SETS: dict[str, ClaimSet] = {}


def register_claim_set(claim_set: ClaimSet) -> ClaimSet:
    if claim_set.name in CLAIM_SETS:
        raise ValueError(f"two claim sets are called {claim_set.name!r}")
    CLAIM_SETS[claim_set.name] = claim_set
    return claim_set
