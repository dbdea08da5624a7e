"""Task runs (data=task): training on answer tokens only, scoring held-out instances per length,
the records in eval.json and run.json, and the CLI end to end for every task."""
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posexp import config as C
from posexp import stats
from posexp.config import derive
from posexp.data.tasks import (
    TASKS,
    VOCAB_SIZE,
    constant_baseline,
    heldout,
    instances_sha256,
    task_fingerprint,
)
from posexp.runs import load_run
from posexp.runs.records import TASK_POINT_KINDS
from tests.conftest import (
    assert_usage_error,
    copy_run,
    in_process,
    read_json,
)
from tests.unit.test_task_runs import SMALL, compose

# per task: an encoding, extra overrides, the lengths scored, and the n/a reasons expected
# (a fragment of the reason, by length); the runs use every kind of encoding between them
RUNS = {
    "copy": ("nope", [], [4, 15, 30], {}),
    "reverse": ("rope", ["train.random_positions=64"], [15, 30], {}),
    "sort": ("rope", ["eval.rope_scaling=linear", "eval.rope_scaling.factor=2"], [15, 30], {}),
    "parity": ("alibi", [], [29, 58], {}),
    "addition": ("t5", [], [9, 21], {21: "addition: 21 digits is past the 20-digit limit"}),
    "recall": ("learned", [], [13, 26],
               {26: "learned positions stop at 32; there is no position 32 or beyond"}),
    "passkey": ("kerple_log", ["task.depths=[0.0,1.0]"], [3, 24, 48],
                {3: "passkey: a context of 3 tokens cannot hold the 6-token key block"}),
}


def task_args(task: str, encoding: str | None = None, seed: int = 0) -> list[str]:
    enc, extra, lengths, _ = RUNS[task]
    return ["train", "data=task", f"task={task}", f"encoding={encoding or enc}", f"seed={seed}",
            *SMALL, *extra, f"eval.task_lengths=[{','.join(map(str, lengths))}]",
            "results_dir=out", f"experiment={task}"]  # the default run name has no task


@pytest.fixture(scope="module")
def task_runs(tmp_path_factory):
    """``task_runs(task, encoding=None, seed=0)``: the result and directory of a tiny task
    run through the CLI in this process, trained once per module, with a token cache of its
    own (which a task run never touches)."""
    root = tmp_path_factory.mktemp("task_runs")
    cache = root / "cache"
    runs: dict[tuple, tuple] = {}

    def get(task: str, encoding: str | None = None, seed: int = 0):
        key = (task, encoding, seed)
        if key not in runs:
            r = in_process(task_args(task, encoding, seed), root, {"POSEXP_CACHE": str(cache)})
            enc = encoding or RUNS[task][0]
            runs[key] = r, root / "out" / task / f"{enc}-L32-s{seed}"
        return runs[key]

    get.cache = cache
    get.root = root
    return get


# --- the CLI end to end ------------------------------------------------------------------------
@pytest.mark.parametrize("task", sorted(RUNS))
def test_a_task_run_end_to_end(task_runs, task):
    r, path = task_runs(task)
    assert r.returncode == 0, r.stderr
    _, _, lengths, na = RUNS[task]
    n_max = derive.task_max_length(C.resolve(compose(task_args(task)[1:])))
    assert f"task {task} at lengths {TASKS[task].min_length}-{n_max}" in r.stderr
    info = read_json(path / "run.json")
    assert info["status"] == "completed"
    assert info["corpus"]["name"] == f"task:{task}"
    assert info["corpus"]["vocab_size"] == VOCAB_SIZE
    assert info["corpus"]["fingerprint"] == task_fingerprint(TASKS[task])
    eval_json = read_json(path / "eval.json")
    assert eval_json["curve"] == []
    points = eval_json["tasks"]
    scalings = [None, {"method": "linear", "factor": 2.0}] if task == "sort" else [None]
    depths = [0.0, 1.0] if task == "passkey" else [None]
    assert sorted((p["length"], p["depth"] or 0.0, json.dumps(p["rope_scaling"]))
                  for p in points) == sorted(
        (n, d or 0.0, json.dumps(s)) for n in lengths for d in depths for s in scalings)
    for p in points:
        # every kind a task point has (the positions only a randomized run's points name)
        at = {"positions", "positions_seed"}
        assert set(p) - at == set(TASK_POINT_KINDS) - at
        assert (p["task"], p["count"], p["eval_seed"]) == (task, 16, 0)
        assert p["tokens"] == TASKS[task].tokens_for(p["length"])
        if p["length"] in na:
            assert not p["applicable"] and na[p["length"]] in p["reason"]
            assert p["exact"] is None
        else:
            assert p["applicable"] and p["reason"] is None
            assert 0 <= p["exact_low"] <= p["exact"] <= p["exact_high"] <= 1
            assert 0 <= p["token_acc_low"] <= p["token_acc"] <= p["token_acc_high"] <= 1
            assert p["answer_loss"] > 0
            instances = heldout(TASKS[task], p["length"], 16, 0, p["depth"])
            assert p["instances_sha256"] == instances_sha256(instances)
            assert (p["chance_exact"], p["chance_token"]) == pytest.approx(
                constant_baseline(instances))
    assert f"out/{task}/{path.name}: task {task}" in r.stdout
    result = load_run(path)
    assert result.status == "completed" and result.task == task
    assert result.tasks == points


def test_a_task_run_reads_no_corpus(task_runs):
    r, _ = task_runs("copy")
    assert r.returncode == 0, r.stderr
    assert not task_runs.cache.exists() or not any(task_runs.cache.iterdir())


def test_every_run_is_scored_on_the_same_instances(task_runs):
    (r1, a), (r2, b) = task_runs("copy"), task_runs("copy", "alibi", seed=1)
    assert r1.returncode == 0 and r2.returncode == 0, r2.stderr
    assert read_json(a / "run.json")["weights_sha256"] != read_json(b / "run.json")[
        "weights_sha256"]
    hashes = [{p["length"]: p["instances_sha256"] for p in read_json(d / "eval.json")["tasks"]}
              for d in (a, b)]
    assert hashes[0] == hashes[1] and len(set(hashes[0].values())) == 3


def test_the_same_command_skips_and_eval_scores_only_missing_points(task_runs, tmp_path):
    _, trained = task_runs("copy")
    path = copy_run(trained, tmp_path / "out")
    before = (path / "eval.json").read_text()
    again = in_process(task_args("copy"), tmp_path, {})
    assert again.returncode == 0, again.stderr
    assert "holds every task point asked for; skipped" in again.stderr
    assert (path / "eval.json").read_text() == before

    r = in_process(["eval", str(path), "eval.task_lengths=[2,15]"], tmp_path, {})
    assert r.returncode == 0, r.stderr
    assert "scoring the 1 missing task point(s) at length 2 from its checkpoint" in r.stderr
    old = {p["length"]: p for p in json.loads(before)["tasks"]}
    new = {p["length"]: p for p in read_json(path / "eval.json")["tasks"]}
    assert sorted(new) == [2, 4, 15, 30]
    assert new[15] == old[15]  # kept, not scored again
    assert new[2]["applicable"] and new[2]["tokens"] == 6

    # another instance count is another point, beside the first
    r = in_process(["eval", str(path), "eval.task_lengths=[2]", "task.eval_count=8"],
                   tmp_path, {})
    assert r.returncode == 0, r.stderr
    counts = sorted(p["count"] for p in read_json(path / "eval.json")["tasks"]
                    if p["length"] == 2)
    assert counts == [8, 16]

    ls = in_process(["ls", str(tmp_path / "out")], tmp_path, {})
    assert ls.returncode == 0, ls.stderr
    row = next(line for line in ls.stdout.splitlines() if "nope-L32-s0" in line)
    exact = {p["length"]: p["exact"] for p in new.values()}
    assert f"copy n=15: exact {exact[15]:.2f}" in row and f"n=30  exact {exact[30]:.2f}" in row
    assert ls.stdout.split()[6:9] == ["EXACT@TRAINED", "LONGEST", "EXACT@LONGEST"]


def test_a_damaged_task_point_makes_the_run_damaged(task_runs, tmp_path):
    _, trained = task_runs("copy")
    path = copy_run(trained, tmp_path / "out")
    data = read_json(path / "eval.json")
    data.pop("sha256")  # as a file written before posexp recorded it: the field's own check
    data["tasks"][1]["exact"] = "high"
    (path / "eval.json").write_text(json.dumps(data))
    result = load_run(path)
    assert result.status == "damaged"
    assert result.reason == (f"{path / 'eval.json'} is damaged: task point 2: 'exact' is "
                             "'high', not a number")
    data["tasks"] = []
    (path / "eval.json").write_text(json.dumps(data))
    assert "the curve holds no points" in load_run(path).reason


@pytest.mark.parametrize(("args", "message"), [
    (["task=copy"], "task=copy is set, but this run trains on data=stdlib; add data=task"),
    (["data=task"], "data=task needs a task: add task=NAME, one of copy, reverse, sort"),
    (["data=task", "task=juggle"], "there is no task 'juggle'; available options in 'task': "
                                   "addition, addition_carries, addition_hints, "
                                   "addition_reversed, common_words, copy"),
    (["data=task", "task=copy", "eval.task_lengths=[0]"],
     "each of eval.task_lengths must be a positive integer, got 0"),
    (["data=task", "task=copy", "eval.task_lengths=[8,8]"],
     "eval.task_lengths lists 8 more than once"),
    (["eval.task_lengths=[8]"], "eval.task_lengths is set, but this run is not a task run"),
    (["data=task", "task=copy", "task.eval_count=0"],
     "task.eval_count must be a positive integer, got 0"),
    (["data=task", "task=passkey", "task.depths=[1.5]"],
     "each of task.depths must be a finite number in [0, 1], got 1.5"),
    (["data=task", "task=passkey", "train.seq_len=4", "train.batch_tokens=64"],
     "train.seq_len is too short for the task: passkey: even the shortest instance"),
    (["data=task", "task=copy", "data.vocab_size=256"], "data=task has its own vocabulary"),
    (["data=task", "task=copy", "eval.lengths=[64,128]"],
     "eval.lengths sets how a corpus run's windows are scored; this run trains on a task"),
    (["data=task", "task=copy", "eval.mode=sliding"], "eval.mode sets how a corpus run's"),
    (["data=task", "task.eval_count=5"],
     "task.eval_count is set, but no task is chosen: add data=task task=NAME"),
])
def test_a_bad_task_config_is_one_line(posexp, args, message):
    assert_usage_error(posexp("train", *args, "device=cpu"), message)


def test_posexp_eval_refuses_task_settings_on_a_corpus_run(tmp_path, posexp):
    path = tmp_path / "run"  # what posexp eval reads before it refuses: the saved config
    path.mkdir()
    (path / "config.yaml").write_text(OmegaConf.to_yaml(compose(["device=cpu"])))
    (path / "run.json").write_text('{"status": "completed"}')
    (path / "checkpoint.pt").write_bytes(b"")
    assert_usage_error(posexp("eval", str(path), "task.eval_count=5"),
                       "task.eval_count: this run has no task; it trains on data=stdlib")
    assert_usage_error(posexp("eval", str(path), "eval.task_lengths=[4]"),
                       "eval.task_lengths is set, but this run is not a task run")


def test_posexp_eval_refuses_corpus_settings_on_a_task_run(task_runs, tmp_path, posexp):
    _, trained = task_runs("copy")
    path = copy_run(trained, tmp_path / "out")
    before = (path / "eval.json").read_text()
    assert_usage_error(posexp("eval", str(path), "eval.lengths=[64]"),
                       "eval.lengths sets how a corpus run's windows are scored; this run "
                       "trains on a task (data=task): its lengths are eval.task_lengths")
    assert (path / "eval.json").read_text() == before


def test_the_task_group_is_listed_in_train_help(posexp):
    r = posexp("train", "--help")
    assert r.returncode == 0
    # every registered task, wrapped at 100 columns under the group's name
    tasks = sorted(p.stem for p in (Path(C.CONFIG_DIR) / "task").glob("*.yaml"))
    listed = r.stdout.split("\n  task=")[1].split("\n  hydra/launcher=")[0]
    assert listed.split() == [t + "," for t in tasks[:-1]] + tasks[-1:]


def test_compare_puts_two_task_runs_side_by_side(task_runs, tmp_path):
    (_, a), (_, b) = task_runs("copy"), task_runs("copy", "alibi", seed=1)
    r = in_process(["compare", str(a), str(b)], tmp_path, {})
    assert r.returncode == 0, r.stderr
    pa, pb = ({p["length"]: p for p in read_json(d / "eval.json")["tasks"]} for d in (a, b))
    d = stats.difference_interval((pb[15]["exact"], pb[15]["exact_low"], pb[15]["exact_high"]),
                                  (pa[15]["exact"], pa[15]["exact_low"], pa[15]["exact_high"]))
    row = next(line for line in r.stdout.splitlines() if line.split()[:1] == ["15"])
    assert row.endswith(f"{d.value:+.3f} [{d.low:+.3f}, {d.high:+.3f}]")
    assert "16 (seed 0)" in row
    _, other = task_runs("reverse")
    r = in_process(["compare", str(a), str(other)], tmp_path, {})
    assert "A is trained on copy, B on reverse: their scores are not comparable" in r.stdout
