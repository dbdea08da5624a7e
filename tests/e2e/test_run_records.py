"""Run records: a completed run without its checkpoint, as results/.gitignore commits it.
Readers (ls, compare, report, the API, reproduce's judging) take it as any completed run;
train skips it; what needs its weights (eval, resume, finetune, load_model, scoring points
it lacks) refuses it in one line that names the command that trains it again -- and that
command, run, gives the run's weights again."""

import json
import shlex
import shutil

import pytest
import torch

import posexp as api
from posexp import config as C
from posexp.errors import PosexpError
from tests.conftest import TINY, copy_run, in_process, read_json
from tests.unit.test_reproduce import SMALL

C.register()

RECORD_LINE = "is a run record without its checkpoint (checkpoint.pt is missing)"


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, cache_dir):
    """posexp train encoding=rope *TINY, once for the module, with its checkpoint."""
    root = tmp_path_factory.mktemp("records")
    r = in_process(["train", "encoding=rope", *TINY, "results_dir=out"], root,
                   {"POSEXP_CACHE": str(cache_dir)})
    assert r.returncode == 0, r.stderr
    return root / "out" / "default" / "rope-L16-s0"


@pytest.fixture
def record(trained_run, tmp_path):
    """A copy of the run, at tmp_path/out/default/rope-L16-s0, without its checkpoint."""
    run = copy_run(trained_run, tmp_path / "out")
    (run / "checkpoint.pt").unlink()
    return run


def files_of(run):
    return {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}


def refused(r, needs: str) -> str:
    """The one line a record is refused with: exit 1, what needed the weights, and the
    command that trains them again (returned)."""
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert RECORD_LINE in lines[0] and f"{needs} needs the trained weights" in lines[0]
    return lines[0].split("train them again with: ")[1]


def test_readers_take_a_record_as_the_run_it_was(posexp, trained_run, record, tmp_path):
    full = copy_run(trained_run, tmp_path / "full")
    ls = posexp("ls", "out")
    assert ls.returncode == 0, ls.stderr
    line = next(x for x in ls.stdout.splitlines() if "rope-L16-s0" in x)
    assert "completed" in line and line.split("completed")[1] in \
        posexp("ls", "full").stdout
    cmp = posexp("compare", str(full), str(record))
    assert cmp.returncode == 0, cmp.stderr
    assert "1.000 [1.000, 1.000]" in cmp.stdout
    rep = posexp("report", "out")
    assert rep.returncode == 0, rep.stderr
    assert "1 completed runs, 0 not included" in rep.stdout
    assert api.load_run(record).status == "completed"
    assert [{k: v for k, v in row.items() if k != "run"} for row in api.curves(record)] \
        == [{k: v for k, v in row.items() if k != "run"} for row in api.curves(full)]


def test_train_skips_a_complete_record_and_needs_weights_for_missing_points(posexp,
                                                                           record):
    before = files_of(record)
    r = posexp("train", "encoding=rope", *TINY, "results_dir=out")
    assert r.returncode == 0, r.stderr
    assert "already completed" in r.stderr and "train length" in r.stdout
    assert files_of(record) == before  # no checkpoint, nothing rescored
    more = [a for a in TINY if not a.startswith("eval.lengths")] + ["eval.lengths=[16,32,64,128]"]
    r = posexp("train", "encoding=rope", *more, "results_dir=out")
    refused(r, "scoring the 1 nonoverlapping point(s) at length 128 that eval.json lacks")
    assert files_of(record) == before


@pytest.mark.parametrize("args", [("eval", "{run}"), ("resume", "{run}"),
                                  ("finetune", "{run}", "train.tokens=2048")])
def test_what_needs_the_weights_refuses_a_record(posexp, record, args):
    before = files_of(record)
    r = posexp(*(a.format(run=record) for a in args))
    command = refused(r, f"posexp {args[0]}")
    assert command.startswith("posexp train encoding=rope ")
    assert command.endswith(" train.resume=false")
    assert files_of(record) == before


def test_load_model_refuses_a_record(record):
    with pytest.raises(PosexpError, match=r"posexp\.load_model needs the trained weights; "
                                          "train them again with: posexp train"):
        api.load_model(record)


def test_the_command_a_record_names_trains_the_same_weights(posexp, trained_run, record):
    command = refused(posexp("eval", str(record)), "posexp eval")
    r = posexp(*shlex.split(command)[1:])
    assert r.returncode == 0, r.stderr
    assert read_json(record / "run.json")["weights_sha256"] == \
        read_json(trained_run / "run.json")["weights_sha256"]
    assert (record / "checkpoint.pt").is_file()
    aside = list((record.parent / ".replaced").iterdir())
    assert len(aside) == 1 and not (aside[0] / "checkpoint.pt").exists()


def test_a_hand_edited_record_is_refused_as_a_run_is(posexp, record):
    config = record / "config.yaml"
    config.write_text(config.read_text().replace("base: 10000.0", "base: 3.0"))
    for r in (posexp("eval", str(record)),
              posexp("train", "encoding=rope", *TINY, "results_dir=out")):
        assert r.returncode == 1 and "it was edited after the run started" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert "damaged" in posexp("ls", "out").stdout


def test_a_damaged_eval_json_of_a_record_is_kept_not_set_aside(posexp, record):
    data = read_json(record / "eval.json")
    data["curve"][0]["ppl"] = -1.0
    (record / "eval.json").write_text(json.dumps(data))
    r = posexp("train", "encoding=rope", *TINY, "results_dir=out")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "eval.json was edited after posexp wrote it" in r.stderr, r.stderr
    assert "restore its eval.json" in r.stderr
    assert read_json(record / "eval.json") == data
    assert not list(record.glob("eval.json.*"))


def test_a_record_beside_another_runs_checkpoint_is_refused(posexp, trained_run, record):
    state = torch.load(trained_run / "checkpoint.pt", weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name] = state["model"][name] + 1  # the weights of another run
    torch.save(state, record / "checkpoint.pt")
    r = posexp("eval", str(record))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "does not hold the weights" in r.stderr
    with pytest.raises(PosexpError, match="does not hold the weights"):
        api.load_model(record)


def test_reproduce_judges_records_without_training(posexp, tmp_path):
    preset = tmp_path / "tiny-rope.yaml"
    preset.write_text(json.dumps({
        "claims": "rope-scaling", "experiment": "claims", "train_seq_len": 16, "seeds": [0],
        "sliding": False,
        "overrides": ["train.seq_len=16", *SMALL, "train.tokens=4096", "train.batch_tokens=128",
                      "eval.tokens=256", "eval.lengths=[16,64]", "device=cpu"],
        "runs": [["encoding=rope", "eval.rope_scaling=yarn", "eval.rope_scaling.factor=4"]],
        "finetunes": [{"parent": ["encoding=rope"], "overrides": [
            "train.seq_len=64", "train.tokens=2048", "encoding.scaling=yarn",
            "encoding.scaling.factor=4"]}],
        "thresholds": {"factor": 4, "finetunes": {"short": 2048}, **{
            name: {"margin": m, "reason": "tiny"} for name, m in (
                ("better", 0.0), ("pi_cost", 0.05), ("finetune_gap", 0.05), ("tie", 0.02))}}}))
    args = ("reproduce", "--preset", str(preset), "--results-dir", "out")
    r = posexp(*args)
    assert r.returncode == 0, r.stderr
    root = tmp_path / "out" / "claims"
    verdicts = read_json(root / "report" / "verdicts.json")["verdicts"]
    checkpoints = list(root.glob("*/checkpoint.pt"))
    assert len(checkpoints) == 2
    for c in checkpoints:
        c.unlink()
    shutil.rmtree(root / "report")
    r = posexp(*args)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("already completed") == 2
    assert not list(root.glob("*/checkpoint.pt"))
    assert read_json(root / "report" / "verdicts.json")["verdicts"] == verdicts


def test_a_fine_tune_record_names_the_fine_tune_that_trains_it_again(posexp, trained_run,
                                                                     tmp_path):
    parent = copy_run(trained_run, tmp_path / "out")
    r = posexp("finetune", str(parent), "train.seq_len=32", "train.tokens=2048",
                    "encoding.scaling=yarn", "encoding.scaling.factor=2")
    assert r.returncode == 0, r.stderr
    tune = parent.with_name("rope-L16-s0-ft-L32-yarn2-2048tok")
    weights = read_json(tune / "run.json")["weights_sha256"]
    (tune / "checkpoint.pt").unlink()
    command = refused(posexp("eval", str(tune)), "posexp eval")
    assert command.startswith(f"posexp finetune {parent} ")
    assert "encoding.scaling.method=yarn" in command and "beta_fast" not in command
    r = posexp(*shlex.split(command)[1:])
    assert r.returncode == 0, r.stderr
    assert read_json(tune / "run.json")["weights_sha256"] == weights
