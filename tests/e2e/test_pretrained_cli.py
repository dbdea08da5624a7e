"""posexp pretrained and a pretrained run through the commands, as a user runs them, on tiny
models saved here (tests/pretrained_models.py): the run, posexp eval with RoPE scalings and
passkey, resume of an unfinished evaluation, ls, compare and report, and bad input as one
line.  Nothing is downloaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests import forkserver
from tests import pretrained_models as tiny
from tests.conftest import read_json

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny.build(tmp_path_factory.mktemp("hf"))


def args(models, *more: str) -> list[str]:
    return ["data=text", f"data.path={models['corpus']}", "data.val_fraction=0.3",
            "eval.tokens=1024", "eval.lengths=[16,64,128]", "results_dir=out", "device=cpu",
            *more]


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_pretrained_run_through_eval_ls_compare_and_report(models, posexp, tmp_path):
    r = posexp("pretrained", str(models["llama"]), *args(models))
    assert r.returncode == 0, r.stderr
    assert "bits/byte" in r.stdout and "<- train length" in r.stdout
    run = tmp_path / "out" / "default" / "tiny-llama"
    info = read_json(run / "run.json")
    assert (info["status"], info["kind"], info["dtype"]) == ("completed", "pretrained", "float32")
    r = posexp("eval", str(run), "eval.rope_scaling=plain,yarn,ntk",
                    "eval.rope_scaling.factor=2", "task=passkey", "task.lengths=[300]",
                    "task.depths=[0,1]", "task.eval_count=2")
    assert r.returncode == 0, r.stderr
    # the points it lacks, named as a trained run's are (run/workloads.wanted_text)
    assert ("YaRN \u00d72 at 16, 64, 128, passkey 300 at depth 0, passkey 300 at depth 1; "
            in r.stderr), r.stderr
    scored = read_json(run / "eval.json")
    assert len(scored["curve"]) == 9 and len(scored["tasks"]) == 6
    assert {p["task"] for p in scored["tasks"]} == {"passkey"}
    r = posexp("eval", str(run), "eval.rope_scaling=yarn", "eval.rope_scaling.factor=2")
    assert r.returncode == 0 and "nothing to score" in r.stderr
    r = posexp("eval", str(run), "eval.lengths=[32]", "--cfg", "job")
    assert r.returncode == 0 and "weights_sha256:" in r.stdout and "  - 32" in r.stdout
    assert read_json(run / "eval.json") == scored  # --cfg job scores nothing
    assert posexp("pretrained", str(models["neox"]), *args(models)).returncode == 0
    r = posexp("ls", "out")
    assert r.returncode == 0
    assert [line.split()[:3] for line in lines(r.stdout)[1:]] == [
        ["default/tiny-llama", "tiny-llama", "64"], ["default/tiny-neox", "tiny-neox", "64"]]
    r = posexp("compare", str(run), "out/default/tiny-neox")
    assert r.returncode == 0, r.stderr
    assert "pretrained.weights_sha256" in r.stdout and "not comparable" not in r.stdout
    r = posexp("report", "out")
    assert r.returncode == 0, r.stderr
    report = tmp_path / "out" / "report"
    for name in ("extrapolation_nonoverlapping", "tasks-passkey-heatmap"):
        assert (report / f"{name}.png").is_file()
    summary = (report / "summary.md").read_text()
    assert "| tiny-llama | 64 | - | YaRN \u00d72 | 1 |" in summary
    assert "| tiny-neox | 64 | - | - | 1 |" in summary
    assert "weights_sha256" not in summary  # labels name the model, not its hashes


def test_resume_scores_only_what_an_unfinished_evaluation_lacks(models, posexp, tmp_path):
    assert posexp("pretrained", str(models["llama"]),
                       *args(models, "eval.lengths=[16]")).returncode == 0
    run = tmp_path / "out" / "default" / "tiny-llama"
    # as a run stopped part-way leaves it: interrupted, some points scored, more asked for
    info = read_json(run / "run.json")
    (run / "run.json").write_text(json.dumps({**info, "status": "interrupted"}))
    config = (run / "config.yaml").read_text().replace("  - 16\n", "  - 16\n  - 32\n")
    (run / "config.yaml").write_text(config)
    before = read_json(run / "eval.json")["curve"][0]
    r = posexp("resume", str(run))
    assert r.returncode == 0, r.stderr
    assert "at length 32" in r.stderr, r.stderr
    curve = read_json(run / "eval.json")["curve"]
    assert [p["length"] for p in curve] == [16, 32] and curve[0] == before
    assert read_json(run / "run.json")["status"] == "completed"


@pytest.mark.parametrize(("command", "code", "words"), [
    (["pretrained", "{llama}", "model.d_model=64"], 2, "can set only data, eval.*, task"),
    (["pretrained", "./no-such-model"], 2, "neither a model directory"),
    (["pretrained", "{llama}", "data=task"], 2, "a pretrained model is scored on text"),
    (["pretrained", "{gpt2}", "eval.rope_scaling=linear", "eval.rope_scaling.factor=2"], 2,
     "has a learned table of absolute positions"),
    (["pretrained", "{llama}", "eval.rope_scaling=longrope", "eval.rope_scaling.factor=2"], 2,
     "long_factor and short_factor the model supplies"),
    (["pretrained", "{llama}", "--revision", "main"], 2, "names a commit of a hub model"),
    (["pretrained", "{llama}", "attention=flash"], 2, "attention=flash"),
    (["pretrained", "tiny-org/absent"], 1, "not in the Hugging Face cache"),
])
def test_bad_input_is_one_line(command, code, words, models, posexp, tmp_path):
    argv = [a.format(llama=models["llama"], gpt2=models["gpt2"]) for a in command]
    r = posexp(*argv, *([] if "data=task" in argv else args(models)),
                    env={"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")})
    assert r.returncode == code, r.stderr
    assert len(lines(r.stderr)) == 1 and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_pretrained_run_is_not_fine_tuned_and_is_locked_while_scored(models, posexp,
                                                                       tmp_path):
    assert posexp("pretrained", str(models["llama"]), *args(models)).returncode == 0
    run = tmp_path / "out" / "default" / "tiny-llama"
    r = posexp("finetune", str(run), "train.seq_len=128")
    assert r.returncode == 2 and "fine-tuning them is out of scope" in r.stderr
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom pathlib import Path\nfrom posexp.runs import Run\n"
        f"with Run(Path({str(run)!r})).lock():\n    print('held', flush=True)\n"
        "    time.sleep(900)")], stdout=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.time()
        r = posexp("eval", str(run), "eval.lengths=[32]")
        assert r.returncode == 1 and "is in use by pid" in r.stderr, r.stderr
        assert time.time() - t0 < 450  # refused at once, not after the holder's 900 s (the
        # margin is for a loaded machine: a start-up there took 65 s)
    finally:
        holder.kill()
        holder.wait()


def test_an_evaluation_stopped_part_way_keeps_its_points_and_resumes(models, tmp_path,
                                                                     cache_dir):
    import signal

    argv = ["pretrained", str(models["llama"]),
            *args(models, "task=passkey", "task.lengths=[300,600,900]", "task.eval_count=20")]
    env = {**os.environ, "POSEXP_CACHE": str(cache_dir)}
    proc = forkserver.popen(argv, cwd=tmp_path, env=env)
    scored = tmp_path / "out" / "default" / "tiny-llama" / "eval.json"
    deadline = time.time() + 300
    while not (scored.exists() and json.loads(scored.read_text() or "{}").get("tasks")):
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert len(lines(err.split("\n", 1)[1])) == 1 and "run the same command again" in err
    run = scored.parent
    kept = read_json(scored)
    assert read_json(run / "run.json")["status"] == "interrupted"
    assert 1 <= len(kept["tasks"]) < 15 and len(kept["curve"]) == 3
    again = forkserver.run(argv, cwd=tmp_path, env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    line = next(line for line in again.stderr.splitlines() if " -> " in line)
    assert line.count("passkey ") == 15 - len(kept["tasks"]), line
    done = read_json(scored)
    assert len(done["tasks"]) == 15 and all(p in done["tasks"] for p in kept["tasks"])
    assert read_json(run / "run.json")["status"] == "completed"
