"""The tests' posexp processes forked from a warm server (tests/forkserver.py) are what a
fresh ``python -m posexp`` is to the test that starts one: the same exit status, standard
streams, working directory and environment, a process of its own for signals, and a fresh
process wherever an import would differ."""

import os
import signal
import subprocess
import sys

import pytest

from tests import forkserver
from tests.conftest import TINY


def fresh(args: list[str], cwd, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posexp", *args], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize(("args", "same_stderr"), [
    (["train", "nonsense=1"], True),             # a usage error: one line on stderr, exit 2
    (["--help"], True),                          # stdout, the program's name from argv
    (["train", "encoding=rope", *TINY, "results_dir=out"], False),  # its timings differ
], ids=["usage-error", "help", "train"])
def test_a_forked_posexp_gives_what_a_fresh_one_gives(args, same_stderr, tmp_path,
                                                      cache_dir):
    env = {**os.environ, "POSEXP_CACHE": str(cache_dir), "POSEXP_PROGRESS_SECONDS": "0"}
    for where in ("fresh", "forked"):
        (tmp_path / where).mkdir()
    forked = forkserver.run(args, cwd=tmp_path / "forked", env=env, timeout=120)
    assert isinstance(forkserver.Server.get(), forkserver.Server)  # it was forked
    expected = fresh(args, tmp_path / "fresh", env)
    assert (forked.returncode, forked.stdout) == (expected.returncode, expected.stdout)
    assert forked.stderr == expected.stderr or not same_stderr
    assert sorted(p.name for p in (tmp_path / "forked").rglob("*")) == sorted(
        p.name for p in (tmp_path / "fresh").rglob("*"))


def test_a_forked_posexp_is_a_process_of_its_own(tmp_path, cache_dir):
    env = {**os.environ, "POSEXP_CACHE": str(cache_dir)}
    long = [a for a in TINY if not a.startswith("train.tokens")] + [
        "train.tokens=10000000", "encoding=rope", "results_dir=out"]
    killed = forkserver.popen(["train", *long], cwd=tmp_path, env=env)
    assert isinstance(killed, forkserver.Forked) and killed.pid != os.getpid()
    with pytest.raises(subprocess.TimeoutExpired):
        killed.wait(timeout=0.5)
    killed.kill()
    assert killed.wait(timeout=60) == -signal.SIGKILL
    killed.communicate()
    stopped = forkserver.popen(["train", *long, "seed=1"], cwd=tmp_path, env=env,
                               start_new_session=True)
    assert os.getsid(stopped.pid) == stopped.pid
    while "tokens at length" not in stopped.stderr.readline():
        assert stopped.poll() is None
    os.killpg(stopped.pid, signal.SIGINT)
    _, err = stopped.communicate(timeout=60)
    assert stopped.returncode == 130 and "stopped by SIGINT" in err, err


def test_what_torch_compile_sets_in_the_tests_process_still_forks(tmp_path):
    """torch.compile sets TORCHINDUCTOR_CACHE_DIR in its process, read when compiling: a
    test after a compiling one still gets a forked process."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    with forkserver.popen(["--help"], cwd=tmp_path, env=env) as proc:
        assert isinstance(proc, forkserver.Forked)
        proc.communicate(timeout=120)


@pytest.mark.parametrize("change", ["OMP_NUM_THREADS", "HOME", "posexp"])
def test_a_process_whose_imports_would_differ_is_a_fresh_one(change, tmp_path):
    env = dict(os.environ)
    if change == "posexp":
        (tmp_path / "posexp").mkdir()  # python -m posexp from here imports this one
    else:
        env[change] = str(tmp_path) if change == "HOME" else "2"
    with forkserver.popen(["--help"], cwd=tmp_path, env=env) as proc:
        assert isinstance(proc, subprocess.Popen)
        proc.communicate(timeout=120)
