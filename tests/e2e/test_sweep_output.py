"""Jobs of a parallel sweep print whole lines, each named by its run."""
import re

from tests.conftest import TINY


def test_joblib_sweep_prints_whole_named_lines(posexp_process):
    # joblib's jobs are processes of their own, writing to the command's own stdout/stderr
    r = posexp_process("sweep", "encoding=alibi,nope", *TINY, "eval.lengths=[16,32]",
                       "results_dir=out", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    assert r.returncode == 0, r.stderr
    for name in ("alibi-L16-s0", "nope-L16-s0"):
        # each job's lines: its header on stderr, its curve on stdout, all named
        assert re.search(rf"^\[{name}\] posexp: {name.split('-')[0]}, 0\.\d\dM parameters",
                         r.stderr, re.M)
        assert re.search(rf"^\[{name}\] +16 +\d+\.\d{{4}} ", r.stdout, re.M)
    jobs = [line for line in (r.stdout + r.stderr).splitlines()
            if "parameters" in line or "<- train length" in line]
    assert len(jobs) == 4 and all(line.startswith(("[alibi-L16-s0] ", "[nope-L16-s0] "))
                                  for line in jobs)
    assert "\r" not in r.stderr  # no progress bars
