"""The claim suite's verdicts, on synthetic run directories whose perplexities are chosen.

Each point holds the summed losses of the documents its spans lie in (as evaluate/windows.py writes
them), so the intervals the verdicts use -- over seeds and documents together, or the
cluster bootstrap for one seed -- are computed from known numbers.
"""
import dataclasses
import functools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from omegaconf import DictConfig, OmegaConf

import posexp.claims.suite
import posexp.run
from posexp import config as C
from posexp import scaling, stats
from posexp.claims import reproduce, verdicts
from posexp.claims.base import FAILS, HOLDS, INCONCLUSIVE, UNMEASURED
from posexp.claims.preset import load_preset, preset_runs, preset_seeds, report_dir
from posexp.config import CONFIG_DIR, compose_overrides, derive, schema
from posexp.errors import PosexpError, UsageError
from posexp.runs import load_runs
from posexp.spans import layout
from tests.conftest import compose_args as compose
from tests.runs_on_disk import as_trained

C.register()


SMALL = ("model.d_model=32", "model.n_layer=1", "model.n_head=2")


NO, SL = "nonoverlapping", "sliding"


def spans_over(val_tokens: int):
    """512 targets over 64 equal documents of a split of ``val_tokens`` tokens."""
    return layout(val_tokens, np.arange(0, val_tokens, val_tokens // 64), 512)


REGION = spans_over(64_000)  # the layout every run here scores, unless a test says
OTHER = spans_over(128_000)  # another layout of as many targets


VERSIONS = {"posexp": "0.1.0", "python": "3.11.7", "torch": "2.13.0"}


def margin(m: float) -> dict:
    return {"margin": m, "reason": f"a margin of {m:g}"}


THRESHOLDS = {"sinusoidal_blowup_at": 4, "sinusoidal_blowup": margin(1.0),
              "rope_between_at": [2, 4], "better": margin(0.0), "alibi_flat_at": [2, 4],
              "alibi_flat": margin(0.05), "alibi_vs_longer": margin(0.02),
              "nope_margin": margin(0.1), "context_at": [2, 4], "context": margin(0.02)}


PRESET = OmegaConf.create({"train_seq_len": 16, "thresholds": THRESHOLDS})


# perplexity at 1, 2, 4 x L (and 8 x L = 128 for sinusoidal trained at 2L)
CLAIM_RUNS = {
    ("sinusoidal", 16): {16: 5.0, 32: 9.0, 64: 15.0},
    ("rope", 16): {16: 4.0, 32: 5.5, 64: 8.0},
    ("alibi", 16): {16: 5.0, 32: 5.0, 64: 5.1},
    ("learned", 16): {16: 4.5, 32: None, 64: None},
    ("nope", 16): {16: 7.0, 32: 7.5, 64: 9.0},
    ("sinusoidal", 32): {32: 8.0, 64: 12.0, 128: 20.0},
}
# claims 1-7 of the press set: 1 sinusoidal blows up, 2 RoPE between ALiBi and sinusoidal,
# 3 ALiBi flat, 4 ALiBi at 2L vs sinusoidal trained at 2L, 5 ALiBi's longer sliding windows
# do not help, 6 NoPE competitive at L, 7 NoPE better than sinusoidal at 4L
EXPECTED = {1: HOLDS, 2: HOLDS, 3: HOLDS, 4: HOLDS, 5: HOLDS, 6: FAILS, 7: HOLDS}


# the scored text's own difficulty, document by document: the same for every point
TEXT = np.random.default_rng(0).normal(0, 0.3, 64)


@functools.lru_cache
def config_text(overrides: tuple[str, ...]) -> str:
    cfg = compose_overrides(list(overrides))
    C.check(cfg)
    return OmegaConf.to_yaml(C.resolve(cfg), resolve=True)


def point(mode: str, length: int, ppl: float | None, region=REGION, noise=0.0) -> dict:
    """A curve point as evaluate/windows.py writes it, whose documents' losses are log(ppl) plus the
    text's difficulty (centred, so the point's perplexity is ``ppl``) and ``noise``."""
    p = {"mode": mode, "length": length, "stride": length if mode == NO else length // 2,
         "first_token": None, "spans": region.id, "documents": region.documents,
         "tokens": region.tokens, "applicable": ppl is not None,
         "reason": None if ppl is not None else f"positions stop before {length}",
         "loss": None, "ppl": ppl, "bits_per_token": None, "bits_per_byte": None,
         "seconds": 0.5}
    if ppl is not None:
        n = region.tokens // 64
        per_doc = math.log(ppl) + TEXT - TEXT.mean() + noise * np.random.default_rng(
            length).normal(0, 1, 64)
        per_doc += math.log(ppl) - per_doc.mean()
        p["block_loss"] = (per_doc * n).tolist()
        p["block_tokens"] = [n] * 64
        p["loss"] = math.log(ppl)
        p["ppl_low"], p["ppl_high"] = stats.ppl_interval(p)
    return p


def curve(ppl: dict, mode: str = NO, region=REGION, noise=0.0) -> list[dict]:
    return [point(mode, length, v, region, noise) for length, v in ppl.items()]


def write_run(path: Path, text: str, points: list[dict], **info) -> Path:
    cfg = OmegaConf.create(text)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text(text)
    (path / "run.json").write_text(json.dumps({
        "status": "completed", "name": path.name, "experiment": path.parent.name,
        "encoding": cfg.encoding.name, "seq_len": cfg.train.seq_len, "seed": cfg.seed,
        "n_params": 12345, "tokens_trained": 49380, "device": "cpu", "versions": VERSIONS,
        **info}))
    layouts = {r.id: r.record() for r in (REGION, OTHER)}
    (path / "eval.json").write_text(json.dumps({
        "curve": as_trained(points, cfg.train.get("random_positions")), "per_position": [],
        "spans": {p["spans"]: layouts[p["spans"]] for p in points if p.get("spans")}}))
    return path


def make_run(root: Path, encoding: str, seq_len: int, seed: int, points: list[dict],
             *overrides: str, suffix: str = "", **info) -> Path:
    text = config_text((f"encoding={encoding}", f"train.seq_len={seq_len}", f"seed={seed}",
                        *SMALL, *overrides))
    return write_run(root / f"{encoding}-L{seq_len}-s{seed}{suffix}", text, points, **info)


def claim_runs(root: Path, seeds=(0,), skip=(), regions=None, sliding=None, scale=None,
               noise=0.0) -> list:
    """The preset's six runs at each seed; ``scale(enc, L, seed)`` multiplies a run's
    perplexities past its training length (seed-to-seed variation)."""
    for seed in seeds:
        for (enc, L), ppl in CLAIM_RUNS.items():
            if (enc, L) in skip:
                continue
            f = scale(enc, L, seed) if scale else 1.0
            ppl = {n: (v if v is None or n == L else v * f) for n, v in ppl.items()}
            region = (regions or {}).get((enc, L), REGION)
            points = curve(ppl, region=region, noise=noise)
            if enc == "alibi":
                points += curve(sliding or {16: 4.0, 32: 4.0, 64: 4.1}, SL, region, noise)
            make_run(root, enc, L, seed, points)
    return load_runs(root)[0]


def by_number(rows) -> dict[int, object]:
    return {int(v.claim.split(".")[0]): v for v in rows}


def bounds(measured: str) -> tuple[float, float]:
    return tuple(float(x) for x in measured.split("[")[1].split("]")[0].split(", "))


def test_three_seeds_give_intervals_over_seeds_and_documents(tmp_path):
    # seeds spread every run's perplexity past L by +-2%: claim 3's ALiBi at 4L (1.02 x
    # ppl(L), margin 5%) then reaches past its margin
    v = by_number(verdicts(claim_runs(tmp_path, seeds=(0, 1, 2),
                                      scale=lambda e, L, s: 1 + 0.02 * (s - 1)), PRESET, 512))
    assert {n: v[n].verdict for n in v} == {**EXPECTED, 3: INCONCLUSIVE}
    assert v[1].interval == "t over 3 seeds + cluster bootstrap over 64 documents (log scale)"
    # sinusoidal ppl(4L)/ppl(L) = 3 x (0.98, 1.00, 1.02): the geometric mean, and the text's
    # difficulty cancels in the ratio, so the interval is the t interval of the seeds
    expected = stats.t_interval([2.94, 3.0, 3.06], log=True)
    assert v[1].measured == f"sinusoidal ppl(4L)/ppl(L) = {expected.text(3)}"
    assert v[1].source.startswith("Press et al.") and "Fig. 1" in v[1].source
    assert v[1].kind.startswith("sinusoidal ppl(4L)/ppl(L): superiority, margin 100% (> 2) (")
    # like with like: the paper's training tokens (not its corpus's size) beside the runs'
    assert v[1].scope.startswith(
        "training tokens: paper not recorded (no figure confirmed from the paper), here ")
    assert "(4.0 per parameter); paper: 247M parameters on WikiText-103 (a corpus of 103M " \
           "tokens), L = 512-3072; here: 0.01M parameters, L = 16" in v[1].scope
    assert "alibi ppl(4L)/ppl(L) = 1.020 [" in v[3].measured
    assert v[6].source.startswith("Haviv et al.") and v[7].source.startswith("Kazemnejad")
    # a claim about perplexity far past L shows the degradation beside it, judged by nothing
    assert "beside: nope/sinusoidal degradation at 4L = " in v[7].measured


def test_a_claim_that_straddles_its_margin_is_inconclusive(tmp_path):
    # sinusoidal blows up 2.7x with seed 0 and only 1.5x with seed 1: the interval spans 2
    def scale(enc, L, seed):
        return (0.9 if seed == 0 else 0.5) if enc == "sinusoidal" and L == 16 else 1.0

    v = by_number(verdicts(claim_runs(tmp_path, seeds=(0, 1), scale=scale), PRESET, 512))
    assert v[1].verdict == INCONCLUSIVE
    low, high = bounds(v[1].measured)
    assert low < 2.0 < high


def test_identical_seeds_decide_on_the_value(tmp_path):
    v = by_number(verdicts(claim_runs(tmp_path, seeds=(0, 1, 2)), PRESET, 512))
    assert v[1].measured == "sinusoidal ppl(4L)/ppl(L) = 3.000 [3.000, 3.000]"
    assert {n: v[n].verdict for n in v} == EXPECTED
    assert {n: v[n].holm for n in v} == EXPECTED


def test_one_seed_uses_the_cluster_bootstrap(tmp_path):
    # every point carries the same text difficulty: a ratio of two points cancels it, so the
    # intervals are exact however hard the text is
    v = by_number(verdicts(claim_runs(tmp_path), PRESET, 512))
    assert v[1].interval == "one seed: cluster bootstrap over 64 documents"
    assert v[1].measured == "sinusoidal ppl(4L)/ppl(L) = 3.000 [3.000, 3.000]"
    # with noise of its own at each length, the interval opens up around the value
    noisy = by_number(verdicts(claim_runs(tmp_path / "noisy", noise=0.5), PRESET, 512))
    value = float(noisy[1].measured.split(" = ")[1].split(" [")[0])
    low, high = bounds(noisy[1].measured)
    assert low < value < high and high - low > 0.3


def test_points_without_documents_are_inconclusive_not_guessed(tmp_path):
    runs = claim_runs(tmp_path)
    for r in runs:
        for p in r.curve:
            p.pop("block_loss", None), p.pop("block_tokens", None)
    v = by_number(verdicts(runs, PRESET, 512))
    assert v[1].verdict == INCONCLUSIVE and v[1].p is None
    assert v[1].measured == "sinusoidal ppl(4L)/ppl(L) = 3.000"


def test_points_on_the_last_tokens_of_the_split_are_not_used(tmp_path):
    """Points scored before posexp spread its spans (one stretch at the end of the split)
    are not mixed with spread ones, and are no basis for a claim."""
    runs = claim_runs(tmp_path)
    for r in runs:
        for p in r.curve:
            p.update(spans=None, first_token=1000)
    v = by_number(verdicts(runs, PRESET, 512))
    assert all(x.verdict == UNMEASURED for x in v.values())
    assert v[1].measured.startswith(
        "not measured: no layout of 512 spread validation tokens common to its runs "
        "(sinusoidal L=16 nonoverlapping: the 512 validation targets 1,001-1,512 (one "
        "stretch); `posexp eval RUN` scores an older run on them)")


def test_a_claim_that_lost_a_run_is_not_measured(tmp_path):
    v = by_number(verdicts(claim_runs(tmp_path, skip={("rope", 16)}), PRESET, 512))
    assert v[2].verdict == v[6].verdict == UNMEASURED
    assert v[2].measured == ("not measured: no completed run of rope L=16 with nonoverlapping "
                             "points")
    assert v[1].verdict == HOLDS


def test_claims_compare_only_seeds_every_run_has(tmp_path):
    claim_runs(tmp_path, seeds=(0, 1))
    claim_runs(tmp_path, seeds=(2,), skip=set(CLAIM_RUNS) - {("sinusoidal", 16)})
    v = by_number(verdicts(load_runs(tmp_path)[0], PRESET, 512))
    assert v[1].interval.startswith("t over 3 seeds")
    assert v[2].interval.startswith("t over 2 seeds")


def test_verdicts_never_combine_scored_regions(tmp_path):
    runs = claim_runs(tmp_path, regions={("sinusoidal", 32): OTHER})
    v = by_number(verdicts(runs, PRESET, 512))
    assert v[4].verdict == UNMEASURED
    assert v[4].measured.startswith(
        "not measured: no layout of 512 spread validation tokens common to its runs (alibi "
        f"L=16 nonoverlapping: 512 validation tokens in spans {REGION.id}; sinusoidal L=32 "
        f"nonoverlapping: 512 validation tokens in spans {OTHER.id}")
    assert v[1].verdict == HOLDS
    v = by_number(verdicts(runs, PRESET, 256))
    assert all(v[n].verdict == UNMEASURED for n in v)


def test_verdicts_never_combine_modes(tmp_path):
    # sliding is flat against nonoverlapping ppl(L)=5 but not against its own ppl(L)=4
    v = by_number(verdicts(claim_runs(tmp_path, sliding={16: 4.0, 32: 6.0, 64: 6.0}), PRESET,
                           512))
    assert v[3].verdict == FAILS
    assert "alibi sliding ppl(2L)/ppl(L) = 1.500 [1.500, 1.500]" in v[3].measured


def test_longer_sliding_windows_that_help_fail_the_context_claim(tmp_path):
    """ALiBi's sliding perplexity 10% lower at 4L than at L: its longer windows use their
    context, against Press et al.'s analysis."""
    v = by_number(verdicts(claim_runs(tmp_path, sliding={16: 4.0, 32: 3.95, 64: 3.6}),
                           PRESET, 512))
    assert v[5].verdict == FAILS
    assert v[5].kind.startswith("alibi sliding ppl(2L)/ppl(L): non-inferiority, margin 2% "
                                "(> 0.9804)")


def _fake_experiment(calls: list, fail: str):
    """experiment.run writing a completed synthetic run (or failing for encoding ``fail``)."""

    def run(spec, progress: bool = True, group: str | None = None) -> str:
        cfg = spec.cfg
        calls.append((cfg.encoding.name, cfg.train.seq_len, cfg.seed,
                      C.EvalMode(cfg.eval.mode).value))
        if cfg.encoding.name == fail:
            raise PosexpError(f"cannot read the corpus for {fail}\nsecond line")
        path = Path(cfg.results_dir) / cfg.experiment / cfg.run_name
        ppl = CLAIM_RUNS[(cfg.encoding.name, cfg.train.seq_len)]
        mode = C.EvalMode(cfg.eval.mode).value
        points = curve({L: ppl.get(L, 50.0) for L in derive.eval_lengths(cfg)}, mode)
        if (path / "eval.json").exists():
            points = json.loads((path / "eval.json").read_text())["curve"] + points
        write_run(path, OmegaConf.to_yaml(C.resolve(cfg), resolve=True), points)
        return "completed"

    return run


def write_preset(path: Path, **fields) -> Path:
    path.write_text(json.dumps({
        "experiment": "claims", "train_seq_len": 16, "description": "tiny", "seeds": [0, 1],
        "overrides": ["train.seq_len=16", *SMALL, "eval.tokens=512", "eval.lengths=[16,32,64]"],
        "runs": [["encoding=sinusoidal"], ["encoding=rope"], ["encoding=alibi"],
                 ["encoding=learned"], ["encoding=nope"],
                 ["encoding=sinusoidal", "train.seq_len=32", "eval.lengths=[32,64]"]],
        "thresholds": THRESHOLDS, **fields}))
    return path


def test_planning_a_suite_says_how_far_it_is(tmp_path, monkeypatch, capsys):
    """Composing a suite's runs takes about 0.2 s a run (the tasks preset's 90, half a
    minute): like a large sweep, planning says how far it has got (every 30 s; here every
    run, POSEXP_PROGRESS_SECONDS=0), before anything trains."""
    monkeypatch.setenv("POSEXP_PROGRESS_SECONDS", "0")
    preset, _ = load_preset(str(write_preset(tmp_path / "tiny.yaml", seeds=[0])))
    configs, _, _ = posexp.claims.suite.plan("tiny", preset, tmp_path / "out", [0])
    lines = [line for line in capsys.readouterr().err.splitlines() if "planning" in line]
    assert len(lines) == len(configs) - 1 == 5
    assert re.fullmatch(r"posexp reproduce: planning: 1 of 6 runs composed and checked, "
                        r"about \d+ s left", lines[0])


def test_reproduce_runs_every_seed_and_fails_at_the_end(tmp_path, monkeypatch, capsys):
    preset = write_preset(tmp_path / "tiny.yaml")
    calls: list = []
    monkeypatch.setattr(posexp.run, "run", _fake_experiment(calls, fail="rope"))
    with pytest.raises(PosexpError, match=r"^2 of 12 runs failed; their claims are not "
                                          r"measured$"):
        reproduce(str(preset), tmp_path / "out")
    # every other run was trained and scored in both modes at both seeds
    assert len(calls) == 2 * (5 * 2 + 1)
    assert {c[2] for c in calls} == {0, 1}
    report = tmp_path / "out" / "claims" / "report"
    v = json.loads((report / "verdicts.json").read_text())
    assert v["seeds"] == [0, 1]
    got = {int(x["claim"].split(".")[0]): x["verdict"] for x in v["verdicts"]}
    assert got == {**EXPECTED, 2: UNMEASURED, 6: UNMEASURED}
    assert all(x["holm"] == x["verdict"] for x in v["verdicts"])
    # each p-value names what it tests; a claim without one, why it is outside the family
    assert v["verdicts"][0]["tested"] == HOLDS
    assert v["verdicts"][1]["tested"] == "outside the Holm family: not measured"
    md = (report / "verdicts.md").read_text()
    assert " | **not measured** | — (outside the Holm family: not measured) | " \
           "**not measured** |" in md
    assert "## Claims of Press et al." in md and "## Claims about no positional encoding" in md
    assert "## A property, not a claim\n\nLearned absolute positions have no row past their " \
           "table (L = 16): posexp reports n/a rather than clamping positions (here at 32, " \
           "64)." in md
    assert "| package | version |\n|---|---|\n| posexp | 0.1.0 |\n| python | 3.11.7 |" in md
    assert "Intervals: t over 2 seeds + cluster bootstrap over 64 documents (log scale)." in md
    assert "| claim | source | kind, margin (why) | scope | measured (95% interval) | " \
           "paper | verdict | p | Holm |" in md
    # the paper's own figure beside the measured one, with its place (Press et al., Table 2)
    assert "sinusoidal ppl(4L)/ppl(L) = 6.6 (Table 2 (appendix; WikiText-103, " \
           "L = 512), at 2,512 tokens (4.9L))" in md
    # what the runs cost, summed from their records, never typed
    assert "## What it cost" in md and re.search(
        r"\| every run \| \d+ \| 0M \| \d+\.\d\d \| \d+\.\d\d \| cpu \|", md)
    out = capsys.readouterr().out
    assert "1. Sinusoidal positions do not extrapolate\n    HOLDS: sinusoidal ppl(4L)/ppl(L)" \
        in out


@pytest.mark.parametrize("fields,message", [
    ({"seeds": [0, 0]}, "seeds must be a list of distinct non-negative integers"),
    ({"seeds": [-1]}, "seeds must be a list of distinct non-negative integers"),
    ({"seeds": []}, "seeds must be a list of distinct non-negative integers"),
    ({"seeds": 3}, "seeds must be a list, got 3"),
    ({"overrides": ["seed=3"]}, "set the seeds in its seeds: list, not as seed="),
])
def test_preset_seeds_are_checked(tmp_path, fields, message):
    preset = write_preset(tmp_path / "bad.yaml", **fields)
    with pytest.raises(UsageError, match=message):
        reproduce(str(preset), tmp_path / "out")


def test_a_preset_without_seeds_runs_seed_0(tmp_path):
    preset = OmegaConf.create({"overrides": [], "runs": [["encoding=rope"]]})
    assert preset_seeds(preset, "p") == [0]
    assert preset_seeds(OmegaConf.merge(preset, {"seeds": [2, 1]}), "p") == [2, 1]


# --- T5's claim and the fair baseline (claims 5 and 9 of the press set) ---------------------
LATER = OmegaConf.create({"train_seq_len": 16, "thresholds": {
    **THRESHOLDS, "t5_flat_at": [2, 4], "t5_flat": margin(0.05),
    "fair_baseline": margin(0.02)}})


def t5_runs(root: Path, seeds=(0, 1, 2), t5=None) -> list:
    """The press runs and a T5 run at each seed."""
    for seed in seeds:
        make_run(root, "t5", 16, seed, curve(t5 or {16: 6.0, 32: 6.06, 64: 6.24}))
    return claim_runs(root, seeds=seeds)


def test_t5_and_fair_baseline_claims_on_known_perplexities(tmp_path):
    v = by_number(verdicts(t5_runs(tmp_path), LATER, 512))
    assert (v[5].verdict, v[9].verdict) == (HOLDS, FAILS)
    assert v[5].measured == ("t5 ppl(2L)/ppl(L) = 1.010 [1.010, 1.010]; "
                             "t5 ppl(4L)/ppl(L) = 1.040 [1.040, 1.040]")
    assert v[5].source.endswith("(the T5 bias column)")
    # sinusoidal 5.0 against learned 4.5 at L: not equivalent within 2%
    assert v[9].measured == "sinusoidal ppl(L) / learned ppl(L) = 1.111 [1.111, 1.111]"
    assert v[9].kind.startswith("sinusoidal ppl(L) / learned ppl(L): equivalence, margin 2%")
    assert v[9].source.startswith("Vaswani et al.") and "(E)" in v[9].source
    # T5 that climbs 20% by 4L does not hold
    v = by_number(verdicts(t5_runs(tmp_path / "climbs", t5={16: 6.0, 32: 6.3, 64: 7.2}),
                           LATER, 512))
    assert v[5].verdict == FAILS


def test_no_claim_reads_a_training_speed(tmp_path):
    """Speed is the benchmark's (scripts/bench.py), not a claim's: runs that trained beside
    other work measure the machine, not the encoding."""
    v = verdicts(t5_runs(tmp_path), LATER, 512)
    assert not any("speed" in x.claim or "tokens per second" in x.measured for x in v)


def test_a_preset_without_the_later_margins_has_claims_1_to_7(tmp_path):
    v = by_number(verdicts(t5_runs(tmp_path), PRESET, 512))
    assert sorted(v) == [1, 2, 3, 4, 5, 6, 7]


# --- the encodings claim set ---------------------------------------------------------------
ENCODINGS = OmegaConf.create({"claims": "encodings", "train_seq_len": 16, "thresholds": {
    "degradation_at": 4, "far_at": 4, "random_positions": 64,
    "randomized": ["rope", "sinusoidal"], "better": margin(0.0), "tie": margin(0.02)}})


def encodings_runs(root: Path, seeds=(0, 1)) -> list:
    """Plain runs of six encodings and randomized runs (M = 64) of RoPE and sinusoidal:
    randomized RoPE is better at 4L than plain RoPE, randomized sinusoidal worse."""
    plain = {"rope": {16: 4.0, 64: 6.0}, "sinusoidal": {16: 5.0, 64: 15.0},
             "xpos": {16: 4.0, 64: 5.0}, "alibi": {16: 5.0, 64: 5.1},
             "kerple_log": {16: 4.9, 64: 4.9}, "fire": {16: 5.0, 64: 5.5}}
    random = {"rope": {16: 4.2, 64: 4.6}, "sinusoidal": {16: 5.0, 64: 20.0}}
    for seed in seeds:
        for enc, ppl in plain.items():
            make_run(root, enc, 16, seed, curve(ppl))
        for enc, ppl in random.items():
            make_run(root, enc, 16, seed, curve(ppl), "train.random_positions=64",
                     suffix="-random64")
    return load_runs(root)[0]


def test_encodings_claims_compare_each_run_with_its_baseline(tmp_path):
    v = by_number(verdicts(encodings_runs(tmp_path), ENCODINGS, 512))
    assert {n: v[n].verdict for n in v} == {1: HOLDS, 2: FAILS, 3: HOLDS, 4: HOLDS, 5: FAILS}
    # judged on perplexity at 4L, each randomized run against its own plain run; the
    # degradation ratio (4.6/4.2) / (6/4) and the cost at L beside it
    assert v[1].measured == ("rope randomized/plain ppl(4L) = 0.767 [0.767, 0.767]; beside: "
                             "rope randomized/plain degradation at 4L = 0.730 [0.730, 0.730]; "
                             "beside: rope randomized/plain ppl(L) = 1.050 [1.050, 1.050]")
    assert v[2].measured.startswith("sinusoidal randomized/plain ppl(4L) = 1.333 [1.333, "
                                    "1.333]")
    assert v[3].measured.startswith("xpos/rope ppl(4L) = 0.833 [0.833, 0.833]")
    assert v[4].measured == "kerple_log/alibi ppl(4L) = 0.961 [0.961, 0.961]"
    assert v[1].source.startswith("Ruoss et al.") and v[3].source.startswith("Sun et al.")
    assert v[4].source.startswith("Chi et al.") and v[5].source.startswith("Li et al.")
    assert v[1].interval.startswith("t over 2 seeds")


def test_a_claim_judged_far_past_L_does_not_follow_the_degradation_ratio(tmp_path):
    """Randomized RoPE twice as bad at L and still worse at 4L, though it degrades less:
    a ratio of degradations would call that a success; perplexity at 4L does not."""
    for seed in (0, 1):
        make_run(tmp_path, "rope", 16, seed, curve({16: 6.1, 64: 9.1}))
        make_run(tmp_path, "rope", 16, seed, curve({16: 12.2, 64: 14.0}),
                 "train.random_positions=64", suffix="-random64")
    v = by_number(verdicts(load_runs(tmp_path)[0], ENCODINGS, 512))
    assert v[1].verdict == FAILS
    assert "beside: rope randomized/plain degradation at 4L = 0.769" in v[1].measured


def test_a_missing_randomized_run_is_named_with_its_positions(tmp_path):
    runs = [r for r in encodings_runs(tmp_path) if not r.name.startswith("rope-L16-s0-random")
            and not r.name.startswith("rope-L16-s1-random")]
    v = by_number(verdicts(runs, ENCODINGS, 512))
    assert v[1].verdict == UNMEASURED and v[3].verdict == HOLDS
    assert v[1].measured == ("not measured: no completed run of rope L=16 "
                             "train.random_positions=64 with nonoverlapping points")


SHIPPED = sorted(p.stem for p in (Path(CONFIG_DIR) / "reproduce").glob("*.yaml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_preset_composes_every_run(name, tmp_path):
    """Each run of each shipped preset composes and passes the config check, and no two
    share a run directory, at any seed: composed at the first seed (a seed changes no other
    value), with each run's directory at every seed from its name's seed -- checked by
    composing the first run at the last seed too."""
    preset = load_preset(name)[0]
    unchosen = [e for e, lr in (preset.get("learning_rates") or {}).items() if lr is None]
    if unchosen:  # refused until its sweep chooses; composed here at a rate of the grid
        with pytest.raises(UsageError, match=f"learning_rates.{unchosen[0]} is not chosen"):
            preset_runs(preset)
        preset.learning_rates = {e: lr or 0.004 for e, lr in preset.learning_rates.items()}
    seeds = preset_seeds(preset, name)

    def path(run: list[str], seed: int) -> Path:
        cfg = compose([*preset.overrides, f"experiment={preset.experiment}",
                       f"results_dir={tmp_path}", *run, f"seed={seed}"])
        return Path(cfg.results_dir) / cfg.experiment / cfg.run_name

    first = [path(run, seeds[0]) for run in preset_runs(preset)]
    assert len(set(first)) == len(first)
    last = path(preset_runs(preset)[0], seeds[-1])
    assert last == first[0] if len(seeds) == 1 else last.name == first[0].name.replace(
        f"-s{seeds[0]}", f"-s{seeds[-1]}", 1)
    report_dir(preset, name)


def test_the_encodings_presets_train_every_encoding_and_share_their_base_presets_runs(
        tmp_path):
    from posexp.encodings import ENCODINGS as REGISTERED

    for name, base in (("encodings", "cpu"), ("encodings-gpu", "gpu")):
        preset, other = (load_preset(n)[0] for n in (name, base))
        runs = preset_runs(preset)
        # each encoding once as is or with its own hparams or run name only (T5's
        # max_distance; FIRE's runs named with their threshold's start, #43)
        plain = [r[0] for r in runs if all(o.startswith(("encoding.hparams.", "train.lr=",
                                                         "run_name=")) for o in r[1:])]
        assert sorted(plain) == sorted(f"encoding={e}" for e in REGISTERED)
        assert preset.experiment == other.experiment and report_dir(preset, name) != "report"

        def identity(p: DictConfig, run: list[str]) -> tuple:
            cfg = compose([*p.overrides, f"experiment={p.experiment}", *run, "seed=0"])
            return cfg.run_name, C.identity(cfg)

        shared = [run for run in preset_runs(other) if run in runs]
        assert len(shared) >= 6
        for run in shared:
            assert identity(preset, run) == identity(other, run)


@pytest.mark.parametrize("value", ["no", 1, None])
def test_every_encoding_is_true_or_false(value, tmp_path):
    preset = write_preset(tmp_path / "p.yaml", runs=[["encoding=rope"]], every_encoding=value)
    if value is None:
        assert preset_runs(load_preset(str(preset))[0]) == [["encoding=rope"]]
        return
    with pytest.raises(UsageError, match="every_encoding must be true or false"):
        load_preset(str(preset))


@pytest.mark.parametrize("report", ["../out", "a/b", ".", ".hidden"])
def test_a_preset_report_is_a_directory_beside_its_runs(report):
    with pytest.raises(UsageError, match="report must be a directory name beside its runs"):
        report_dir(OmegaConf.create({"report": report}), "p")


# --- RoPE context extension (claims: rope-scaling) -----------------------------------------
ROPE_PRESET = OmegaConf.create({"claims": "rope-scaling", "train_seq_len": 16, "thresholds": {
    "factor": 4, "finetunes": {"short": 2048}, "better": margin(0.0), "pi_cost": margin(0.05),
    "finetune_gap": margin(0.05), "tie": margin(0.02)}})


PARAMS = dataclasses.asdict(schema.ScalingParams())


def fine_tune(root: Path, method: str | None, seq_len: int, ppl: dict,
              tokens: int = 2048) -> None:
    """A fine-tune of rope-L16-s0 at ``seq_len`` on ``tokens`` with RoPE scaling ``method``
    (None: the control, which continues the parent at its own length)."""
    cfg = OmegaConf.create(config_text(("encoding=rope", f"train.seq_len={seq_len}",
                                        f"train.tokens={tokens}", *SMALL)))
    if method:
        cfg.encoding.scaling.method, cfg.encoding.scaling.factor = method, 4.0
    cfg.parent = {"run": str(root / "rope-L16-s0"), "identity": "i", "config": "c",
                  "weights_sha256": "w", "original_len": 16}
    write_run(root / f"rope-L16-s0-ft-L{seq_len}-{method}-{tokens}tok", OmegaConf.to_yaml(cfg),
              curve(ppl))


def rope_runs(root: Path, tuned_pi: float = 5.1, tunes: bool = True) -> list:
    """A RoPE run at L=16 scored as trained and with NTK-aware, YaRN and PI at factor 4, and
    (``tunes``) its fine-tunes at 4L with PI and YaRN and the control that continues it at
    L, of chosen perplexities at L and 4L."""
    points = curve({16: 5.0, 64: 9.0})
    for method, ppl in (("ntk", {16: 5.1, 64: 6.0}), ("yarn", {16: 5.05, 64: 5.5}),
                        ("linear", {16: 6.5, 64: 5.8})):
        record = scaling.record(method, 4, PARAMS)
        points += [{**p, "rope_scaling": record} for p in curve(ppl)]
    make_run(root, "rope", 16, 0, points)
    if tunes:
        fine_tune(root, "linear", 64, {16: 5.4, 64: tuned_pi})
        fine_tune(root, "yarn", 64, {16: 5.3, 64: 4.9})
        fine_tune(root, None, 16, {16: 4.95, 64: 8.8})
    return load_runs(root)[0]


def test_rope_scaling_claims_on_known_perplexities(tmp_path):
    v = by_number(verdicts(rope_runs(tmp_path), ROPE_PRESET, 512))
    assert {n: v[n].verdict for n in v} == dict.fromkeys(range(1, 9), HOLDS)
    # one claim a method (#43): a claim of two held only where both did
    assert v[1].measured == "NTK-aware x4 / plain, ppl(4L) = 0.667 [0.667, 0.667]"
    assert v[2].measured == "YaRN x4 / plain, ppl(4L) = 0.611 [0.611, 0.611]"
    assert v[3].measured == "PI x4 / plain, ppl(L) = 1.300 [1.300, 1.300]"
    # against the control's ppl(L) -- the same training budget -- with the parent's beside
    assert v[4].measured == (
        "fine-tuned PI ppl(4L) / control ppl(L) = 1.030 [1.030, 1.030]; beside: fine-tuned "
        "PI ppl(4L) / parent ppl(L) = 1.020 [1.020, 1.020]")
    assert v[5].measured.startswith(
        "fine-tuned YaRN ppl(4L) / control ppl(L) = 0.990 [0.990, 0.990]")
    assert v[6].measured == "fine-tuned PI / control, ppl(4L) = 0.580 [0.580, 0.580]"
    assert v[7].measured == "fine-tuned YaRN / control, ppl(4L) = 0.557 [0.557, 0.557]"
    assert v[8].measured == "fine-tuned YaRN / PI, ppl(4L) = 0.961 [0.961, 0.961]"
    assert v[1].source.startswith("bloc97") and v[2].source.startswith("Peng et al.")
    assert v[4].source.startswith("Chen et al.") and v[5].source.startswith("Peng et al.")
    assert v[4].kind.startswith("fine-tuned PI ppl(4L) / control ppl(L): non-inferiority, "
                                "margin 5% (< 1.05)")
    # each split claim says so, in bold, wherever its verdict is
    for n in (1, 2, 4, 5, 6, 7):
        assert "**[re-specified after the data: split per method in 6e96f12 (#43)" in v[n].claim
    assert "re-specified" not in v[3].claim + v[8].claim
    # a PI fine-tune that leaves 4L 20% above the control's L: YaRN's claim still holds
    v = by_number(verdicts(rope_runs(tmp_path / "worse", tuned_pi=6.0), ROPE_PRESET, 512))
    assert (v[4].verdict, v[5].verdict, v[8].verdict) == (FAILS, HOLDS, HOLDS)
    # without fine-tunes, their claims are not measured, naming what is missing
    v = by_number(verdicts(rope_runs(tmp_path / "none", tunes=False), ROPE_PRESET, 512))
    assert [v[n].verdict for n in range(1, 9)] == [HOLDS] * 3 + [UNMEASURED] * 5
    assert v[8].measured == ("not measured: no completed run of rope L=16 \u2192 ft L=64 PI "
                             "\u00d74 on 2,048 tokens with nonoverlapping points")


def test_each_fine_tune_budget_is_judged_on_its_own_fine_tunes(tmp_path):
    rope_runs(tmp_path)  # the short fine-tunes (2,048 tokens) and their control
    fine_tune(tmp_path, "linear", 64, {16: 5.2, 64: 8.0}, tokens=8192)  # worse than the control
    fine_tune(tmp_path, "yarn", 64, {16: 5.2, 64: 4.7}, tokens=8192)
    fine_tune(tmp_path, None, 16, {16: 4.9, 64: 8.7}, tokens=8192)
    preset = OmegaConf.merge(ROPE_PRESET, {"thresholds": {"finetunes": {
        "short": 2048, "continued training": 8192}}})
    v = by_number(verdicts(load_runs(tmp_path)[0], preset, 512))
    assert len(v) == 13 and [v[n].verdict for n in range(1, 9)] == [HOLDS] * 8
    assert "(continued training, 8,192 tokens)" in v[9].claim
    # 8.0 / 8.7 at 4L against the continued control, not the short one's 8.8
    assert v[11].measured.startswith("fine-tuned PI / control, ppl(4L) = 0.920")
    assert v[9].verdict == FAILS  # PI: 8.0 / 4.9, far from the control's ppl(L)
    # a budget the margins name but no run trained is not measured, never another's runs
    preset = OmegaConf.merge(ROPE_PRESET, {"thresholds": {"finetunes": {"long": 99}}})
    v = by_number(verdicts(rope_runs(tmp_path / "one"), preset, 512))
    assert [v[n].verdict for n in range(4, 14)] == [HOLDS] * 5 + [UNMEASURED] * 5


@pytest.mark.parametrize("finetunes", [{}, {"short": 0}, {"short": "many"}, {"short": True}])
def test_a_fine_tune_budget_must_be_named_tokens(finetunes):
    preset = OmegaConf.merge(ROPE_PRESET, {"thresholds": {"finetunes": None}})
    preset.thresholds.finetunes = finetunes
    with pytest.raises(UsageError, match=re.escape("thresholds.finetunes must map each "
                                                   "fine-tune budget's name to its tokens")):
        posexp.claims.registry.CLAIM_SETS["rope-scaling"].sections(preset)


@pytest.mark.parametrize("fields,message", [
    ({"claims": "ropes"},
     f"claims must be one of {', '.join(posexp.claims.registry.CLAIM_SETS)}, got 'ropes'"),
    ({"finetunes": [{"parent": ["encoding=rope"], "overrides": ["encoding.scaling=yarn"]}]},
     "the parent of fine-tune ['encoding.scaling=yarn'] (['encoding=rope']) is not one of its "
     "runs"),
])
def test_rope_preset_mistakes_are_usage_errors(tmp_path, fields, message):
    preset = write_preset(tmp_path / "bad.yaml", runs=[["encoding=alibi"]], **fields)
    with pytest.raises(UsageError, match=re.escape(message)):
        reproduce(str(preset), tmp_path / "out")


def test_every_encoding_trains_at_its_own_learning_rate(tmp_path):
    rates = {"sinusoidal": 0.002, "rope": 0.008}
    preset = load_preset(str(write_preset(
        tmp_path / "p.yaml", runs=[["encoding=sinusoidal"], ["encoding=rope"],
                                   ["encoding=rope", "train.lr=0.001"]],
        learning_rates=rates)))[0]
    assert preset_runs(preset) == [["encoding=sinusoidal", "train.lr=0.002"],
                                   ["encoding=rope", "train.lr=0.008"],
                                   ["encoding=rope", "train.lr=0.001"]]
    # a fine-tune's parent is found at its encoding's rate too
    configs, paths, tunes = posexp.claims.suite.plan(
        "p", OmegaConf.merge(preset, {"finetunes": [
            {"parent": ["encoding=rope"], "overrides": ["train.seq_len=64"]}]}),
        tmp_path / "out", [0])
    assert tunes[0][0] == paths[1] and configs[1].train.lr == 0.008


@pytest.mark.parametrize("rates,message", [
    ({"sinusoidal": 0.002}, "learning_rates has no rate for encoding rope"),
    ({"sinusoidal": 0.002, "rope": -1}, "learning_rates.rope must be a positive number"),
    ({"sinusoidal": 0.002, "rope": "fast"}, "learning_rates.rope must be a positive number"),
])
def test_a_preset_without_an_encodings_rate_is_refused(tmp_path, rates, message):
    preset = write_preset(tmp_path / "p.yaml", runs=[["encoding=sinusoidal"], ["encoding=rope"]],
                          learning_rates=rates)
    with pytest.raises(UsageError, match=message):
        preset_runs(load_preset(str(preset))[0])


@pytest.mark.parametrize("value", [1.05, {"margin": 0.05}, {"margin": -0.1, "reason": "x"},
                                   {"margin": 0.05, "reason": " "},
                                   {"margin": 0.05, "reason": "x", "why": "y"}])
def test_a_margin_comes_with_its_reason(tmp_path, value):
    preset = write_preset(tmp_path / "p.yaml", thresholds={**THRESHOLDS, "alibi_flat": value})
    with pytest.raises(UsageError, match=r"thresholds.alibi_flat must be a mapping of margin "
                                         r"\(a number, 0 or more\) and reason"):
        load_preset(str(preset))
