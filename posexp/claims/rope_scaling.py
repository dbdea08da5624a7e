"""The claim set ``rope-scaling`` (configs/reproduce/rope-scaling.yaml, rope-scaling-gpu.yaml):
RoPE context extension -- Position Interpolation, NTK-aware scaling, YaRN -- measured on
RoPE-scaled evaluations of one run (``eval.rope_scaling`` in its overrides) and on short
fine-tunes of it (``finetunes:``, each a parent among the runs and the overrides of
``posexp finetune``).  They compare, at s x L for the preset's factor s, the run as trained
with its RoPE-scaled scorings at factor s and with its fine-tunes at s x L."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from posexp import scaling
from posexp.claims.base import Claim, CurveRef, Test, at
from posexp.claims.registry import ClaimSet, Sections, register_claim_set
from posexp.claims.sources import BLOC97, CHEN, PENG


@dataclass
class Thresholds:
    factor: float  # claims compare at factor x L, scaled by factor (fine-tunes too)
    pi_cost: float  # claim 2: PI without fine-tuning, ppl(L) >= this x plain ppl(L)
    finetune_gap: float  # claim 3: fine-tuned ppl(sL) <= (1 + this) x the parent's ppl(L)


def claims(L: int, th: DictConfig) -> list[Claim]:
    s = float(th.factor)
    long = int(s * L)
    defaults = {p.name: p.default for p in scaling.all_params()}

    def scaled(method: str) -> scaling.Key:
        return scaling.key(scaling.record(method, s, defaults))

    plain = CurveRef("rope", L)

    def scored(method: str) -> CurveRef:  # the run scored with a scaling
        return CurveRef("rope", L, scaling=scaled(method))

    def tuned(method: str) -> CurveRef:  # its fine-tune at s x L with a scaling
        return CurveRef("rope", long, fine_tune=(L, scaled(method)))

    k, gap = f"{s:g}", float(th.finetune_gap)
    return [
        Claim(1, f"Without fine-tuning, NTK-aware and YaRN scaling (factor {k}) beat plain "
                 f"extrapolation at {k}L", f"{BLOC97}; {PENG}, §3.1 and §3.4",
              "RoPE's perplexity climbs past L, and both methods are proposed as a fix that "
              "needs no training; 1 is a tie",
              [plain, scored("ntk"), scored("yarn")],
              [Test(f"{name} x{k} / plain, ppl({k}L)", at(scored(method), long, plain, long),
                    "<=", 1.0) for method, name in (("ntk", "NTK-aware"), ("yarn", "YaRN"))]),
        Claim(2, f"Position Interpolation without fine-tuning costs perplexity at L (factor "
                 f"{k})", f"{CHEN}; {PENG}, §3.1 (PI loses the high frequencies)",
              f"PI squeezes the positions the model learned by {k}: a cost of "
              f"{float(th.pi_cost) - 1:.0%} at L is one a user would notice",
              [plain, scored("linear")],
              [Test(f"PI x{k} / plain, ppl(L)", at(scored("linear"), L, plain, L), ">=",
                    float(th.pi_cost))]),
        Claim(3, f"A short fine-tune at {k}L with PI or YaRN brings {k}L within a few percent "
                 "of the parent's perplexity at L", f"{CHEN}, §3 (about 1000 steps); "
                 f"{PENG}, §4",
              f"'a few percent': {gap:.0%} above the parent's ppl(L); with {k}x the context "
              "a well-extended model does no worse than at L",
              [plain, tuned("linear"), tuned("yarn")],
              [Test(f"fine-tuned {name} ppl({k}L) / parent ppl(L)",
                    at(tuned(method), long, plain, L), "<=", 1 + gap)
               for method, name in (("linear", "PI"), ("yarn", "YaRN"))]),
        Claim(4, "YaRN fine-tunes at least as well as PI", f"{PENG}, §4",
              "the same fine-tune budget for both; 1 is a tie",
              [tuned("linear"), tuned("yarn")],
              [Test(f"fine-tuned YaRN / PI, ppl({k}L)", at(tuned("yarn"), long,
                                                          tuned("linear"), long),
                    "<=", 1.0)]),
    ]


def sections(preset: DictConfig) -> Sections:
    return [(f"Claims about RoPE context extension ({CHEN.split(',')[0]}; "
             f"{PENG.split(',')[0]}; {BLOC97.split(',')[0]})",
             claims(int(preset.train_seq_len), preset.thresholds))]


register_claim_set(ClaimSet("rope-scaling", Thresholds, sections))
