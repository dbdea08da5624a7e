"""Issue #28 through the real CLI: a number belongs to its run.  Each row of a table names a
case of the issue (its number first), damages a copy of a trained run the way a user could,
runs one command and says what a careful user wants: one line and the exit code, and the
run's points not replaced, mixed or lost -- or the right behaviour, where there is one.

Cases: 1 the run lock through a symlink, ``.`` or ``resume link``; 2 a checkpoint that is
not the run's weights; 3 a hand-edited config.yaml; 4 code changed since the run (an
encoding module of the user's, posexp's own source); 5 numbers out of range in eval.json;
6 a FIFO in place of a run file; 7 a report series of runs of different corpora;
8 a symbolic link to a run under ls and report."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from posexp.runs import Run
from posexp.runs.records import contents_sha256
from tests import forkserver
from tests.conftest import TINY, copy_run, in_process, read_json
from tests.runs_on_disk import FINGERPRINT, curve_point, losses, write_run

EXAMPLE = Path(__file__).parents[1] / "custom_encoding"
WIDER = [a for a in TINY if not a.startswith("eval.lengths")] + ["eval.lengths=[16,32,64,128]"]
NAME = "rope-L16-s0"


def cli(cache_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``posexp ARGS`` as a process of its own; a command that hangs (a FIFO opened) fails
    the test after two minutes instead of holding the suite."""
    env = {**os.environ, "POSEXP_CACHE": str(cache_dir)}
    env.pop("POSEXP_DEBUG", None)
    return forkserver.run(list(args), cwd=cwd, env=env, timeout=120)


def strict_json(path: Path) -> dict:
    """A JSON file as any JSON reader takes it: NaN and infinities refused."""
    def refuse(constant: str) -> None:
        raise AssertionError(f"{path} holds {constant}")

    return json.loads(path.read_text(), parse_constant=refuse)


# --- what a row does to its copy of the run -------------------------------------------
def edit_json(name: str, change: Callable[[dict], None]) -> Callable[[Path], None]:
    """The file as a writer other than this posexp left it: an eval.json keeps a sha256 of
    its contents that matches, so the check under test is the one that answers (a hand
    edit is its own case, tests/unit/test_run_records.py)."""
    def edit(run: Path) -> None:
        data = json.loads((run / name).read_text())
        change(data)
        if "sha256" in data:
            data["sha256"] = contents_sha256(data)
        (run / name).write_text(json.dumps(data))  # json writes NaN and Infinity as given

    return edit


def point_value(key: str, value: object, index: int = 0) -> Callable[[Path], None]:
    return edit_json("eval.json", lambda d: d["curve"][index].update({key: value}))


def edit_config(key: str, value: object) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        cfg = OmegaConf.load(run / "config.yaml")
        assert OmegaConf.select(cfg, key) not in (None, value)
        OmegaConf.update(cfg, key, value)
        (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg))

    return edit


def other_weights(run: Path) -> None:
    """The checkpoint of a run trained otherwise (its weights moved), under the run's name."""
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    gen = torch.Generator().manual_seed(1)
    state["model"] = {k: v + 0.5 * torch.randn(v.shape, generator=gen) if v.is_floating_point()
                      else v for k, v in state["model"].items()}
    torch.save(state, run / "checkpoint.pt")


def fifo(name: str) -> Callable[[Path], None]:
    def make(run: Path) -> None:
        (run / name).unlink()
        os.mkfifo(run / name)

    return make


def interrupted(run: Path) -> None:
    edit_json("run.json", lambda d: d.update(status="interrupted"))(run)


def both(*edits: Callable[[Path], None]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        for e in edits:
            e(run)

    return edit


def other_code(run: Path) -> None:
    """eval.json as scored by another posexp source."""
    edit_json("eval.json", lambda d: d["code"].update(source_sha256="0" * 64))(run)


def linked_away(run: Path) -> None:
    """The run moved elsewhere, and a symbolic link to it where it was."""
    away = run.parents[2] / "elsewhere" / run.name
    away.parent.mkdir()
    run.rename(away)
    run.symlink_to(away)


def nothing(run: Path) -> None:
    pass


@dataclass(frozen=True)
class Row:
    case: str
    damage: Callable[[Path], None]
    args: tuple[str, ...]  # {run}: the run, {link}: a symbolic link to it, {out}: results_dir
    code: int
    message: str  # in the one line on stderr (or in stdout, with ``stdout``)
    stdout: bool = False
    locked: bool = False  # this test holds the run's lock while the command runs
    inside: bool = False  # the command runs from inside the run directory
    kept: bool = True  # eval.json is the same file afterwards
    after: Callable[[Path], None] = nothing  # what else must hold of the run afterwards
    # a process of its own: a FIFO could hang the command (the timeout fails the test then)
    process: bool = False


def scored_again_with_this_code(run: Path) -> None:
    data = strict_json(run / "eval.json")
    assert data["code"]["source_sha256"] not in ("0" * 64, None)  # this process's code
    assert sorted(p["length"] for p in data["curve"]) == [16, 32, 64, 128]
    [aside] = run.glob("eval.json.other-code-*")
    assert read_json(aside)["code"]["source_sha256"] == "0" * 64  # kept, whole


def rescore_stopped(run: Path) -> None:
    """A scoring again under new code stopped after its first point: the old eval.json (of
    another source) copied aside, the new one holding length 16 alone, of this code."""
    code = read_json(run / "eval.json")["code"]
    other_code(run)
    shutil.copyfile(run / "eval.json", run / "eval.json.other-code-20260101T000000Z")
    edit_json("eval.json", lambda d: d.update(
        code=code, curve=[p for p in d["curve"] if p["length"] == 16]))(run)


def the_copy_s_points_scored_again(run: Path) -> None:
    """The points the stopped scoring had not reached are scored now, to the values the
    copy holds (the numbers' code is the same here)."""
    data = strict_json(run / "eval.json")
    [aside] = run.glob("eval.json.other-code-*")
    old = {p["length"]: p["loss"] for p in read_json(aside)["curve"]}
    assert {p["length"]: p["loss"] for p in data["curve"]} == old
    assert data["code"]["source_sha256"] != "0" * 64


def held_points_scored_again_beside_the_new(run: Path) -> None:
    """A point asked for under other code: every point eval.json held is scored again
    with this code beside it (one run's points come from one code), none dropped, and
    since the numbers' code is the same here, to the same values."""
    data = strict_json(run / "eval.json")
    assert data["code"]["source_sha256"] not in ("0" * 64, None)
    [aside] = run.glob("eval.json.other-code-*")
    old = {(p["mode"], p["length"]): p["loss"] for p in read_json(aside)["curve"]}
    new = {(p["mode"], p["length"]): p["loss"] for p in data["curve"]}
    assert sorted(new) == [*sorted(old), ("sliding", 128)]
    assert {k: new[k] for k in old} == old


def resumed_with_both_codes(run: Path) -> None:
    info = read_json(run / "run.json")
    assert info["status"] == "completed"
    assert info["code"]["source_sha256"] == "0" * 64  # the code it started with, kept
    assert [c["source_sha256"] != "0" * 64 for c in info["resumed_code"]] == [True]


def damaged_set_aside_and_scored(run: Path) -> None:
    assert [p["length"] for p in strict_json(run / "eval.json")["curve"]] == [16, 32, 64]
    assert len(list(run.glob("eval.json.damaged-*"))) == 1


ROWS = [
    Row("1 eval through a symlink while the run is locked", nothing, ("eval", "{link}"), 1,
        "is in use", locked=True),
    Row("1 eval . from inside the run while it is locked", nothing, ("eval", "."), 1,
        "is in use", locked=True, inside=True),
    Row("1 resume through a symlink while the run is locked", interrupted,
        ("resume", "{link}"), 1, "is in use", locked=True),
    Row("2 eval of a checkpoint that is not the run's weights", other_weights,
        ("eval", "{run}"), 1, "does not hold the weights"),
    Row("2 train again, a point missing, the checkpoint not the run's weights", other_weights,
        ("train", "encoding=rope", *WIDER, "results_dir=out"), 1,
        "does not hold the weights"),
    Row("2 finetune of a checkpoint that is not the run's weights", other_weights,
        ("finetune", "{run}", "train.seq_len=32"), 1, "does not hold the weights"),
    Row("3 eval after config.yaml was edited (base: 3.0)",
        edit_config("encoding.base", 3.0), ("eval", "{run}"), 1,
        "config.yaml is not the config this run was trained with: it was edited after the "
        "run started (encoding.base: 10000.0 -> 3.0)"),
    Row("3 resume after config.yaml was edited (lr)",
        both(interrupted, edit_config("train.lr", 0.5)), ("resume", "{run}"), 1,
        "it was edited after the run started (train.lr: "),
    Row("3 ls of a run whose config.yaml was edited", edit_config("encoding.base", 3.0),
        ("ls", "out"), 0, "config.yaml is not the config this run was trained", stdout=True),
    Row("4 eval after posexp's source changed: the old points set aside, all scored again",
        other_code, ("eval", "{run}", "eval.lengths=[16,32,64,128]"), 0,
        "eval.json holds points scored by other code", kept=False,
        after=scored_again_with_this_code),
    Row("4 eval of a new mode after posexp's source changed: the old points scored again too",
        other_code, ("eval", "{run}", "eval.lengths=[128]", "eval.mode=sliding"), 0,
        "and the 3 others it held, are scored again with this code", kept=False,
        after=held_points_scored_again_beside_the_new),
    Row("4 train again after a scoring again was stopped: the copy's points it lacks scored",
        rescore_stopped, ("train", "encoding=rope", *[a for a in TINY if "eval.lengths" not in a],
                          "eval.lengths=[16]", "results_dir=out"), 0,
        "holds 2 point(s) eval.json lacks (its scoring again was stopped)", kept=False,
        after=the_copy_s_points_scored_again),
    Row("4 train again after posexp's source changed, nothing missing: skipped, untouched",
        other_code, ("train", "encoding=rope", *TINY, "results_dir=out"), 0,
        "already completed, and eval.json holds every point asked for"),
    Row("4 resume after posexp's source changed: a warning, both codes in run.json",
        both(interrupted, edit_json("run.json", lambda d: d["code"].update(
            source_sha256="0" * 64))), ("resume", "{run}"), 0,
        "posexp: warning: out/default/rope-L16-s0: posexp's source has changed since the run "
        "started", kept=False, after=resumed_with_both_codes),
    Row("5 ls of a NaN perplexity", point_value("ppl", float("nan")), ("ls", "out"), 0,
        "damaged  eval.json is damaged: curve point 1: 'ppl' is nan, not a finite",
        stdout=True),
    Row("5 ls of an infinite interval", point_value("ppl_high", float("inf")), ("ls", "out"), 0,
        "curve point 1: 'ppl_high' is inf, not a finite", stdout=True),
    Row("5 ls of a perplexity of 0", point_value("ppl", 0.0), ("ls", "out"), 0,
        "curve point 1: 'ppl' is 0.0, not a finite", stdout=True),
    Row("5 report of a negative perplexity", point_value("ppl", -2.0), ("report", "out"), 0,
        "curve point 1: 'ppl' is -2.0, not a finite number > 0"),
    Row("5 report of length 0", point_value("length", 0), ("report", "out"), 0,
        "curve point 1: 'length' is 0, not an integer in [1, 2**30]"),
    Row("5 report of length 10**30", point_value("length", 10**30), ("report", "out"), 0,
        "curve point 1: 'length' is 1000000000000000000000000000000, not an integer in"),
    Row("5 report of ppl_low above ppl_high", point_value("ppl_low", 1e6), ("report", "out"),
        0, "curve point 1: 'ppl_low' (1000000.0) and 'ppl_high' ("),
    Row("5 compare with a run holding -Infinity", point_value("loss", float("-inf")),
        ("compare", "{run}", "{run}"), 2, "'loss' is -inf, not a finite number >= 0"),
    Row("5 report of a run with an infinite perplexity", point_value("ppl", float("inf")),
        ("report", "out"), 0, "not included: out/default/rope-L16-s0/eval.json is damaged: "
        "curve point 1: 'ppl' is inf"),
    Row("5 eval of a run whose eval.json holds Infinity where no new point lands",
        edit_json("eval.json", lambda d: d["per_position"][0]["loss"].__setitem__(
            0, float("inf"))), ("eval", "{run}"), 0, "kept as eval.json.damaged-",
        kept=False, after=damaged_set_aside_and_scored),
    Row("6 eval of a run whose run.json is a FIFO", fifo("run.json"), ("eval", "{run}"), 1,
        "run.json is damaged: it is a FIFO, not a regular file", process=True),
    Row("6 resume of a run whose run.json is a FIFO", fifo("run.json"), ("resume", "{run}"), 1,
        "run.json is damaged: it is a FIFO", process=True),
    Row("6 train again on a run whose run.json is a FIFO", fifo("run.json"),
        ("train", "encoding=rope", *TINY, "results_dir=out"), 1,
        "run.json is damaged: it is a FIFO", process=True),
    Row("6 ls of a run whose run.json is a FIFO", fifo("run.json"), ("ls", "out"), 0,
        "damaged  run.json is damaged: it is a FIFO, not a regular file", stdout=True,
        process=True),
    Row("6 eval of a run whose checkpoint.pt is a FIFO", fifo("checkpoint.pt"),
        ("eval", "{run}"), 1, "checkpoint.pt is damaged: it is a FIFO", process=True),
    Row("6 finetune of a run whose checkpoint.pt is a FIFO", fifo("checkpoint.pt"),
        ("finetune", "{run}", "train.seq_len=32"), 1, "checkpoint.pt is damaged: it is a FIFO",
        process=True),
    Row("8 ls of a run that is a symbolic link", linked_away, ("ls", "out"), 0,
        f"default/{NAME}  rope", stdout=True),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.case for row in ROWS])
def test_issue_28_through_the_cli(trained, cache_dir, tmp_path, row):
    result, source = trained("rope")
    assert result.returncode == 0, result.stderr
    run = copy_run(source, tmp_path / "out")
    (tmp_path / "link").symlink_to(run)
    row.damage(run)
    before = (run / "eval.json").read_bytes() if (run / "eval.json").is_file() else None
    args = [a.format(run=run.relative_to(tmp_path), link="link", out="out") for a in row.args]
    cwd = run if row.inside else tmp_path
    if row.locked:  # held by this process: the command is another
        with Run(run).lock():
            r = cli(cache_dir, cwd, *args)
    elif row.process:
        r = cli(cache_dir, cwd, *args)
    else:
        r = in_process(args, cwd, {"POSEXP_CACHE": str(cache_dir)})
    assert r.returncode == row.code, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    if row.stdout:
        assert row.message in r.stdout, r.stdout
    elif row.code:
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("posexp: error: "), r.stderr
        assert row.message in r.stderr, r.stderr
    else:
        assert row.message in r.stderr, r.stderr
    assert not (run / ".locks").exists()  # never a lock inside a run
    if row.kept and before is not None:
        assert (run / "eval.json").read_bytes() == before
    row.after(run)


# --- 4: an encoding module of the user's edited after its run trained --------------------
@pytest.fixture(scope="module")
def custom_project(cache_dir, tmp_path_factory) -> Path:
    """A directory of the user's own (the module beside configs/) with a run trained."""
    project = tmp_path_factory.mktemp("custom")
    shutil.copy(EXAMPLE / "log_alibi.py", project)
    shutil.copytree(EXAMPLE / "configs", project / "configs")
    r = cli(cache_dir, project, "train", "--config-dir", "configs", "encoding=log_alibi", *TINY)
    assert r.returncode == 0, r.stderr
    return project


CUSTOM = "results/default/log_alibi-L16-s0"
MODULE_ROWS = [
    ("4 train again after the module was edited: not skipped",
     ("train", "--config-dir", "configs", "encoding=log_alibi", *TINY)),
    ("4 eval after the module was edited", ("eval", CUSTOM, "eval.lengths=[128]")),
    ("4 resume after the module was edited", ("resume", CUSTOM)),
    ("4 finetune after the module was edited", ("finetune", CUSTOM, "train.seq_len=32")),
]


@pytest.mark.parametrize("case,args", MODULE_ROWS, ids=[case for case, _ in MODULE_ROWS])
def test_issue_28_an_edited_encoding_module(custom_project, cache_dir, tmp_path, case, args):
    project = tmp_path / "project"
    shutil.copytree(custom_project, project, symlinks=True)
    module = project / "log_alibi.py"
    module.write_text(module.read_text().replace("torch.log1p(distance.float())",
                                                 "distance.float()"))
    before = (project / CUSTOM / "eval.json").read_bytes()
    r = cli(cache_dir, project, *args)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1, r.stderr
    assert "the encoding module log_alibi has changed since" in r.stderr
    assert "its weights belong to the old code" in r.stderr
    assert (project / CUSTOM / "eval.json").read_bytes() == before
    assert not (project / f"{CUSTOM}-ft-L32").exists()


# --- 7: seeds trained on different text are not one series --------------------------------
def test_issue_28_a_corpus_edited_between_seeds_makes_two_series(cache_dir, tmp_path):
    for seed, corpus in ((0, FINGERPRINT), (1, "ab" * 32)):
        write_run(tmp_path / "out" / "exp" / f"rope-L16-s{seed}", ["encoding=rope",
                  f"seed={seed}"], [curve_point("nonoverlapping", L, losses(2.0, seed=seed))
                                    for L in (16, 32)], corpus=corpus)
    r = cli(cache_dir, tmp_path, "report", "out")
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "out" / "report" / "summary.csv") as fh:
        series = {row["seed"]: row["series"] for row in csv.DictReader(fh)}
    assert series == {"0": "rope L=16 · corpus_fingerprint=7f3e3fa2ed09",
                      "1": "rope L=16 · corpus_fingerprint=abababababab"}
