"""The claim set ``encodings`` (configs/reproduce/encodings.yaml, encodings-gpu.yaml): the
encodings that came after the seed's four -- randomized positions (Ruoss et al.) against the
same encoding without them, xPos against RoPE, KERPLE and FIRE against ALiBi.  Its presets
train every registered encoding (``every_encoding: true``).  A claim that an encoding helps
far past L is judged on perplexity there, its degradation ratio shown beside."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

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
    randomized,
    ratio_of,
)
from posexp.claims.gate import Bar
from posexp.claims.press import learned_property
from posexp.claims.registry import ClaimSet, Sections, register_claim_set
from posexp.claims.sources import CHI, CHI_SCALE, LI, LI_SCALE, RUOSS, RUOSS_SCALE, SUN, SUN_SCALE


@dataclass
class Thresholds:
    degradation_at: int  # randomized vs plain, xPos vs RoPE: ppl(kL)
    far_at: int  # KERPLE and FIRE vs ALiBi: ppl(mL)
    random_positions: int  # M of the randomized runs
    randomized: list  # encodings trained with and without random positions
    better: Margin  # every superiority claim "a is better than b": by more than this
    tie: Margin  # every "at least as good as": no worse than this
    # the learning gate (claims/gate.py): the compressor an arm must beat at L
    learned_bar: Bar | None = None


def helps(a: CurveRef, b: CurveRef, k: int, what: str, th: Thresholds) -> tuple[list, list]:
    """(the test that ``a`` is better than ``b`` at kL, the values shown beside it: their
    degradations' ratio, and their ratio at L)."""
    L = a.train_len
    return ([Test(f"{what} ppl({k}L)", at(a, k * L, b, k * L), lower(th.better.margin))],
            [Shown(f"{what} degradation at {k}L", ratio_of(degradation(a, k),
                                                           degradation(b, k))),
             Shown(f"{what} ppl(L)", at(a, L, b, L))])


def randomized_claims(L: int, th: Thresholds) -> list[Claim]:
    k, M = th.degradation_at, th.random_positions
    return [
        Claim(f"Training on random positions below {M} makes {enc} better past L than "
              "training on 0..L-1",
              f"{RUOSS}, §4 (shown there on algorithmic tasks; tested here on perplexity)",
              RUOSS_SCALE, f"{th.better.reason}; the runs share their batches, so the "
                           "positions are the only difference",
              [CurveRef(enc, L), randomized(enc, L, M)],
              *helps(randomized(enc, L, M), CurveRef(enc, L), k, f"{enc} randomized/plain",
                     th))
        for enc in th.randomized]


def later_claims(L: int, th: Thresholds) -> list[Claim]:
    k, far, tie = th.degradation_at, th.far_at, th.tie.margin
    xpos, rope, alibi = CurveRef("xpos", L), CurveRef("rope", L), CurveRef("alibi", L)
    kerple, fire = CurveRef("kerple_log", L), CurveRef("fire", L)
    return [
        Claim("xPos is better than RoPE past L", f"{SUN}, §3 and Table 3 (measured there with "
                                                 "blockwise causal attention, which posexp "
                                                 "does not use)",
              SUN_SCALE, th.better.reason, [xpos, rope], *helps(xpos, rope, k, "xpos/rope", th)),
        Claim(f"KERPLE's logarithmic kernel is at least as good as ALiBi far past L ({far}L)",
              f"{CHI}, Tables 2-3 (kerple log beats ALiBi at the longest lengths)", CHI_SCALE,
              th.tie.reason, [kerple, alibi],
              [Test(f"kerple_log/alibi ppl({far}L)", at(kerple, far * L, alibi, far * L),
                    no_higher(tie))]),
        Claim(f"FIRE is at least as good as ALiBi far past L ({far}L)",
              f"{LI}, §4 (language modelling at lengths beyond training)", LI_SCALE,
              th.tie.reason, [fire, alibi],
              [Test(f"fire/alibi ppl({far}L)", at(fire, far * L, alibi, far * L),
                    no_higher(tie))]),
    ]


def sections(preset: DictConfig, th: Thresholds) -> Sections:
    L = int(preset.train_seq_len)
    return [(f"Randomized positions ({RUOSS.split(',')[0]})", randomized_claims(L, th)),
            (f"The later encodings ({SUN.split(',')[0]}; {CHI.split(',')[0]}; "
             f"{LI.split(',')[0]})", later_claims(L, th))]


register_claim_set(ClaimSet("encodings", Thresholds, sections, noted_by=learned_property))
