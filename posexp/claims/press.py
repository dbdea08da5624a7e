"""The claim set ``press`` (configs/reproduce/cpu.yaml, gpu.yaml): the claims of Press et al.
(ALiBi) -- with T5's relative bias where the preset has its margin, and whether ALiBi's
longer windows use their context -- two about NoPE, and the fair-baseline claim.  A claim
that an encoding helps far past L is judged on perplexity there (absolute), its degradation
ratio ppl(mL)/ppl(L) shown beside."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from omegaconf import DictConfig

from posexp.claims.base import (
    NONOVERLAPPING,
    SLIDING,
    Claim,
    CurveRef,
    Lookup,
    Margin,
    Shown,
    Test,
    at,
    degradation,
    higher,
    lower,
    no_higher,
    no_lower,
    ratio_of,
    same,
)
from posexp.claims.gate import Bar
from posexp.claims.registry import ClaimSet, Sections, register_claim_set
from posexp.claims.sources import (
    HAVIV,
    HAVIV_SCALE,
    KAZEMNEJAD,
    KAZEMNEJAD_SCALE,
    PRESS,
    PRESS_SCALE,
    VASWANI,
    VASWANI_SCALE,
    press_between,
    press_degradation,
)
from posexp.runs import RunResult

# the absolute and relative encodings NoPE is compared with at the training length
OTHERS = ("learned", "sinusoidal", "rope", "alibi")


@dataclass
class Thresholds:
    sinusoidal_blowup_at: int  # claims 1 and 6 compare ppl at this multiple of L
    sinusoidal_blowup: Margin  # claim 1: sinusoidal ppl(kL)/ppl(L) above 1 + margin
    rope_between_at: list  # claim 2: the multiples of L it compares at
    better: Margin  # every superiority claim "a is better than b": by more than this
    alibi_flat_at: list  # claim 3: at these multiples of L ...
    alibi_flat: Margin  # ... ALiBi's ppl(mL)/ppl(L) no higher than 1 + margin
    alibi_vs_longer: Margin  # claim 4: ALiBi at 2L no worse than sinusoidal trained at 2L
    nope_margin: Margin  # claim 5: NoPE's ppl(L) no worse than the best encoding's
    context_at: list  # ALiBi's sliding windows of these multiples of L ...
    context: Margin  # ... score no better than at L by this (they do not use the context)
    t5_flat_at: list | None = None  # T5's ppl(mL)/ppl(L) here ...
    t5_flat: Margin | None = None  # ... no higher than 1 + margin
    fair_baseline: Margin | None = None  # sinusoidal and learned equivalent at L
    # the learning gate (claims/gate.py): the compressor an arm must beat at L
    learned_bar: Bar | None = None


def _curve(enc: str, L: int, mode: str = NONOVERLAPPING) -> CurveRef:
    return CurveRef(enc, L, mode)


def press_claims(L: int, th: Thresholds) -> list[Claim]:
    """How sinusoidal, RoPE and ALiBi extrapolate (Press et al.)."""
    k, better = th.sinusoidal_blowup_at, th.better.margin
    rope, alibi, sin = (_curve(e, L) for e in ("rope", "alibi", "sinusoidal"))
    return [
        Claim("Sinusoidal positions do not extrapolate", f"{PRESS}, Fig. 1 and §2.1",
              PRESS_SCALE, th.sinusoidal_blowup.reason, [sin],
              [Test(f"sinusoidal ppl({k}L)/ppl(L)", degradation(sin, k),
                    higher(th.sinusoidal_blowup.margin),
                    press_degradation("sinusoidal", k))]),
        Claim("RoPE extrapolates only a little: past L it is worse than ALiBi and better "
              "than sinusoidal", f"{PRESS}, Fig. 1 and §2.2", PRESS_SCALE, th.better.reason,
              [rope, alibi, sin],
              [test for m in th.rope_between_at for test in (
                  Test(f"rope/alibi ppl({m}L)", at(rope, m * L, alibi, m * L), higher(better),
                       press_between("rope", "alibi", m)),
                  Test(f"sinusoidal/rope ppl({m}L)", at(sin, m * L, rope, m * L),
                       higher(better), press_between("sinusoidal", "rope", m)))],
              [Shown(f"{a.encoding}/{b.encoding} degradation at {m}L",
                     ratio_of(degradation(a, m), degradation(b, m)))
               for m in th.rope_between_at for a, b in ((rope, alibi), (sin, rope))]),
        Claim("ALiBi extrapolates: no worse past L, nonoverlapping and sliding",
              f"{PRESS}, Fig. 1, Table 2 and §5", PRESS_SCALE, th.alibi_flat.reason,
              [alibi, _curve("alibi", L, SLIDING)],
              [Test(f"alibi{' sliding' if mode == SLIDING else ''} ppl({m}L)/ppl(L)",
                    degradation(_curve("alibi", L, mode), m),
                    no_higher(th.alibi_flat.margin),
                    press_degradation("alibi", m) if mode == NONOVERLAPPING else None)
               for mode in (NONOVERLAPPING, SLIDING) for m in th.alibi_flat_at]),
        Claim("ALiBi trained at L and evaluated at 2L is no worse than sinusoidal trained "
              "at 2L on the same token budget", f"{PRESS}, abstract and Fig. 4", PRESS_SCALE,
              th.alibi_vs_longer.reason, [alibi, _curve("sinusoidal", 2 * L)],
              [Test(f"alibi(L={L}) / sinusoidal(L={2 * L}) at 2L",
                    at(alibi, 2 * L, _curve("sinusoidal", 2 * L), 2 * L),
                    no_higher(th.alibi_vs_longer.margin))]),
    ]


def context_claims(L: int, th: Thresholds) -> list[Claim]:
    """Whether ALiBi's longer sliding windows use their extra context (Press et al., §5)."""
    alibi = _curve("alibi", L, SLIDING)
    return [Claim(
        "ALiBi's longer windows do not use their extra context: sliding perplexity at mL is "
        "no better than at L", f"{PRESS}, §5 (the analysis of why ALiBi extrapolates)",
        PRESS_SCALE, th.context.reason, [alibi],
        [Test(f"alibi sliding ppl({m}L)/ppl(L)", degradation(alibi, m),
              no_lower(th.context.margin)) for m in th.context_at])]


def nope_claims(L: int, th: Thresholds) -> list[Claim]:
    """No positional encoding at and past the training length."""
    k, nope, sin = th.sinusoidal_blowup_at, _curve("nope", L), _curve("sinusoidal", L)

    def nope_gap(ppl: Lookup) -> object:
        best = ppl(_curve(OTHERS[0], L), L)
        for enc in OTHERS[1:]:
            best = np.minimum(best, ppl(_curve(enc, L), L))
        return ppl(nope, L) / best

    return [
        Claim("Without any position signal the causal mask still teaches order: NoPE is "
              "competitive at the training length", f"{HAVIV}, Tables 1-2", HAVIV_SCALE,
              th.nope_margin.reason, [nope, *(_curve(enc, L) for enc in OTHERS)],
              [Test("nope ppl(L) / best encoding's ppl(L)", nope_gap,
                    no_higher(th.nope_margin.margin))], gated=False),
        Claim("NoPE is better than absolute (sinusoidal) positions past L",
              f"{KAZEMNEJAD}, §4 (shown there on algorithmic tasks; tested here on "
              "perplexity)", KAZEMNEJAD_SCALE, th.better.reason, [nope, sin],
              [Test(f"nope/sinusoidal ppl({k}L)", at(nope, k * L, sin, k * L),
                    lower(th.better.margin))],
              [Shown(f"nope/sinusoidal degradation at {k}L",
                     ratio_of(degradation(nope, k), degradation(sin, k)))]),
    ]


def t5_claims(L: int, th: Thresholds) -> list[Claim]:
    """T5's relative bias (Press et al., Table 2), where the preset has its margin."""
    if th.t5_flat is None or th.t5_flat_at is None:
        return []
    t5 = _curve("t5", L)
    at_text = " and ".join(f"{m}L" for m in th.t5_flat_at)
    return [Claim(f"T5's relative bias extrapolates a little: no worse than its ppl(L) at "
                  f"{at_text}", f"{PRESS}, Table 2 (the T5 bias column)", PRESS_SCALE,
                  th.t5_flat.reason, [t5],
                  [Test(f"t5 ppl({m}L)/ppl(L)", degradation(t5, m),
                        no_higher(th.t5_flat.margin), press_degradation("t5", m))
                   for m in th.t5_flat_at],
                  respecified="its margin went from 5% to 2% and its test from 5L to 4L in "
                              "d119cea, after a pilot run showed T5 failing")]


def fair_claims(L: int, th: Thresholds) -> list[Claim]:
    """The absolute baselines are fair, where the preset has its margin."""
    if th.fair_baseline is None:
        return []
    sinusoidal, learned = _curve("sinusoidal", L), _curve("learned", L)
    return [Claim(
        "Sinusoidal positions are as good as learned ones at the training length: the "
        "absolute baselines are fair", f"{VASWANI}, Table 3 row (E)", VASWANI_SCALE,
        th.fair_baseline.reason, [sinusoidal, learned],
        [Test("sinusoidal ppl(L) / learned ppl(L)", at(sinusoidal, L, learned, L),
              same(th.fair_baseline.margin))], gated=False)]


def sections(preset: DictConfig, th: Thresholds) -> Sections:
    L = int(preset.train_seq_len)
    fair = fair_claims(L, th)
    return [(f"Claims of {PRESS}",
             press_claims(L, th) + t5_claims(L, th) + context_claims(L, th)),
            ("Claims about no positional encoding (NoPE)", nope_claims(L, th)),
            *([("A fair baseline at the training length", fair)] if fair else [])]


def learned_property(runs: list[RunResult], preset: DictConfig, th: object) -> str:
    """What posexp did past a table of learned positions (an encoding with a
    ``position_table``, as learned's): a property of the encoding (it has no rows there), not
    evidence for a claim."""
    from posexp.encodings import ENCODINGS  # the registry (imports torch: not at start-up)

    train_len = int(preset.train_seq_len)
    tables = {name for name, spec in ENCODINGS.items() if spec.position_table}
    lengths = sorted({p["length"] for r in runs if r.encoding in tables
                      and r.train_len == train_len for p in r.curve if not p["applicable"]})
    shown = ", ".join(map(str, lengths)) if lengths else "no length past the table"
    return ("## A property, not a claim\n\n"
            f"Learned absolute positions have no row past their table (L = {train_len}): "
            f"posexp reports n/a rather than clamping positions (here at {shown}). This is "
            "how the encoding is built, not a finding.")


register_claim_set(ClaimSet("press", Thresholds, sections, noted_by=learned_property))
