"""Sweeps, reports, W&B and the claim suite, through the real CLI."""
import csv
import json
import os
import shutil
from pathlib import Path

import pytest

from posexp.config import CONFIG_DIR
from tests import forkserver
from tests.conftest import TINY, read_json

# encodings by glob: posexp plans the jobs, and Hydra's launchers get the same two spelled out
# 4,096 scored tokens: capped over the stdlib's 35 documents with text, a span holds a whole
# window of 64 (the per-position figure's)
GRID = ["encoding=glob([a*,r*])", "train.seq_len=16,32", *[a for a in TINY
        if not a.startswith(("train.seq_len", "eval.tokens"))], "eval.tokens=4096",
        "eval.lengths=[32,64]", "results_dir=out"]


RUNS = ["alibi-L16-s0", "alibi-L32-s0", "rope-L16-s0", "rope-L32-s0"]


def losses(root, runs=RUNS):
    return {r: [p["loss"] for p in read_json(root / r / "eval.json")["curve"]] for r in runs}


@pytest.fixture(scope="session")
def basic_sweep(cache_dir, tmp_path_factory):
    """``posexp sweep GRID experiment=basic`` through the real CLI, once per session: its
    result and the experiment's directory.  Tests that change the runs take a copy."""
    cwd = tmp_path_factory.mktemp("sweep")
    env = {**os.environ, "POSEXP_CACHE": str(cache_dir)}
    env.pop("POSEXP_DEBUG", None)
    r = forkserver.run(["sweep", *GRID, "experiment=basic"], cwd=cwd, env=env, timeout=600)
    return r, cwd / "out" / "basic"


def test_sweep_basic_launcher_then_resume_then_report(posexp_process, posexp, basic_sweep,
                                                      tmp_path):
    r, swept = basic_sweep
    assert r.returncode == 0, r.stderr
    root = tmp_path / "out" / "basic"
    shutil.copytree(swept, root)
    assert all(read_json(root / n / "run.json")["status"] == "completed" for n in RUNS)
    rows = list(csv.DictReader((root / "summary.csv").open()))
    assert len(rows) == 4 * 2 and {row["encoding"] for row in rows} == {"alibi", "rope"}
    assert "perplexity (nonoverlapping" in r.stdout and "alibi" in r.stdout
    # batches in tokens: runs at L=16 and L=32 take the same optimizer steps on the same tokens
    assert {read_json(root / n / "run.json")["steps"] for n in RUNS} == {8192 // 128}
    assert {read_json(root / n / "run.json")["batch_size"] for n in RUNS} == {8, 4}

    # a finished sweep re-runs no training
    stamps = {n: (root / n / "checkpoint.pt").stat().st_mtime_ns for n in RUNS}
    r = posexp("sweep", *GRID, "experiment=basic")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("already completed") == 4 and r.stderr.count("skipped") == 4
    assert stamps == {n: (root / n / "checkpoint.pt").stat().st_mtime_ns for n in RUNS}

    # another identity in the same directories: refused before any job starts
    r = posexp("sweep", *GRID, "experiment=basic", "train.lr=0.001")
    assert r.returncode == 2 and "holds a run of another identity (train.lr: 0.002 -> 0.001)" \
        in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert stamps == {n: (root / n / "checkpoint.pt").stat().st_mtime_ns for n in RUNS}

    # report: figures and tables from run.json / eval.json; a damaged run is named and skipped
    (root / "rope-L32-s0" / "eval.json").write_text('{"curve": [')
    r = posexp("report", "out")
    assert r.returncode == 0, r.stderr
    assert "rope-L32-s0/eval.json" in r.stderr and r.stderr.count("warning") == 1
    report = tmp_path / "out" / "report"
    for name in ("extrapolation_nonoverlapping", "per_position"):
        assert (report / f"{name}.png").stat().st_size > 10_000
        assert (report / f"{name}.svg").read_text().lstrip().startswith("<?xml")
    rows = list(csv.DictReader((report / "summary.csv").open()))
    assert len(rows) == 3 * 2
    assert {(row["encoding"], row["train_seq_len"], row["length"]) for row in rows} == {
        (e, L, n) for e, L in [("alibi", "16"), ("alibi", "32"), ("rope", "16")]
        for n in ("32", "64")}
    md = (report / "summary.md").read_text()
    assert "| alibi | 32 | 1 | **1.000** |" in md
    assert "Runs not included" in md and "rope-L32-s0" in md and "eval.json is unreadable" in md

    # the report uploaded to W&B (offline here): figures and the tidy table
    # W&B's service is a process of its own: through the real script
    r = posexp_process("report", "out", "--wandb",
                       env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"})
    assert r.returncode == 0, r.stderr
    [offline] = (report / "wandb").glob("offline-run-*")
    images = {p.name.split("_")[0] for p in offline.glob("files/media/images/*.png")}
    assert {"extrapolation", "per"} <= images
    [table] = offline.glob("files/media/table/summary_*.table.json")
    assert len(json.loads(table.read_text())["data"]) == 3 * 2

    # a damaged run.json is named and never overwritten; train.resume=false moves it aside
    (root / "alibi-L16-s0" / "run.json").write_text('{"status": "compl')
    r = posexp("sweep", *GRID, "experiment=basic")
    assert r.returncode == 1 and "alibi-L16-s0/run.json is unreadable" in r.stderr
    assert "train.resume=false" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = posexp("train", "encoding=alibi", "train.seq_len=16", *GRID[2:],
                    "experiment=basic", "train.resume=false")
    assert r.returncode == 0, r.stderr
    assert read_json(root / "alibi-L16-s0" / "run.json")["status"] == "completed"
    [aside] = (root / ".replaced").iterdir()
    assert (aside / "run.json").read_text() == '{"status": "compl'


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_parallel_launchers_give_the_same_numbers(posexp, basic_sweep, tmp_path, launcher):
    extra = ["hydra.launcher.timeout_min=10"] if launcher.startswith("submitit") else []
    r, swept = basic_sweep
    assert r.returncode == 0, r.stderr
    # the runs at L=16: two jobs at once, one round of the launcher's processes
    grid = [a for a in GRID if not a.startswith("train.seq_len")] + ["train.seq_len=16"]
    r = posexp("sweep", *grid, "experiment=par", f"hydra/launcher={launcher}", *extra)
    assert r.returncode == 0, r.stderr
    # one torch thread per job instead of two: the same numbers up to summation order
    seq, par = losses(swept), losses(tmp_path / "out" / "par", RUNS[::2])
    assert sorted(par) == ["alibi-L16-s0", "rope-L16-s0"]
    assert all(par[n] == pytest.approx(seq[n], rel=1e-5) for n in par)


def test_a_failing_run_does_not_stop_the_sweep(posexp, tmp_path):
    lines = (f"line {i} of a small text\n" for i in range(3000))
    (tmp_path / "corpus.txt").write_text("".join(lines))
    r = posexp("sweep", "encoding=nope", "data=text",
                    f"data.path={tmp_path / 'corpus.txt'},{tmp_path / 'missing.txt'}",
                    "run_name=${data.path}", *TINY, "results_dir=out")
    # run_name from a path is refused up front, before anything runs
    assert r.returncode == 2 and "run_name must be a plain directory name" in r.stderr
    r = posexp("sweep", "encoding=nope,alibi", "data=text",
                    f"data.path={tmp_path}/missing.txt", *TINY, "results_dir=out")
    assert r.returncode == 1
    assert r.stderr.count("failed: data.path") == 2
    assert "2 of 2 runs did not complete" in r.stderr
    assert "not started" in (tmp_path / "out" / "default" / "summary.md").read_text()


def test_the_sweep_presets_sweep_every_registered_encoding(posexp, tmp_path):
    from posexp.encodings import ENCODINGS

    def jobs(*args: str) -> list[str]:
        r = posexp("sweep", *args, "--cfg", "job")
        assert r.returncode == 0, r.stderr
        return [line.split(": ", 1)[1] for line in r.stdout.splitlines()
                if line.startswith("# job ")]

    assert jobs() == [f"encoding={e}" for e in sorted(ENCODINGS)]
    assert len(jobs("sweep=lengths")) == 3 * len(ENCODINGS)
    chosen = "encoding=glob(*,exclude=[nope,learned,sinusoidal,*rope,t5,k*,fox,hybrid,cope])"
    assert jobs(chosen, "seed=0,1") == [
        f"encoding={e} seed={s}" for e in ("alibi", "fire", "xpos") for s in (0, 1)]
    # the command line's choice list replaces the preset's glob
    assert jobs("encoding=rope,alibi") == ["encoding=rope", "encoding=alibi"]


@pytest.mark.parametrize("args,message", [
    (["encoding=glob(zz*)"], "encoding=glob(zz*) matches none of the encoding options (alibi, "),
    (["encoding=glob(*schema)"], "matches none of the encoding options"),
    (["seed=glob(*)"], "seed=glob(*): glob() chooses among a config group's options, and seed "
                       "is not a config group"),
])
def test_a_glob_that_picks_nothing_is_refused(posexp, tmp_path, args, message):
    r = posexp("sweep", *args, *TINY, "results_dir=out")
    assert r.returncode == 2 and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_sweep_rejects_a_bad_value_before_running(posexp, tmp_path):
    r = posexp("sweep", "encoding=alibi,rpoe", *TINY, "results_dir=out")
    assert r.returncode == 2 and "there is no encoding 'rpoe'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_wandb_offline_logs_the_extrapolation_table(posexp_process, tmp_path):
    r = posexp_process("train", "encoding=alibi", *TINY, "results_dir=out", "logger=wandb",
                       "logger.mode=offline", "logger.tags=[ci]", env={"WANDB_SILENT": "true"})
    assert r.returncode == 0, r.stderr
    run = tmp_path / "out" / "default" / "alibi-L16-s0"
    assert read_json(run / "run.json")["status"] == "completed"
    media = "offline-run-*/files/media/table"
    tables = list((run / "wandb").glob(f"{media}/extrapolation_*.table.json"))
    assert len(tables) == 1
    table = json.loads(tables[0].read_text())
    assert table["columns"][:3] == ["mode", "stride", "length"]
    assert [row[2] for row in table["data"]] == [16, 32, 64]
    local = read_json(run / "eval.json")["curve"]
    assert [row[4] for row in table["data"]] == pytest.approx([p["ppl"] for p in local])
    assert list((run / "wandb").glob(f"{media}/per_position_*.table.json"))


def test_wandb_failure_is_a_warning_and_the_run_completes(posexp_process, tmp_path):
    # online mode with no key and no network: W&B cannot start; the run must not be lost
    r = posexp_process("train", "encoding=nope", *TINY, "results_dir=out", "logger=wandb",
                       "logger.init_timeout=5",
                       env={"WANDB_API_KEY": "", "WANDB_MODE": "online", "HOME": str(tmp_path),
                    "WANDB_BASE_URL": "http://127.0.0.1:9"})
    assert r.returncode == 0, r.stderr
    assert "posexp: warning: W&B" in r.stderr
    run = tmp_path / "out" / "default" / "nope-L16-s0"
    assert read_json(run / "run.json")["status"] == "completed"
    assert (run / "eval.json").exists()


def write_preset(path, runs):
    """A claim-suite preset of tiny runs at L=16 with the paper's thresholds."""
    overrides = [a for a in TINY if not a.startswith(("train.seq_len", "eval.lengths"))]
    path.write_text(json.dumps({
        "experiment": "claims", "train_seq_len": 16,
        "overrides": ["train.seq_len=16", *overrides], "runs": runs,
        "thresholds": {"sinusoidal_blowup_at": 4, "rope_between_at": [2, 4],
                       "alibi_flat_at": [2, 4, 16], "context_at": [2, 4],
                       **{name: {"margin": m, "reason": "the paper's"} for name, m in (
                           ("sinusoidal_blowup", 1.0), ("better", 0.0), ("alibi_flat", 0.05),
                           ("alibi_vs_longer", 0.02), ("nope_margin", 0.1),
                           ("context", 0.02))}},
    }))
    return path


def test_reproduce_prints_verdicts(posexp, tmp_path):
    preset = write_preset(tmp_path / "tiny.yaml", [
        ["encoding=sinusoidal"], ["encoding=rope"], ["encoding=alibi"], ["encoding=learned"],
        ["encoding=nope"], ["encoding=sinusoidal", "train.seq_len=32"]])
    r = posexp("reproduce", "--preset", str(preset), "--results-dir", "out")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out" / "claims" / "report"
    verdicts = read_json(out / "verdicts.json")["verdicts"]
    assert [v["claim"][:2] for v in verdicts] == ["1.", "2.", "3.", "4.", "5.", "6.", "7."]
    # one seed: every claim is measured, with the cluster bootstrap over the documents --
    # the 35 of the stdlib split's 38 with text (three are empty files and hold no target)
    assert {v["interval"] for v in verdicts} == {
        "one seed: cluster bootstrap over 35 documents"}
    assert all(v["verdict"] in ("holds", "does not hold", "inconclusive") for v in verdicts)
    assert all(" [" in v["measured"] for v in verdicts)
    assert "1. Sinusoidal positions do not extrapolate\n    " in r.stdout
    # learned: n/a past its table, whatever the training -- a property, not a verdict
    assert "(here at 32, 64, 128, 256)" in (out / "verdicts.md").read_text()
    assert (out / "extrapolation_sliding.png").exists()
    # run again: nothing is retrained
    r = posexp("reproduce", "--preset", str(preset), "--results-dir", "out")
    assert r.returncode == 0 and r.stderr.count("skipped") == 12  # both modes of 6 runs
    assert "parameters" not in r.stderr  # nothing trained


def test_reproduce_finishes_every_run_and_fails_at_the_end(posexp, tmp_path):
    preset = write_preset(tmp_path / "broken.yaml", [
        ["encoding=sinusoidal", "data=text", f"data.path={tmp_path}/missing.txt"],
        ["encoding=alibi"]])
    r = posexp("reproduce", "--preset", str(preset), "--results-dir", "out")
    assert r.returncode == 1
    assert "posexp reproduce: claims/sinusoidal-L16-s0: failed: data.path" in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "posexp: error: 1 of 2 runs failed; their claims are not measured")
    out = tmp_path / "out" / "claims"
    assert read_json(out / "alibi-L16-s0/run.json")["status"] == "completed"  # it went on
    verdicts = {v["claim"][:2]: v["verdict"] for v in read_json(out / "report/verdicts.json")[
        "verdicts"]}
    assert verdicts["1."] == verdicts["7."] == "not measured"  # sinusoidal's claims


def test_reproduce_unknown_preset(posexp):
    r = posexp("reproduce", "--preset", "tpu")
    presets = sorted(p.stem for p in (Path(CONFIG_DIR) / "reproduce").glob("*.yaml"))
    assert r.returncode == 2 and f"available: {', '.join(presets)}" in r.stderr
