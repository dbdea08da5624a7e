"""torchrun with two CPU processes (gloo) trains the same model as one process."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import TINY, read_json


def test_two_processes_match_one_on_the_same_global_batch(posexp, cache_dir, tmp_path):
    args = ["train", "encoding=rope", *TINY, "results_dir=out"]
    assert posexp(*args, "experiment=one").returncode == 0
    env = {**os.environ, "POSEXP_CACHE": str(cache_dir), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc_per_node=2", "-m", "posexp", *args, "experiment=two"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "x 2 processes" in r.stderr

    def curve(name):
        run = tmp_path / "out" / name / "rope-L16-s0"
        lines = (run / "metrics.jsonl").read_text().splitlines()
        train = [json.loads(line)["loss"] for line in lines if '"loss"' in line]
        return train, [p["loss"] for p in read_json(run / "eval.json")["curve"]]

    one, two = curve("one"), curve("two")
    assert len(one[0]) == len(two[0]) == 8
    # the same data and the same averaged gradients, up to float summation order
    assert two[0] == pytest.approx(one[0], rel=1e-4)
    assert two[1] == pytest.approx(one[1], rel=1e-4)
