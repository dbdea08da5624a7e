"""The claim set ``rope-scaling`` (configs/reproduce/rope-scaling.yaml, rope-scaling-gpu.yaml):
RoPE context extension -- Position Interpolation, NTK-aware scaling, YaRN -- measured on
RoPE-scaled evaluations of one run (``eval.rope_scaling`` in its overrides) and on short
fine-tunes of it (``finetunes:``, each a parent among the runs and the overrides of
``posexp finetune``).  They compare, at s x L for the preset's factor s, the run as trained
with its RoPE-scaled scorings at factor s and with its fine-tunes at s x L; and a control
that continues the parent at L on the fine-tunes' tokens, so that a fine-tune is measured
against the same training budget, not against fewer tokens."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from posexp import scaling
from posexp.claims.base import (
    Claim,
    CurveRef,
    Margin,
    Shown,
    Test,
    at,
    higher,
    lower,
    no_higher,
)
from posexp.claims.registry import ClaimSet, Sections, register_claim_set
from posexp.claims.sources import BLOC97, CHEN, CHEN_SCALE, PENG, PENG_SCALE


@dataclass
class Thresholds:
    factor: float  # claims compare at factor x L, scaled by factor (fine-tunes too)
    better: Margin  # every superiority claim "a is better than b": by more than this
    pi_cost: Margin  # PI without fine-tuning: ppl(L) above (1 + margin) x plain ppl(L)
    finetune_gap: Margin  # fine-tuned ppl(sL) no higher than (1 + margin) x control ppl(L)
    tie: Margin  # YaRN's fine-tune no worse than PI's


def claims(L: int, th: DictConfig) -> list[Claim]:
    s = float(th.factor)
    long, k, better = int(s * L), f"{s:g}", float(th.better.margin)
    defaults = {p.name: p.default for p in scaling.all_params()}

    def scaled(method: str) -> scaling.Key:
        return scaling.key(scaling.record(method, s, defaults))

    plain = CurveRef("rope", L)
    control = CurveRef("rope", L, fine_tune=(L, None))  # the parent continued at L

    def scored(method: str) -> CurveRef:  # the run scored with a scaling
        return CurveRef("rope", L, scaling=scaled(method))

    def tuned(method: str) -> CurveRef:  # its fine-tune at s x L with a scaling
        return CurveRef("rope", long, fine_tune=(L, scaled(method)))

    methods = (("linear", "PI"), ("yarn", "YaRN"))
    return [
        Claim(f"Without fine-tuning, NTK-aware and YaRN scaling (factor {k}) beat plain "
              f"extrapolation at {k}L", f"{BLOC97}; {PENG}, §3.1 and §3.4", PENG_SCALE,
              th.better.reason, [plain, scored("ntk"), scored("yarn")],
              [Test(f"{name} x{k} / plain, ppl({k}L)", at(scored(method), long, plain, long),
                    lower(better)) for method, name in (("ntk", "NTK-aware"), ("yarn", "YaRN"))]),
        Claim(f"Position Interpolation without fine-tuning costs perplexity at L (factor {k})",
              f"{CHEN}; {PENG}, §3.1 (PI loses the high frequencies)", CHEN_SCALE,
              th.pi_cost.reason, [plain, scored("linear")],
              [Test(f"PI x{k} / plain, ppl(L)", at(scored("linear"), L, plain, L),
                    higher(float(th.pi_cost.margin)))]),
        Claim(f"A short fine-tune at {k}L with PI or YaRN brings {k}L within a few percent of "
              f"ppl(L) after the same training at L", f"{CHEN}, §3 (about 1000 steps); "
                                                       f"{PENG}, §4", CHEN_SCALE,
              th.finetune_gap.reason, [control, plain, *(tuned(m) for m, _ in methods)],
              [Test(f"fine-tuned {name} ppl({k}L) / control ppl(L)",
                    at(tuned(method), long, control, L), no_higher(float(th.finetune_gap.margin)))
               for method, name in methods],
              [Shown(f"fine-tuned {name} ppl({k}L) / parent ppl(L)",
                     at(tuned(method), long, plain, L)) for method, name in methods]),
        Claim(f"The fine-tunes' gain at {k}L is not more training alone: each beats the "
              f"parent continued at L on the same tokens, at {k}L", f"{CHEN}, §3; {PENG}, §4",
              CHEN_SCALE, th.better.reason, [control, *(tuned(m) for m, _ in methods)],
              [Test(f"fine-tuned {name} / control, ppl({k}L)",
                    at(tuned(method), long, control, long), lower(better))
               for method, name in methods]),
        Claim("YaRN fine-tunes at least as well as PI", f"{PENG}, §4", PENG_SCALE,
              th.tie.reason, [tuned("linear"), tuned("yarn")],
              [Test(f"fine-tuned YaRN / PI, ppl({k}L)",
                    at(tuned("yarn"), long, tuned("linear"), long),
                    no_higher(float(th.tie.margin)))]),
    ]


def sections(preset: DictConfig) -> Sections:
    return [(f"Claims about RoPE context extension ({CHEN.split(',')[0]}; "
             f"{PENG.split(',')[0]}; {BLOC97.split(',')[0]})",
             claims(int(preset.train_seq_len), preset.thresholds))]


register_claim_set(ClaimSet("rope-scaling", Thresholds, sections))
