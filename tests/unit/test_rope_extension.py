"""RoPE context extension through posexp: eval.rope_scaling (its settings, every variant
scored by one process on the same tokens, eval.json old and new, report and compare) and
posexp finetune (identity, weights, refusals, resume and the lock)."""
import dataclasses

import pytest

from posexp import config as C
from posexp import scaling
from posexp.config import derive, schema
from posexp.encodings import ENCODINGS
from posexp.errors import UsageError
from posexp.listing import compare_lines, summary_points
from posexp.report.series import METHOD_COLOURS, build_series
from posexp.report.style import ramp
from posexp.runs import load_runs
from posexp.scaling import key as scaling_key
from tests.conftest import (
    TINY,
    compose_args,
    plan_sweep,
)
from tests.reports import markdown, tidy_rows
from tests.runs_on_disk import curve_point, losses, write_run

C.register()


PARAMS = dataclasses.asdict(schema.ScalingParams())


LENGTHS = (16, 32, 64)  # TINY's evaluation lengths; it trains at 16


NO = "nonoverlapping"


TIMES = "\u00d7"


# --- settings -----------------------------------------------------------------------------
def test_shorthands_and_comma_lists_ask_for_every_method_at_every_factor(tmp_path):
    cfg = compose_args([*TINY, "eval.rope_scaling=linear,yarn", "eval.rope_scaling.factor=2,8"])
    assert list(cfg.eval.rope_scaling.method) == ["linear", "yarn"]
    assert derive.eval_scalings(cfg) == [
        {"method": "linear", "factor": 2.0}, {"method": "linear", "factor": 8.0},
        {"method": "yarn", "factor": 2.0, "beta_fast": 32.0, "beta_slow": 1.0},
        {"method": "yarn", "factor": 8.0, "beta_fast": 32.0, "beta_slow": 1.0}]
    other = compose_args([*TINY, "eval.rope_scaling=plain,llama3", "eval.rope_scaling.factor=4",
                         "eval.rope_scaling.high_freq_factor=8"])
    assert derive.eval_scalings(other) == [None, {"method": "llama3", "factor": 4.0,
                                             "low_freq_factor": 1.0, "high_freq_factor": 8.0}]
    assert derive.eval_scalings(compose_args(TINY)) == [None]
    # evaluation settings: the same run
    assert C.identity(cfg) == C.identity(other) == C.identity(compose_args(TINY))
    # a sweep does not make runs of a list of variants
    jobs, _ = plan_sweep([*TINY, "encoding=rope", "eval.rope_scaling=ntk,yarn", "seed=0,1",
         f"results_dir={tmp_path}", "--cfg", "job"])
    assert [(j.cfg.seed, list(j.cfg.eval.rope_scaling.method)) for j in jobs] == [
        (0, ["ntk", "yarn"]), (1, ["ntk", "yarn"])]


@pytest.mark.parametrize("overrides,message", [
    (["eval.rope_scaling=pi"], "eval.rope_scaling.method must be one of plain, linear, ntk, "
                               "dynamic, yarn, llama3, self_extend, rerope, leaky_rerope, "
                               "llama4_temperature, yarn_temperature, logn_temperature or a "
                               "list of them"),
    (["eval.rope_scaling=rerope", "eval.rope_scaling.factor=4"],
     "eval.rope_scaling.factor is set but rerope takes no factor"),
    (["eval.rope_scaling=self_extend", "eval.rope_scaling.neighbor_window=1.5"],
     "eval.rope_scaling: neighbor_window is a fraction of the training length L, above 0 and "
     "below 1; got 1.5"),
    (["eval.rope_scaling=rerope", "eval.rope_scaling.logn=-1"],
     "eval.rope_scaling.logn must be a finite number in [0, "),
    (["eval.rope_scaling=leaky_rerope", "eval.rope_scaling.logn=0.5"], "logn is 1"),
    (["eval.rope_scaling=yarn", "eval.rope_scaling.window=0.5"],
     "eval.rope_scaling.window is set, but eval.rope_scaling=yarn does not read it"),
    (["eval.rope_scaling=llama4_temperature,yarn_temperature", "eval.rope_scaling.factor=2"],
     "llama4_temperature, yarn_temperature takes no factor"),
    (["encoding=alibi", "eval.rope_scaling=llama4_temperature,yarn"],
     "eval.rope_scaling=yarn needs encoding=rope"),
    (["encoding.scaling=llama4_temperature"],
     "encoding.scaling=llama4_temperature is applied at evaluation only"),
    (["encoding.scaling=self_extend", "encoding.scaling.factor=4"],
     "encoding.scaling=self_extend is applied at evaluation only"),
    (["eval.rope_scaling.factor=4"], "eval.rope_scaling.factor is set but "
                                     "eval.rope_scaling.method is not"),
    (["eval.rope_scaling=yarn", "eval.rope_scaling.factor=0.5"],
     "eval.rope_scaling.factor must be a finite number in [1, "),
    (["eval.rope_scaling=yarn,ntk,yarn"], "eval.rope_scaling.method lists yarn more than once"),
    (["eval.rope_scaling=ntk", "eval.rope_scaling.factor=2,2"],
     "eval.rope_scaling.factor lists 2 more than once"),
    (["eval.rope_scaling=yarn", "eval.rope_scaling.beta_fast=0.5"],
     "eval.rope_scaling: yarn needs beta_fast > beta_slow > 0"),
    (["eval.rope_scaling=plain", "eval.rope_scaling.factor=4"], "the only method is plain"),
    (["encoding=alibi", "eval.rope_scaling=ntk"], "eval.rope_scaling=ntk needs encoding=rope"),
    (["eval.rope_scaling.betafast=1"], "eval.rope_scaling has no key 'betafast'; did you mean "
                                       "'beta_fast'?"),
    (["encoding.scaling=linear"], "encoding.scaling is for fine-tuning a trained run"),
    (["parent.identity=abc"], "parent.identity is set by posexp finetune"),
])
def test_bad_scaling_settings_are_one_line_usage_errors(overrides, message):
    with pytest.raises(UsageError) as e:
        compose_args([*TINY, *overrides])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_each_scaling_is_its_own_series_in_report_and_compare(tmp_path):
    yarn = scaling.record("yarn", 4, PARAMS)
    curve = [curve_point(NO, L, losses(2.0, seed=L)) for L in LENGTHS]
    curve += [{**curve_point(NO, L, losses(1.8, seed=L)), "rope_scaling": yarn}
              for L in LENGTHS]
    run = write_run(tmp_path / "e" / "rope-L16-s0", ["encoding=rope"], curve)
    runs, _ = load_runs(tmp_path)
    series, _ = build_series(runs)
    assert [(s.label, s.scaling) for s in series] == [
        ("rope L=16", None), (f"rope L=16 + YaRN {TIMES}4", scaling_key(yarn))]
    # one encoding with scalings: a colour per method, the encoding's own as trained
    assert series[0].colour == ENCODINGS["rope"].colour != series[1].colour
    assert series[1].colour in METHOD_COLOURS
    # beside another encoding, colours go by encoding again: two shades of RoPE's
    write_run(tmp_path / "e" / "alibi-L16-s0", ["encoding=alibi"], curve[:len(LENGTHS)])
    mixed, _ = build_series(load_runs(tmp_path)[0])
    light, dark = ramp(ENCODINGS["rope"].colour, 2)
    assert {s.label: s.colour for s in mixed} == {
        "rope L=16": light, f"rope L=16 + YaRN {TIMES}4": dark,
        "alibi L=16": ENCODINGS["alibi"].colour}
    assert {(row["series"], row["rope_scaling"], row["rope_scaling_factor"], row["length"])
            for row in tidy_rows(runs)} == {
        *(("rope L=16", None, None, L) for L in LENGTHS),
        *((f"rope L=16 + YaRN {TIMES}4", f"YaRN {TIMES}4", 4.0, L) for L in LENGTHS)}
    md = markdown(runs, [], "t")
    assert "| encoding | L_train | fine-tune | RoPE scaling | seeds | 16 | 32 | 64 |" in md
    assert f"| rope | 16 | - | YaRN {TIMES}4 | 1 | **" in md
    # ls summarises the run as trained, compare gives each scaling its rows
    at_train, longest = summary_points(runs[0])
    assert (at_train["ppl"], longest["ppl"]) == (curve[0]["ppl"], curve[2]["ppl"])
    rows = [line.split() for line in compare_lines(run, run) if line.startswith("      ")]
    assert [row[:3] for row in rows] == [
        *(([str(L), "as", "trained"]) for L in LENGTHS),
        *(([str(L), "YaRN", f"{TIMES}4"]) for L in LENGTHS)]
