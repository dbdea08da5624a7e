"""Every input answered: one line and an exit code for each bad input, never a traceback; no
code run from a config or a flag; a help that stands alone.

Most cases run in this process through ``cli.main`` -- the same function the ``posexp``
script calls, so the exit code and stderr are what a user sees -- with Hydra's entry point
replaced by a guard: every case here must end before anything would run.  A few things only a
real process shows (the script's help, a refused code path leaving no trace on disk) run as
subprocesses.
"""
from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import yaml

from posexp import cli
from posexp import config as C
from posexp.cli import run_commands
from tests.bad_inputs import (  # noqa: F401
    BAD,
    CUDA_GPUS,
    RUN,
    UNSET,
    device_words,
    fake_run,
    make_inputs,
)
from tests.conftest import copy_run, read_json


def no_hydra(*args, **kwargs):
    raise AssertionError("reached Hydra's job or launcher: this input would have run")


@pytest.fixture
def run_cli(monkeypatch, capsys, cache_dir, tmp_path):
    """cli.main(args) in this process, from an empty directory: (exit code, stdout, stderr)."""
    monkeypatch.setattr(run_commands, "run_job", no_hydra)
    monkeypatch.setattr(run_commands, "launch", no_hydra)
    monkeypatch.setenv("POSEXP_CACHE", str(cache_dir))
    monkeypatch.delenv("POSEXP_DEBUG", raising=False)
    monkeypatch.delenv(UNSET, raising=False)
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as done:
            cli.main(list(args))
        out, err = capsys.readouterr()
        return done.value.code, out, err

    return run


def fill(args: list[str], d: Path) -> list[str]:
    return [a.replace("{d}", str(d)) for a in args]




@pytest.mark.parametrize("args,code,words", BAD, ids=[repr(a)[1:71] for a, _, _ in BAD])
def test_bad_input_is_one_line_and_an_exit_code(run_cli, inputs, tmp_path, args, code, words):
    exit_code, _, err = run_cli(*fill(args, inputs))
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert exit_code == code, err
    assert lines[0].startswith("posexp: error: "), err
    for word in words:
        assert word.replace("{d}", str(inputs)) in lines[0], err
    assert "Traceback" not in err and "weights_only=False" not in err
    assert not any(tmp_path.iterdir())  # nothing written where the command ran


def test_cfg_job_shows_the_values_that_will_run(run_cli):
    code, out, err = run_cli("train", "--cfg", "job", "encoding=learned", "train.seq_len=32")
    assert code == 0, err
    cfg = yaml.safe_load(out)
    assert cfg["eval"]["lengths"] == [32, 64, 128, 256, 512]
    assert cfg["model"]["d_ff"] == 512 and cfg["encoding"]["max_positions"] == 32
    assert cfg["train"]["batch_size"] == 64 and cfg["run_name"] == "learned-L32-s0"
    code, out, _ = run_cli("train", "--cfg", "job", "--package", "model")
    assert code == 0 and yaml.safe_load(out)["d_model"] == 128
    code, out, err = run_cli("sweep", "--cfg", "job", "encoding=rope,alibi", "model.d_model=64")
    assert code == 0, err
    assert out.count("# job ") == 2 and "run_name: alibi-L64-s0" in out


def test_help_pages(run_cli):
    pages = {}
    for args in (["-h"], ["--help"], ["eval", "-h"], ["sweep", "--help"], ["report", "-h"],
                 ["reproduce", "--help"], ["resume", "-h"], ["finetune", "-h"], ["train", "-h"],
                 ["train", "--help", "encoding=alibi"]):
        code, out, err = run_cli(*args)
        assert code == 0 and not err, (args, err)
        pages[" ".join(args)] = out
        assert "<bool>" not in out and "{" not in out and "_schema" not in out, args
        assert all(len(line) <= 100 for line in out.splitlines()), args
        assert "Examples:" in out, args
    assert pages["-h"] == pages["--help"]
    for command in ("train", "eval", "sweep", "report", "reproduce", "resume", "finetune"):
        assert command in pages["-h"]
    assert "Usage: posexp eval [OPTIONS] RUN_DIR" in pages["eval -h"]
    train = pages["train -h"]
    assert "powered by Hydra" not in train and "posexp train" in train
    for group in ("model=", "encoding=", "data=", "train=", "eval=", "logger=",
                  "hydra/launcher="):
        assert f"\n  {group}" in train, group
    assert "sweep=" not in train and "reproduce" not in train.split("Main keys")[0]
    encodings = sorted(p.stem for p in (Path(C.CONFIG_DIR) / "encoding").glob("*.yaml"))
    # every encoding in one list, wrapped at 100 columns (the lines above say so)
    assert "encoding= " + ", ".join(f"[{e}]" if e == "rope" else e
                                    for e in encodings) in " ".join(train.split())
    assert "train.seq_len=64" in train and "eval.lengths=[64,128,256,512,1024]" in train
    assert "--cfg job" in train
    assert "[alibi]" in pages["train --help encoding=alibi"]
    code, out, _ = run_cli("--version")
    assert code == 0 and out.strip() == "posexp 0.1.0"
    code, out, _ = run_cli()
    assert code == 0 and "Usage: posexp" in out


# --- through the real posexp process --------------------------------------------------------
def test_code_paths_leave_no_trace(posexp, tmp_path):
    """A crafted pickle for --experimental-rerun and a hydra callback would each create a
    directory; posexp refuses both with one line, and nothing is created."""

    class Payload:
        def __reduce__(self):
            return (os.makedirs, (str(tmp_path / "pwned-by-pickle"),))

    (tmp_path / "job.pickle").write_bytes(pickle.dumps(Payload()))
    r = posexp("train", "--experimental-rerun", str(tmp_path / "job.pickle"))
    assert r.returncode == 2 and "--experimental-rerun is refused" in r.stderr, r.stderr
    r = posexp("train", "+hydra.callbacks.x._target_=os.makedirs",
               f"+hydra.callbacks.x.name={tmp_path / 'pwned-by-callback'}")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not list(tmp_path.glob("pwned*"))


def test_help_of_the_real_script(posexp_process):
    r = posexp_process("train", "-h")
    assert r.returncode == 0 and not r.stderr, r.stderr
    assert r.stdout.startswith("posexp train:") and "hydra/launcher=" in r.stdout
    r = posexp_process("eval", "-h")
    assert r.returncode == 0 and "Examples:" in r.stdout and "{" not in r.stdout


def test_resume_after_a_damaged_metrics_file(posexp, trained, tmp_path):
    """A run whose metrics.jsonl holds lines that are not records still resumes (here: from
    its final checkpoint, so only the evaluation is left) and completes."""
    done, trained_run = trained("nope")
    assert done.returncode == 0, done.stderr
    run = copy_run(trained_run, tmp_path / "out")
    info = read_json(run / "run.json")
    (run / "run.json").write_text(json.dumps({**info, "status": "interrupted"}))
    with (run / "metrics.jsonl").open("ab") as fh:
        fh.write(b"5\n\xff\xfe garbage\n{\"step\": ")
    r = posexp("resume", str(run))
    assert r.returncode == 0, r.stderr
    assert "resuming from step" in r.stderr
    assert read_json(run / "run.json")["status"] == "completed"
