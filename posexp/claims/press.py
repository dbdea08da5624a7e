"""The claim set ``press`` (configs/reproduce/cpu.yaml, gpu.yaml): the claims of Press et
al. (ALiBi), with T5's relative bias where the preset gives its thresholds, two about NoPE,
and the fair-baseline claim."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from omegaconf import DictConfig

from posexp.claims.base import (
    NONOVERLAPPING,
    SLIDING,
    TRAIN_SPEED,
    Claim,
    CurveRef,
    Lookup,
    Test,
    at,
    degradation,
    ratio_of,
)
from posexp.claims.registry import ClaimSet, Sections, register_claim_set
from posexp.claims.sources import HAVIV, KAZEMNEJAD, PRESS, VASWANI
from posexp.runs import RunResult

# the absolute and relative encodings NoPE is compared with at the training length
OTHERS = ("learned", "sinusoidal", "rope", "alibi")


@dataclass
class Thresholds:
    sinusoidal_blowup_at: int  # claims 1 and 6 compare ppl at this multiple of L
    sinusoidal_blowup: float  # claim 1: ppl(kL) >= this x ppl(L)
    rope_between_at: list  # claim 2: RoPE's degradation between ALiBi's and sinusoidal's here
    alibi_flat_at: list  # claim 3: at these multiples of L ...
    alibi_flat: float  # ... ppl(mL) <= this x ppl(L)
    nope_margin: float  # claim 5: NoPE ppl(L) within this share of the best encoding's
    t5_flat_at: list | None = None  # claim 7 (with t5_flat): T5's ppl(mL)/ppl(L) here ...
    t5_flat: float | None = None  # ... at most this
    fair_baseline: float | None = None  # claim 9: sinusoidal ppl(L) / learned ppl(L) at most


def _curve(enc: str, L: int, mode: str = NONOVERLAPPING) -> CurveRef:
    return CurveRef(enc, L, mode)


def press_claims(L: int, th: DictConfig) -> list[Claim]:
    """Claims 1-4: how sinusoidal, RoPE and ALiBi extrapolate (Press et al.)."""
    k = int(th.sinusoidal_blowup_at)
    rope_at = [int(m) for m in th.rope_between_at]

    def ratio(enc: str, m: int, mode: str = NONOVERLAPPING):
        return degradation(_curve(enc, L, mode), m)

    return [
        Claim(1, "Sinusoidal positions do not extrapolate", f"{PRESS}, Fig. 1 and §2.1",
              f"Fig. 1: sinusoidal perplexity climbs steeply within a few hundred tokens past "
              f"L; doubling by {k}L is a failure that seed noise cannot produce",
              [_curve("sinusoidal", L)],
              [Test(f"sinusoidal ppl({k}L)/ppl(L)", ratio("sinusoidal", k), ">=",
                    float(th.sinusoidal_blowup))]),
        Claim(2, "RoPE extrapolates only a little: it degrades past L more than ALiBi and "
                 "less than sinusoidal", f"{PRESS}, Fig. 1 and §2.2",
              "the paper's ordering of the three curves at 2L and 4L; 1 is 'no difference'",
              [_curve(enc, L) for enc in ("rope", "alibi", "sinusoidal")],
              [test for m in rope_at for test in (
                  Test(f"rope/alibi degradation at {m}L", ratio_of(ratio("rope", m),
                                                                   ratio("alibi", m)),
                       ">=", 1.0),
                  Test(f"sinusoidal/rope degradation at {m}L",
                       ratio_of(ratio("sinusoidal", m), ratio("rope", m)), ">=", 1.0))]),
        Claim(3, "ALiBi extrapolates: no worse past L, nonoverlapping and sliding",
              f"{PRESS}, Fig. 1, Table 2 and §5",
              f"the paper's ALiBi curves stay at or below ppl(L) to 16L; {th.alibi_flat:g} "
              "allows for a model a thousand times smaller",
              [_curve("alibi", L), _curve("alibi", L, SLIDING)],
              [Test(f"alibi{' sliding' if mode == SLIDING else ''} ppl({m}L)/ppl(L)",
                    ratio("alibi", int(m), mode), "<=", float(th.alibi_flat))
               for mode in (NONOVERLAPPING, SLIDING) for m in th.alibi_flat_at]),
        Claim(4, "ALiBi trained at L and evaluated at 2L is at least as good as sinusoidal "
                 "trained at 2L on the same token budget", f"{PRESS}, abstract and Fig. 4",
              "'achieving the same perplexity': a ratio of 1 is a tie",
              [_curve("alibi", L), _curve("sinusoidal", 2 * L)],
              [Test(f"alibi(L={L}) / sinusoidal(L={2 * L}) at 2L",
                    at(_curve("alibi", L), 2 * L, _curve("sinusoidal", 2 * L), 2 * L),
                    "<=", 1.0)]),
    ]


def nope_claims(L: int, th: DictConfig) -> list[Claim]:
    """Claims 5-6: no positional encoding at and past the training length."""
    k = int(th.sinusoidal_blowup_at)

    def nope_gap(ppl: Lookup) -> object:
        best = ppl(_curve(OTHERS[0], L), L)
        for enc in OTHERS[1:]:
            best = np.minimum(best, ppl(_curve(enc, L), L))
        return ppl(_curve("nope", L), L) / best

    return [
        Claim(5, "Without any position signal the causal mask still teaches order: NoPE is "
                 "competitive at the training length", f"{HAVIV}, Tables 1-2",
              f"Haviv et al. call a small gap that shrinks with scale competitive; posexp's "
              f"line is {th.nope_margin:.0%} (configs/reproduce)",
              [_curve(enc, L) for enc in ("nope", *OTHERS)],
              [Test("nope ppl(L) / best encoding's ppl(L)", nope_gap, "<=",
                    1 + float(th.nope_margin))]),
        Claim(6, "NoPE degrades less past L than absolute (sinusoidal) positions",
              f"{KAZEMNEJAD}, §4 (shown there on algorithmic tasks; tested here on "
              "perplexity)", "1 is 'degrades alike'",
              [_curve("nope", L), _curve("sinusoidal", L)],
              [Test(f"nope/sinusoidal degradation at {k}L",
                    ratio_of(degradation(_curve("nope", L), k),
                             degradation(_curve("sinusoidal", L), k)), "<=", 1.0)]),
    ]


def t5_claims(L: int, th: DictConfig) -> list[Claim]:
    """Claims 7-8: T5's relative bias (Press et al., Tables 1-2), where the preset has
    their thresholds."""
    if th.get("t5_flat") is None:
        return []
    t5_at = [int(m) for m in th.t5_flat_at]
    alibi, t5 = _curve("alibi", L), _curve("t5", L)
    return [
        Claim(7, "T5's relative bias extrapolates a little: its perplexity stays near "
                 f"ppl(L) at {' and '.join(f'{m}L' for m in t5_at)}",
              f"{PRESS}, Table 2 (the T5 bias column)",
              "Table 2 has T5's bias within a few percent of its ppl(L) at about 2L and "
              f"5L; {th.t5_flat:g}, as for ALiBi",
              [t5], [Test(f"t5 ppl({m}L)/ppl(L)", degradation(t5, m), "<=", float(th.t5_flat))
                     for m in t5_at]),
        Claim(8, "T5's relative bias trains slower than ALiBi", f"{PRESS}, Table 1",
              "Table 1 has the T5 bias training markedly slower than ALiBi (and "
              "sinusoidal) on the same hardware; 1 is the same speed. Both runs of a "
              "seed train one after the other on one machine",
              [alibi, t5], [Test("alibi / t5 training tokens per second",
                                 at(alibi, TRAIN_SPEED, t5, TRAIN_SPEED), ">=", 1.0,
                                 speed=True)]),
    ]


def fair_claims(L: int, th: DictConfig) -> list[Claim]:
    """Claim 9: the absolute baselines are fair, where the preset has its threshold."""
    if th.get("fair_baseline") is None:
        return []
    sinusoidal, learned = _curve("sinusoidal", L), _curve("learned", L)
    return [Claim(
        9, "Sinusoidal positions are as good as learned ones at the training length: "
           "the absolute baselines are fair", f"{VASWANI}, Table 3 row (E)",
        "row (E): learned positions instead of sinusoids gave 'nearly identical results' "
        f"(4.92 vs 4.91 dev perplexity); {th.fair_baseline:g} is 'no worse'",
        [sinusoidal, learned],
        [Test("sinusoidal ppl(L) / learned ppl(L)", at(sinusoidal, L, learned, L), "<=",
              float(th.fair_baseline))])]


def sections(preset: DictConfig) -> Sections:
    L, th = int(preset.train_seq_len), preset.thresholds
    fair = fair_claims(L, th)
    return [(f"Claims of {PRESS}", press_claims(L, th) + t5_claims(L, th)),
            ("Claims about no positional encoding (NoPE)", nope_claims(L, th)),
            *([("A fair baseline at the training length", fair)] if fair else [])]


def learned_property(runs: list[RunResult], preset: DictConfig) -> str:
    """What posexp did past a learned table's size: a property of the encoding (it has no
    rows there), not evidence for a claim."""
    train_len = int(preset.train_seq_len)
    lengths = sorted({p["length"] for r in runs if r.encoding == "learned"
                      and r.train_len == train_len for p in r.curve if not p["applicable"]})
    shown = ", ".join(map(str, lengths)) if lengths else "no length past the table"
    return (f"Learned absolute positions have no row past their table (L = {train_len}): "
            f"posexp reports n/a rather than clamping positions (here at {shown}). This is "
            "how the encoding is built, not a finding.")


register_claim_set(ClaimSet("press", Thresholds, sections, note=learned_property))
