"""RoPE context extension through posexp: eval.rope_scaling (its settings, every variant
scored by one process on the same tokens, eval.json old and new, report and compare) and
posexp finetune (identity, weights, refusals, resume and the lock)."""

import dataclasses
import json
import signal

import pytest
import torch
from omegaconf import OmegaConf

from posexp import config as C
from posexp import scaling
from posexp.config import derive, schema
from posexp.encodings import ENCODINGS
from posexp.errors import UsageError
from posexp.listing import compare_lines, summary_points
from posexp.report.series import METHOD_COLOURS, build_series
from posexp.run.finetune import digest
from posexp.runs import Run, load_run, load_runs, point_key, point_scaling
from posexp.scaling import key as scaling_key
from tests.conftest import (
    TINY,
    assert_usage_error,
    compose_args,
    copy_run,
    plan_sweep,
    read_json,
)
from tests.reports import markdown, tidy_rows
from tests.runs_on_disk import curve_point, losses, write_run
from tests.test_reliability import start, wait_for_step

C.register()
PARAMS = dataclasses.asdict(schema.ScalingParams())
LENGTHS = (16, 32, 64)  # TINY's evaluation lengths; it trains at 16
NO = "nonoverlapping"
TIMES = "\u00d7"


def scaled(method: str, factor: float):
    return scaling_key(scaling.record(method, factor, PARAMS))


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
                               "dynamic, yarn, llama3 or a list of them"),
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


# --- evaluation ---------------------------------------------------------------------------
@pytest.mark.slow
def test_eval_scores_every_variant_in_one_process_on_the_same_tokens(trained, posexp_here,
                                                                     tmp_path, monkeypatch):
    done, trained_run = trained("rope")
    assert done.returncode == 0, done.stderr
    run = copy_run(trained_run, tmp_path / "out")
    loads = []
    load = Run.load_checkpoint
    monkeypatch.setattr(Run, "load_checkpoint", lambda self: loads.append(self) or load(self))
    r = posexp_here("eval", str(run), "eval.rope_scaling=plain,linear,ntk,dynamic,yarn,llama3",
                    "eval.rope_scaling.factor=1,4")
    assert r.returncode == 0, r.stderr
    assert len(loads) == 1  # the model is loaded once for all eleven
    assert "11 RoPE scalings (as trained, PI \u00d71, PI \u00d74, NTK-aware" in r.stderr
    data = read_json(run / "eval.json")
    curve = data["curve"]
    assert len({point_key(p) for p in curve}) == len(curve) == 11 * len(LENGTHS)
    # every variant scored the same tokens in the same blocks: paired comparisons hold
    assert len({(p["first_token"], p["tokens"], tuple(p["block_tokens"])) for p in curve}) == 1
    by = {(point_scaling(p), p["length"]): p for p in curve}
    plain = {L: by[(None, L)] for L in LENGTHS}
    for method in ("linear", "ntk", "yarn", "llama3"):  # factor 1: RoPE as trained, exactly
        assert all(by[(scaled(method, 1), L)]["block_loss"] == plain[L]["block_loss"]
                   for L in LENGTHS)
    # dynamic NTK at factor 1 is plain up to the training length and NTK of the window above
    assert by[(scaled("dynamic", 1), 16)]["block_loss"] == plain[16]["block_loss"]
    assert by[(scaled("dynamic", 1), 64)]["loss"] != plain[64]["loss"]
    assert by[(scaled("dynamic", 4), 16)]["block_loss"] == plain[16]["block_loss"]
    assert by[(scaled("linear", 4), 16)]["loss"] != plain[16]["loss"]
    assert by[(scaled("yarn", 4), 16)]["rope_scaling"] == {
        "method": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0}
    # per-position loss: the run as trained only
    assert [p["length"] for p in data["per_position"]] == [64]
    # the same command again replaces the points, never doubles them
    assert posexp_here("eval", str(run), "eval.rope_scaling=yarn",
                       "eval.rope_scaling.factor=4").returncode == 0
    assert len(read_json(run / "eval.json")["curve"]) == len(curve)


@pytest.mark.slow
def test_eval_json_without_scalings_reads_as_the_run_as_trained(trained, posexp_here,
                                                                tmp_path):
    _, trained_run = trained("rope")
    run = copy_run(trained_run, tmp_path / "out")
    data = read_json(run / "eval.json")
    for p in data["curve"]:
        del p["rope_scaling"]
    (run / "eval.json").write_text(json.dumps(data))
    before = (run / "eval.json").read_text()
    result = load_run(run)
    assert result.status == "completed" and result.scalings(NO) == [None]
    assert sorted(result.points(NO, result.regions(NO)[0])) == list(LENGTHS)
    # posexp train of the same config finds every point it asks for: nothing is scored
    args = ["train", "encoding=rope", *TINY, "results_dir=out"]
    r = posexp_here(*args)
    assert r.returncode == 0 and "skipped" in r.stderr, r.stderr
    assert (run / "eval.json").read_text() == before
    # with a scaling asked for, only its points are scored, beside the old ones
    r = posexp_here(*args, "eval.rope_scaling=ntk", "eval.rope_scaling.factor=4")
    assert r.returncode == 0, r.stderr
    assert f"scoring the 3 missing point(s) (NTK-aware {TIMES}4 at 16, 32, 64)" in r.stderr
    curve = read_json(run / "eval.json")["curve"]
    assert [("rope_scaling" in p, p["length"]) for p in curve] == [
        (False, 16), (False, 32), (False, 64), (True, 16), (True, 32), (True, 64)]


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
    # beside another encoding, colours go by encoding again
    write_run(tmp_path / "e" / "alibi-L16-s0", ["encoding=alibi"], curve[:len(LENGTHS)])
    mixed, _ = build_series(load_runs(tmp_path)[0])
    assert {s.label: s.colour for s in mixed} == {
        "rope L=16": ENCODINGS["rope"].colour, f"rope L=16 + YaRN {TIMES}4":
        ENCODINGS["rope"].colour, "alibi L=16": ENCODINGS["alibi"].colour}
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


# --- fine-tuning --------------------------------------------------------------------------
FT = ["train.seq_len=32", "train.tokens=1024", "encoding.scaling=yarn",
      "encoding.scaling.factor=2"]


@pytest.mark.slow
def test_finetune_starts_from_the_parent_and_records_it(trained, posexp_here, tmp_path):
    _, trained_run = trained("rope")
    parent = copy_run(trained_run, tmp_path / "out")
    # a learning rate of 1e-12: the fine-tune's weights stay its parent's
    r = posexp_here("finetune", str(parent), *FT, "train.lr=1e-12", "train.warmup_tokens=0")
    assert r.returncode == 0, r.stderr
    child = parent.with_name("rope-L16-s0-ft-L32-yarn2")
    cfg = OmegaConf.load(child / "config.yaml")
    assert cfg.parent.identity == digest(Run(parent).identity())
    assert cfg.parent.weights_sha256 == read_json(parent / "run.json")["weights_sha256"]
    assert (cfg.parent.original_len, cfg.train.seq_len, cfg.encoding.scaling.method,
            cfg.encoding.scaling.factor) == (16, 32, "yarn", 2.0)
    assert cfg.train.batch_size == 4  # the parent's 128 tokens a step, at the new length
    assert read_json(child / "run.json")["parent"] == str(parent.resolve())
    ident = Run(child).identity()
    assert ident["parent.weights_sha256"] == cfg.parent.weights_sha256
    assert "parent.run" not in ident  # where the parent lies is not what the child is
    before, after = (Run(p).load_checkpoint()["model"] for p in (parent, child))
    for name, tensor in before.items():
        torch.testing.assert_close(after[name], tensor, rtol=0, atol=1e-6)
    # as trained, the fine-tune is its parent's weights scaled by YaRN x2 over L = 16
    r = posexp_here("eval", str(parent), "eval.rope_scaling=yarn", "eval.rope_scaling.factor=2")
    assert r.returncode == 0, r.stderr
    parent_yarn = {p["length"]: p["loss"] for p in read_json(parent / "eval.json")["curve"]
                   if point_scaling(p) == scaled("yarn", 2)}
    child_plain = {p["length"]: p["loss"] for p in read_json(child / "eval.json")["curve"]}
    assert child_plain == pytest.approx(parent_yarn, rel=1e-4)
    # the same command finds it done; other settings under its name are another identity
    r = posexp_here("finetune", str(parent), *FT, "train.lr=1e-12", "train.warmup_tokens=0")
    assert r.returncode == 0 and "skipped" in r.stderr, r.stderr
    r = posexp_here("finetune", str(parent), *FT)
    assert_usage_error(r, "holds a run of another identity (train.lr: 1e-12 -> 0.002")
    # a fine-tune of a fine-tune keeps the root's length as L
    r = posexp_here("finetune", str(child), "train.seq_len=64", "--cfg", "job")
    assert r.returncode == 0, r.stderr
    grandchild = OmegaConf.create(r.stdout)
    assert grandchild.run_name == "rope-L16-s0-ft-L32-yarn2-ft-L64-yarn2"
    assert grandchild.parent.original_len == 16
    assert grandchild.parent.identity == digest(Run(child).identity())
    # the report puts the fine-tune beside its parent
    labels = [s.label for s in build_series(load_runs(tmp_path / "out")[0])[0]]
    assert labels == ["rope L=16", f"rope L=16 + YaRN {TIMES}2",
                      f"rope L=16 \u2192 ft L=32 YaRN {TIMES}2"]


@pytest.mark.slow
def test_finetune_refuses_what_it_cannot_continue(trained, posexp_here, tmp_path):
    _, rope = trained("rope")
    _, learned = trained("learned")

    def parent(source, name, **info):
        path = copy_run(source, tmp_path / name)
        if info:
            (path / "run.json").write_text(json.dumps({**read_json(path / "run.json"), **info}))
        return path

    assert_usage_error(posexp_here("finetune", str(tmp_path / "none"), *FT),
                       "is not a directory")
    stopped = parent(rope, "stopped", status="interrupted")
    assert_usage_error(posexp_here("finetune", str(stopped), *FT),
                       f"has status 'interrupted'; only a completed run can be fine-tuned "
                       f"(posexp resume {stopped} finishes it)")
    changed = parent(rope, "changed", weights_sha256="0" * 64)
    r = posexp_here("finetune", str(changed), *FT)
    assert r.returncode == 1 and "does not hold the weights" in r.stderr, r.stderr
    damaged = parent(rope, "damaged")
    (damaged / "checkpoint.pt").write_bytes(b"not a checkpoint")
    r = posexp_here("finetune", str(damaged), *FT)
    assert r.returncode == 1 and "it is not a torch checkpoint" in r.stderr, r.stderr
    table = parent(learned, "learned")
    assert_usage_error(posexp_here("finetune", str(table), "train.seq_len=32"),
                       "encoding.max_positions (16) is less than train.seq_len (32): learned "
                       "has no position past its table, and a fine-tune keeps its parent's "
                       "table")
    assert_usage_error(posexp_here("finetune", str(table), "encoding.scaling=linear",
                                   "encoding.scaling.factor=2"),
                       "encoding.scaling needs encoding=rope")
    assert_usage_error(posexp_here("eval", str(table), "eval.rope_scaling=ntk"),
                       "eval.rope_scaling=ntk needs encoding=rope")
    assert_usage_error(posexp_here("finetune", str(table), "model.d_model=64"),
                       "posexp finetune can change only train.*, eval.*, encoding.scaling")
    assert not list(tmp_path.rglob("*-ft*"))  # nothing was started


@pytest.mark.slow
def test_a_killed_finetune_resumes_to_the_weights_of_an_unbroken_one(trained, posexp_here,
                                                                     cache_dir, tmp_path):
    _, rope = trained("rope")
    args = ["train.seq_len=32", "train.tokens=32768", "train.log_every=4",
            "train.checkpoint_every=1024", "encoding.scaling=linear", "encoding.scaling.factor=2"]
    unbroken = copy_run(rope, tmp_path / "a")
    assert posexp_here("finetune", str(unbroken), *args).returncode == 0
    parent = copy_run(rope, tmp_path / "b")
    child = parent.with_name("rope-L16-s0-ft-L32-linear2")
    proc = start(cache_dir, tmp_path, "finetune", str(parent), *args)
    try:
        wait_for_step(proc, child, 40)
        # one writer: a second fine-tune of the same run is refused while the first runs
        r = posexp_here("finetune", str(parent), *args)
        assert r.returncode == 1 and f"is in use by pid {proc.pid}" in r.stderr, r.stderr
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert read_json(child / "run.json")["status"] == "running"  # killed: nothing more said
    r = posexp_here("finetune", str(parent), *args)
    assert r.returncode == 0, r.stderr
    assert "resuming from step" in r.stderr
    done = unbroken.with_name(child.name)
    assert read_json(child / "run.json")["weights_sha256"] == \
        read_json(done / "run.json")["weights_sha256"]
    assert [p["loss"] for p in read_json(child / "eval.json")["curve"]] == \
        [p["loss"] for p in read_json(done / "eval.json")["curve"]]
