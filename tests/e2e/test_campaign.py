"""Campaigns end to end at a tiny scale: posexp reproduce stopped at its time limit (exit
status 3, runs checkpointed, claims pending) and continued to the numbers of a campaign that
was never stopped; and its runs handed to Hydra's joblib launcher."""
import json
import os

import pytest

from posexp.timelimit import TIME_LIMIT_EXIT
from tests import forkserver
from tests.conftest import read_json
from tests.unit.test_reproduce import SMALL, THRESHOLDS


def tiny_preset(path, rope_tokens: int):
    path.write_text(json.dumps({
        "experiment": "claims", "train_seq_len": 16, "seeds": [0], "sliding": False,
        "overrides": ["train.seq_len=16", *SMALL, "train.tokens=2048", "train.batch_tokens=128",
                      "train.checkpoint_every=1024", "eval.tokens=256", "eval.lengths=[16,64]",
                      "device=cpu"],
        "runs": [["encoding=rope", f"train.tokens={rope_tokens}",
                  f"train.checkpoint_every={max(1024, rope_tokens // 4)}"], ["encoding=alibi"]],
        "thresholds": THRESHOLDS}))
    return path


@pytest.fixture(scope="module")
def whole(cache_dir, tmp_path_factory):
    """The tiny preset's campaign never stopped (rope trained on 65,536 tokens): what a
    stopped and continued one must come to."""
    root = tmp_path_factory.mktemp("whole")
    preset = tiny_preset(root / "tiny.yaml", rope_tokens=65536)
    r = forkserver.run(["reproduce", "--preset", str(preset), "--results-dir", "whole"],
                       cwd=root, env={**os.environ, "POSEXP_CACHE": str(cache_dir)},
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return root / "whole" / "claims"


def numbers(root):
    """What each run computed: its weights and every evaluated point, timings left out."""
    return {name: (read_json(root / name / "run.json")["weights_sha256"],
                   [{k: v for k, v in p.items() if k != "seconds"}
                    for p in read_json(root / name / "eval.json")["curve"]])
            for name in ("rope-L16-s0", "alibi-L16-s0")}


def test_a_campaign_stops_at_its_limit_and_continues_to_the_same_numbers(posexp, tmp_path,
                                                                          whole):
    # the rope run trains for seconds, past the limit of one second, on a fast idle machine
    # too (16,384 tokens took under a second there)
    preset = tiny_preset(tmp_path / "tiny.yaml", rope_tokens=65536)
    r = posexp("reproduce", "--preset", str(preset), "--results-dir", "part",
               "--time-limit", "1s")
    assert r.returncode == TIME_LIMIT_EXIT == 3, r.stderr
    root = tmp_path / "part" / "claims"
    info = read_json(root / "rope-L16-s0" / "run.json")
    assert info["status"] == "interrupted"  # checkpointed where the limit found it
    assert (root / "rope-L16-s0" / "checkpoint.pt").is_file()
    assert not (root / "alibi-L16-s0").exists()
    lines = r.stderr.splitlines()
    assert "posexp reproduce: started: claims/rope-L16-s0 (nothing measured yet; 1s left)" \
        in lines
    assert "posexp reproduce: pending: claims/rope-L16-s0 (stopped at the time limit, " \
           "checkpointed)" in lines
    assert "posexp reproduce: pending: claims/alibi-L16-s0 (not started: the time limit has " \
           "passed)" in lines
    summary = "0 runs recorded, 2 pending; time left unknown: no run has been measured yet"
    assert lines[-2:] == [f"posexp reproduce: {summary}",
                          f"posexp: stopped at the time limit: {summary}; run the same "
                          "command again to continue"]
    verdicts = read_json(root / "report" / "verdicts.json")["verdicts"]
    assert {v["verdict"] for v in verdicts} >= {"pending (1 run)", "pending (2 runs)"}
    assert all(v["verdict"].startswith("pending") or v["verdict"] == "not measured"
               for v in verdicts)

    r = posexp("reproduce", "--preset", str(preset), "--results-dir", "part",
               "--time-limit", "10m")
    assert r.returncode == 0, r.stderr
    assert "resuming from step" in r.stderr
    assert r.stderr.splitlines()[-1] == "posexp reproduce: 2 runs recorded, 0 pending; " \
                                        "nothing left to train"
    assert read_json(root / "rope-L16-s0" / "run.json")["tok_per_s"] > 0

    assert numbers(root) == numbers(whole)


def test_reproduce_hands_its_runs_to_the_joblib_launcher(posexp_process, tmp_path):
    # joblib's jobs are processes of their own, writing to the command's own stderr
    preset = tiny_preset(tmp_path / "tiny.yaml", rope_tokens=2048)
    r = posexp_process("reproduce", "--preset", str(preset), "--results-dir", "out",
                       "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    assert r.returncode == 0, r.stderr
    root = tmp_path / "out" / "claims"
    for name in ("rope-L16-s0", "alibi-L16-s0"):
        assert read_json(root / name / "run.json")["status"] == "completed"
        assert f"posexp reproduce: recorded: claims/{name}" in r.stderr.splitlines()
        assert f"[{name}] posexp: " in r.stderr  # each job's lines, whole and named
    assert read_json(root / "report" / "verdicts.json")["preset"] == str(preset)
    assert not list((root / ".campaign").glob("plan-*.json"))  # the plan does not stay
    r = posexp_process("reproduce", "--preset", str(preset), "--results-dir", "out",
                       "hydra/launcher=joblib", "seed=3")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "posexp: error: posexp reproduce takes hydra/launcher=NAME and "
        "hydra.launcher.KEY=VALUE besides its options; got 'seed=3' (posexp reproduce --help)"]


def test_a_sweep_stops_at_its_limit_with_the_same_exit_and_summary(posexp, tmp_path):
    # long enough to outlast the limit anywhere (minutes on an idle machine): it stops at the
    # limit, never trains to the end; a limit of seconds, so that a loaded machine still
    # starts the first run before it
    r = posexp("sweep", "encoding=rope,alibi", "train.seq_len=16", *SMALL,
               "train.tokens=4194304", "train.batch_tokens=128", "eval.tokens=256",
               "eval.lengths=[16]", "device=cpu", "results_dir=out", "--time-limit", "8s")
    assert r.returncode == TIME_LIMIT_EXIT, r.stderr
    assert read_json(tmp_path / "out" / "default" / "rope-L16-s0" / "run.json")["status"] == \
        "interrupted"
    summary = "0 runs recorded, 2 pending; time left unknown: no run has been measured yet"
    assert r.stderr.splitlines()[-2:] == [
        f"posexp sweep: {summary}",
        f"posexp: stopped at the time limit: {summary}; run the same command again to continue"]


def test_a_campaign_continues_on_a_fresh_clone_holding_only_its_records(posexp, tmp_path,
                                                                         whole):
    """What git carries: the records of the runs that finished, no checkpoint, nothing of a
    run the limit stopped.  The campaign carries on from them to the numbers of one that was
    never stopped."""
    import shutil

    preset = tiny_preset(tmp_path / "tiny.yaml", rope_tokens=65536)
    tree = json.loads(preset.read_text())
    tree["runs"].reverse()  # alibi (2,048 tokens) first: recorded within the limit
    preset.write_text(json.dumps(tree))
    # a limit alibi's run keeps on busy cores too (under load it took over a second); rope
    # is then pending, stopped at the limit, or on a fast machine recorded: the clone below
    # holds alibi's record alone whichever it was
    r = posexp("reproduce", "--preset", str(preset), "--results-dir", "here",
               "--time-limit", "10s")
    assert r.returncode in (0, TIME_LIMIT_EXIT), r.stderr
    here = tmp_path / "here" / "claims"
    assert read_json(here / "alibi-L16-s0" / "run.json")["status"] == "completed"
    clone = tmp_path / "clone" / "claims"
    clone.mkdir(parents=True)
    shutil.copytree(here / "alibi-L16-s0", clone / "alibi-L16-s0",
                    ignore=shutil.ignore_patterns("checkpoint.pt"))
    r = posexp("reproduce", "--preset", str(preset), "--results-dir", "clone",
               "--time-limit", "10m")
    assert r.returncode == 0, r.stderr
    assert "posexp reproduce: recorded: claims/alibi-L16-s0" in r.stderr.splitlines()
    assert not (clone / "alibi-L16-s0" / "checkpoint.pt").exists()  # skipped, not retrained
    assert numbers(clone) == numbers(whole)  # its runs in the other order: the same numbers
    verdicts = [read_json(root / "report" / "verdicts.json")["verdicts"]
                for root in (clone, whole)]
    assert [v["verdict"] for v in verdicts[0]] == [v["verdict"] for v in verdicts[1]]
