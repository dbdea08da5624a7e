"""A run's identity: one directory per identity, nothing a user ran lost or mixed, one
writer per run, and the scored region that belongs to the run (not to the lengths)."""
import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import posexp
from posexp import runs, version
from tests.conftest import TINY, assert_usage_error, copy_run, read_json
from tests.processes import LONG, start, wait_for_step

SMALL = [a for a in TINY if not a.startswith("model.d_model")]


def files_of(run: Path) -> dict[str, int]:
    """Every file of a run with its modification time: equal dicts, untouched run."""
    return {p.name: p.stat().st_mtime_ns for p in run.iterdir()}


@pytest.mark.parametrize("args,message", [
    (["train.lr=nan"], "train.lr must be a finite number"),
    (["experiment=../../x"], "experiment must be a plain directory name"),
    (["train.batch_size=8"], "both size the batch"),
])
def test_bad_values_are_refused_before_anything_is_written(posexp, tmp_path, args,
                                                           message):
    r = posexp("train", *TINY, *args, "results_dir=out")
    assert_usage_error(r, message)
    assert not (tmp_path / "out").exists() and not (tmp_path / "x").exists()


# --- sweeps -------------------------------------------------------------------------------
def test_sweep_gives_each_identity_its_own_directory_and_reruns_train_nothing(posexp,
                                                                              tmp_path):
    grid = ["sweep", "encoding=rope", "model.d_model=32,64", "train.lr=0.001,0.002", *SMALL,
            "results_dir=out", "experiment=sw"]
    r = posexp(*grid)
    assert r.returncode == 0, r.stderr
    root = tmp_path / "out/sw"
    names = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert names == [f"rope-L16-s0,d_model={d},lr={lr}" for d in (32, 64)
                     for lr in (0.001, 0.002)]
    for name in names:
        cfg = OmegaConf.load(root / name / "config.yaml")
        assert f"d_model={cfg.model.d_model},lr={cfg.train.lr}" in name
    before = {name: files_of(root / name) for name in names}
    r = posexp(*grid)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("skipped") == 4 and "parameters" not in r.stderr  # nothing trained
    assert {name: files_of(root / name) for name in names} == before
    # the report draws four series, each labelled by what tells it apart
    r = posexp("report", "out/sw")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader((root / "report/summary.csv").open()))
    assert {row["series"] for row in rows} == {f"rope L=16 · d_model={d} · lr={lr:g}"
                                               for d in (32, 64) for lr in (0.001, 0.002)}


def test_sweep_plan_that_shares_a_directory_is_refused(posexp, tmp_path):
    r = posexp("sweep", "encoding=rope", "eval.per_position_buckets=8,16", *TINY,
                    "results_dir=out")
    assert_usage_error(r, "two jobs of this sweep would share the run directory "
                          "out/default/rope-L16-s0: [eval.per_position_buckets=8] and "
                          "[eval.per_position_buckets=16]")
    r = posexp("sweep", "encoding=rope,alibi", "run_name=same", *TINY, "results_dir=out")
    assert_usage_error(r, "[encoding=rope] and [encoding=alibi]")
    assert not (tmp_path / "out").exists()


# --- a completed run is never destroyed ---------------------------------------------------
def test_completed_run_survives_every_rerun(posexp, trained, tmp_path):
    args = ["train", "encoding=rope", *TINY, "results_dir=out"]
    done, trained_run = trained("rope")
    assert done.returncode == 0, done.stderr
    run = copy_run(trained_run, tmp_path / "out")
    kept = files_of(run)
    checkpoint = kept["checkpoint.pt"]
    # settings that are not the identity: skipped, nothing rewritten
    for extra in (["device=auto"], ["eval.batch_tokens=64"], ["train.log_every=3"],
                  ["attention=sdpa"], [f"data.cache_dir={os.environ.get('POSEXP_CACHE', '')}"]):
        r = posexp(*[a for a in args if a != "device=cpu"], *extra)
        assert r.returncode == 0 and "skipped" in r.stderr, (extra, r.stderr)
        assert files_of(run) == kept, extra
    # values that are not valid: refused before anything is touched
    for bad in ("train.lr=nan", "train.beta1=1.5", "encoding.base=nan"):
        assert posexp(*args, bad).returncode == 2
        assert files_of(run) == kept, bad
    # another identity: refused, naming what differs and the ways out
    r = posexp(*args, "train.lr=0.001")
    assert_usage_error(r, "holds a run of another identity (train.lr: 0.002 -> 0.001)")
    assert "run_name=" in r.stderr and "train.resume=false" in r.stderr
    assert files_of(run) == kept
    # more evaluation lengths: only the missing points are scored, from the checkpoint
    old = read_json(run / "eval.json")["curve"]
    r = posexp(*args, "eval.lengths=[16,32,64,128]")
    assert r.returncode == 0 and "scoring the 1 missing point(s) at length 128" in r.stderr
    curve = read_json(run / "eval.json")["curve"]
    assert (run / "checkpoint.pt").stat().st_mtime_ns == checkpoint
    assert [p["length"] for p in curve] == [16, 32, 64, 128]
    assert curve[:3] == old  # the old points stay as they were
    assert read_json(run / "run.json")["status"] == "completed"


# --- the scored region --------------------------------------------------------------------
def test_every_point_of_a_run_scores_the_same_tokens(posexp, trained, tmp_path):
    done, trained_run = trained("alibi")
    assert done.returncode == 0, done.stderr
    run = copy_run(trained_run, tmp_path / "out")
    first = read_json(run / "eval.json")["curve"]
    r = posexp("eval", str(run), "eval.lengths=[16,256]")
    assert r.returncode == 0, r.stderr
    curve = read_json(run / "eval.json")["curve"]
    keys = [runs.point_key(p) for p in curve]
    assert len(keys) == len(set(keys)) == 4  # 16 was replaced, not doubled
    assert {(p["first_token"], p["tokens"]) for p in curve} == {
        (first[0]["first_token"], 512)}
    # scored again with other lengths around it, length 16 gives the same number
    assert next(p for p in curve if p["length"] == 16)["loss"] == first[0]["loss"]


# --- one writer per run -------------------------------------------------------------------
def test_one_writer_per_run_and_a_killed_holder_never_blocks(posexp, cache_dir,
                                                              tmp_path):
    run = tmp_path / "out/default/rope-L16-s0"
    proc = start(cache_dir, tmp_path, "train", *LONG)
    try:
        wait_for_step(proc, run, 8)
        while not (run / "checkpoint.pt").exists():
            assert proc.poll() is None
            time.sleep(0.01)
        proc.send_signal(signal.SIGSTOP)  # it holds the run, and cannot finish meanwhile
        for args in (["train", *LONG], ["train", *LONG, "train.lr=0.001"],
                     ["resume", str(run)], ["eval", str(run)]):
            r = posexp(*args)
            assert r.returncode == 1, (args, r.stderr)
            line = r.stderr.strip().splitlines()
            assert len(line) == 1 and f"{run.relative_to(tmp_path)} is in use by pid " \
                f"{proc.pid}" in line[0].replace(str(tmp_path) + "/", ""), (args, r.stderr)
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    r = posexp("resume", str(run))
    assert r.returncode == 0, r.stderr
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
             if '"loss"' in line]
    assert steps == sorted(set(steps))  # one writer: no interleaved or doubled steps


# --- interrupted evaluation ---------------------------------------------------------------
def test_sigterm_during_evaluation_then_rerun_finishes_without_training(posexp, cache_dir,
                                                                        tmp_path):
    args = ["train", "encoding=alibi", *[a for a in TINY if not a.startswith("eval.")],
            "eval.tokens=4096", "eval.lengths=[16,32,64,128,256,512,1024,2048]",
            "results_dir=out"]
    run = tmp_path / "out/default/alibi-L16-s0"
    proc = start(cache_dir, tmp_path, *args)
    deadline = time.time() + 120
    # run.json says when evaluation started
    info = run / "run.json"
    while not info.exists() or "eval_started_at" not in info.read_text():
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1].startswith("posexp: stopped by SIGTERM")
    info = read_json(run / "run.json")
    assert info["status"] == "interrupted" and "during evaluation" in info["reason"]
    assert not (run / "eval.json").exists()
    r = posexp(*args)
    assert r.returncode == 0, r.stderr
    assert "resuming from step 64" in r.stderr
    after = read_json(run / "run.json")
    assert after["status"] == "completed" and after["weights_sha256"] == info["weights_sha256"]
    assert len(read_json(run / "eval.json")["curve"]) == 8


# --- the token cache ----------------------------------------------------------------------
def test_a_truncated_token_cache_is_named_and_rebuilt(posexp, tmp_path):
    args = ["train", "encoding=nope", *TINY, f"data.cache_dir={tmp_path / 'cache'}",
            "results_dir=out"]
    assert posexp(*args, "experiment=a").returncode == 0
    [train_bin] = (tmp_path / "cache").glob("stdlib-*/train.bin")
    size = train_bin.stat().st_size
    with train_bin.open("r+b") as f:
        f.truncate(20_000)
    r = posexp(*args, "experiment=b")
    assert r.returncode == 0, r.stderr
    assert f"token cache {train_bin.parent}: train.bin has 20000 bytes, meta.json records " \
        f"{size}; rebuilding it" in r.stderr
    assert train_bin.stat().st_size == size
    a, b = (read_json(tmp_path / f"out/{e}/nope-L16-s0/run.json") for e in "ab")
    assert a["corpus"] == b["corpus"] and a["weights_sha256"] == b["weights_sha256"]


def test_code_version_only_from_posexp_own_tree(tmp_path, monkeypatch):
    enclosing = tmp_path / "project"
    package = enclosing / ".venv/lib/site-packages/posexp"
    package.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(enclosing)], check=True)
    monkeypatch.setattr(version, "SOURCE", package)
    assert runs.code_version() == posexp.__version__
    (package.parent / "pyproject.toml").write_text("")
    subprocess.run(["git", "init", "-q", str(package.parent)], check=True)
    subprocess.run(["git", "-C", str(package.parent), "-c", "user.name=t", "-c",
                    "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "t"], check=True)
    assert runs.code_version().startswith(f"{posexp.__version__}+git.")
