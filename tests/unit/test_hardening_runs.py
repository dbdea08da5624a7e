"""Issue #28 in this process: the pieces under the CLI (tests/e2e/test_hardening_runs.py runs
the commands).  Every table names the case of the issue it covers: 1 locks on the resolved
directory, 2 the checkpoint is the run's weights, 3 the identity recorded and checked,
4 the code recorded and never mixed, 5 eval.json's numbers in range, 6 no FIFO ever opened,
7 a series never mixes corpora or held-out instances, 8 symbolic links to runs."""
from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posexp import config as C
from posexp import version
from posexp.errors import PosexpError
from posexp.report.series import build_series
from posexp.report.tasks import task_series
from posexp.runs import (
    DAMAGED,
    Run,
    RunResult,
    atomic_write_json,
    code_record,
    load_run,
    run_dirs,
    weights_sha256,
)
from posexp.runs.records import read_eval
from tests.conftest import TINY
from tests.conftest import compose_args as compose
from tests.runs_on_disk import FINGERPRINT, curve_point, eval_file, losses, write_run

NO = "nonoverlapping"


def started_run(path: Path, *overrides: str) -> Run:
    """A run as posexp train starts one (Run.create): config.yaml, and run.json with the
    identity and code it started with."""
    C.register()
    return Run.create(path, C.resolve(compose([*TINY, *overrides])))


def finishes(call: Callable[[], object], fifo: Path | None = None, seconds: float = 10):
    """``call()``'s result or exception, failing the test when it does not return (it opened
    a FIFO: the FIFO is then opened for writing once, so that the thread ends)."""
    done: dict = {}

    def target() -> None:
        try:
            done["result"] = call()
        except BaseException as e:  # handed back to the test
            done["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"{call} did not return: it blocked (on a FIFO?)")
    if "error" in done:
        raise done["error"]
    return done.get("result")


# --- 1: one lock per run, whatever path names it ------------------------------------------
LOCK_PATHS = {
    "1 a symbolic link to the run": lambda run, tmp: tmp / "link",
    "1 . from inside the run": lambda run, tmp: Path("."),
    "1 a path through ..": lambda run, tmp: run.parent / ".." / run.parent.name / run.name,
    "1 a relative path": lambda run, tmp: Path(os.path.relpath(run)),
}


@pytest.mark.parametrize("case", LOCK_PATHS)
def test_the_lock_is_keyed_on_the_resolved_directory(tmp_path, monkeypatch, case):
    run = tmp_path / "out" / "exp" / "rope-L16-s0"
    run.mkdir(parents=True)
    (tmp_path / "link").symlink_to(run)
    if case.startswith("1 ."):
        monkeypatch.chdir(run)
    other = LOCK_PATHS[case](run, tmp_path)
    with Run(run).lock(), pytest.raises(PosexpError, match="is in use by pid"), \
            Run(other).lock():
        pass
    with Run(other).lock():  # released: the same lock, free again
        pass
    assert not (run / ".locks").exists()
    assert sorted(p.name for p in (run.parent / ".locks").iterdir()) == [
        "rope-L16-s0.holder", "rope-L16-s0.lock"]


# --- 2: a checkpoint is scored only as the weights run.json names -------------------------
WEIGHT_ROWS = [
    ("2 no hash recorded (training not finished, an older posexp)", None, False, None),
    ("2 the weights run.json names", "ours", False, None),
    ("2 other weights under the run's name", "ours", True,
     r"checkpoint.pt does not hold the weights .*run.json names \(sha256 [0-9a-f]{12}, "
     r"run.json has [0-9a-f]{12}\); the run is damaged"),
    ("2 a hash that is not a string", 12345, False,
     r"run.json is damaged: 'weights_sha256' is 12345, not a string"),
]


@pytest.mark.parametrize("case,recorded,swapped,refused", WEIGHT_ROWS,
                         ids=[row[0] for row in WEIGHT_ROWS])
def test_a_checkpoint_is_loaded_only_when_it_holds_the_run_weights(tmp_path, case, recorded,
                                                                   swapped, refused):
    import torch

    run = started_run(tmp_path / "run")
    weights = {"a": torch.arange(6.0).reshape(2, 3), "b": torch.tensor(3, dtype=torch.int64)}
    moved = {**weights, "b": torch.tensor(4, dtype=torch.int64)}
    assert weights_sha256(weights) != weights_sha256(moved)  # one value moves the hash
    if recorded is not None:
        run.update(weights_sha256=weights_sha256(weights) if recorded == "ours" else recorded)
    run.save_checkpoint({"model": {**weights, "b": torch.tensor(4)} if swapped else weights})
    if refused is None:
        assert run.load_checkpoint()["model"]["b"] == 3
        return
    with pytest.raises(PosexpError, match=refused):
        run.load_checkpoint()


# --- 3: the identity a run started with -------------------------------------------------
def edit_yaml(key: str, value: object) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        cfg = OmegaConf.load(run / "config.yaml")
        OmegaConf.update(cfg, key, value)
        (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg))

    return edit


def edit_info(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        info = json.loads((run / "run.json").read_text())
        change(info)
        (run / "run.json").write_text(json.dumps(info))

    return edit


IDENTITY_ROWS = [
    ("3 config.yaml as it started", lambda run: None, None),
    ("3 an evaluation setting changed", edit_yaml("eval.lengths", [16, 128]), None),
    ("3 encoding.base edited", edit_yaml("encoding.base", 3.0),
     r"is not the config this run was trained with: it was edited after the run started "
     r"\(encoding\.base: 10000\.0 -> 3\.0\)"),
    ("3 train.lr edited", edit_yaml("train.lr", 0.5), r"\(train\.lr: 0\.002 -> 0\.5\)"),
    ("3 a run from before identity records", edit_info(
        lambda d: [d.pop("identity"), d.pop("identity_sha256")]), None),
    ("3 a key identities gained since, at its legacy value", edit_info(
        lambda d: d.update(identity=(i := {k: v for k, v in d["identity"].items()
                                           if k != "model.init"}),
                           identity_sha256=__import__("posexp").runs.identity_sha256(i))),
     None),
    ("3 the record edited too", edit_info(lambda d: d["identity"].update({"train.lr": 0.5})),
     "its identity record does not match its identity_sha256"),
]


@pytest.mark.parametrize("case,edit,refused", IDENTITY_ROWS,
                         ids=[row[0] for row in IDENTITY_ROWS])
def test_config_yaml_must_hold_the_identity_the_run_started_with(tmp_path, case, edit,
                                                                 refused):
    run = started_run(tmp_path / "out" / "exp" / "rope-L16-s0", "model.init=gpt2")
    assert json.loads((run.path / "run.json").read_text())["identity"] == run.identity()
    edit(run.path)
    if refused is None:
        assert run.check_identity(run.info()) == run.identity()
        return
    with pytest.raises(PosexpError, match=refused):
        run.check_identity(run.info())
    run.finish("completed")
    (run.path / "eval.json").write_text(eval_file([curve_point(NO, 16, losses(2.0))]))
    r = load_run(run.path)  # ls, compare and report read it as damaged, saying why
    assert r.status == DAMAGED and ("config.yaml" in r.reason or "run.json" in r.reason)


def test_an_edit_is_seen_however_quick_and_whatever_its_size(tmp_path):
    """A run's identity is worked out once per text of config.yaml (runs/configs.py): an
    in-place edit of the same size with the old modification time put back -- what a key of
    the file's size and time would miss -- is still seen."""
    run = started_run(tmp_path / "out" / "exp" / "rope-L16-s0")
    file = run.path / "config.yaml"
    before, stat = run.identity(), file.stat()
    text = file.read_text()
    assert "  base: 10000.0\n" in text
    file.write_text(text.replace("  base: 10000.0\n", "  base: 20000.0\n"))
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert file.stat().st_size == stat.st_size
    assert (before["encoding.base"], run.identity()["encoding.base"]) == (10000.0, 20000.0)
    run.identity()["encoding.base"] = 1.0  # what a caller does to its copy stays its own
    assert run.identity()["encoding.base"] == 20000.0


# --- 4: the code a run and its points come from -----------------------------------------
def test_a_module_hash_names_its_source_and_changes_with_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_encoding.py").write_text("SCALE = 1\n")
    version.module_sha256.cache_clear()
    first = version.module_sha256("my_encoding")
    (tmp_path / "my_encoding.py").write_text("SCALE = 2\n")
    version.module_sha256.cache_clear()
    assert version.module_sha256("my_encoding") not in (first, None)
    assert version.module_sha256("no_such_module_here") is None
    assert code_record("my_encoding")["encoding_module"] == "my_encoding"
    assert code_record(None) == {"posexp": version.__version__,
                                 "source_sha256": version.source_sha256()}
    version.module_sha256.cache_clear()


CODE_ROWS = [
    ("4 points of this code: merged", lambda code: code, None),
    ("4 points of another posexp source: refused",
     lambda code: {**code, "source_sha256": "0" * 64}, "holds points scored by other code"),
    ("4 points of no recorded code: refused", lambda code: None,
     "holds points scored by other code \\(unrecorded"),
]


@pytest.mark.parametrize("case,stored,refused", CODE_ROWS, ids=[row[0] for row in CODE_ROWS])
def test_points_of_two_codes_are_never_merged_in_one_eval_json(tmp_path, case, stored,
                                                               refused):
    run = started_run(tmp_path / "run")
    old = curve_point(NO, 16, losses(2.0))
    data = json.loads(eval_file([old]))
    data["code"] = stored(code_record(None))
    (run.path / "eval.json").write_text(json.dumps(data))
    new = curve_point(NO, 32, losses(2.0, seed=1), spans=None)
    if refused:
        with pytest.raises(PosexpError, match=refused):
            run.write_eval([new], None)
        assert json.loads((run.path / "eval.json").read_text()) == data  # untouched
        return
    merged = run.write_eval([new], None)
    assert [p["length"] for p in merged["curve"]] == [16, 32]
    assert merged["code"] == code_record(None)


def test_points_of_other_code_stay_in_eval_json_until_new_points_replace_them(tmp_path):
    """A command stopped between setting the old points aside and writing its first new
    point leaves the run with its old points (of one code), never without points."""
    run = started_run(tmp_path / "run")
    data = {**json.loads(eval_file([curve_point(NO, 16, losses(2.0))])), "code": None}
    (run.path / "eval.json").write_text(json.dumps(data))
    aside = run.restart_eval("other-code")
    assert aside.name.startswith("eval.json.other-code-")
    assert json.loads(aside.read_text()) == data == json.loads(
        (run.path / "eval.json").read_text())  # both there, whole: a stop here loses nothing
    merged = run.write_eval([curve_point(NO, 32, losses(2.0, seed=1))], None)
    assert [p["length"] for p in merged["curve"]] == [32]  # the old code's points not mixed in
    assert merged["code"] == code_record(None)
    assert run.restart_eval("other-code") != aside  # a second one never overwrites the first


# --- 5: eval.json's numbers are in range, or the run is damaged ---------------------------
def point_edit(key: str, value: object, where: str = "curve") -> Callable[[dict], None]:
    return lambda d: d[where][0].update({key: value})


RANGE_ROWS = [
    ("5 NaN perplexity", point_edit("ppl", math.nan), "curve point 1: 'ppl' is nan, not a "
                                                      "finite number > 0"),
    ("5 infinite perplexity", point_edit("ppl", math.inf), "'ppl' is inf, not a finite"),
    ("5 -Infinity loss", point_edit("loss", -math.inf), "'loss' is -inf, not a finite number >= 0"),
    ("5 negative loss", point_edit("loss", -0.5), "'loss' is -0.5, not a finite number >= 0"),
    ("5 perplexity 0", point_edit("ppl", 0), "'ppl' is 0, not a finite number > 0"),
    ("5 perplexity below 0", point_edit("ppl", -3.0), "'ppl' is -3.0, not a finite number > 0"),
    ("5 perplexity not a number", point_edit("ppl", "x"), "'ppl' is 'x', not a number"),
    ("5 infinite interval end", point_edit("ppl_high", math.inf), "'ppl_high' is inf"),
    ("5 interval out of order", lambda d: d["curve"][0].update(ppl_low=9.0, ppl_high=8.0),
     "'ppl_low' (9.0) and 'ppl_high' (8.0) are not an interval, low <= high"),
    ("5 one end of an interval", point_edit("ppl_high", None), "are not an interval"),
    ("5 length 0", point_edit("length", 0), "'length' is 0, not an integer in [1, 2**30]"),
    ("5 length 10**30", point_edit("length", 10**30), "'length' is 100000000000000000000000"),
    ("5 length not an integer", point_edit("length", 16.5), "'length' is 16.5, not an integer"),
    ("5 stride longer than the window", point_edit("stride", 64), "'stride' (64) is longer"),
    ("5 no tokens", point_edit("tokens", 0), "'tokens' is 0, not an integer in [1, 2**40]"),
    ("5 negative seconds", point_edit("seconds", -1.0), "'seconds' is -1.0"),
    ("5 NaN block loss", lambda d: d["curve"][0]["block_loss"].__setitem__(0, math.nan),
     "block_loss and block_tokens are not lists"),
    ("5 RoPE factor 0", point_edit("rope_scaling", {"method": "linear", "factor": 0}),
     "rope_scaling: 'factor' is 0, not a finite number > 0"),
    ("5 Infinity in a per-position loss",
     lambda d: d["per_position"].append({"length": 16, "position": [1.0], "position_end": [2.0],
                                         "loss": [math.inf]}),
     "per_position record 1: position, position_end, loss and loss_se are not lists of "
     "numbers"),
    ("5 NaN under a key no reader checks", lambda d: d.update(note=math.nan),
     "eval.json is damaged: note = nan, not a finite number"),
    ("5 task accuracy above 1", lambda d: d["tasks"].append(task_point(exact=1.5)),
     "task point 1: 'exact' is 1.5, not a number in [0, 1]"),
    ("5 task interval out of order",
     lambda d: d["tasks"].append(task_point(exact_low=0.9, exact_high=0.1)),
     "'exact_low' (0.9) and 'exact_high' (0.1) are not an interval"),
    ("5 task count 0", lambda d: d["tasks"].append(task_point(count=0)),
     "'count' is 0, not an integer >= 1"),
]


def task_point(**changes) -> dict:
    return {"task": "copy", "length": 8, "depth": None, "count": 10, "eval_seed": 0,
            "tokens": 18, "applicable": True, "exact": 0.5, "exact_low": 0.2,
            "exact_high": 0.8, "token_acc": 0.7, "answer_loss": 0.9, **changes}


@pytest.mark.parametrize("case,edit,message", RANGE_ROWS, ids=[row[0] for row in RANGE_ROWS])
def test_numbers_out_of_range_make_eval_json_damaged(tmp_path, case, edit, message):
    data = {**json.loads(eval_file([curve_point(NO, 16, losses(2.0))])), "tasks": []}
    (tmp_path / "eval.json").write_text(json.dumps(data))
    assert read_eval(tmp_path / "eval.json")["curve"]  # as written: whole
    edit(data)
    (tmp_path / "eval.json").write_text(json.dumps(data))  # json writes NaN as NaN
    with pytest.raises(PosexpError) as e:
        read_eval(tmp_path / "eval.json")
    assert str(e.value).startswith(f"{tmp_path / 'eval.json'} is damaged: "), e.value
    assert message in str(e.value)


RUN_RANGE_ROWS = [
    ("5 run.json seq_len 0", {"seq_len": 0}, "'seq_len' is 0, not an integer in [1, 2**30]"),
    ("5 run.json NaN final loss", {"final_train_loss": math.nan},
     "final_train_loss = nan, not a finite number"),
    ("5 run.json seed below 0", {"seed": -1}, "'seed' is -1, not an integer in [0, 2**63 - 1]"),
]


@pytest.mark.parametrize("case,fields,message", RUN_RANGE_ROWS,
                         ids=[row[0] for row in RUN_RANGE_ROWS])
def test_numbers_out_of_range_make_run_json_damaged(tmp_path, case, fields, message):
    path = write_run(tmp_path / "exp" / "rope-L16-s0", ["encoding=rope"],
                     [curve_point(NO, 16, losses(2.0))])
    assert load_run(path).status == "completed"
    edit_info(lambda d: d.update(fields))(path)
    r = load_run(path)
    assert r.status == DAMAGED and message in r.reason, r.reason


def test_json_nested_past_the_stack_is_damaged_not_a_traceback(tmp_path):
    path = write_run(tmp_path / "exp" / "rope-L16-s0", ["encoding=rope"],
                     [curve_point(NO, 16, losses(2.0))])
    (path / "eval.json").write_text("[" * 100_000 + "]" * 100_000)
    r = load_run(path)
    assert r.status == DAMAGED and "eval.json is unreadable" in r.reason
    deep = {"curve": [], "note": json.loads("[" * 500 + "1e999" + "]" * 500)}
    (path / "eval.json").write_text(json.dumps(deep))  # inf, deep down
    with pytest.raises(PosexpError, match=r"note(\[0\]){500} = inf, not a finite number"):
        read_eval(path / "eval.json")


def test_no_run_file_is_ever_written_with_a_nan_or_an_infinity(tmp_path):
    (tmp_path / "run.json").write_text('{"status": "completed"}\n')
    with pytest.raises(PosexpError, match=r"cannot write .*run.json: it would hold a value that "
                                          r"is not a finite number \(curve\[0\]\.ppl = inf\)"):
        atomic_write_json(tmp_path / "run.json", {"curve": [{"ppl": math.inf}]})
    assert (tmp_path / "run.json").read_text() == '{"status": "completed"}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary file left


# --- 6: a FIFO in place of a run file is damaged, never opened ------------------------------
def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def link_to_dev_zero(path: Path) -> None:  # reads without end
    path.symlink_to("/dev/zero")


FIFO_ROWS = [
    ("6 run.json, read back (ls, report)", "run.json", make_fifo, lambda run: load_run(run.path),
     "run.json is damaged: it is a FIFO, not a regular file"),
    ("6 run.json, opened by train, resume, eval", "run.json", make_fifo,
     lambda run: run.previous(), "run.json is damaged: it is a FIFO"),
    ("6 config.yaml", "config.yaml", make_fifo, lambda run: run.config(),
     "config.yaml is damaged: it is a FIFO"),
    ("6 eval.json", "eval.json", make_fifo, lambda run: run.read_eval(),
     "eval.json is damaged: it is a FIFO"),
    ("6 checkpoint.pt", "checkpoint.pt", make_fifo, lambda run: run.load_checkpoint(),
     "checkpoint.pt is damaged: it is a FIFO"),
    ("6 eval (Run.open)", "checkpoint.pt", make_fifo, lambda run: Run.open(run.path),
     "checkpoint.pt is damaged: it is a FIFO"),
    ("6 config.yaml a link to /dev/zero", "config.yaml", link_to_dev_zero,
     lambda run: run.config(), "config.yaml is damaged: it is a device or socket"),
    ("6 run.json a directory", "run.json", Path.mkdir, lambda run: load_run(run.path),
     "run.json is damaged: it is a directory"),
]


@pytest.mark.parametrize("case,name,make,call,message", FIFO_ROWS,
                         ids=[row[0] for row in FIFO_ROWS])
def test_a_fifo_in_place_of_a_run_file_is_damaged_and_never_opened(tmp_path, case, name, make,
                                                                   call, message):
    run = started_run(tmp_path / "out" / "exp" / "rope-L16-s0")
    run.finish("completed")
    (run.path / "checkpoint.pt").write_bytes(b"")
    (run.path / name).unlink(missing_ok=True)
    make(run.path / name)
    try:
        result = finishes(lambda: call(run), run.path / name)
    except PosexpError as e:
        assert message in str(e)
        return
    assert isinstance(result, RunResult) and result.status == DAMAGED, result
    assert message in result.reason


def test_a_fifo_left_for_metrics_or_the_lock_holder_blocks_nothing(tmp_path):
    run = started_run(tmp_path / "out" / "exp" / "rope-L16-s0")
    os.mkfifo(run.path / "metrics.jsonl")
    finishes(lambda: run.resume(0, C.resolve(compose(TINY))), run.path / "metrics.jsonl")
    assert (run.path / "metrics.jsonl").is_file()  # rewritten as a file, without records
    holder = run.path.parent / ".locks" / "rope-L16-s0.holder"
    holder.parent.mkdir()
    os.mkfifo(holder)
    with run.lock(), pytest.raises(PosexpError, match="is in use; wait"):
        os.remove(holder)
        os.mkfifo(holder)  # what a second process finds beside the held lock
        finishes(lambda: Run(run.path).lock().__enter__(), holder)


# --- 7: a series never mixes corpora, tokenizers or held-out instances ---------------------
def corpus_run(root: Path, seed: int, corpus: str = FINGERPRINT, tokenizer: str | None = None):
    path = write_run(root / f"rope-L16-s{seed}", ["encoding=rope", f"seed={seed}"],
                     [curve_point(NO, L, losses(2.0, seed=seed)) for L in (16, 32)],
                     corpus=corpus)
    if tokenizer:
        edit_info(lambda d: d["corpus"].update(tokenizer_fingerprint=tokenizer))(path)
    return load_run(path)


SERIES_ROWS = [
    ("7 one corpus: one series of two seeds", {}, ["rope L=16"]),
    ("7 the corpus edited between seeds", {"corpus": "ab" * 32},
     ["rope L=16 · corpus_fingerprint=7f3e3fa2ed09",
      "rope L=16 · corpus_fingerprint=abababababab"]),
    ("7 the tokenizer edited between seeds", {"tokenizer": "cd" * 32},
     ["rope L=16 · tokenizer_fingerprint=1c31626f568a",
      "rope L=16 · tokenizer_fingerprint=cdcdcdcdcdcd"]),
]


@pytest.mark.parametrize("case,second,labels", SERIES_ROWS, ids=[row[0] for row in SERIES_ROWS])
def test_seeds_of_other_text_are_other_series(tmp_path, case, second, labels):
    runs = [corpus_run(tmp_path, 0), corpus_run(tmp_path, 1, **second)]
    series, _ = build_series(runs)
    assert sorted(s.label for s in series) == labels
    assert sum(len(s.members) for s in series) == 2


def task_run(root: Path, seed: int, eval_seed: int) -> RunResult:
    identity = {"encoding.name": "rope", "train.seq_len": 64, "seed": seed,
                "data.name": "task", "task.name": "copy", "model.d_model": 32}
    info = {"status": "completed", "name": f"copy-s{seed}", "encoding": "rope", "seq_len": 64,
            "seed": seed}
    return RunResult(root / f"copy-s{seed}", info, identity, [], [],
                     [task_point(eval_seed=eval_seed, count=200)])


@pytest.mark.parametrize("case,eval_seeds,labels", [
    ("7 task runs scored on the same instances: one series", (0, 0), ["rope L=64"]),
    ("7 task runs scored on other instances: two series", (0, 3),
     ["rope L=64 · instances=200 of eval seed 0", "rope L=64 · instances=200 of eval seed 3"]),
], ids=lambda v: v if isinstance(v, str) and v.startswith("7") else "")
def test_task_seeds_on_other_instances_are_other_series(tmp_path, case, eval_seeds, labels):
    runs = [task_run(tmp_path, seed, e) for seed, e in enumerate(eval_seeds)]
    series, _ = task_series(runs)
    assert sorted(s.label for s in series) == labels
    assert sum(len(s.members) for s in series) == 2


# --- 8: symbolic links to runs ---------------------------------------------------------------
def link_in(root: Path, outside: Path) -> None:
    (root / "exp" / "linked").symlink_to(outside / "rope-L16-s9")


LINK_ROWS = [
    ("8 a link to a run elsewhere is listed, under its name", link_in,
     ["exp/linked", "exp/rope-L16-s0"]),
    ("8 a link to a run listed anyway counts once",
     lambda root, outside: (root / "exp" / "again").symlink_to(root / "exp" / "rope-L16-s0"),
     ["exp/rope-L16-s0"]),
    ("8 a link back up is not walked again",
     lambda root, outside: (root / "exp" / "up").symlink_to(root), ["exp/rope-L16-s0"]),
    ("8 a link to a directory of runs", lambda root, outside: (root / "more").symlink_to(outside),
     ["exp/rope-L16-s0", "more/rope-L16-s9"]),
    ("8 a link to nothing", lambda root, outside: (root / "exp" / "gone").symlink_to(
        outside / "nothing"), ["exp/rope-L16-s0"]),
    ("8 a link inside a run is not followed into what it links to",
     lambda root, outside: (root / "exp" / "rope-L16-s0" / "data").symlink_to(outside),
     ["exp/rope-L16-s0"]),
]


@pytest.mark.parametrize("case,link,listed", LINK_ROWS, ids=[row[0] for row in LINK_ROWS])
def test_runs_behind_symbolic_links_are_found_once(tmp_path, case, link, listed):
    root, outside = tmp_path / "out", tmp_path / "elsewhere"
    point = [curve_point(NO, 16, losses(2.0))]
    write_run(root / "exp" / "rope-L16-s0", ["encoding=rope"], point)
    write_run(outside / "rope-L16-s9", ["encoding=rope", "seed=9"], point)
    link(root, outside)
    found = run_dirs(root)
    assert [p.relative_to(root).as_posix() for p in found] == listed
    assert all(load_run(p).status == "completed" for p in found)
