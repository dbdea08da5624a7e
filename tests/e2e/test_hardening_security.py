"""Issue #28, case by case, through the real command line: each row names its case, the
files it starts from, the command, and what a careful user wants -- the exit code and the
words of the one line, no module of the user's imported, nothing written outside the
results.  Rows that import or may import code run as processes of their own (a module
imported once in this process would not run its code again); the others run in this
process through cli.main, with training replaced by a guard, so that a broken refusal fails
the row instead of starting a suite."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from posexp import config as C
from tests.conftest import copy_run
from tests.presets import shipped_preset
from tests.runs_on_disk import curve_point, losses, write_run
from tests.unit.test_report_tasks import task_point, task_run, write_task_run

EXAMPLE = Path(__file__).parents[1] / "custom_encoding"
PWNED = "PWNED"  # what every module of these rows writes when it is imported
EVIL = f"import pathlib\npathlib.Path({PWNED!r}).write_text('imported')\n"
PRESETS = Path(C.CONFIG_DIR) / "reproduce"


def preset(name: str, change: Callable[[dict], None]) -> str:
    """A shipped preset, changed, as YAML."""
    tree = shipped_preset(name)
    change(tree)
    return yaml.safe_dump(tree)


def outside(tmp_path: Path) -> str:
    """tmp_path/x/evil named relative to posexp's configs: a --config-name that climbs out."""
    return os.path.relpath(tmp_path / "x" / "evil", C.CONFIG_DIR)


def log_alibi(tmp_path: Path) -> None:
    """docs/encodings.md's worked example, its module marked so that an import shows."""
    shutil.copytree(EXAMPLE / "configs", tmp_path / "configs")
    (tmp_path / "log_alibi.py").write_text((EXAMPLE / "log_alibi.py").read_text() + EVIL)


def linked_dir(tmp_path: Path) -> None:
    """A --config-dir whose encoding/ is a symbolic link to a directory with a _target_."""
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "pwn.yaml").write_text(
        "defaults: [encoding_schema]\nname: rope\n_target_: os.system\n")
    (tmp_path / "cd").mkdir()
    (tmp_path / "cd" / "encoding").symlink_to(tmp_path / "linked")


def task_run_named(tmp_path: Path) -> None:
    """A completed copy run, and a task run whose eval.json names its task with a path."""
    root = tmp_path / "runs"
    write_task_run(task_run(root, "good", "copy", [task_point("copy", 8, 0.9, 0.8, 1.0)]))
    bad = task_run(root, "bad", "copy", [task_point("x/../../../OUTSIDE", 8, 0.9, 0.8, 1.0)])
    write_task_run(bad)


def run_named_report(tmp_path: Path) -> None:
    """out/default holds a completed run named report, beside another."""
    curve = [curve_point("nonoverlapping", n, losses(1.5, seed=n)) for n in (16, 32, 64)]
    write_run(tmp_path / "out" / "default" / "report", ["encoding=rope"], curve)
    write_run(tmp_path / "out" / "default" / "alibi-L16-s0", ["encoding=alibi"], curve)


def files_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


@dataclass
class Case:
    name: str  # the item of issue #28 and what it is
    args: list[str]  # {d}: the working directory; {out}: a --config-name out of the tree
    code: int
    words: list[str]  # in the one line on stderr (code 2), or on stdout (code 0)
    files: dict[str, str] = field(default_factory=dict)  # written under {d} first ({d} too)
    setup: Callable[[Path], None] | None = None
    process: bool = False  # a process of its own: the row may import a module
    env: dict[str, str] = field(default_factory=dict)
    then: Callable[[Path, subprocess.CompletedProcess], None] | None = None


def no_outside_png(d: Path, r: subprocess.CompletedProcess) -> None:
    assert "not included" in r.stderr and "not a task name" in r.stderr, r.stderr
    written = files_under(d)
    assert not any("OUTSIDE" in f for f in written), written
    assert (d / "runs" / "report" / "tasks-copy.png").is_file()
    assert not (d.parent / "OUTSIDE.png").exists()


def run_left_alone(d: Path, r: subprocess.CompletedProcess) -> None:
    assert files_under(d / "out" / "default" / "report") == {"config.yaml", "run.json",
                                                             "eval.json"}


def shows_log_alibi(d: Path, r: subprocess.CompletedProcess) -> None:
    assert "name: log_alibi" in r.stdout, r.stdout


CASES = [
    # 1: an override's value holds a key refused as a dotted key
    Case("1 encoding={name,module} smuggles encoding.module", [
        "train", "--cfg", "job", "encoding={name:evil,module:evilmod}"], 2,
        ["encoding.module names Python code to import", "inside encoding={name:evil"],
        files={"evilmod.py": EVIL}, process=True),
    Case("1 the same as one value of a sweep", [
        "sweep", "--cfg", "job", "encoding={name:evil,module:evilmod},rope"], 2,
        ["encoding.module names Python code to import"], files={"evilmod.py": EVIL},
        process=True),
    Case("1 the same under a package", ["train", "--cfg", "job", "+x@encoding={module:evilmod}"],
         2, ["encoding.module names Python code to import"], files={"evilmod.py": EVIL},
         process=True),
    Case("1 env_set inside a value", ["train", "hydra.job={env_set:{LD_PRELOAD:/x.so}}"], 2,
         ["hydra.job.env_set.LD_PRELOAD is refused"]),
    Case("1 callbacks inside a value", ["train", "hydra={callbacks:{x:{name:y}}}"], 2,
         ["hydra.callbacks cannot be set"]),
    Case("1 parent.* inside a value", ["train", "+x@parent={identity:abc}"], 2,
         ["parent is set by posexp finetune"]),
    # 2: configs from outside posexp's tree and --config-dir
    Case("2 --config-name climbs out of posexp's configs", [
        "train", "--cfg", "job", "--config-name", "{out}"], 2,
        ["is not the name of a config"],
        files={"x/evil.yaml": "defaults: [config, _self_]\nhydra:\n  searchpath: "
                              "[pkg://evilpkg]\n", "evilpkg/__init__.py": EVIL},
        process=True),  # python -m posexp: the working directory is on sys.path
    Case("2 a group's option that is a path", ["train", "--cfg", "job", "encoding=../../x/e"],
         2, ["'../../x/e' is not an option of encoding"]),
    Case("2 a --config-dir file whose defaults climb out", [
        "train", "--cfg", "job", "--config-dir", "cd", "--config-name", "mine"], 2,
        ["cd/mine.yaml lists '../../x/evil' in its defaults"],
        files={"cd/mine.yaml": "defaults: [config, ../../x/evil, _self_]\n",
               "x/evil.yaml": "hydra:\n  searchpath: [pkg://evilpkg]\n",
               "evilpkg/__init__.py": EVIL},
        process=True),
    Case("2 a --config-dir directory behind a symbolic link is scanned too", [
        "train", "--config-dir", "cd", "encoding=pwn"], 2, ["pwn.yaml sets _target_"],
        setup=linked_dir),
    # 3: a record field that names a report file
    Case("3 a task named x/../../../OUTSIDE in eval.json", ["report", "runs"], 0,
         ["1 completed runs, 1 not included"], setup=task_run_named, then=no_outside_png),
    # 4: a preset that writes outside --results-dir
    Case("4 results_dir in a preset's run", ["reproduce", "--preset", "p.yaml"], 2,
         ["p.yaml: run 1: results_dir cannot be set in a preset", "--results-dir DIR"],
         files={"p.yaml": preset("cpu", lambda t: t["runs"][0].append(
             "results_dir={d}/elsewhere"))}),
    Case("4 results_dir in a preset's overrides", ["reproduce", "--preset", "p.yaml"], 2,
         ["p.yaml: overrides: results_dir cannot be set"],
         files={"p.yaml": preset("cpu", lambda t: t["overrides"].append("results_dir=.."))}),
    Case("4 a preset's experiment that is not a plain name", [
        "reproduce", "--preset", "p.yaml"], 2,
        ["p.yaml: experiment must be a plain directory name", "'../../x'"],
        files={"p.yaml": preset("cpu", lambda t: t.update(experiment="../../x"))}),
    Case("4 experiment=../x in a preset's run", ["reproduce", "--preset", "p.yaml"], 2,
         ["p.yaml: run 2: experiment must be a plain directory name"],
         files={"p.yaml": preset("cpu", lambda t: t["runs"][1].append("experiment=../x"))}),
    Case("4 data.cache_dir in a preset's fine-tune", ["reproduce", "--preset", "p.yaml"], 2,
         ["p.yaml: fine-tune 1 overrides: data.cache_dir cannot be set"],
         files={"p.yaml": preset("rope-scaling", lambda t: (
             t["finetunes"][0]["overrides"].append("data.cache_dir={d}/elsewhere")))}),
    Case("4 a preset whose rate its sweep has not chosen", ["reproduce", "--preset", "p.yaml"], 2,
         ["learning_rates.rope is not chosen yet: run the learning-rate sweep"],
         files={"p.yaml": preset("rope-scaling", lambda t: t["learning_rates"].update(
             rope=None))}),
    Case("4 a fine-tune with lr_factor and train.lr", ["reproduce", "--preset", "p.yaml"], 2,
         ["p.yaml: fine-tune 2 sets train.lr and lr_factor; give one"],
         files={"p.yaml": preset("rope-scaling", lambda t: (
             t["finetunes"][1]["overrides"].append("train.lr=0.1")))}),
    # 5: a --config-dir module is imported only to train or score
    Case("5 train --cfg job imports no module", [
        "train", "--cfg", "job", "--config-dir", "configs", "encoding=log_alibi"], 0,
        ["module: log_alibi"], setup=log_alibi, process=True, then=shows_log_alibi),
    Case("5 sweep --cfg job imports no module", [
        "sweep", "--cfg", "job", "--config-dir", "configs", "encoding=log_alibi,alibi"], 0,
        ["# job 2/2"], setup=log_alibi, process=True, then=shows_log_alibi),
    Case("5 train --info imports no module", [
        "train", "--info", "config", "--config-dir", "configs", "encoding=log_alibi"], 0,
        ["log_alibi"], setup=log_alibi, process=True),
    Case("5 a module no --config-dir file names as written", [
        "train", "--cfg", "job", "--config-dir", "cd", "encoding=x"], 2,
        ["encoding.module 'evilmod' is refused: no config file under --config-dir cd names it"],
        files={"cd/encoding/x.yaml": "defaults: [encoding_schema]\nname: x\n"
                                     "module: ${oc.env:MOD}\n", "evilmod.py": EVIL},
        process=True, env={"MOD": "evilmod"}),
    Case("5 a module that would replace posexp's encoding is not imported", [
        "train", "--config-dir", "cd", "encoding=r"], 2, ["rope is posexp's own encoding"],
        files={"cd/encoding/r.yaml": "defaults: [encoding_schema]\nname: rope\n"
                                     "module: evilmod\n", "evilmod.py": EVIL}, process=True),
    # 6: preset thresholds
    Case("6 a factor of .nan", ["reproduce", "--preset", "p.yaml"], 2,
         ["p.yaml: thresholds.factor must be a finite number above 0, got nan"],
         files={"p.yaml": preset("rope-scaling", lambda t: t["thresholds"].update(
             factor=float("nan")))}),
    Case("6 alibi_flat_at: [1.5]", ["reproduce", "--preset", "p.yaml"], 2,
         ["thresholds.alibi_flat_at must be a list of integer multiples of L, each 2 or more"],
         files={"p.yaml": preset("cpu", lambda t: t["thresholds"].update(
             alibi_flat_at=[1.5]))}),
    Case("6 alibi_flat_at: [1], a claim at L itself", ["reproduce", "--preset", "p.yaml"], 2,
         ["thresholds.alibi_flat_at must be a list of integer multiples"],
         files={"p.yaml": preset("cpu", lambda t: t["thresholds"].update(alibi_flat_at=[1]))}),
    Case("6 context_at: [x]", ["reproduce", "--preset", "p.yaml"], 2,
         ["thresholds.context_at must be a list of integer multiples", "['x']"],
         files={"p.yaml": preset("cpu", lambda t: t["thresholds"].update(context_at=["x"]))}),
    Case("6 sinusoidal_blowup_at: 1.5", ["reproduce", "--preset", "p.yaml"], 2,
         ["thresholds.sinusoidal_blowup_at must be a positive integer, got 1.5"],
         files={"p.yaml": preset("cpu", lambda t: t["thresholds"].update(
             sinusoidal_blowup_at=1.5))}),
    Case("6 a margin of .nan", ["reproduce", "--preset", "p.yaml"], 2,
         ["thresholds.alibi_flat must be a mapping of margin"],
         files={"p.yaml": preset("cpu", lambda t: t["thresholds"]["alibi_flat"].update(
             margin=float("nan")))}),
    Case("6 train_seq_len: .inf", ["reproduce", "--preset", "p.yaml"], 2,
         ["train_seq_len must be a positive integer, got inf"],
         files={"p.yaml": preset("cpu", lambda t: t.update(train_seq_len=float("inf")))}),
    Case("6 a list of names holding a number", ["reproduce", "--preset", "p.yaml"], 2,
         ["thresholds.randomized must be a list of names"],
         files={"p.yaml": preset("encodings", lambda t: t["thresholds"].update(
             randomized=[float("nan")]))}),
    # 7: a report never writes into a run
    Case("7 a run named report", ["report", "out/default"], 2,
         ["the report directory out/default/report is the directory of the run 'report'",
          "--out DIR"], setup=run_named_report, then=run_left_alone),
    Case("7 --out inside a run", ["report", "out", "--out", "out/default/report/figs"], 2,
         ["is inside the run directory"], setup=run_named_report, then=run_left_alone),
    Case("7 a preset whose run is named as its report", [
        "reproduce", "--preset", "p.yaml", "--results-dir", "out"], 2,
        ["its report directory out/cpu-L128/report is the directory of one of its runs"],
        files={"p.yaml": preset("cpu", lambda t: (t["runs"][0].append("run_name=report"),
                                                  t.update(seeds=[0])))}),
    # 10: data.source against the data group
    Case("10 data.source=stdlib with data=task", [
        "train", "data=task", "task=copy", "data.source=stdlib"], 2,
        ["data.source=stdlib contradicts data=task", "drop data.source"]),
    Case("10 data.source=task with data=stdlib", ["train", "data.source=task"], 2,
         ["data.source=task contradicts data=stdlib", "data=task task=NAME"]),
]


def reached(*args, **kwargs):
    raise AssertionError("reached training: this row would have run")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_issue_28(case, posexp_process, posexp, tmp_path, monkeypatch):
    from posexp.claims import suite
    from posexp.cli import run_commands

    for name, text in case.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text.replace("{d}", str(tmp_path)))
    if case.setup:
        case.setup(tmp_path)
    args = [a.replace("{d}", str(tmp_path)).replace("{out}", outside(tmp_path))
            for a in case.args]
    env = {k: v.replace("{d}", str(tmp_path)) for k, v in case.env.items()}
    if case.process:
        r = posexp_process(*args, env=env)
    else:
        monkeypatch.setattr(run_commands, "run_job", reached)
        monkeypatch.setattr(run_commands, "launch", reached)
        monkeypatch.setattr(suite, "train_all", reached)
        r = posexp(*args, env=env)
    assert r.returncode == case.code, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    if case.code:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("posexp: error: "), r.stderr
        for word in case.words:
            assert word in lines[0], lines[0]
    else:
        for word in case.words:
            assert word in r.stdout, r.stdout
    assert not (tmp_path / PWNED).exists(), "a module of the user's was imported"
    assert not (tmp_path / "elsewhere").exists(), "written outside the results"
    if case.then:
        case.then(tmp_path, r)


def test_issue_28_10_a_swept_path_names_its_runs(posexp, tmp_path):
    for name in ("a", "b"):
        (tmp_path / "c").mkdir(exist_ok=True)
        (tmp_path / "c" / f"{name}.txt").write_text("words and more words\n" * 4000)
    r = posexp("sweep", "--cfg", "job", "encoding=rope", "data=text",
                    "data.path=c/a.txt,c/b.txt")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("# job ") == 2
    assert "run_name: rope-L64-s0,path=c_a.txt" in r.stdout, r.stdout


# --- 8: help imports no torch ---------------------------------------------------------------
HELP = [["train", "-h"], ["train", "--help", "encoding=alibi"], ["-h"], ["eval", "-h"],
        ["sweep", "-h"], ["report", "-h"], ["reproduce", "-h"], ["resume", "-h"],
        ["finetune", "-h"], ["ls", "-h"], ["compare", "-h"]]


@pytest.mark.parametrize("args", HELP, ids=[" ".join(a) for a in HELP])
def test_issue_28_8_help_imports_no_torch(args, tmp_path):
    code = ("import sys\nfrom posexp.cli import main\ntry:\n    main(sys.argv[1:])\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "print('torch' in sys.modules, file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "False", r.stderr
    assert "Usage" in r.stdout or "posexp train:" in r.stdout


# --- 9: a run named from inside it ----------------------------------------------------------
def test_issue_28_9_resume_eval_and_finetune_of_dot(trained, posexp, tmp_path):
    result, run = trained("rope")
    assert result.returncode == 0, result.stderr
    home = copy_run(run, tmp_path / "res")
    before = files_under(home)
    r = posexp("resume", ".", cwd=home)
    assert r.returncode == 0, r.stderr
    assert "experiment ''" not in r.stderr
    r = posexp("eval", ".", "eval.lengths=[16]", cwd=home)
    assert r.returncode == 0, r.stderr
    r = posexp("finetune", ".", "--cfg", "job", cwd=home)
    assert r.returncode == 0, r.stderr
    shown = yaml.safe_load(r.stdout)
    assert shown["run_name"] == "rope-L16-s0-ft" and shown["experiment"] == "default"
    assert Path(home, shown["results_dir"]).resolve() == (tmp_path / "res").resolve()
    new = files_under(home) - before
    assert not any(f.startswith(("results", "res", "default")) for f in new), new
    assert json.loads((home / "run.json").read_text())["status"] == "completed"
