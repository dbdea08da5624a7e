"""One shape for every extension: a throwaway encoding, corpus kind, task, RoPE scaling
method, claim and figure, each added the way docs/architecture.md says (one entry in its
registry plus its config), appear in sweep, eval, report and reproduce with no other edit."""
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import TINY, in_process, read_json

EXAMPLE = Path(__file__).parents[1] / "custom_encoding"


TASK_SMALL = ["model.d_model=32", "model.n_layer=1", "model.n_head=2", "train.seq_len=32",
              "train.tokens=4096", "train.batch_tokens=256", "task.eval_count=16",
              "device=cpu"]


@pytest.fixture
def registries():
    """Every registry as it was, after a test that adds to them."""
    from posexp import scaling
    from posexp.claims import CLAIM_SETS
    from posexp.data.kinds import KINDS
    from posexp.data.tasks import TASKS
    from posexp.encodings import ENCODINGS
    from posexp.report import FIGURES

    saved = [(registry, dict(registry)) for registry in
             (scaling.METHODS, CLAIM_SETS, TASKS, ENCODINGS, KINDS)]
    figures = list(FIGURES)
    yield
    for registry, content in saved:
        registry.clear()
        registry.update(content)
    FIGURES[:] = figures
    sys.modules.pop("log_alibi", None)  # the encoding's module, imported from the project


def add_task(configs: Path) -> None:
    """mirror: the letters, then the letters backwards -- a Task and its config file."""
    from posexp.data.tasks import register_task
    from posexp.data.tasks.generators import _SymbolTask

    class MirrorTask(_SymbolTask):
        name, task_id, length_unit = "mirror", 90, "letters"
        description = "the n letters of the prompt, then the same letters backwards"

        def tokens_for(self, length: int) -> int:
            return 3 * length + 2

        @staticmethod
        def transform(symbols: np.ndarray) -> np.ndarray:
            return np.concatenate([symbols, symbols[::-1]])

    register_task(MirrorTask())
    (configs / "task").mkdir()
    (configs / "task" / "mirror.yaml").write_text("defaults:\n  - task_schema\nname: mirror\n")


def add_corpus_kind(configs: Path) -> None:
    """lines: each line of one local file a document -- a reader registered with the keys it
    reads and its check, and its config file."""
    from posexp.data.kinds import CorpusKind, register_corpus_kind
    from posexp.data.source import Source, in_validation
    from posexp.errors import UsageError

    def open_lines(d) -> Source:
        lines = Path(d.path).read_text().splitlines()
        named = [(f"line {i}", line.encode()) for i, line in enumerate(lines) if line]

        def split(val: bool):
            return lambda: iter([[text] for name, text in named
                                 if in_validation(name, d.val_fraction) == val])
        return Source(d.name, {"train": split(False), "val": split(True)})

    def check(d) -> None:
        if not d["path"]:
            raise UsageError("data=lines needs data.path=FILE")

    register_corpus_kind(CorpusKind("lines", open_lines, ("path",), ("path",), check))
    (configs / "data").mkdir()
    (configs / "data" / "lines.yaml").write_text(
        "defaults:\n  - data_schema\nname: lines\nval_fraction: 0.2\n")


def halved(s, d: int, base: float, L: int, T: int):
    """The halve method's formula: every RoPE frequency halved."""
    from posexp.encodings.rope_scaling import plain_inv_freq

    return plain_inv_freq(d, base) / 2, 1.0


def add_scaling_method() -> None:
    """halve: a table entry naming its formula, a function of this module."""
    from posexp import scaling

    scaling.METHODS["halve"] = scaling.Method("halve", "halved", "a test's own",
                                              formula=f"{__name__}:halved")


def add_claim() -> None:
    """A claim set of one claim: log_alibi is no worse than ALiBi at L, by a margin."""
    from posexp.claims import Claim, ClaimSet, CurveRef, Test, register_claim_set
    from posexp.claims.base import Margin, at, no_higher

    @dataclass
    class Thresholds:
        tie: Margin

    def sections(preset, th: Thresholds):
        L, tie = int(preset.train_seq_len), th.tie
        mine, alibi = CurveRef("log_alibi", L), CurveRef("alibi", L)
        return [("Throwaway", [Claim("log_alibi is about as good as ALiBi at L", "a test",
                                     "a tiny model", tie.reason, [mine, alibi],
                                     [Test("log_alibi/alibi ppl(L)", at(mine, L, alibi, L),
                                           no_higher(tie.margin))])])]

    register_claim_set(ClaimSet("throwaway", Thresholds, sections))


def add_figure() -> None:
    """A figure of how many series a report holds."""
    from posexp.report import Figure, register_figure
    from posexp.report.plotting import pyplot

    def draw(report):
        fig = pyplot().figure()
        fig.gca().bar(["series", "task series"], [len(report.series), len(report.tasks)])
        yield "throwaway", fig

    register_figure(Figure("throwaway", 99, draw))


def test_an_extension_of_each_kind_appears_everywhere(tmp_path, cache_dir, registries):
    shutil.copy(EXAMPLE / "log_alibi.py", tmp_path)
    shutil.copytree(EXAMPLE / "configs", tmp_path / "configs")
    add_task(tmp_path / "configs")
    add_corpus_kind(tmp_path / "configs")
    add_scaling_method()
    add_claim()
    add_figure()
    env = {"POSEXP_CACHE": str(cache_dir)}

    def posexp(*args: str):
        r = in_process(list(args), tmp_path, env)
        assert r.returncode == 0, r.stderr
        return r

    # the encoding: a glob of the encoding group finds its config beside posexp's own
    posexp("sweep", "--config-dir", "configs", "encoding=glob(*alibi)", *TINY, "experiment=ext")
    runs = tmp_path / "results" / "ext"
    assert sorted(p.parent.name for p in runs.glob("*/run.json")) == [
        "alibi-L16-s0", "log_alibi-L16-s0"]
    # the corpus kind: its check refuses a run without its file, and a run trains on it
    refused = in_process(["train", "--config-dir", "configs", "data=lines", *TINY], tmp_path, env)
    assert refused.returncode == 2 and "data=lines needs data.path=FILE" in refused.stderr
    (tmp_path / "lines.txt").write_text("\n".join(f"line {i}: " + "the quick brown fox " * 9
                                                  for i in range(400)))
    posexp("train", "--config-dir", "configs", "data=lines", "data.path=lines.txt",
           "encoding=alibi", *TINY, "experiment=lines")
    assert read_json(tmp_path / "results/lines/alibi-L16-s0/run.json")["status"] == "completed"
    # the task: a sweep over it and a built-in one
    posexp("sweep", "--config-dir", "configs", "data=task", "task=mirror,reverse",
           "encoding=rope", *TASK_SMALL, "experiment=ext", "run_name=${task.name}-rope")
    tasks = read_json(runs / "mirror-rope" / "eval.json")["tasks"]
    assert {p["task"] for p in tasks} == {"mirror"} and all(p["applicable"] for p in tasks)
    # the scaling method: a RoPE run scored with it, beside as trained
    posexp("train", "encoding=rope", *TINY, "experiment=ext")
    posexp("eval", "results/ext/rope-L16-s0", "eval.rope_scaling=plain,halve",
           "eval.rope_scaling.factor=2")
    curve = read_json(runs / "rope-L16-s0" / "eval.json")["curve"]
    assert {(p.get("rope_scaling") or {}).get("method") for p in curve} == {None, "halve"}
    # the report: the encoding, the task, the method and the figure
    posexp("report", "results/ext")
    report = runs / "report"
    summary = (report / "summary.md").read_text()
    assert "| log_alibi | 16 |" in summary and "halved \u00d72" in summary
    assert "### mirror: exact match by letters" in summary
    assert {"throwaway.png", "tasks-mirror.png"} <= {p.name for p in report.iterdir()}
    # the claim: a preset of its claim set, judged on runs trained with --config-dir
    preset = tmp_path / "mine.yaml"
    preset.write_text(json.dumps({
        "claims": "throwaway", "experiment": "ext", "train_seq_len": 16, "sliding": False,
        "overrides": TINY, "runs": [["encoding=log_alibi"], ["encoding=alibi"]],
        "report": "claims",
        "thresholds": {"tie": {"margin": 0.5, "reason": "a margin for a tiny model"}}}))
    posexp("reproduce", "--preset", str(preset), "--config-dir", "configs")
    verdicts = read_json(runs / "claims" / "verdicts.json")["verdicts"]
    assert [v["claim"] for v in verdicts] == ["1. log_alibi is about as good as ALiBi at L"]
    assert verdicts[0]["verdict"] in ("holds", "inconclusive", "does not hold")
