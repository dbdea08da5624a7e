"""The claim set ``encodings`` (configs/reproduce/encodings.yaml, encodings-gpu.yaml): the
encodings that came after the seed's four -- randomized positions (Ruoss et al.) against the
same encoding without them, xPos against RoPE, KERPLE and FIRE against ALiBi.  Its presets
train every registered encoding (``every_encoding: true``)."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from posexp.claims.base import Claim, CurveRef, Test, at, degradation, randomized, ratio_of
from posexp.claims.press import learned_property
from posexp.claims.registry import ClaimSet, Sections, register_claim_set
from posexp.claims.sources import CHI, LI, RUOSS, SUN


@dataclass
class Thresholds:
    degradation_at: int  # randomized vs plain, xPos vs RoPE: ppl(kL)/ppl(L)
    far_at: int  # KERPLE and FIRE vs ALiBi: ppl(mL)
    random_positions: int  # M of the randomized runs
    randomized: list  # encodings trained with and without random positions


def randomized_claims(L: int, th: DictConfig) -> list[Claim]:
    k, M = int(th.degradation_at), int(th.random_positions)
    return [
        Claim(10 + i, f"Training on random positions below {M} makes {enc} degrade less past "
                      "L than training on 0..L-1",
              f"{RUOSS}, §4 (shown there on algorithmic tasks; tested here on perplexity)",
              "1 is 'degrades alike'; the runs share their batches, so the positions are the "
              "only difference",
              [CurveRef(enc, L), randomized(enc, L, M)],
              [Test(f"{enc} randomized/plain degradation at {k}L",
                    ratio_of(degradation(randomized(enc, L, M), k),
                             degradation(CurveRef(enc, L), k)), "<=", 1.0)])
        for i, enc in enumerate(th.randomized)]


def later_claims(L: int, th: DictConfig, first: int) -> list[Claim]:
    k, far = int(th.degradation_at), int(th.far_at)
    xpos, rope, alibi = CurveRef("xpos", L), CurveRef("rope", L), CurveRef("alibi", L)
    kerple, fire = CurveRef("kerple_log", L), CurveRef("fire", L)
    return [
        Claim(first, "xPos degrades less past L than RoPE", f"{SUN}, §3 and Table 3 (measured "
                     "there with blockwise causal attention, which posexp does not use)",
              "xPos's scale is proposed as RoPE's fix for extrapolation; 1 is 'degrades alike'",
              [xpos, rope],
              [Test(f"xpos/rope degradation at {k}L", ratio_of(
                  degradation(xpos, k), degradation(rope, k)), "<=", 1.0)]),
        Claim(first + 1, f"KERPLE's logarithmic kernel is at least as good as ALiBi far past L "
                         f"({far}L)", f"{CHI}, Tables 2-3 (kerple log beats ALiBi at the "
                                      "longest lengths)", "1 is a tie",
              [kerple, alibi],
              [Test(f"kerple_log/alibi ppl({far}L)", at(kerple, far * L, alibi, far * L), "<=",
                    1.0)]),
        Claim(first + 2, f"FIRE is at least as good as ALiBi far past L ({far}L)",
              f"{LI}, §4 (language modelling at lengths beyond training)", "1 is a tie",
              [fire, alibi],
              [Test(f"fire/alibi ppl({far}L)", at(fire, far * L, alibi, far * L), "<=", 1.0)]),
    ]


def sections(preset: DictConfig) -> Sections:
    L, th = int(preset.train_seq_len), preset.thresholds
    random = randomized_claims(L, th)
    return [(f"Randomized positions ({RUOSS.split(',')[0]})", random),
            (f"The later encodings ({SUN.split(',')[0]}; {CHI.split(',')[0]}; "
             f"{LI.split(',')[0]})", later_claims(L, th, 10 + len(random)))]


register_claim_set(ClaimSet("encodings", Thresholds, sections, note=learned_property))
