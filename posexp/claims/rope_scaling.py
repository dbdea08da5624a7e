"""The claim set ``rope-scaling`` (configs/reproduce/rope-scaling.yaml, rope-scaling-gpu.yaml):
RoPE context extension -- Position Interpolation, NTK-aware scaling, YaRN -- measured on RoPE-
scaled evaluations of one run (``eval.rope_scaling`` in its overrides) and on fine-tunes of it
(``finetunes:``, each a parent among the runs and the overrides of ``posexp finetune``), at
each token budget the margins file names (``finetunes``, name -> tokens: a short fine-tune, and
continued training). They compare, at s x L for the preset's factor s, the run as trained with
its RoPE-scaled scorings at factor s and with its fine-tunes at s x L; and a control that
continues the parent at L on the fine-tunes' tokens, so that a fine-tune is measured against
the same training budget, not against fewer tokens."""

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
from posexp.claims.gate import Bar
from posexp.claims.registry import ClaimSet, Sections, register_claim_set
from posexp.claims.sources import BLOC97, CHEN, CHEN_SCALE, PENG, PENG_SCALE
from posexp.errors import UsageError


@dataclass
class Thresholds:
    factor: float  # claims compare at factor x L, scaled by factor (fine-tunes too)
    finetunes: dict  # name -> tokens: each fine-tune budget's claims (and its control's)
    better: Margin  # every superiority claim "a is better than b": by more than this
    pi_cost: Margin  # PI without fine-tuning: ppl(L) above (1 + margin) x plain ppl(L)
    finetune_gap: Margin  # fine-tuned ppl(sL) no higher than (1 + margin) x control ppl(L)
    tie: Margin  # YaRN's fine-tune no worse than PI's
    # the learning gate (claims/gate.py): the compressor an arm must beat at L
    learned_bar: Bar | None = None


METHODS = (("linear", "PI"), ("yarn", "YaRN"))  # the methods fine-tuned with


def budgets(th: Thresholds) -> list[tuple[str, int]]:
    """(name, tokens) of each fine-tune budget, in the margins file's order."""
    out = list((th.finetunes or {}).items())
    if not out or not all(isinstance(n, str) and n.strip() and isinstance(t, int)
                          and not isinstance(t, bool) and t > 0 for n, t in out):
        raise UsageError("thresholds.finetunes must map each fine-tune budget's name to its "
                         f"tokens (a positive integer), e.g. {{short: 200000}}; got "
                         f"{th.finetunes or None}")
    return out


def claims(L: int, th: Thresholds) -> list[Claim]:
    s = th.factor
    long, k, better = int(s * L), f"{s:g}", th.better.margin
    defaults = {p.name: p.default for p in scaling.all_params()}

    def scaled(method: str) -> scaling.Key:
        return scaling.key(scaling.record(method, s, defaults))

    plain = CurveRef("rope", L)

    def scored(method: str) -> CurveRef:  # the run scored with a scaling
        return CurveRef("rope", L, scaling=scaled(method))

    return [
        *(Claim(f"Without fine-tuning, {name} scaling (factor {k}) beats plain extrapolation "
                f"at {k}L", source, PENG_SCALE, th.better.reason, [plain, scored(method)],
                [Test(f"{name} x{k} / plain, ppl({k}L)", at(scored(method), long, plain, long),
                      lower(better))], respecified=SPLIT.format(first="NTK-aware and YaRN"))
          for method, name, source in (("ntk", "NTK-aware", f"{BLOC97}; {PENG}, §3.1"),
                                       ("yarn", "YaRN", f"{PENG}, §3.4"))),
        Claim(f"Position Interpolation without fine-tuning costs perplexity at L (factor {k})",
              f"{CHEN}; {PENG}, §3.1 (PI loses the high frequencies)", CHEN_SCALE,
              th.pi_cost.reason, [plain, scored("linear")],
              [Test(f"PI x{k} / plain, ppl(L)", at(scored("linear"), L, plain, L),
                    higher(th.pi_cost.margin))]),
        *(c for name, tokens in budgets(th) for c in tuned_claims(L, th, name, tokens, scaled)),
    ]


# each method a claim of its own: one claim of two methods held only if both did, and so a
# method that held read as "does not hold" beside one that did not
SPLIT = "split per method in 6e96f12 (#43); it was one claim of {first}, judged on both"
SOURCES = {"linear": f"{CHEN}, §3 (about 1000 steps)", "yarn": f"{PENG}, §4"}
SCALES = {"linear": CHEN_SCALE, "yarn": PENG_SCALE}


def tuned_claims(L: int, th: Thresholds, name: str, tokens: int,
                 scaled) -> list[Claim]:
    """The claims about the fine-tunes of one budget (``name``, ``tokens``): each method's
    against its control, the parent continued at L on the same tokens."""
    s = th.factor
    long, k, better = int(s * L), f"{s:g}", th.better.margin
    plain = CurveRef("rope", L)
    control = CurveRef("rope", L, fine_tune=(L, None, tokens))
    what = f"{name}, {tokens:,} tokens"

    def tuned(method: str) -> CurveRef:  # its fine-tune at s x L with a scaling
        return CurveRef("rope", long, fine_tune=(L, scaled(method), tokens))

    within = [
        Claim(f"A fine-tune at {k}L with {n} ({what}) brings {k}L within a few percent of "
              f"ppl(L) after the same training at L", SOURCES[m], SCALES[m],
              th.finetune_gap.reason, [control, plain, tuned(m)],
              [Test(f"fine-tuned {n} ppl({k}L) / control ppl(L)",
                    at(tuned(m), long, control, L), no_higher(th.finetune_gap.margin))],
              [Shown(f"fine-tuned {n} ppl({k}L) / parent ppl(L)",
                     at(tuned(m), long, plain, L))],
              respecified=SPLIT.format(first="PI and YaRN"))
        for m, n in METHODS]
    gains = [
        Claim(f"The {n} fine-tune's gain at {k}L ({what}) is not more training alone: it "
              f"beats the parent continued at L on the same tokens, at {k}L", SOURCES[m],
              SCALES[m], th.better.reason, [control, tuned(m)],
              [Test(f"fine-tuned {n} / control, ppl({k}L)",
                    at(tuned(m), long, control, long), lower(better))],
              respecified=SPLIT.format(first="PI and YaRN"))
        for m, n in METHODS]
    return [*within, *gains,
            Claim(f"YaRN fine-tunes at least as well as PI ({what})", f"{PENG}, §4", PENG_SCALE,
                  th.tie.reason, [tuned("linear"), tuned("yarn")],
                  [Test(f"fine-tuned YaRN / PI, ppl({k}L)",
                        at(tuned("yarn"), long, tuned("linear"), long),
                        no_higher(th.tie.margin))])]


def sections(preset: DictConfig, th: Thresholds) -> Sections:
    return [(f"Claims about RoPE context extension ({CHEN.split(',')[0]}; "
             f"{PENG.split(',')[0]}; {BLOC97.split(',')[0]})",
             claims(int(preset.train_seq_len), th))]


register_claim_set(ClaimSet("rope-scaling", Thresholds, sections))
