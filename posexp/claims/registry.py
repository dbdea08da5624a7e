"""The registry of claim sets.  A preset (configs/reproduce/*.yaml) names its set in
``claims:``; the set says which thresholds its presets hold (a dataclass: the preset is
checked against it), the sections of verdicts.md with their claims, how its claims are
judged, and what the verdicts note beside them.  Adding a claim set is a module that
registers one; adding a claim is a function in its set's module and its thresholds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from omegaconf import DictConfig

from posexp.claims.base import Claim, Curves, Verdict, judge
from posexp.claims.gate import Bar
from posexp.runs import RunResult

Sections = list[tuple[str, list[Claim]]]


def numbered(sections: Sections) -> list[tuple[int, Claim]]:
    """Every claim of the suite with its number: 1, 2, ... in the order of its sections."""
    return list(enumerate((c for _, section in sections for c in section), 1))


def judge_curves(sections: Sections, runs: list[RunResult], preset: DictConfig,
                 n_tokens: int) -> list[Verdict]:
    """Every claim judged on the runs' perplexity curves, on the layout of ``n_tokens``."""
    curves = Curves(runs, n_tokens, Bar.of(preset.thresholds))
    return [judge(c, curves, n) for n, c in numbered(sections)]


@dataclass(frozen=True)
class ClaimSet:
    name: str  # a preset's claims:
    thresholds: type  # dataclass: each threshold, its type; a default makes it optional
    sections: Callable[[DictConfig], Sections]
    judge: Callable[[Sections, list[RunResult], DictConfig, int], list[Verdict]] = judge_curves
    # a section of verdicts.md after the verdicts, its heading and text: a property of what
    # was measured (not a claim), or the gate its claims passed
    note: Callable[[list[RunResult], DictConfig], str | None] | None = None


CLAIM_SETS: dict[str, ClaimSet] = {}


def register_claim_set(claim_set: ClaimSet) -> ClaimSet:
    if claim_set.name in CLAIM_SETS:
        raise ValueError(f"two claim sets are called {claim_set.name!r}")
    CLAIM_SETS[claim_set.name] = claim_set
    return claim_set
