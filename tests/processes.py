"""posexp in a process of its own, for tests that stop it part-way: start one, and wait for
its run to reach a step."""

import json
import os
import time

from tests import forkserver
from tests.conftest import TINY

LONG = [a for a in TINY if not a.startswith(("train.tokens", "train.log_every"))] + [
    "train.tokens=65536", "train.log_every=4", "train.checkpoint_every=1024",
    "encoding=rope", "results_dir=out"]


def start(cache_dir, cwd, *args):
    env = {**os.environ, "POSEXP_CACHE": str(cache_dir)}
    return forkserver.popen(list(args), cwd=cwd, env=env)


def last_step(run_dir):
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    steps = [json.loads(line).get("step", 0) for line in lines if line.endswith("}")]
    return max(steps, default=0)


def wait_for_step(proc, run_dir, step, timeout=120):
    deadline = time.time() + timeout
    while last_step(run_dir) < step:
        assert proc.poll() is None, f"finished before step {step}: {proc.stderr.read()}"
        assert time.time() < deadline
        time.sleep(0.01)
