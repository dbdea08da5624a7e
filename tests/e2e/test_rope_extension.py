"""RoPE context extension through posexp: eval.rope_scaling (its settings, every variant
scored by one process on the same tokens, eval.json old and new, report and compare) and
posexp finetune (identity, weights, refusals, resume and the lock)."""
import json
import signal

import pytest
import torch
from omegaconf import OmegaConf

from posexp import config as C
from posexp import scaling
from posexp.report.series import build_series
from posexp.runs import Run, load_run, load_runs, point_key, point_scaling
from posexp.runs.parents import digest
from posexp.scaling import key as scaling_key
from tests.conftest import (
    TINY,
    assert_usage_error,
    copy_run,
    read_json,
)
from tests.processes import start, wait_for_step
from tests.unit.test_rope_extension import LENGTHS, NO, PARAMS, TIMES

C.register()


def scaled(method: str, factor: float):
    return scaling_key(scaling.record(method, factor, PARAMS))


# --- evaluation ---------------------------------------------------------------------------
def test_eval_scores_every_variant_in_one_process_on_the_same_tokens(trained, posexp,
                                                                     tmp_path, monkeypatch):
    done, trained_run = trained("rope")
    assert done.returncode == 0, done.stderr
    run = copy_run(trained_run, tmp_path / "out")
    loads = []
    load = Run.load_checkpoint
    monkeypatch.setattr(Run, "load_checkpoint", lambda self: loads.append(self) or load(self))
    r = posexp("eval", str(run), "eval.rope_scaling=plain,linear,ntk,dynamic,yarn,llama3",
                    "eval.rope_scaling.factor=1,4")
    assert r.returncode == 0, r.stderr
    assert len(loads) == 1  # the model is loaded once for all eleven
    assert "11 RoPE scalings (as trained, PI \u00d71, PI \u00d74, NTK-aware" in r.stderr
    # one method x length table, not eleven: plain first, each scaling's ratio to it below
    assert r.stdout.count("RoPE scalings by length") == 1 and "RoPE scaled:" not in r.stdout
    lines = r.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("method"))
    assert lines[head + 1].startswith("plain ") and lines[head + 2].startswith("PI \u00d71 ")
    assert sum(line.startswith("  / plain ") for line in lines) == 10
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
    # per-position loss: the run as trained only, at 16 -- 512 targets capped over 35
    # documents make spans of at most 20, which hold no whole window of 32 or 64
    assert [p["length"] for p in data["per_position"]] == [16]
    # the same command again replaces the points, never doubles them
    assert posexp("eval", str(run), "eval.rope_scaling=yarn",
                       "eval.rope_scaling.factor=4").returncode == 0
    assert len(read_json(run / "eval.json")["curve"]) == len(curve)


def test_a_plain_point_scored_after_a_scaled_one_is_the_run_as_trained(trained, posexp,
                                                                       tmp_path):
    """eval.rope_scaling=linear,plain scores PI first: the plain points after it are the
    run's own, as train scored them (they were PI's, labelled plain, before the fix)."""
    done, trained_run = trained("rope")
    assert done.returncode == 0, done.stderr
    run = copy_run(trained_run, tmp_path / "out")
    before = {p["length"]: p["block_loss"] for p in read_json(run / "eval.json")["curve"]}
    r = posexp("eval", str(run), "eval.rope_scaling=linear,plain",
                    "eval.rope_scaling.factor=4")
    assert r.returncode == 0, r.stderr
    by = {(point_scaling(p), p["length"]): p for p in read_json(run / "eval.json")["curve"]}
    assert {L: by[(None, L)]["block_loss"] for L in LENGTHS} == before
    assert by[(scaled("linear", 4), 16)]["loss"] != by[(None, 16)]["loss"]


def test_eval_json_without_scalings_reads_as_the_run_as_trained(trained, posexp,
                                                                tmp_path):
    _, trained_run = trained("rope")
    run = copy_run(trained_run, tmp_path / "out")
    data = read_json(run / "eval.json")
    del data["sha256"]  # a file of before posexp recorded scalings had no sha256 either
    for p in data["curve"]:
        del p["rope_scaling"]
    (run / "eval.json").write_text(json.dumps(data))
    before = (run / "eval.json").read_text()
    result = load_run(run)
    assert result.status == "completed" and result.scalings(NO) == [None]
    assert sorted(result.points(NO, result.regions(NO)[0])) == list(LENGTHS)
    # posexp train of the same config finds every point it asks for: nothing is scored
    args = ["train", "encoding=rope", *TINY, "results_dir=out"]
    r = posexp(*args)
    assert r.returncode == 0 and "skipped" in r.stderr, r.stderr
    assert (run / "eval.json").read_text() == before
    # with a scaling asked for, only its points are scored, beside the old ones
    r = posexp(*args, "eval.rope_scaling=ntk", "eval.rope_scaling.factor=4")
    assert r.returncode == 0, r.stderr
    assert f"scoring the 3 missing point(s) (NTK-aware {TIMES}4 at 16, 32, 64)" in r.stderr
    curve = read_json(run / "eval.json")["curve"]
    assert [("rope_scaling" in p, p["length"]) for p in curve] == [
        (False, 16), (False, 32), (False, 64), (True, 16), (True, 32), (True, 64)]


# --- fine-tuning --------------------------------------------------------------------------
FT = ["train.seq_len=32", "train.tokens=1024", "encoding.scaling=yarn",
      "encoding.scaling.factor=2"]


def test_finetune_starts_from_the_parent_and_records_it(trained, posexp, tmp_path):
    _, trained_run = trained("rope")
    parent = copy_run(trained_run, tmp_path / "out")
    # a learning rate of 1e-12: the fine-tune's weights stay its parent's
    r = posexp("finetune", str(parent), *FT, "train.lr=1e-12", "train.warmup_tokens=0")
    assert r.returncode == 0, r.stderr
    child = parent.with_name("rope-L16-s0-ft-L32-yarn2-1024tok")
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
    r = posexp("eval", str(parent), "eval.rope_scaling=yarn", "eval.rope_scaling.factor=2")
    assert r.returncode == 0, r.stderr
    parent_yarn = {p["length"]: p["loss"] for p in read_json(parent / "eval.json")["curve"]
                   if point_scaling(p) == scaled("yarn", 2)}
    child_plain = {p["length"]: p["loss"] for p in read_json(child / "eval.json")["curve"]}
    assert child_plain == pytest.approx(parent_yarn, rel=1e-4)
    # the same command finds it done; other settings under its name are another identity
    r = posexp("finetune", str(parent), *FT, "train.lr=1e-12", "train.warmup_tokens=0")
    assert r.returncode == 0 and "skipped" in r.stderr, r.stderr
    r = posexp("finetune", str(parent), *FT)
    assert_usage_error(r, "holds a run of another identity (train.lr: 1e-12 -> 0.002")
    # a fine-tune of a fine-tune keeps the root's length as L
    r = posexp("finetune", str(child), "train.seq_len=64", "--cfg", "job")
    assert r.returncode == 0, r.stderr
    grandchild = OmegaConf.create(r.stdout)
    assert grandchild.run_name == "rope-L16-s0-ft-L32-yarn2-1024tok-ft-L64-yarn2"
    assert grandchild.parent.original_len == 16
    assert grandchild.parent.identity == digest(Run(child).identity())
    # the report puts the fine-tune beside its parent
    labels = [s.label for s in build_series(load_runs(tmp_path / "out")[0])[0]]
    assert labels == ["rope L=16", f"rope L=16 + YaRN {TIMES}2",
                      f"rope L=16 \u2192 ft L=32 YaRN {TIMES}2"]


def test_finetune_refuses_what_it_cannot_continue(trained, posexp, tmp_path):
    _, rope = trained("rope")
    _, learned = trained("learned")

    def parent(source, name, **info):
        path = copy_run(source, tmp_path / name)
        if info:
            (path / "run.json").write_text(json.dumps({**read_json(path / "run.json"), **info}))
        return path

    assert_usage_error(posexp("finetune", str(tmp_path / "none"), *FT),
                       "is not a directory")
    stopped = parent(rope, "stopped", status="interrupted")
    assert_usage_error(posexp("finetune", str(stopped), *FT),
                       f"has status 'interrupted'; only a completed run can be fine-tuned "
                       f"(posexp resume {stopped} finishes it)")
    changed = parent(rope, "changed", weights_sha256="0" * 64)
    r = posexp("finetune", str(changed), *FT)
    assert r.returncode == 1 and "does not hold the weights" in r.stderr, r.stderr
    damaged = parent(rope, "damaged")
    (damaged / "checkpoint.pt").write_bytes(b"not a checkpoint")
    r = posexp("finetune", str(damaged), *FT)
    assert r.returncode == 1 and "it is not a torch checkpoint" in r.stderr, r.stderr
    table = parent(learned, "learned")
    assert_usage_error(posexp("finetune", str(table), "train.seq_len=32"),
                       "encoding.max_positions (16) is less than train.seq_len (32): learned "
                       "has no position past its table, and a fine-tune keeps its parent's "
                       "table")
    assert_usage_error(posexp("finetune", str(table), "encoding.scaling=linear",
                                   "encoding.scaling.factor=2"),
                       "encoding.scaling needs encoding=rope")
    assert_usage_error(posexp("eval", str(table), "eval.rope_scaling=ntk"),
                       "eval.rope_scaling=ntk needs encoding=rope")
    assert_usage_error(posexp("finetune", str(table), "model.d_model=64"),
                       "posexp finetune can change only train.*, eval.*, encoding.scaling")
    assert not list(tmp_path.rglob("*-ft*"))  # nothing was started


def test_a_killed_finetune_resumes_to_the_weights_of_an_unbroken_one(trained, posexp,
                                                                     cache_dir, tmp_path):
    _, rope = trained("rope")
    args = ["train.seq_len=32", "train.tokens=32768", "train.log_every=4",
            "train.checkpoint_every=1024", "encoding.scaling=linear", "encoding.scaling.factor=2"]
    unbroken = copy_run(rope, tmp_path / "a")
    assert posexp("finetune", str(unbroken), *args).returncode == 0
    parent = copy_run(rope, tmp_path / "b")
    child = parent.with_name("rope-L16-s0-ft-L32-linear2-32768tok")
    proc = start(cache_dir, tmp_path, "finetune", str(parent), *args)
    try:
        wait_for_step(proc, child, 40)
        # one writer: a second fine-tune of the same run is refused while the first runs
        r = posexp("finetune", str(parent), *args)
        assert r.returncode == 1 and f"is in use by pid {proc.pid}" in r.stderr, r.stderr
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert read_json(child / "run.json")["status"] == "running"  # killed: nothing more said
    r = posexp("finetune", str(parent), *args)
    assert r.returncode == 0, r.stderr
    assert "resuming from step" in r.stderr
    done = unbroken.with_name(child.name)
    assert read_json(child / "run.json")["weights_sha256"] == \
        read_json(done / "run.json")["weights_sha256"]
    assert [p["loss"] for p in read_json(child / "eval.json")["curve"]] == \
        [p["loss"] for p in read_json(done / "eval.json")["curve"]]
