"""Interruptions, divergence, damaged files and bad input, through the real CLI."""
import contextlib
import json
import os
import random
import signal
import subprocess
import sys

import pytest
import torch

from tests.conftest import TINY, copy_run, read_json
from tests.processes import LONG, last_step, start, wait_for_step


def outcome(run_dir):
    info = read_json(run_dir / "run.json")
    return info["weights_sha256"], [p["loss"] for p in read_json(run_dir / "eval.json")["curve"]]


@pytest.fixture(scope="session")
def whole(cache_dir, tmp_path_factory):
    """The outcome of the LONG run trained without a break, once per session: what every
    interrupted and resumed run must reproduce."""
    cwd = tmp_path_factory.mktemp("whole")
    proc = start(cache_dir, cwd, "train", *LONG, "experiment=whole")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return outcome(cwd / "out/whole/rope-L16-s0")


def test_kill_9_at_random_points_then_resume_gives_identical_numbers(posexp, cache_dir,
                                                                     tmp_path, whole):
    run = tmp_path / "out/cut/rope-L16-s0"
    kill_points = sorted(random.Random(5).sample(range(10, 500), 3))
    for point in kill_points:
        proc = start(cache_dir, tmp_path, "train", *LONG, "experiment=cut")
        wait_for_step(proc, run, point)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert read_json(run / "run.json")["status"] == "running"  # killed: nothing more said
    # the process runs on a few steps between reaching the point and the kill
    killed_at = last_step(run)
    r = posexp("train", *LONG, "experiment=cut")  # the same command again
    assert r.returncode == 0, r.stderr
    assert "resuming from step" in r.stderr
    assert outcome(run) == whole
    info = read_json(run / "run.json")
    assert info["status"] == "completed" and kill_points[-1] <= killed_at
    assert info["resumed_from_step"] <= killed_at
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
             if "loss" in json.loads(line)]
    assert steps == sorted(set(steps))  # no step logged twice after resuming
    assert not list(run.glob(".*.tmp"))


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_checkpoints_then_resume_command_finishes(posexp, cache_dir, tmp_path, whole,
                                                         sig, code):
    run = tmp_path / "out/sig/rope-L16-s0"
    proc = start(cache_dir, tmp_path, "train", *LONG, "experiment=sig")
    wait_for_step(proc, run, 150)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code
    assert err.strip().splitlines()[-1].startswith("posexp: stopped by SIG")
    info = read_json(run / "run.json")
    assert info["status"] == "interrupted" and "resume" in info["reason"]
    stopped_at = torch.load(run / "checkpoint.pt", weights_only=True)["step"]
    assert stopped_at >= 150
    r = posexp("resume", str(run))
    assert r.returncode == 0, r.stderr
    assert f"resuming from step {stopped_at}" in r.stderr
    assert outcome(run) == whole


def test_killed_sweep_completes_only_what_is_missing(posexp, cache_dir, tmp_path):
    grid = ["encoding=alibi,nope", *[a for a in LONG if not a.startswith("encoding")],
            "experiment=sw"]
    root = tmp_path / "out/sw"
    proc = start(cache_dir, tmp_path, "sweep", *grid)
    wait_for_step(proc, root / "nope-L16-s0", 50)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert read_json(root / "alibi-L16-s0/run.json")["status"] == "completed"
    assert read_json(root / "nope-L16-s0/run.json")["status"] == "running"
    done_stamp = (root / "alibi-L16-s0/checkpoint.pt").stat().st_mtime_ns
    r = posexp("sweep", *grid)
    assert r.returncode == 0, r.stderr
    assert "alibi-L16-s0: already completed" in r.stderr and "resuming from step" in r.stderr
    assert (root / "alibi-L16-s0/checkpoint.pt").stat().st_mtime_ns == done_stamp
    assert read_json(root / "nope-L16-s0/run.json")["status"] == "completed"
    assert "not completed" not in r.stdout


def test_completed_run_is_skipped_unless_resume_false(posexp, trained, tmp_path):
    args = ["train", "encoding=nope", *TINY, "results_dir=out"]
    done, trained_run = trained("nope")
    assert done.returncode == 0, done.stderr
    run = copy_run(trained_run, tmp_path / "out")
    stamp = (run / "checkpoint.pt").stat().st_mtime_ns
    weights = read_json(run / "run.json")["weights_sha256"]
    r = posexp(*args)
    assert r.returncode == 0 and "already completed" in r.stderr and "skipped" in r.stderr
    assert (run / "checkpoint.pt").stat().st_mtime_ns == stamp
    r = posexp(*args, "train.resume=false")
    assert r.returncode == 0 and (run / "checkpoint.pt").stat().st_mtime_ns != stamp
    # the old run was moved aside, whole, never deleted
    (aside,) = (tmp_path / "out/default/.replaced").iterdir()
    assert aside.name.startswith("nope-L16-s0-") and str(aside.relative_to(tmp_path)) in r.stderr
    assert read_json(aside / "run.json")["weights_sha256"] == weights
    assert (aside / "checkpoint.pt").stat().st_mtime_ns == stamp


def test_divergence_stops_the_run_and_the_sweep_goes_on(posexp, tmp_path):
    r = posexp("sweep", "encoding=nope", "train.lr=1e6,0.002", *TINY, "train.log_every=2",
                    "run_name=lr${train.lr}", "results_dir=out")
    assert r.returncode == 1  # one of two runs did not complete
    info = read_json(tmp_path / "out/default/lr1000000.0/run.json")
    assert info["status"] == "diverged" and info["diverged_at_step"] <= 4
    assert "training diverged: loss became nan" in info["reason"]
    assert not (tmp_path / "out/default/lr1000000.0/eval.json").exists()
    assert read_json(tmp_path / "out/default/lr0.002/run.json")["status"] == "completed"
    md = (tmp_path / "out/default/summary.md").read_text()
    assert "diverged" in md and "| nope | 16 | 1 |" in md


def test_disk_full_fails_cleanly_and_keeps_the_last_checkpoint(posexp, trained, tmp_path):
    probe, run = trained("nope")
    assert probe.returncode == 0, probe.stderr
    size = (run / "checkpoint.pt").stat().st_size
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(size * 1.5)}",
                              "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        r = posexp("train", "encoding=nope", *TINY, "train.checkpoint_every=2048",
                   f"results_dir={disk}")
        assert r.returncode == 1
        assert r.stderr.strip().splitlines()[-1].startswith("posexp: error: cannot write")
        assert "No space left on device" in r.stderr and "Traceback" not in r.stderr
        run = disk / "default/nope-L16-s0"
        assert read_json(run / "run.json")["status"] == "failed"
        state = torch.load(run / "checkpoint.pt", weights_only=True)  # the previous one, whole
        assert state["step"] == 16
        assert not list(run.glob(".*.tmp")) and not (run / "eval.json").exists()
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_checkpoint_with_pickled_objects_is_refused(posexp, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("{}")
    (run / "run.json").write_text('{"status": "completed"}')

    class Payload:
        def __reduce__(self):
            return (os.system, ("echo owned > owned.txt",))

    torch.save({"model": Payload()}, run / "checkpoint.pt")
    r = posexp("eval", str(run))
    assert r.returncode != 0
    assert not (tmp_path / "owned.txt").exists()
    r = subprocess.run([sys.executable, "-c", "from pathlib import Path; from posexp.runs import "
                        f"Run; Run(Path('{run}')).load_checkpoint()"], capture_output=True,
                       text=True, cwd=tmp_path)
    assert "refusing to load" in r.stderr and not (tmp_path / "owned.txt").exists()


def test_no_api_key_in_any_results_file(posexp_process, tmp_path):
    secret = "0123456789abcdef0123456789abcdef01234567"
    r = posexp_process("train", "encoding=nope", *TINY, "results_dir=out", "logger=wandb",
                       "logger.mode=offline", env={"WANDB_API_KEY": secret, "WANDB_SILENT": "true"})
    assert r.returncode == 0, r.stderr
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_results_dir_that_cannot_be_created(posexp, tmp_path):
    (tmp_path / "afile").write_text("x")
    r = posexp("train", "encoding=nope", *TINY, f"results_dir={tmp_path / 'afile'}")
    assert r.returncode == 2 and "results_dir: cannot create" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_unknown_launcher(posexp):
    r = posexp("sweep", "encoding=nope", "hydra/launcher=ray", *TINY)
    assert r.returncode == 2 and "there is no hydra/launcher 'ray'" in r.stderr


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_as_training_starts_is_never_lost(posexp, tmp_path, monkeypatch, sig, code):
    """A signal that comes while the progress bar is made -- the first moment of training,
    where a Ctrl-C lands and where tqdm started a thread inside an ``except Exception`` that
    swallowed the signal's exception: 4 of 8 such Ctrl-Cs were lost, and the run trained on
    to its end -- stops the run after its first step, checkpointed."""
    import posexp.run.training as training

    class SignalledBar(training.tqdm):
        def __init__(self, *args, **kwargs):
            with contextlib.suppress(Exception):  # as a library's code may: the handler's
                os.kill(os.getpid(), sig)         # exception goes no further
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(training, "tqdm", SignalledBar)
    r = posexp("train", *LONG, "experiment=early")
    assert r.returncode == code, r.stderr
    assert "stopped by SIG" in r.stderr and "at step 1; checkpoint saved" in r.stderr, r.stderr
    run = tmp_path / "out/early/rope-L16-s0"
    assert read_json(run / "run.json")["status"] == "interrupted"
    assert torch.load(run / "checkpoint.pt", weights_only=True)["step"] == 1


def test_a_progress_bar_starts_no_thread(monkeypatch):
    """tqdm's monitor thread, started with a first bar, would be started inside an
    ``except Exception`` that swallows a signal's exception raised meanwhile."""
    import threading

    from posexp.run.training import Progress, tqdm

    monkeypatch.setattr(tqdm, "monitor", None)  # as in a fresh process
    before = set(threading.enumerate())
    with Progress(10, "tok", "rope", enabled=True):
        assert set(threading.enumerate()) == before
