"""Published claims about length extrapolation, measured here with their uncertainty.

A preset (``configs/reproduce/<name>.yaml``) lists the runs, the seeds, the common overrides
and every threshold.  Each run trains unless a completed run of the same identity exists, is
scored in both modes, and each claim is judged from what was measured:

* every claim names its source paper, its threshold and why that threshold;
* its statistic (a ratio of perplexities) is computed per seed and reported with a 95%
  interval: Student-t over the seeds on the log scale (the centre is the geometric mean)
  when there are two or more, else the paired bootstrap over the scored text's blocks
  (posexp/stats.py), which says how sure one run's number is but not how another seed would
  have trained;
* the verdict is *holds* when the whole interval lies on the claim's side of the threshold,
  *does not hold* when it lies wholly on the other side, and *inconclusive* when it straddles
  the threshold.

A preset names its claim set (``claims:``, default ``press``): ``press`` holds the claims of
Press et al. (with T5's relative bias when the preset gives its thresholds), two about NoPE
and the fair-baseline claim (configs/reproduce/cpu.yaml, gpu.yaml); ``rope-scaling`` those
about RoPE context extension (rope-scaling.yaml, rope-scaling-gpu.yaml), measured on
RoPE-scaled evaluations of one run (``eval.rope_scaling`` in its overrides) and on short
fine-tunes of it (``finetunes:``, each a parent among the runs and the overrides of
``posexp finetune``); ``encodings`` those about the later encodings and randomized positions
(encodings.yaml, encodings-gpu.yaml), whose presets train every registered encoding
(``every_encoding: true``) beside the runs of the press preset they share, and write their
report to a directory of their own (``report:``); ``tasks`` those about length
generalization on algorithmic tasks (tasks.yaml, tasks-gpu.yaml), whose statistics are
differences of accuracy beyond the longest trained length (judge_accuracy): Student-t over
seeds on the plain scale, or for one seed the points' own Wilson or bootstrap intervals
combined.

The verdicts read exactly the preset's runs.  A run that fails does not stop the others; every
claim that needs it is "not measured", and so is a claim whose runs hold no common scored
region or no common seed: a claim never compares points scored on different validation
tokens, or in different modes.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from posexp import config as C
from posexp import stats
from posexp.errors import PosexpError, UsageError
from posexp.report import Series, build_series, curve_name, region_text, write_report
from posexp.runs import (
    MISSING,
    Region,
    RunResult,
    Scaling,
    atomic_write_json,
    atomic_write_text,
    load_run,
    scaling_key,
    split_runs,
)

NONOVERLAPPING, SLIDING = "nonoverlapping", "sliding"
# A curve a claim compares: (encoding, training length, mode) of a run as trained; or, with
# RoPE scaling, (encoding, training length, mode, the scaling it is scored with, None or a
# fine-tune's (root training length, its training-time scaling)); or all that and a variant:
# the values of VARIANT_KEYS that set the run apart from the plain run of its encoding.
Need = tuple
VARIANT_KEYS = ("train.random_positions",)  # identity keys a claim may compare runs on
# ppl(*need, evaluation length): one seed's perplexity, or the bootstrap resamples of it (an
# array; every point's blocks drawn alike).  At the length TRAIN_SPEED, the run's training
# tokens per second.
Lookup = Callable[..., "float | np.ndarray"]
TRAIN_SPEED = "training speed"


def full_need(need: Need) -> tuple[str, int, str, Scaling, tuple | None, tuple]:
    return (*need, None, None, ())[:6] if len(need) == 3 else (*need, ())[:6]


def randomized(encoding: str, train_len: int, positions: int) -> Need:
    """The curve of ``encoding`` trained at ``train_len`` on random positions below
    ``positions`` (train.random_positions)."""
    return (encoding, train_len, NONOVERLAPPING, None, None,
            (("train.random_positions", positions),))


def variant_of(run: RunResult) -> tuple:
    return tuple((k, run.identity[k]) for k in VARIANT_KEYS if run.identity.get(k) is not None)


def need_text(need: Need) -> str:
    """How a verdict names the curve a claim needs (report.curve_name)."""
    enc, train_len, _, scaling, fine_tune, variant = full_need(need)
    return " ".join([curve_name(enc, train_len, scaling, fine_tune),
                     *(f"{k}={v}" for k, v in variant)])


def speed_point(run: RunResult) -> dict:
    """The run's training speed as a point a claim can read (a speed has no blocks, so one
    seed gives it no interval)."""
    speed = run.info.get("tok_per_s")
    ok = isinstance(speed, int | float) and not isinstance(speed, bool) and speed > 0
    return {"ppl": float(speed) if ok else None, "applicable": ok}


PRESS = "Press et al., Train Short, Test Long (ALiBi), ICLR 2022"
HAVIV = "Haviv et al., Transformer Language Models without Positional Encodings Still Learn " \
        "Positional Information, Findings of EMNLP 2022"
KAZEMNEJAD = "Kazemnejad et al., The Impact of Positional Encoding on Length Generalization " \
             "in Transformers, NeurIPS 2023"
CHEN = "Chen et al., Extending Context Window of Large Language Models via Positional " \
       "Interpolation, arXiv:2306.15595 (2023)"
PENG = "Peng et al., YaRN: Efficient Context Window Extension of Large Language Models, " \
       "ICLR 2024"
BLOC97 = "bloc97, NTK-Aware Scaled RoPE (r/LocalLLaMA, 2023)"
VASWANI = "Vaswani et al., Attention Is All You Need, NeurIPS 2017"
RUOSS = "Ruoss et al., Randomized Positional Encodings Boost Length Generalization of " \
        "Transformers, ACL 2023"
SUN = "Sun et al., A Length-Extrapolatable Transformer, ACL 2023"
CHI = "Chi et al., KERPLE: Kernelized Relative Positional Embedding for Length " \
      "Extrapolation, NeurIPS 2022"
LI = "Li et al., Functional Interpolation for Relative Positions Improves Long Context " \
     "Transformers, ICLR 2024"
HOLDS, FAILS, INCONCLUSIVE, UNMEASURED = "holds", "does not hold", "inconclusive", "not measured"


@dataclass(frozen=True)
class Test:
    """One comparison of a claim: ``statistic`` (op) ``threshold``."""

    label: str
    statistic: Callable[[Lookup], float | np.ndarray]
    op: str  # "<=" or ">="
    threshold: float
    speed: bool = False  # a ratio of training speeds: no bootstrap interval for one seed


@dataclass(frozen=True)
class Claim:
    number: int
    text: str
    source: str
    why: str  # why this threshold
    needs: list[Need]
    tests: list[Test]


@dataclass
class Verdict:
    claim: str
    source: str
    threshold: str
    measured: str
    verdict: str  # holds | does not hold | inconclusive | not measured
    interval: str  # where the intervals come from


def load_preset(name: str, config_dir: Path) -> DictConfig:
    """A preset by name from configs/reproduce/, or a YAML file of the same shape."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else (
        config_dir / "reproduce" / f"{name}.yaml")
    if not path.is_file():
        found = sorted(p.stem for p in (config_dir / "reproduce").glob("*.yaml"))
        raise UsageError(f"there is no reproduce preset {name!r}; available: {', '.join(found)}")
    return OmegaConf.load(path)


class Missing(Exception):
    """A claim needs a point its runs do not hold."""


class Curves:
    """The preset's completed runs as series, for claims to look up by (encoding, training
    length, mode), every curve of one claim on one scored region."""

    def __init__(self, runs: list[RunResult], n_tokens: int) -> None:
        self.series = build_series(runs)[0]
        self.n_tokens = n_tokens

    def measure(self, needs: list[Need]) -> dict[Need, dict[int, dict[int, dict]]] | str:
        """seed -> length -> point of each needed curve, all on one region of eval.tokens
        tokens, or why there is none.  eval.tokens puts its region at the end of the
        validation split, so of the regions every curve holds, the one that starts latest
        is the preset's own; older runs may hold points on other regions beside it."""
        found: dict[Need, dict[Region, Series]] = {}
        for need in needs:
            mode = need[2]
            by_region: dict[Region, Series] = {}
            for s in self.series:
                if (s.encoding, s.train_len, s.mode, s.scaling, s.fine_tune,
                        variant_of(s.members[0])) != full_need(need):
                    continue
                if s.region in by_region:
                    return (f"two configs of {need_text(need)}: {by_region[s.region].label} "
                            f"and {s.label}")
                by_region[s.region] = s
            if not by_region:
                return f"no completed run of {need_text(need)} with {mode} points"
            found[need] = by_region
        common = set.intersection(*(set(by_region) for by_region in found.values()))
        common = {region for region in common if region[1] == self.n_tokens}
        if not common:
            held = "; ".join(f"{need_text(need)} {need[2]}: "
                             + ", ".join(region_text(r) for r in sorted(found[need]))
                             for need in needs)
            return (f"no scored region of {self.n_tokens} tokens common to its runs ({held})")
        region = max(common)
        return {need: {r.seed: {**r.points(need[2], region, full_need(need)[3]),
                                TRAIN_SPEED: speed_point(r)}
                       for r in found[need][region].members} for need in needs}


def _decide(interval: stats.Interval, op: str, threshold: float) -> str:
    if interval.low is None or interval.high is None:
        return INCONCLUSIVE
    on_side = operator.le if op == "<=" else operator.ge
    if on_side(interval.low, threshold) and on_side(interval.high, threshold):
        return HOLDS
    if not on_side(interval.low, threshold) and not on_side(interval.high, threshold):
        return FAILS
    return INCONCLUSIVE


def judge(claim: Claim, curves: Curves) -> Verdict:
    """The claim's verdict: every test's statistic with its interval, combined (all hold:
    holds; one wholly on the wrong side: does not hold; otherwise inconclusive)."""
    threshold = "; ".join(f"{t.label} {t.op} {t.threshold:g}" for t in claim.tests)
    threshold += f" ({claim.why})"

    def unmeasured(reason: str) -> Verdict:
        return Verdict(f"{claim.number}. {claim.text}", claim.source, threshold,
                       f"not measured: {reason}", UNMEASURED, "")

    got = curves.measure(claim.needs)
    if isinstance(got, str):
        return unmeasured(got)
    seeds = sorted(set.intersection(*(set(by_seed) for by_seed in got.values())))
    if not seeds:
        return unmeasured("its runs share no seed")

    def point(seed: int, *need_length: object) -> dict:
        need, length = need_length[:-1], need_length[-1]
        p = got[need][seed].get(length)
        if length == TRAIN_SPEED and not p["applicable"]:
            raise Missing(f"{need_text(need)} (seed {seed}) recorded no training speed")
        if p is None or not p["applicable"]:
            raise Missing(f"{need_text(need)} has no {need[2]} point at {length}")
        return p

    try:
        if len(seeds) > 1:
            intervals = [stats.t_interval([
                float(t.statistic(lambda *need, s=s: point(s, *need)["ppl"])) for s in seeds],
                log=True) for t in claim.tests]
            method = f"Student-t over seeds {', '.join(map(str, seeds))} (log scale)"
        else:
            intervals = [_bootstrap(t, lambda *need: point(seeds[0], *need))
                         for t in claim.tests]
            method = f"one seed ({seeds[0]}): bootstrap over the scored text's blocks"
    except Missing as e:
        return unmeasured(str(e))
    decisions = [_decide(i, t.op, t.threshold) for i, t in zip(intervals, claim.tests,
                                                                strict=True)]
    verdict = FAILS if FAILS in decisions else HOLDS if all(
        d == HOLDS for d in decisions) else INCONCLUSIVE
    measured = "; ".join(
        f"{t.label} = {i.text(3)}" if i.low is not None else
        f"{t.label} = {i.value:.3f} (no interval: " + (
            "a speed has none from one seed)" if t.speed else "rescore with posexp eval RUN)")
        for t, i in zip(claim.tests, intervals, strict=True))
    return Verdict(f"{claim.number}. {claim.text}", claim.source, threshold, measured, verdict,
                   method)


def _bootstrap(test: Test, point: Callable[..., dict]) -> stats.Interval:
    """One seed: the statistic on the measured perplexities, and its percentile interval over
    bootstrap resamples of the scored blocks (the same blocks for every point)."""
    value = float(test.statistic(lambda *need: point(*need)["ppl"]))
    if test.speed:
        return stats.Interval(value, None, None, 1, "no interval")
    try:
        samples = test.statistic(lambda *need: np.exp(stats.resampled_loss(point(*need))))
    except ValueError:  # points written before posexp recorded block losses
        return stats.Interval(value, None, None, 1, "no interval")
    low, high = stats.percentile_interval(np.asarray(samples))
    return stats.Interval(value, low, high, 1, "bootstrap")


def degradation(need: Need, m: int) -> Callable[[Lookup], object]:
    """ppl(mL) / ppl(L) of a curve trained at L."""
    L = need[1]
    return lambda ppl: ppl(*need, m * L) / ppl(*need, L)


def ratio_of(a: Callable, b: Callable) -> Callable[[Lookup], object]:
    return lambda ppl: a(ppl) / b(ppl)


def claims(preset: DictConfig) -> tuple[list[Claim], list[Claim], list[Claim]]:
    """(claims of Press et al., claims about NoPE, the fair-baseline claim) with the preset's
    thresholds: the claim set ``press``.  T5's claims and the fair baseline's need their
    thresholds in the preset (t5_flat, t5_flat_at, fair_baseline); a preset without them
    has claims 1 to 6."""
    L, th = int(preset.train_seq_len), preset.thresholds
    k = int(th.sinusoidal_blowup_at)

    def ratio(enc: str, m: int, mode: str = NONOVERLAPPING) -> Callable[[Lookup], object]:
        return degradation((enc, L, mode), m)

    rope_at = [int(m) for m in th.rope_between_at]
    others = ("learned", "sinusoidal", "rope", "alibi")

    def nope_gap(ppl: Lookup) -> object:
        best = ppl(others[0], L, NONOVERLAPPING, L)
        for enc in others[1:]:
            best = np.minimum(best, ppl(enc, L, NONOVERLAPPING, L))
        return ppl("nope", L, NONOVERLAPPING, L) / best

    press = [
        Claim(1, "Sinusoidal positions do not extrapolate", f"{PRESS}, Fig. 1 and §2.1",
              f"Fig. 1: sinusoidal perplexity climbs steeply within a few hundred tokens past "
              f"L; doubling by {k}L is a failure that seed noise cannot produce",
              [("sinusoidal", L, NONOVERLAPPING)],
              [Test(f"sinusoidal ppl({k}L)/ppl(L)", ratio("sinusoidal", k), ">=",
                    float(th.sinusoidal_blowup))]),
        Claim(2, "RoPE extrapolates only a little: it degrades past L more than ALiBi and "
                 "less than sinusoidal", f"{PRESS}, Fig. 1 and §2.2",
              "the paper's ordering of the three curves at 2L and 4L; 1 is 'no difference'",
              [(enc, L, NONOVERLAPPING) for enc in ("rope", "alibi", "sinusoidal")],
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
              [("alibi", L, NONOVERLAPPING), ("alibi", L, SLIDING)],
              [Test(f"alibi{' sliding' if mode == SLIDING else ''} ppl({m}L)/ppl(L)",
                    ratio("alibi", int(m), mode), "<=", float(th.alibi_flat))
               for mode in (NONOVERLAPPING, SLIDING) for m in th.alibi_flat_at]),
        Claim(4, "ALiBi trained at L and evaluated at 2L is at least as good as sinusoidal "
                 "trained at 2L on the same token budget", f"{PRESS}, abstract and Fig. 4",
              "'achieving the same perplexity': a ratio of 1 is a tie",
              [("alibi", L, NONOVERLAPPING), ("sinusoidal", 2 * L, NONOVERLAPPING)],
              [Test(f"alibi(L={L}) / sinusoidal(L={2 * L}) at 2L",
                    lambda ppl: ppl("alibi", L, NONOVERLAPPING, 2 * L)
                    / ppl("sinusoidal", 2 * L, NONOVERLAPPING, 2 * L), "<=", 1.0)]),
    ]
    nope = [
        Claim(5, "Without any position signal the causal mask still teaches order: NoPE is "
                 "competitive at the training length", f"{HAVIV}, Tables 1-2",
              f"Haviv et al. call a small gap that shrinks with scale competitive; posexp's "
              f"line is {th.nope_margin:.0%} (configs/reproduce)",
              [(enc, L, NONOVERLAPPING) for enc in ("nope", *others)],
              [Test("nope ppl(L) / best encoding's ppl(L)", nope_gap, "<=",
                    1 + float(th.nope_margin))]),
        Claim(6, "NoPE degrades less past L than absolute (sinusoidal) positions",
              f"{KAZEMNEJAD}, §4 (shown there on algorithmic tasks; tested here on "
              "perplexity)", "1 is 'degrades alike'",
              [("nope", L, NONOVERLAPPING), ("sinusoidal", L, NONOVERLAPPING)],
              [Test(f"nope/sinusoidal degradation at {k}L",
                    ratio_of(ratio("nope", k), ratio("sinusoidal", k)), "<=", 1.0)]),
    ]
    fair = []
    if th.get("t5_flat") is not None:
        t5_at = [int(m) for m in th.t5_flat_at]
        press += [
            Claim(7, "T5's relative bias extrapolates a little: its perplexity stays near "
                     f"ppl(L) at {' and '.join(f'{m}L' for m in t5_at)}",
                  f"{PRESS}, Table 2 (the T5 bias column)",
                  "Table 2 has T5's bias within a few percent of its ppl(L) at about 2L and "
                  f"5L; {th.t5_flat:g}, as for ALiBi",
                  [("t5", L, NONOVERLAPPING)],
                  [Test(f"t5 ppl({m}L)/ppl(L)", ratio("t5", m), "<=", float(th.t5_flat))
                   for m in t5_at]),
            Claim(8, "T5's relative bias trains slower than ALiBi", f"{PRESS}, Table 1",
                  "Table 1 has the T5 bias training markedly slower than ALiBi (and "
                  "sinusoidal) on the same hardware; 1 is the same speed. Both runs of a "
                  "seed train one after the other on one machine",
                  [("alibi", L, NONOVERLAPPING), ("t5", L, NONOVERLAPPING)],
                  [Test("alibi / t5 training tokens per second",
                        lambda ppl: ppl("alibi", L, NONOVERLAPPING, TRAIN_SPEED)
                        / ppl("t5", L, NONOVERLAPPING, TRAIN_SPEED), ">=", 1.0, speed=True)]),
        ]
    if th.get("fair_baseline") is not None:
        fair.append(Claim(
            9, "Sinusoidal positions are as good as learned ones at the training length: "
               "the absolute baselines are fair", f"{VASWANI}, Table 3 row (E)",
            "row (E): learned positions instead of sinusoids gave 'nearly identical results' "
            f"(4.92 vs 4.91 dev perplexity); {th.fair_baseline:g} is 'no worse'",
            [("sinusoidal", L, NONOVERLAPPING), ("learned", L, NONOVERLAPPING)],
            [Test("sinusoidal ppl(L) / learned ppl(L)",
                  lambda ppl: ppl("sinusoidal", L, NONOVERLAPPING, L)
                  / ppl("learned", L, NONOVERLAPPING, L), "<=", float(th.fair_baseline))]))
    return press, nope, fair


def encodings_claims(preset: DictConfig) -> tuple[list[Claim], list[Claim]]:
    """(randomized positions against the same encoding without them, the later encodings
    against their baselines) with the preset's thresholds: the claim set ``encodings``."""
    L, th = int(preset.train_seq_len), preset.thresholds
    k, far, M = int(th.degradation_at), int(th.far_at), int(th.random_positions)

    def plain(enc: str) -> Need:
        return (enc, L, NONOVERLAPPING)

    random = [
        Claim(10 + i, f"Training on random positions below {M} makes {enc} degrade less past "
                      "L than training on 0..L-1",
              f"{RUOSS}, §4 (shown there on algorithmic tasks; tested here on perplexity)",
              "1 is 'degrades alike'; the runs share their batches, so the positions are the "
              "only difference",
              [plain(enc), randomized(enc, L, M)],
              [Test(f"{enc} randomized/plain degradation at {k}L",
                    ratio_of(degradation(randomized(enc, L, M), k),
                             degradation(plain(enc), k)), "<=", 1.0)])
        for i, enc in enumerate(th.randomized)]
    n = 10 + len(random)

    def at_far(a: str, b: str) -> Callable[[Lookup], object]:
        return lambda ppl: ppl(*plain(a), far * L) / ppl(*plain(b), far * L)

    later = [
        Claim(n, "xPos degrades less past L than RoPE", f"{SUN}, §3 and Table 3 (measured "
                 "there with blockwise causal attention, which posexp does not use)",
              "xPos's scale is proposed as RoPE's fix for extrapolation; 1 is 'degrades alike'",
              [plain("xpos"), plain("rope")],
              [Test(f"xpos/rope degradation at {k}L", ratio_of(
                  degradation(plain("xpos"), k), degradation(plain("rope"), k)), "<=", 1.0)]),
        Claim(n + 1, f"KERPLE's logarithmic kernel is at least as good as ALiBi far past L "
                     f"({far}L)", f"{CHI}, Tables 2-3 (kerple log beats ALiBi at the longest "
                                  "lengths)", "1 is a tie",
              [plain("kerple_log"), plain("alibi")],
              [Test(f"kerple_log/alibi ppl({far}L)", at_far("kerple_log", "alibi"), "<=",
                    1.0)]),
        Claim(n + 2, f"FIRE is at least as good as ALiBi far past L ({far}L)",
              f"{LI}, §4 (language modelling at lengths beyond training)", "1 is a tie",
              [plain("fire"), plain("alibi")],
              [Test(f"fire/alibi ppl({far}L)", at_far("fire", "alibi"), "<=", 1.0)]),
    ]
    return random, later


def rope_scaling_claims(preset: DictConfig) -> list[Claim]:
    """The claims about RoPE context extension with the preset's thresholds: the claim set
    ``rope-scaling``.  They compare, at s x L for the preset's factor s, the run as trained
    with its RoPE-scaled scorings at factor s and with its fine-tunes at s x L."""
    L, th = int(preset.train_seq_len), preset.thresholds
    s = float(th.factor)
    long = int(s * L)
    params = {p.name: p.default for p in dataclasses.fields(C.ScalingParams)}

    def scaled(method: str) -> Scaling:
        return scaling_key(C.scaling_record(method, s, params))

    plain = ("rope", L, NONOVERLAPPING)

    def at(method: str) -> Need:  # the run scored with a scaling
        return ("rope", L, NONOVERLAPPING, scaled(method), None)

    def tuned(method: str) -> Need:  # its fine-tune at s x L with a scaling
        return ("rope", long, NONOVERLAPPING, None, (L, scaled(method)))

    def ratio(a: Need, length_a: int, b: Need, length_b: int) -> Callable[[Lookup], object]:
        return lambda ppl: ppl(*a, length_a) / ppl(*b, length_b)

    k, gap = f"{s:g}", float(th.finetune_gap)
    return [
        Claim(1, f"Without fine-tuning, NTK-aware and YaRN scaling (factor {k}) beat plain "
                 f"extrapolation at {k}L", f"{BLOC97}; {PENG}, §3.1 and §3.4",
              "RoPE's perplexity climbs past L, and both methods are proposed as a fix that "
              "needs no training; 1 is a tie",
              [plain, at("ntk"), at("yarn")],
              [Test(f"{name} x{k} / plain, ppl({k}L)", ratio(at(method), long, plain, long),
                    "<=", 1.0) for method, name in (("ntk", "NTK-aware"), ("yarn", "YaRN"))]),
        Claim(2, f"Position Interpolation without fine-tuning costs perplexity at L (factor "
                 f"{k})", f"{CHEN}; {PENG}, §3.1 (PI loses the high frequencies)",
              f"PI squeezes the positions the model learned by {k}: a cost of "
              f"{float(th.pi_cost) - 1:.0%} at L is one a user would notice",
              [plain, at("linear")],
              [Test(f"PI x{k} / plain, ppl(L)", ratio(at("linear"), L, plain, L), ">=",
                    float(th.pi_cost))]),
        Claim(3, f"A short fine-tune at {k}L with PI or YaRN brings {k}L within a few percent "
                 "of the parent's perplexity at L", f"{CHEN}, §3 (about 1000 steps); "
                 f"{PENG}, §4",
              f"'a few percent': {gap:.0%} above the parent's ppl(L); with {k}x the context "
              "a well-extended model does no worse than at L",
              [plain, tuned("linear"), tuned("yarn")],
              [Test(f"fine-tuned {name} ppl({k}L) / parent ppl(L)",
                    ratio(tuned(method), long, plain, L), "<=", 1 + gap)
               for method, name in (("linear", "PI"), ("yarn", "YaRN"))]),
        Claim(4, "YaRN fine-tunes at least as well as PI", f"{PENG}, §4",
              "the same fine-tune budget for both; 1 is a tie",
              [tuned("linear"), tuned("yarn")],
              [Test(f"fine-tuned YaRN / PI, ppl({k}L)", ratio(tuned("yarn"), long,
                                                           tuned("linear"), long),
                    "<=", 1.0)]),
    ]


# --- claims on task accuracy ----------------------------------------------------------------
# An arm of a task claim: (task, encoding, variant) -- runs of one task and encoding, plain
# (variant ()) or on random positions (VARIANT_KEYS' values, as variant_of gives them).
Arm = tuple


@dataclass(frozen=True)
class AccuracyTest:
    """One comparison of a task claim: the mean accuracy beyond the longest trained length of
    arm ``a`` minus that of arm ``b`` (op) ``threshold``, on the same held-out instances."""

    label: str
    a: Arm
    b: Arm
    op: str  # "<=" or ">="
    threshold: float


def arm_text(arm: Arm) -> str:
    task, enc, variant = arm
    return " ".join([f"{enc} on {task}", *(f"{k}={v}" for k, v in variant)])


def task_claims(preset: DictConfig) -> tuple[list[Claim], list[Claim]]:
    """(NoPE against the absolute encodings, randomized positions against plain ones) on the
    preset's tasks, with its thresholds: the claim set ``tasks``.  Every statistic is a
    difference of accuracies (thresholds.metric: exact or token_acc) averaged over the task
    lengths scored beyond the longest one trained on."""
    th = preset.thresholds
    metric, M = str(th.metric), int(th.random_positions)
    if metric not in ("exact", "token_acc"):  # checked before any run trains
        raise UsageError(f"thresholds.metric must be exact or token_acc, got {metric!r}")
    what = "exact match" if metric == "exact" else "token accuracy"
    nope = [
        Claim(1 + i, f"NoPE generalizes to longer {task} instances at least as well as "
                     f"absolute positions ({', '.join(th.absolute)})",
              f"{KAZEMNEJAD}, §4 and Fig. 3 (copy, reverse, addition among their tasks)",
              f"0 is a tie: 'at least as well' holds when NoPE's {what} beyond the training "
              "lengths is no lower than each absolute encoding's",
              [(task, enc, ()) for enc in ("nope", *th.absolute)],
              [AccuracyTest(f"nope - {enc} {what} beyond n_max", (task, "nope", ()),
                            (task, enc, ()), ">=", 0.0) for enc in th.absolute])
        for i, task in enumerate(th.tasks)]
    random = [
        Claim(1 + len(nope) + i, f"Training {enc} on random positions below {M} raises its "
                                 f"accuracy on {task} beyond the training lengths",
              f"{RUOSS}, §4 and Table 1",
              f"a gain of at least {float(th.min_gain):g} in {what}: less is not the 'boost' "
              "the paper reports; the runs share their batches, so the positions are the only "
              "difference",
              [(task, enc, ()), (task, enc, (("train.random_positions", M),))],
              [AccuracyTest(f"{enc} randomized - plain {what} beyond n_max",
                            (task, enc, (("train.random_positions", M),)), (task, enc, ()),
                            ">=", float(th.min_gain))])
        for i, (task, enc) in enumerate((t, e) for t in th.tasks for e in th.randomized)]
    return nope, random


def arm_points(runs: list[RunResult], arms: list[Arm],
               train_len: int) -> dict[Arm, dict[int, RunResult]] | str:
    """seed -> run of each arm trained at ``train_len``, or why there is none (no run; two
    runs of one arm and seed)."""
    found: dict[Arm, dict[int, RunResult]] = {}
    for arm in arms:
        by_seed: dict[int, RunResult] = {}
        for r in runs:
            if (r.task, r.encoding, variant_of(r)) != arm or r.train_len != train_len:
                continue
            if r.seed in by_seed:
                return (f"two runs of {arm_text(arm)} at seed {r.seed}: {by_seed[r.seed].name} "
                        f"and {r.name}")
            by_seed[r.seed] = r
        if not by_seed:
            return f"no completed run of {arm_text(arm)} at train.seq_len={train_len}"
        found[arm] = by_seed
    return found


def beyond_points(runs: list[RunResult]) -> dict[Path, list[dict]] | str:
    """Each run's task points (as trained; by the run's path) at the lengths beyond the
    longest it trained on, on the instances every run was scored on -- the largest instance
    count they share -- or why there are none.  The runs must share the longest trained length."""
    n_max = {(r.info.get("corpus") or {}).get("max_train_length") for r in runs}
    if len(n_max) != 1 or None in n_max:
        return "its runs trained on different lengths (max_train_length " \
               f"{', '.join(sorted(map(str, n_max)))})"
    n = n_max.pop()
    groups = [{(p["count"], p["eval_seed"]) for p in r.tasks if p.get("rope_scaling") is None}
              for r in runs]
    common = set.intersection(*groups)
    if not common:
        return "its runs share no held-out instances (task.eval_count, task.eval_seed)"
    count, seed = max(common, key=lambda g: (g[0], -g[1]))
    lengths = set.intersection(*({p["length"] for p in r.tasks if p.get("rope_scaling") is None
                                  and (p["count"], p["eval_seed"]) == (count, seed)
                                  and p["length"] > n} for r in runs))
    # a length no run could be scored at is one the task cannot represent (addition past
    # its digit limit): left out; one that only some runs lack makes the claim unmeasured
    lengths -= {p["length"] for p in runs[0].tasks if not p["applicable"] and all(
        not q["applicable"] for r in runs for q in r.tasks if q["length"] == p["length"]
        and (q["count"], q["eval_seed"]) == (count, seed))}
    if not lengths:
        return f"its runs share no task length beyond n_max = {n} that they could score"
    out: dict[Path, list[dict]] = {}
    hashes: dict[tuple, str] = {}
    for r in runs:
        chosen = [p for p in r.tasks if p.get("rope_scaling") is None and p["length"] in lengths
                  and (p["count"], p["eval_seed"]) == (count, seed)]
        for p in chosen:
            if not p["applicable"]:
                return f"{r.name} has no score at length {p['length']}: {p['reason']}"
            key = (p["length"], p.get("depth"))
            if hashes.setdefault(key, p["instances_sha256"]) != p["instances_sha256"]:
                return f"{r.name} was scored on other instances at length {p['length']}"
        out[r.path] = chosen
    return out


def judge_accuracy(claim: Claim, runs: list[RunResult], metric: str,
                   train_len: int) -> Verdict:
    """A task claim's verdict.  Per seed, each test's statistic is a difference of mean
    accuracies beyond n_max; over two or more seeds its interval is Student-t on the plain
    scale; for one seed it combines the points' own 95% intervals (Wilson for exact match,
    the bootstrap over instances for token accuracy) by Newcombe's rule for a difference.
    When no arm beats the chance level beyond n_max the claim is inconclusive: a difference
    of two failures says nothing about generalization."""
    what = "exact match" if metric == "exact" else "token accuracy"
    chance_key = "chance_exact" if metric == "exact" else "chance_token"
    threshold = "; ".join(f"{t.label} {t.op} {t.threshold:g}" for t in claim.tests)
    threshold += f" ({claim.why})"

    def verdict(measured: str, outcome: str, method: str = "") -> Verdict:
        return Verdict(f"{claim.number}. {claim.text}", claim.source, threshold, measured,
                       outcome, method)

    found = arm_points(runs, claim.needs, train_len)
    if isinstance(found, str):
        return verdict(f"not measured: {found}", UNMEASURED)
    seeds = sorted(set.intersection(*(set(by_seed) for by_seed in found.values())))
    if not seeds:
        return verdict("not measured: its runs share no seed", UNMEASURED)
    points = beyond_points([found[arm][s] for arm in claim.needs for s in seeds])
    if isinstance(points, str):
        return verdict(f"not measured: {points}", UNMEASURED)

    def mean(arm: Arm, seed: int, key: str = metric) -> float:
        return float(np.mean([p[key] for p in points[found[arm][seed].path]]))

    level = {arm: float(np.mean([mean(arm, s) for s in seeds])) for arm in claim.needs}
    chance = {arm: float(np.mean([mean(arm, s, chance_key) for s in seeds]))
              for arm in claim.needs}
    lengths = sorted({p["length"] for ps in points.values() for p in ps})
    where = f"lengths {', '.join(map(str, lengths))}"
    means = ", ".join(f"{arm[1]}{' randomized' if arm[2] else ''} {level[arm]:.3f}"
                      for arm in claim.needs)
    if all(level[arm] <= chance[arm] for arm in claim.needs):
        return verdict(f"no arm above chance beyond n_max ({where}: {means}; chance "
                       f"{max(chance.values()):.3f})", INCONCLUSIVE, "")
    intervals = []
    for t in claim.tests:
        if len(seeds) > 1:
            intervals.append(stats.t_interval([mean(t.a, s) - mean(t.b, s) for s in seeds]))
        else:
            intervals.append(newcombe(points[found[t.a][seeds[0]].path],
                                      points[found[t.b][seeds[0]].path], metric))
    method = (f"Student-t over seeds {', '.join(map(str, seeds))} (plain scale)"
              if len(seeds) > 1 else
              f"one seed ({seeds[0]}): Newcombe's difference of the points' 95% intervals "
              "(Wilson for exact match, bootstrap over instances for token accuracy)")
    decisions = [_decide(i, t.op, t.threshold) for i, t in zip(intervals, claim.tests,
                                                                strict=True)]
    outcome = FAILS if FAILS in decisions else HOLDS if all(
        d == HOLDS for d in decisions) else INCONCLUSIVE
    measured = "; ".join(f"{t.label} = {i.value:+.3f} [{i.low:+.3f}, {i.high:+.3f}]"
                         for t, i in zip(claim.tests, intervals, strict=True))
    return verdict(f"{measured} ({where}, {what}: {means})", outcome, method)


def newcombe(a: list[dict], b: list[dict], metric: str) -> stats.Interval:
    """One seed: mean(a) - mean(b) over the lengths, with the 95% interval of
    stats.difference_interval; each mean's distances to its limits are the points' own,
    added in quadrature and divided by their number (each length's instances drawn apart)."""
    def spread(points: list[dict]) -> tuple[float, float, float]:
        value = float(np.mean([p[metric] for p in points]))
        below = math.sqrt(sum((p[metric] - p[f"{metric}_low"]) ** 2 for p in points))
        above = math.sqrt(sum((p[f"{metric}_high"] - p[metric]) ** 2 for p in points))
        return value, value - below / len(points), value + above / len(points)

    return stats.difference_interval(spread(a), spread(b))


CLAIM_SETS = ("press", "rope-scaling", "encodings", "tasks")


def claim_set(preset: DictConfig) -> str:
    name = preset.get("claims") or "press"
    if name not in CLAIM_SETS:
        raise UsageError(f"claims must be one of {', '.join(CLAIM_SETS)}, got {name!r}")
    return name


def claim_sections(preset: DictConfig) -> list[tuple[str, list[Claim]]]:
    """The preset's claims, by section of verdicts.md."""
    if claim_set(preset) == "rope-scaling":
        return [(f"Claims about RoPE context extension ({CHEN.split(',')[0]}; "
                 f"{PENG.split(',')[0]}; {BLOC97.split(',')[0]})", rope_scaling_claims(preset))]
    if claim_set(preset) == "tasks":
        nope, random = task_claims(preset)
        return [(f"NoPE against absolute positions on tasks ({KAZEMNEJAD.split(',')[0]})",
                 nope), (f"Randomized positions on tasks ({RUOSS.split(',')[0]})", random)]
    if claim_set(preset) == "encodings":
        random, later = encodings_claims(preset)
        return [(f"Randomized positions ({RUOSS.split(',')[0]})", random),
                (f"The later encodings ({SUN.split(',')[0]}; {CHI.split(',')[0]}; "
                 f"{LI.split(',')[0]})", later)]
    press, nope, fair = claims(preset)
    return [(f"Claims of {PRESS}", press), ("Claims about no positional encoding (NoPE)", nope),
            *([("A fair baseline at the training length", fair)] if fair else [])]


def verdicts(runs: list[RunResult], preset: DictConfig, n_tokens: int) -> list[Verdict]:
    """Every claim measured on ``runs`` (the preset's completed runs), each on the region of
    ``n_tokens`` (the preset's eval.tokens) scored tokens."""
    if claim_set(preset) == "tasks":
        return [judge_accuracy(c, runs, str(preset.thresholds.metric),
                               int(preset.train_seq_len))
                for _, section in claim_sections(preset) for c in section]
    curves = Curves(runs, n_tokens)
    return [judge(c, curves) for _, section in claim_sections(preset) for c in section]


def learned_property(runs: list[RunResult], train_len: int) -> str:
    """What posexp did past a learned table's size: a property of the encoding (it has no
    rows there), not evidence for a claim."""
    lengths = sorted({p["length"] for r in runs if r.encoding == "learned"
                      and r.train_len == train_len for p in r.curve if not p["applicable"]})
    shown = ", ".join(map(str, lengths)) if lengths else "no length past the table"
    return (f"Learned absolute positions have no row past their table (L = {train_len}): "
            f"posexp reports n/a rather than clamping positions (here at {shown}). This is "
            "how the encoding is built, not a finding.")


def verdict_table(rows: list[Verdict]) -> str:
    lines = ["| claim | source | threshold (why) | measured (95% interval) | verdict |",
             "|---|---|---|---|---|"]
    for v in rows:
        verdict = v.verdict if v.verdict == HOLDS else f"**{v.verdict}**"
        lines.append(f"| {v.claim} | {v.source} | {v.threshold} | {v.measured} | {verdict} |")
    return "\n".join(lines)


def versions_table(runs: list[RunResult]) -> str:
    """The software every run recorded, one row per package; a package whose version differs
    between runs lists each version with its runs."""
    seen: dict[str, dict[str, list[str]]] = {}
    for r in runs:
        versions = r.info.get("versions")
        for package, version in (versions.items() if isinstance(versions, dict) else ()):
            seen.setdefault(package, {}).setdefault(str(version), []).append(r.name)
    lines = ["| package | version |", "|---|---|"]
    for package, by_version in seen.items():
        text = next(iter(by_version)) if len(by_version) == 1 else "; ".join(
            f"{v} ({', '.join(names)})" for v, names in by_version.items())
        lines.append(f"| {package} | {text} |")
    return "\n".join(lines) if seen else "(no run recorded its versions)"


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def preset_runs(preset: DictConfig) -> list[list[str]]:
    """The preset's runs: those it lists, and with ``every_encoding: true`` one more for each
    registered encoding it does not train as is or with only its own hparams set (the
    registry decides; the preset names none of them)."""
    from posexp.encodings import in_order

    runs = [list(run) for run in preset.runs]
    every = preset.get("every_encoding")
    every = False if every is None else every
    if not isinstance(every, bool):  # every_encoding: "no" would read as true
        raise UsageError(f"preset: every_encoding must be true or false, got {every!r}")
    if every:
        listed = {run[0] for run in runs
                  if all(o.startswith("encoding.hparams.") for o in run[1:])}
        runs += [[f"encoding={name}"] for name in in_order()
                 if f"encoding={name}" not in listed]
    return runs


def report_dir(preset: DictConfig, name: str) -> str:
    """The name of the preset's report directory beside its runs (``report:``, default
    report): several presets may share runs and each keep its report."""
    report = str(preset.get("report") or "report")
    if "/" in report or "\\" in report or report in (".", "..") or report.startswith("."):
        raise UsageError(f"preset {name}: report must be a directory name beside its runs, "
                         f"got {report!r}")
    return report


def preset_seeds(preset: DictConfig, name: str) -> list[int]:
    seeds = preset.get("seeds")
    seeds = [0] if seeds is None else (
        OmegaConf.to_container(seeds) if OmegaConf.is_config(seeds) else seeds)
    if not (isinstance(seeds, list) and seeds and all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
            and len(set(seeds)) == len(seeds)):
        raise UsageError(f"preset {name}: seeds must be a list of distinct non-negative "
                         f"integers, got {seeds!r}")
    if any(str(o).startswith("seed=") for o in (*preset.overrides,
                                                 *(o for run in preset_runs(preset)
                                                   for o in run))):
        raise UsageError(f"preset {name}: set the seeds in its seeds: list, not as seed=")
    return seeds


def reproduce(name: str, results_dir: Path, config_dir: Path,
              compose: Callable[[list[str]], DictConfig],
              finetune: Callable[[Path, list[str]], DictConfig] | None = None) -> list[Verdict]:
    """Train what is missing, score every run (in both modes, unless the preset says
    ``sliding: false``), fine-tune what the preset lists, write the report and verdicts.
    ``compose`` turns a list of overrides into a checked config, ``finetune`` a parent run
    and overrides into a fine-tune's (the CLI's).  A run that fails is named and the others
    go on (a fine-tune of a failed run fails too); after the report, a PosexpError says how
    many failed."""
    from posexp.experiment import run as run_experiment
    from posexp.train import Interrupted

    preset = load_preset(name, config_dir)
    sections = claim_sections(preset)
    seeds = preset_seeds(preset, name)
    common = [*preset.overrides, f"experiment={preset.experiment}", f"results_dir={results_dir}"]
    # every run at every seed, all checked before any runs
    report = report_dir(preset, name)
    configs = [compose([*common, *run, f"seed={seed}"]) for seed in seeds
               for run in preset_runs(preset)]
    if not configs:
        raise UsageError(f"preset {name} lists no runs")
    n_tokens = {int(cfg.eval.tokens) for cfg in configs}
    if len(n_tokens) > 1:
        raise UsageError(f"the runs of preset {name} score different eval.tokens "
                         f"({', '.join(map(str, sorted(n_tokens)))}); its claims compare them "
                         "on the same tokens")
    paths = [Path(cfg.results_dir) / cfg.experiment / cfg.run_name for cfg in configs]
    # each fine-tune at each seed: (parent, its overrides), the parent one of the runs
    tunes = []
    for entry in preset.get("finetunes") or []:
        for seed in seeds:
            cfg = compose([*common, *entry.parent, f"seed={seed}"])
            parent = Path(cfg.results_dir) / cfg.experiment / cfg.run_name
            if parent not in paths:
                raise UsageError(f"preset {name}: the parent of fine-tune "
                                 f"{list(entry.overrides)} ({list(entry.parent)}) is not one "
                                 "of its runs")
            tunes.append((parent, list(entry.overrides)))
    if tunes and finetune is None:
        raise UsageError(f"preset {name} lists fine-tunes, and reproduce was given no way to "
                         "set them up")
    failed: dict[Path, str] = {}

    def attempt(path: Path, configure: Callable[[], list[DictConfig]], what: str) -> Path:
        """Run the configs ``configure`` gives; a failure is recorded under their run's
        directory (``path`` until they are known)."""
        try:
            for each in configure():
                path = Path(each.results_dir) / each.experiment / each.run_name
                run_experiment(each)
        except Interrupted:
            raise  # a signal stops the whole suite; the run is checkpointed
        except Exception as e:  # one failed run must not stop the others
            failed[path] = _first_line(e)
            print(f"posexp reproduce: {what}: failed: {failed[path]}", file=sys.stderr)
        return path

    total = len(configs) + len(tunes)
    for i, (cfg, path) in enumerate(zip(configs, paths, strict=True), 1):
        print(f"posexp reproduce: run {i}/{total}: {cfg.run_name}", file=sys.stderr)
        # trains (or finds the run completed), then scores only the sliding points
        modes = [cfg]
        if preset.get("sliding", True):
            modes.append(OmegaConf.merge(cfg, {"eval": {"mode": SLIDING, "stride": None}}))
        attempt(path, lambda modes=modes: modes, f"{cfg.experiment}/{cfg.run_name}")
    for i, (parent, overrides) in enumerate(tunes, len(configs) + 1):
        print(f"posexp reproduce: run {i}/{total}: fine-tune of {parent.name} "
              f"{' '.join(overrides)}", file=sys.stderr)
        placeholder = parent.with_name(f"{parent.name}-ft-{i}")
        if parent in failed:
            failed[placeholder] = f"its parent {parent.name} failed"
            paths.append(placeholder)
            continue
        paths.append(attempt(placeholder, lambda p=parent, o=overrides: [finetune(p, o)],
                             f"fine-tune of {parent}"))

    results = []
    for path in paths:
        r = load_run(path)
        if r.status == MISSING and path in failed:  # it failed before its directory held a run
            r = RunResult(path, {"status": "not started", "reason": failed[path]})
        results.append(r)
    runs, not_done = split_runs(results)
    out = results_dir / preset.experiment / report
    write_report(runs, not_done, out, f"posexp reproduce --preset {name}")
    # a run that failed after it completed (scoring its sliding points) is in the report, but
    # its claims are not measured
    rows = verdicts([r for r in runs if r.path not in failed], preset, n_tokens.pop())
    devices = ", ".join(sorted({str(r.info.get("device", "?")) for r in runs})) or "?"
    by_section, start = [], 0
    for title, section in sections:
        by_section.append((title, rows[start:start + len(section)]))
        start += len(section)
    note = None if claim_set(preset) in ("rope-scaling", "tasks") else learned_property(
        runs, int(preset.train_seq_len))
    atomic_write_text(out / "verdicts.md", verdicts_markdown(
        name, preset, by_section, note, failed, devices, versions_table(runs)))
    atomic_write_json(out / "verdicts.json", {
        "preset": name, "seeds": seeds, "verdicts": [asdict(v) for v in rows],
        "failed": {str(path): message for path, message in failed.items()},
        "thresholds": OmegaConf.to_container(preset.thresholds)})
    print(f"\n{terminal_verdicts(rows)}\n\nreport: {out}")
    if failed:
        raise PosexpError(f"{len(failed)} of {total} runs failed; their claims are not "
                          "measured")
    return rows


def verdicts_markdown(name: str, preset: DictConfig, sections: list[tuple[str, list[Verdict]]],
                      note: str | None, failed: dict[Path, str], device: str,
                      versions: str) -> str:
    """verdicts.md: a table of verdicts per section, ``note`` (a property, not a claim), the
    runs that failed and the software."""
    failures = "".join(f"* {path}: failed: {message}\n" for path, message in failed.items())
    methods = sorted({v.interval for _, rows in sections for v in rows if v.interval})
    tables = "".join(f"## {title}\n\n{verdict_table(rows)}\n\n" for title, rows in sections)
    return (
        f"# Claims about length extrapolation, preset {name}\n\n"
        f"{preset.get('description', '')}\n\n"
        "A claim **holds** when the whole 95% interval of its statistic lies on the claim's "
        "side of the threshold, **does not hold** when it lies wholly on the other side, and is "
        "**inconclusive** when it straddles the threshold. Intervals: "
        f"{'; '.join(methods) or 'none'}.\n\n{tables}"
        + (f"## A property, not a claim\n\n{note}\n\n" if note else "")
        + (f"Runs that failed (their claims are not measured):\n\n{failures}\n" if failed
           else "")
        + f"## Software\n\nDevice: {device}\n\n{versions}\n")


def terminal_verdicts(rows: list[Verdict]) -> str:
    """One block per claim for a terminal: the claim, its verdict, and what was measured."""
    return "\n".join(f"{v.claim}\n    {v.verdict.upper()}: {v.measured}" for v in rows)
