"""The claim sets of today's baselines (#45), under one margins file (margins/modern.yaml):
``modern`` (configs/reproduce/modern.yaml) judges them at the cpu suite's scale and protocol
-- forgetting attention (FoX), the hybrid of RoPE and NoPE layers, partial RoPE, SSMax, and,
on the cpu suite's RoPE runs without retraining, Self-Extend and the eval-time log-n
temperature; ``modern-tasks`` (configs/reproduce/modern-tasks.yaml) judges CoPE's own
claim, counting, on tasks under the tasks suite's recipe and gate.  Every claim is worded as
its paper words it; where posexp chose the comparator or the length, the source says so.
"Past L" is ppl(past_at x L), "far past L" ppl(far_at x L), both fixed in margins/modern.yaml
before the new arms trained."""

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
    degradation,
    lower,
    no_higher,
)
from posexp.claims.gate import Bar
from posexp.claims.press import learned_property
from posexp.claims.registry import ClaimSet, Sections, numbered, register_claim_set
from posexp.claims.sources import (
    BARBERO,
    BARBERO_SCALE,
    CHIANG,
    CHIANG_SCALE,
    GOLOVNEVA,
    GOLOVNEVA_SCALE,
    JIN,
    JIN_SCALE,
    LIN,
    LIN_SCALE,
    NAKANISHI,
    NAKANISHI_SCALE,
    YANG,
    YANG_SCALE,
)
from posexp.claims.tasks import AccuracyTest, at_least, judge_accuracy

SSMAX = (("model.ssmax", True),)  # the variant of a run trained with SSMax


@dataclass
class Thresholds:
    past_at: int  # "past L": ppl(kL)
    far_at: int  # "far past L": ppl(mL)
    better: Margin  # every superiority claim: by more than this
    tie: Margin  # every "no worse than": by less than this
    fox_flat: Margin  # FoX's ppl(mL) / ppl(L) below 1 + margin
    self_extend: dict  # group (G), neighbor_window (a fraction of L), margin and reason
    extension_factor: float  # NTK-aware and YaRN, Self-Extend's comparators, at this factor
    temperature: str  # the eval-time temperature (a method of posexp/scaling.py)
    # CoPE's own claims (the set modern-tasks): the tasks, the gate, the gain
    cope_tasks: list
    cope_learned: float
    cope_gain: Margin
    # the learning gate (claims/gate.py): the compressor an arm must beat at L
    learned_bar: Bar | None = None


def scored(method: str, factor: float, params: dict, L: int) -> CurveRef:
    """The RoPE runs scored with a method of posexp/scaling.py at ``factor``."""
    defaults = {p.name: p.default for p in scaling.all_params()} | params
    return CurveRef("rope", L, scaling=scaling.key(scaling.record(method, factor, defaults)))


def better_at(a: CurveRef, b: CurveRef, n: int, label: str, th: Thresholds) -> Test:
    return Test(f"{label} ppl({n // a.train_len}L)", at(a, n, b, n), lower(th.better.margin))


def fox_claims(L: int, th: Thresholds) -> list[Claim]:
    k, m, tie = th.past_at, th.far_at, th.tie.margin
    fox, rope, alibi = CurveRef("fox", L), CurveRef("rope", L), CurveRef("alibi", L)
    return [
        Claim(f"FoX extrapolates: no worse than its ppl(L) far past L ({m}L), and better "
              f"than RoPE past L ({k}L)",
              f"{LIN}, abstract (FoX outperforms the Transformer on length extrapolation)",
              LIN_SCALE, f"{th.fox_flat.reason}; {th.better.reason}", [fox, rope],
              [Test(f"fox ppl({m}L)/ppl(L)", degradation(fox, m),
                    no_higher(th.fox_flat.margin)),
               better_at(fox, rope, k * L, "fox/rope", th)],
              [Shown("fox/rope ppl(L)", at(fox, L, rope, L))]),
        Claim(f"FoX is at least as good as ALiBi far past L ({m}L)",
              f"{LIN} (the comparator is posexp's, #45: ALiBi is the data-independent "
              "decay FoX's forget gate learns per token)", LIN_SCALE, th.tie.reason,
              [fox, alibi],
              [Test(f"fox/alibi ppl({m}L)", at(fox, m * L, alibi, m * L), no_higher(tie))],
              [Shown("fox/alibi ppl(L)", at(fox, L, alibi, L))]),
    ]


def layer_claims(L: int, th: Thresholds) -> list[Claim]:
    k, tie = th.past_at, th.tie.margin
    rope = CurveRef("rope", L)
    hybrid, partial = CurveRef("hybrid", L), CurveRef("partial_rope", L)
    ssmax = CurveRef("rope", L, variant=SSMAX)
    return [
        Claim(f"The hybrid of RoPE and NoPE layers is better than RoPE past L ({k}L) and no "
              "worse at L",
              f"{YANG}, abstract (there the RoPE layers attend in a sliding window; here "
              "every layer attends to all keys)", YANG_SCALE,
              f"{th.better.reason}; {th.tie.reason}", [hybrid, rope],
              [better_at(hybrid, rope, k * L, "hybrid/rope", th),
               Test("hybrid/rope ppl(L)", at(hybrid, L, rope, L), no_higher(tie))]),
        Claim("Partial RoPE is no worse than RoPE at L",
              f"{BARBERO}, Table 2 (there p-RoPE's validation perplexity is better)",
              BARBERO_SCALE, th.tie.reason, [partial, rope],
              [Test("partial_rope/rope ppl(L)", at(partial, L, rope, L), no_higher(tie))],
              gated=False),
        Claim(f"SSMax helps RoPE past L ({k}L)",
              f"{NAKANISHI}, abstract (better length generalization with SSMax from the "
              "start of pretraining)", NAKANISHI_SCALE, th.better.reason, [ssmax, rope],
              [better_at(ssmax, rope, k * L, "rope+ssmax/rope", th)],
              [Shown("rope+ssmax/rope ppl(L)", at(ssmax, L, rope, L))]),
    ]


def eval_claims(L: int, th: Thresholds) -> list[Claim]:
    k, se, s = th.past_at, th.self_extend, th.extension_factor
    n, rope = k * L, CurveRef("rope", L)
    extended = scored("self_extend", float(se["group"]),
                      {"neighbor_window": float(se["neighbor_window"])}, L)
    ntk, yarn = scored("ntk", s, {}, L), scored("yarn", s, {}, L)
    warm = scored(th.temperature, 1.0, {}, L)
    return [
        Claim(f"Without fine-tuning, Self-Extend (G = {se['group']}) keeps RoPE's ppl({k}L) "
              f"within {se['margin']:.0%} of its ppl(L), and beats plain extrapolation, "
              f"NTK-aware and YaRN (factor {s:g}) there",
              f"{JIN}, abstract and §1 (scored here on the cpu suite's RoPE runs)", JIN_SCALE,
              f"{se['reason']}; {th.better.reason}", [rope, extended, ntk, yarn],
              [Test(f"self_extend ppl({k}L) / plain ppl(L)", at(extended, n, rope, L),
                    no_higher(float(se["margin"]))),
               better_at(extended, rope, n, "self_extend/plain", th),
               better_at(extended, ntk, n, "self_extend/ntk", th),
               better_at(extended, yarn, n, "self_extend/yarn", th)]),
        Claim(f"The log-n temperature at evaluation helps RoPE past L ({k}L)",
              f"{CHIANG} (log-length scaled attention, trained with there; applied here at "
              "evaluation only, as Su's entropy-invariance argument has it)", CHIANG_SCALE,
              th.better.reason, [rope, warm],
              [better_at(warm, rope, n, f"{th.temperature}/plain", th)],
              [Shown(f"{th.temperature}/plain ppl(L)", at(warm, L, rope, L))]),
    ]


def sections(preset: DictConfig, th: Thresholds) -> Sections:
    L = int(preset.train_seq_len)
    return [(f"Forgetting attention ({LIN.split(',')[0]})", fox_claims(L, th)),
            (f"Layers and logits ({YANG.split(',')[0]}; {BARBERO.split(',')[0]}; "
             f"{NAKANISHI.split(',')[0]})", layer_claims(L, th)),
            (f"At evaluation, no training ({JIN.split(',')[0]}; {CHIANG.split(',')[0]})",
             eval_claims(L, th))]


def cope_claims(preset: DictConfig, th: Thresholds) -> Sections:
    """CoPE against RoPE and against NoPE beyond the longest trained length, on each of
    cope_tasks, in exact match (the tasks suite's statistic)."""
    gain = th.cope_gain.margin
    claims = [
        Claim(f"CoPE generalizes to longer {task} instances better than RoPE and than NoPE",
              f"{GOLOVNEVA}, abstract (counting and selective copying, where the usual "
              f"encodings fail{'' if task == 'count' else '; copy here is plain copy'})",
              GOLOVNEVA_SCALE, th.cope_gain.reason,
              [(task, enc, ()) for enc in ("cope", "rope", "nope")],
              [AccuracyTest(f"cope - {enc} exact match beyond n_max", (task, "cope", ()),
                            (task, enc, ()), at_least(gain)) for enc in ("rope", "nope")])
        for task in th.cope_tasks]
    return [(f"Counting what matters ({GOLOVNEVA.split(',')[0]})", claims)]


def judge_cope(sections: Sections, runs: list, preset: DictConfig, th: Thresholds,
               n_tokens: int) -> list:
    return [judge_accuracy(c, runs, "exact", int(preset.train_seq_len), n, th.cope_learned)
            for n, c in numbered(sections)]


register_claim_set(ClaimSet("modern", Thresholds, sections, noted_by=learned_property))
register_claim_set(ClaimSet("modern-tasks", Thresholds, cope_claims, judged_by=judge_cope))
