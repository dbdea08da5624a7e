"""Campaigns with a time limit (posexp/timelimit.py) and what reproduce makes of a partial one
(posexp/claims/campaign.py), without training: the limit parsed, the estimate that decides
whether a run starts, a run another process holds skipped, and pending claims."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import posexp.run
from posexp.claims import reproduce, verdicts
from posexp.claims.base import UNMEASURED
from posexp.claims.campaign import Pending, check_launcher_args
from posexp.errors import PosexpError, UsageError
from posexp.runs import Run
from posexp.timelimit import Campaign, held_elsewhere, parse_time_limit, pop_time_limit
from tests.unit.test_reproduce import (
    EXPECTED,
    PRESET,
    _fake_experiment,
    by_number,
    claim_runs,
    write_preset,
)


@pytest.mark.parametrize("text,seconds", [
    ("90s", 90), ("45m", 2700), ("2h", 7200), ("1h30m", 5400), ("1h0m5s", 3605),
    (" 10m ", 600),
])
def test_a_time_limit_is_hours_minutes_and_seconds(text, seconds):
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["0", "0s", "0h0m", "-5m", "two hours", "10y", "90", "",
                                  "1m30h", "1.5h", "2 h", "h"])
def test_a_bad_time_limit_is_one_line(text):
    with pytest.raises(UsageError, match=r"^--time-limit (takes a duration such as 90s, 45m, "
                                         r"2h or 1h30m|must be more than no time at all); "
                                         r"got '.*'$"):
        parse_time_limit(text)


def test_sweep_takes_the_time_limit_off_its_overrides():
    assert pop_time_limit(["encoding=rope", "--time-limit", "2h", "seed=0,1"]) == \
        (["encoding=rope", "seed=0,1"], 7200)
    assert pop_time_limit(["--time-limit=45m"]) == ([], 2700)
    assert pop_time_limit(["seed=0"]) == (["seed=0"], None)
    with pytest.raises(UsageError, match="--time-limit needs a value"):
        pop_time_limit(["seed=0", "--time-limit"])


def test_reproduce_takes_only_launcher_arguments():
    args = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    assert check_launcher_args(args) == args
    with pytest.raises(UsageError, match=r"takes hydra/launcher=NAME and hydra.launcher.KEY="
                                         r"VALUE besides its options; got 'seed=3'"):
        check_launcher_args(["hydra/launcher=joblib", "seed=3"])


def completed(path: Path, tok_per_s: float, finished: str, train: float = 10.0,
              scoring: float = 0.0) -> Path:
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({
        "status": "completed", "tok_per_s": tok_per_s, "finished_at": finished,
        "train_seconds": train, "eval_seconds": scoring}))
    return path


def tokens(n: int):
    return OmegaConf.create({"train": {"tokens": n}})


def test_a_run_starts_only_if_its_estimate_fits(tmp_path, capsys):
    old = completed(tmp_path / "x" / "old", 10_000, "2026-01-01T00:00:00+00:00")
    # the most recent run measured 100 tok/s, and scored for half as long as it trained
    new = completed(tmp_path / "x" / "new", 100, "2026-02-01T00:00:00+00:00", 10.0, 5.0)
    campaign = Campaign("posexp reproduce", 600, [old, new])
    assert campaign.estimate(tmp_path / "x" / "next", tokens(30_000)) == pytest.approx(450)
    assert campaign.admit(tmp_path / "x" / "next", tokens(30_000))  # 450 s of 600
    assert not campaign.admit(tmp_path / "x" / "big", tokens(50_000))  # 750 s
    # a run half trained needs only its other half
    part = tmp_path / "x" / "part"
    part.mkdir()
    (part / "metrics.jsonl").write_text('{"step": 1, "tokens": 25000, "loss": 3.0}\n')
    assert campaign.admit(part, tokens(50_000))
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("posexp reproduce: started: x/next (about 7m30s of ")
    assert err[1].startswith("posexp reproduce: pending: x/big (needs about 12m30s, ")
    assert err[2].startswith("posexp reproduce: started: x/part (about 6m15s of ")
    line = campaign.summary({tmp_path / "x" / "big": tokens(50_000)})
    assert line == "2 runs recorded, 1 pending; about 12m30s left at 100 tok/s (measured by new)"


def test_a_record_trained_again_for_its_weights_needs_its_whole_budget(tmp_path, capsys):
    """A record that lacks points asked for is trained again first (run/restore.py): it
    starts only if its whole budget fits -- at `--time-limit 1s` it is pending, and nothing
    trains -- while a recorded run that lacks nothing is let through to be skipped."""
    record = completed(tmp_path / "x" / "record", 100, "2026-02-01T00:00:00+00:00")
    campaign = Campaign("posexp reproduce", 600, [record])
    assert campaign.estimate(record, tokens(30_000)) == 0.0
    assert campaign.estimate(record, tokens(30_000), again=True) == pytest.approx(300)
    assert campaign.admit(record, tokens(30_000))  # nothing to train: not a line
    assert not campaign.admit(record, tokens(90_000), again=True)  # 900 s of 600
    assert campaign.admit(record, tokens(30_000), again=True)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("posexp reproduce: pending: x/record (its weights again: needs "
                             "about 15m00s, ")
    assert err[1].startswith("posexp reproduce: started: x/record (its weights again: about "
                             "5m00s of ")
    assert len(err) == 2


def test_the_first_run_starts_before_anything_is_measured(tmp_path, capsys):
    campaign = Campaign("posexp sweep", 60, [tmp_path / "e" / "a"])
    assert campaign.estimate(tmp_path / "e" / "a", tokens(10**9)) is None
    assert campaign.admit(tmp_path / "e" / "a", tokens(10**9))
    assert "started: e/a (nothing measured yet; " in capsys.readouterr().err
    assert campaign.summary({tmp_path / "e" / "a": tokens(1)}) == \
        "0 runs recorded, 1 pending; time left unknown: no run has been measured yet"


def test_nothing_starts_once_the_limit_has_passed(tmp_path, capsys):
    campaign = Campaign("posexp reproduce", 60, [])
    campaign.deadline = time.time() - 1
    assert campaign.expired
    assert not campaign.admit(tmp_path / "e" / "a", tokens(1))
    assert "pending: e/a (not started: the time limit has passed)" in capsys.readouterr().err
    # a recorded run met after the limit is not named pending: the summary counts it recorded
    completed(tmp_path / "e" / "done", 100.0, "2026-12-01T00:00:00")
    assert not campaign.admit(tmp_path / "e" / "done", tokens(1))
    assert "e/done" not in capsys.readouterr().err


def test_nothing_starts_once_the_sweep_is_stopped(tmp_path, monkeypatch, capsys):
    from posexp.run.training import STOP_FILE

    monkeypatch.setenv(STOP_FILE, str(tmp_path / "stop"))
    (tmp_path / "stop").write_text("15\n")  # the parent's SIGTERM (sweep/stop.py)
    campaign = Campaign("posexp reproduce", 600, [])
    assert not campaign.admit(tmp_path / "e" / "a", tokens(1))
    assert capsys.readouterr().err == \
        "posexp reproduce: pending: e/a (not started: stopped by SIGTERM)\n"
    completed(tmp_path / "e" / "done", 100.0, "2026-12-01T00:00:00")
    assert not campaign.admit(tmp_path / "e" / "done", tokens(1))  # not rescored either
    assert capsys.readouterr().err == ""


def test_claims_whose_runs_are_pending_get_no_verdict(tmp_path):
    runs = claim_runs(tmp_path)
    rows = by_number(verdicts(runs, PRESET, 512, [
        Pending("nope", 16, None, (), False), Pending("nope", 16, None, (), False),
        Pending("rope", 16, None, (), True)]))  # a fine-tune: no claim here reads one
    # claims 6 and 7 read NoPE: two of its runs (seeds) are pending
    for n in (6, 7):
        assert (rows[n].verdict, rows[n].holm, rows[n].p) == ("pending (2 runs)",
                                                              "pending (2 runs)", None)
    assert {n: v.verdict for n, v in rows.items() if n < 6} == \
        {n: v for n, v in EXPECTED.items() if n < 6}
    one = by_number(verdicts(runs, PRESET, 512, [Pending("alibi", 16, None, (), False)]))
    assert one[3].verdict == "pending (1 run)" and one[1].verdict == EXPECTED[1]
    assert UNMEASURED not in {v.verdict for v in one.values()}


def hold_lock(path: Path) -> subprocess.Popen:
    """Another process holding ``path``'s run lock until killed."""
    proc = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom pathlib import Path\nfrom posexp.runs import Run\n"
        f"with Run(Path({str(path)!r})).lock():\n    print('held', flush=True)\n"
        "    time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_run_another_process_holds_is_skipped_not_failed(tmp_path, monkeypatch, capsys):
    preset = write_preset(tmp_path / "tiny.yaml", seeds=[0])
    calls: list = []
    fake = _fake_experiment(calls, fail="none")

    def locked(spec, progress=True, group=None):
        with Run(spec.path).lock():
            return fake(spec, progress, group)

    monkeypatch.setattr(posexp.run, "run", locked)
    holder = hold_lock(tmp_path / "out" / "claims" / "nope-L16-s0")
    try:
        with pytest.raises(PosexpError, match=r"^1 of 6 runs are pending \(running "
                                              r"elsewhere, or stopped\)"):
            reproduce(str(preset), tmp_path / "out")
    finally:
        holder.kill()
        holder.wait()
    assert len(calls) == 2 * 5  # every other run, in both modes
    err = capsys.readouterr().err
    assert "posexp reproduce: skipped: claims/nope-L16-s0 (running elsewhere: " in err
    assert "failed" not in err
    v = json.loads((tmp_path / "out" / "claims" / "report" / "verdicts.json").read_text())
    got = {int(x["claim"].split(".")[0]): x["verdict"] for x in v["verdicts"]}
    assert got == {**EXPECTED, 6: "pending (1 run)", 7: "pending (1 run)"}


def test_a_launched_job_leaves_a_run_held_elsewhere_to_its_holder(tmp_path, capsys):
    path = tmp_path / "e" / "rope-L16-s0"
    campaign = Campaign("posexp sweep", 60, [path])
    assert not held_elsewhere(campaign, path)
    holder = hold_lock(path)
    try:
        assert held_elsewhere(campaign, path)
    finally:
        holder.kill()
        holder.wait()
    assert f"posexp sweep: skipped: e/rope-L16-s0 (running elsewhere: {path} is in use by " \
           f"pid {holder.pid} " in capsys.readouterr().err
