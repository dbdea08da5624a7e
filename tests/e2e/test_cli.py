"""End to end through the real CLI: train, eval, and the errors a user can make."""
import json
import sys
from pathlib import Path

import pytest
import torch
import yaml

from posexp.config import CONFIG_DIR
from tests.conftest import TINY, assert_usage_error, read_json

ENCODINGS = ["nope", "learned", "sinusoidal", "rope", "alibi"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_train_then_eval(request, tmp_path, encoding):
    # rope through the installed script, the others through cli.main in this process
    posexp = request.getfixturevalue("posexp_process" if encoding == "rope" else "posexp")
    r = posexp("train", f"encoding={encoding}", *TINY, "results_dir=out", "experiment=e2e")
    assert r.returncode == 0, r.stderr
    run = tmp_path / "out" / "e2e" / f"{encoding}-L16-s0"
    assert sorted(p.name for p in run.iterdir()) == [
        "checkpoint.pt", "config.yaml", "eval.json", "metrics.jsonl", "run.json"]

    info = read_json(run / "run.json")
    assert info["status"] == "completed" and info["encoding"] == encoding
    assert info["corpus"]["name"] == "stdlib" and len(info["corpus"]["fingerprint"]) == 64
    assert info["steps"] == 8192 // (8 * 16) and info["n_params"] > 0
    assert yaml.safe_load((run / "config.yaml").read_text())["encoding"]["name"] == encoding

    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_points = [m for m in metrics if "loss" in m]
    assert [m["step"] for m in train_points] == list(range(8, 65, 8))
    assert train_points[-1]["loss"] < train_points[0]["loss"]  # it learned something
    assert sum("val_loss" in m for m in metrics) == 2

    curve = read_json(run / "eval.json")["curve"]
    assert [(p["mode"], p["length"]) for p in curve] == [
        ("nonoverlapping", L) for L in (16, 32, 64)]
    # the scored text: the same spans of 512 targets over every validation document with
    # text (35 of the 38: three are empty files), at every length, recorded beside the
    # points
    layouts = read_json(run / "eval.json")["spans"]
    assert len({p["spans"] for p in curve}) == 1 and list(layouts) == [curve[0]["spans"]]
    assert all(p["tokens"] == 512 and p["documents"] == 35 for p in curve)
    assert layouts[curve[0]["spans"]]["text_documents"] == 35
    assert sum(layouts[curve[0]["spans"]]["length"]) == 512
    if encoding == "learned":
        assert [p["applicable"] for p in curve] == [True, False, False]
        assert "n/a" in r.stdout
    else:
        assert all(p["applicable"] and p["ppl"] > 1 for p in curve)
    assert "<- train length" in r.stdout and "16" in r.stdout

    state = torch.load(run / "checkpoint.pt", weights_only=True)
    assert {"model", "optimizer", "step", "data_rng"} <= state.keys()

    # re-score in sliding mode: new points beside the old ones, no retraining
    r = posexp("eval", str(run), "eval.mode=sliding", "eval.stride=8", "eval.lengths=[16,32]")
    assert r.returncode == 0, r.stderr
    curve2 = read_json(run / "eval.json")["curve"]
    sliding = [p for p in curve2 if p["mode"] == "sliding"]
    assert [(p["length"], p["stride"]) for p in sliding] == [(16, 8), (32, 8)]
    assert [p for p in curve2 if p["mode"] == "nonoverlapping"] == curve
    if encoding != "learned":
        non32 = next(p for p in curve if p["length"] == 32)
        assert sliding[1]["loss"] != non32["loss"]
    assert (run / "checkpoint.pt").stat().st_mtime == pytest.approx(
        (run / "checkpoint.pt").stat().st_mtime)


def test_same_seed_same_numbers(posexp_process, posexp, tmp_path):
    """The same numbers from a process of its own and from a process that ran other work."""
    args = ["train", "encoding=alibi", *TINY, "results_dir=out"]
    assert posexp_process(*args, "experiment=a").returncode == 0
    assert posexp(*args, "experiment=b").returncode == 0
    a = read_json(tmp_path / "out/a/alibi-L16-s0/eval.json")["curve"]
    b = read_json(tmp_path / "out/b/alibi-L16-s0/eval.json")["curve"]
    assert [p["loss"] for p in a] == [p["loss"] for p in b]
    assert posexp(*args, "experiment=c", "seed=1").returncode == 0
    c = read_json(tmp_path / "out/c/alibi-L16-s1/eval.json")["curve"]
    assert [p["loss"] for p in a] != [p["loss"] for p in c]


def test_cfg_job_prints_config_without_running(posexp, tmp_path):
    r = posexp("train", "--cfg", "job", "encoding=alibi", "train.seq_len=128")
    assert r.returncode == 0, r.stderr
    cfg = yaml.safe_load(r.stdout)
    assert cfg["encoding"]["name"] == "alibi" and cfg["train"]["seq_len"] == 128
    assert not (tmp_path / "results").exists()


def test_a_config_is_composed_once(posexp, tmp_path, monkeypatch):
    """posexp train composes its config once; a sweep composes its preset once, each job
    once to plan it and once more for Hydra's launcher (the job's directory and
    environment), and the launcher's own config: the job runs the config posexp planned.
    --cfg hydra shows Hydra's part of the one composition.  A composition is posexp's
    (config/composer.py, which may reuse the part the config groups make) or Hydra's own."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from posexp.config import composer

    composed, inside = [], []
    load, ours = ConfigLoaderImpl.load_configuration, composer.compose_cached

    def counted(self, *args, **kwargs):
        if not inside:
            composed.append(kwargs.get("overrides"))
        return load(self, *args, **kwargs)

    def counted_ours(hydra, config_name, overrides, config_dirs):
        composed.append(overrides)
        inside.append(True)
        try:
            return ours(hydra, config_name, overrides, config_dirs)
        finally:
            inside.pop()

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    monkeypatch.setattr(sys.modules["posexp.config.compose"], "compose_cached", counted_ours)
    args = [*TINY, "train.tokens=1024", "results_dir=out"]
    r = posexp("train", "encoding=alibi", *args)
    assert r.returncode == 0, r.stderr
    assert len(composed) == 1
    composed.clear()
    r = posexp("sweep", "encoding=alibi,rope", *args)
    assert r.returncode == 0, r.stderr
    assert len(composed) == 1 + 2 * 2 + 1
    r = posexp("train", "--cfg", "hydra", "hydra.job.chdir=false")
    shown = yaml.safe_load(r.stdout)["hydra"]
    assert shown["run"]["dir"] == "." and "help" not in shown and "hydra_help" not in shown
    # --resolve reads Hydra's part against the whole config, whose keys it names
    r = posexp("train", "--cfg", "hydra", "--resolve", "--package", "hydra.sweep")
    assert yaml.safe_load(r.stdout) == {"dir": "results/default", "subdir": "rope-L64-s0"}, \
        r.stderr


def test_config_dir_adds_an_encoding_variant(posexp, tmp_path):
    (tmp_path / "extra" / "encoding").mkdir(parents=True)
    (tmp_path / "extra" / "encoding" / "rope500k.yaml").write_text(
        "defaults:\n  - encoding_schema\nname: rope\nbase: 500000.0\n")
    r = posexp("train", "--config-dir", str(tmp_path / "extra"), "encoding=rope500k",
               "--cfg", "job")
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(r.stdout)["encoding"]["base"] == 500000.0


USAGE_ERRORS = [
    (["encoding=zope"], "available options in 'encoding': " + ", ".join(sorted(
        p.stem for p in (Path(CONFIG_DIR) / "encoding").glob("*.yaml")))),
    (["train.seqlen=64"], "seqlen"),
    (["train.seq_len=abc"], "seq_len"),
    (["train.seq_len=0"], "train.seq_len must be a positive integer"),
    (["train.seq_len=12.5"], "seq_len"),
    (["train.tokens=-5"], "train.tokens must be a positive integer"),
    (["train.batch_tokens=0"], "train.batch_tokens must be a positive integer"),
    (["train.lr=0"], "train.lr must be a finite number in (0, 1e+06], got 0.0"),
    (["model.d_model=100", "model.n_head=3"], "divisible by model.n_head"),
    (["encoding=rope", "model.d_model=36", "model.n_head=4"], "even head dimension"),
    (["eval.lengths=[64,-128]"], "each of eval.lengths must be a positive integer"),
    (["eval.mode=sliding", "eval.stride=64"], "eval.stride (64) must be smaller"),
    (["eval.mode=overlapping"], "nonoverlapping"),
    (["device=gpu"], "device"),
    (["attention=fused"], "attention"),
    (["attention=flash"], "needs the flash-attn package"),
    (["attention=flex", "model.dropout=0.1"], "attention=flex has no dropout"),
    (["attention=flex", "device=cpu"], "cannot train on the CPU"),
    (["data=text"], "data.path"),
    (["data=text", "data.path=/nonexistent/corpus"], "does not exist"),
    (["data=hub"], "available options in 'data'"),
    (["eval.tokens=100000000"], "validation split has"),
]


@pytest.mark.parametrize("args,message", USAGE_ERRORS, ids=lambda v: str(v)[:40])
def test_usage_errors_are_one_line_and_exit_2(request, tmp_path, args, message):
    # two through the installed script (nothing else writes to its stderr), the rest here
    real = args in (["train.seq_len=0"], ["data=text"])
    r = request.getfixturevalue("posexp_process" if real else "posexp")(
        "train", *args, "results_dir=out")
    assert_usage_error(r, message)
    assert not list((tmp_path / "out").glob("*/*/run.json"))


def test_cuda_without_gpu(posexp):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    r = posexp("train", "device=cuda", *TINY[:-1], "results_dir=out")
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_eval_on_a_directory_that_is_not_a_run(posexp, tmp_path):
    (tmp_path / "notarun").mkdir()
    r = posexp("eval", str(tmp_path / "notarun"))
    assert r.returncode == 2 and "not a finished posexp run" in r.stderr
    r = posexp("eval", str(tmp_path / "missing"))
    assert r.returncode == 2 and "is not a directory" in r.stderr


def test_eval_errors_on_a_real_run(posexp, tmp_path):
    posexp = posexp
    assert posexp("train", "encoding=nope", *TINY, "results_dir=out").returncode == 0
    run = tmp_path / "out/default/nope-L16-s0"
    r = posexp("eval", str(run), "train.seq_len=32")
    assert r.returncode == 2 and "can change only" in r.stderr
    r = posexp("eval", str(run), "eval.strde=3")
    assert r.returncode == 2 and "strde" in r.stderr
    (run / "checkpoint.pt").write_bytes((run / "checkpoint.pt").read_bytes()[:1000])
    r = posexp("eval", str(run))
    assert r.returncode == 1 and "cannot load" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
