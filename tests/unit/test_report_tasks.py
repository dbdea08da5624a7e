"""Task accuracy in reports: series over seeds, tables, summary.csv, the figures' data.

Task runs are built as RunResults (what runs.load_run gives back for a completed data=task
run) with chosen accuracies and intervals, so every number a test checks is known; the
whole reports read task runs and corpus runs from directories written as posexp writes
them (config.yaml of a composed config, run.json, eval.json).
"""
import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from posexp.data.tasks import binomial_interval
from posexp.report import write_report
from posexp.report.plotting import GREY
from posexp.report.tables import CSV_COLUMNS
from posexp.report.task_figures import task_figure
from posexp.report.tasks import passkey_grid, task_cells, task_markdown, task_series
from posexp.runs import RunResult, load_runs
from tests.reports import terminal_table, write_tables
from tests.unit.test_report import SMALL, caption, config_text, curves_drawn, make_run, panels

T_975_2 = 4.302652729911275  # the 97.5% quantile of Student's t with 2 degrees of freedom


def task_point(task: str, length: int, exact: float | None, low: float | None = None,
               high: float | None = None, depth: float | None = None, count: int = 100,
               chance: float = 0.0, reason: str | None = None) -> dict:
    """A task point as evaluation writes it; ``exact`` None: not applicable, for ``reason``."""
    ok = exact is not None
    return {"task": task, "length": length, "depth": depth, "count": count, "eval_seed": 7,
            "tokens": 2 * length + 2, "rope_scaling": None, "applicable": ok,
            "reason": None if ok else reason, "exact": exact,
            "exact_low": low if ok else None, "exact_high": high if ok else None,
            "token_acc": exact and (1 + exact) / 2, "token_acc_low": None,
            "token_acc_high": None, "answer_loss": exact and 1 - exact,
            "chance_exact": chance if ok else None, "chance_token": 0.04 if ok else None,
            "seconds": 0.25}


def task_run(root: Path, name: str, task: str, points: list[dict], encoding: str = "rope",
             seq_len: int = 64, seed: int = 0) -> RunResult:
    identity = {"encoding.name": encoding, "train.seq_len": seq_len, "seed": seed,
                "data.name": "task", "task.name": task, "model.d_model": 32,
                "model.n_layer": 1, "model.n_head": 2}
    info = {"status": "completed", "name": name, "experiment": root.name,
            "encoding": encoding, "seq_len": seq_len, "seed": seed, "n_params": 12345,
            "steps": 100, "tokens_trained": 204_800}
    return RunResult(root / name, info, identity, [], [], points)


# --- series over seeds ---------------------------------------------------------------------
def test_seeds_are_averaged_with_a_t_interval_clipped_to_one(tmp_path):
    runs = [task_run(tmp_path, f"copy-s{seed}", "copy",
                     [task_point("copy", 8, exact, exact - 0.05, exact + 0.05)], seed=seed)
            for seed, exact in enumerate([0.9, 0.8, 0.7])]
    [s] = task_series(runs)[0]
    assert len(s.members) == 3
    iv = task_cells(s)[8].value
    half = T_975_2 * 0.1 / math.sqrt(3)
    assert iv.value == pytest.approx(0.8)
    assert iv.low == pytest.approx(0.8 - half) and iv.low == pytest.approx(0.5515862, abs=1e-6)
    assert iv.high == 1.0  # 0.8 + half = 1.048...: an accuracy stops at 1
    assert iv.method == "Student-t over 3 seeds, clipped to [0, 1]"


def test_one_seed_keeps_its_wilson_interval_and_passkey_pools_its_depths(tmp_path):
    copy = task_run(tmp_path, "copy", "copy", [task_point("copy", 8, 0.93, 0.88, 0.96)])
    passkey = task_run(tmp_path, "passkey", "passkey",
                       [task_point("passkey", 64, 1.0, 0.9, 1.0, depth=0.0, count=10),
                        task_point("passkey", 64, 0.5, 0.2, 0.8, depth=1.0, count=10)])
    series = task_series([copy, passkey])[0]
    [copy_series] = [s for s in series if s.task == "copy"]
    [passkey_series] = [s for s in series if s.task == "passkey"]
    iv = task_cells(copy_series)[8].value
    assert (iv.value, iv.low, iv.high) == (0.93, 0.88, 0.96)
    iv = task_cells(passkey_series)[64].value
    assert iv.value == 0.75  # the mean over depths
    assert (iv.low, iv.high) == binomial_interval(15, 20)  # 10 + 5 of 20 instances
    assert iv.low == pytest.approx(0.5313, abs=1e-4) and iv.high == pytest.approx(0.8881,
                                                                                  abs=1e-4)


def test_the_training_length_is_the_longest_instance_that_fits(tmp_path):
    # copy of n letters takes 2n + 2 tokens: 31 is the longest within seq_len 64
    [s] = task_series([task_run(tmp_path, "copy", "copy", [task_point("copy", 8, 1.0)])])[0]
    assert s.max_length == 31
    [s] = task_series([task_run(tmp_path, "odd", "a-task-posexp-lacks",
                                [task_point("a-task-posexp-lacks", 8, 1.0)])])[0]
    assert s.max_length is None


# --- tables --------------------------------------------------------------------------------
def copy_runs(root: Path) -> list[RunResult]:
    """rope and alibi on copy at 8, 16, 32; alibi n/a at 32."""
    rope = task_run(root, "rope", "copy", [
        task_point("copy", 8, 1.0, 0.96, 1.0, chance=0.25),
        task_point("copy", 16, 0.5, 0.4, 0.6, chance=0.125),
        task_point("copy", 32, 0.1, 0.05, 0.17, chance=0.0)])
    alibi = task_run(root, "alibi", "copy", [
        task_point("copy", 8, 1.0, 0.96, 1.0, chance=0.25),
        task_point("copy", 16, 0.93, 0.88, 0.96, chance=0.125),
        task_point("copy", 32, None, reason="no position beyond 20")], encoding="alibi")
    return [rope, alibi]


def test_task_table_bolds_the_best_at_each_length_and_footnotes_n_a(tmp_path):
    md = task_markdown(task_series(copy_runs(tmp_path))[0])
    assert md[0] == "## Task accuracy"
    table = md[md.index("### copy: exact match by letters"):]
    assert "100 held-out instances per length (eval seed 7)." in table
    assert ("| encoding | L_train | train ≤ | seeds | 8 | 16 | 32 |" in table)
    # registry order: rope before alibi; ties at 8 are both the best
    rows = [line for line in table if line.startswith(("| rope", "| alibi", "| chance"))]
    assert rows == [
        "| rope | 64 | 31 | 1 | **1.00** [0.96, 1.00] | 0.50 [0.40, 0.60] | 0.10 [0.05, 0.17] |",
        "| alibi | 64 | 31 | 1 | **1.00** [0.96, 1.00] | **0.93** [0.88, 0.96] | "
        "n/a[^copy-exact-1] |",
        "| chance (best constant answer) |  |  |  | 0.25 | 0.12 | 0.00 |"]
    assert "[^copy-exact-1]: no position beyond 20" in table


def test_randomized_positions_label_only_the_runs_that_set_them(tmp_path):
    plain = task_run(tmp_path, "plain", "copy", [task_point("copy", 8, 0.5)])
    random = task_run(tmp_path, "random", "copy", [task_point("copy", 8, 0.75)])
    random.identity["train.random_positions"] = 256
    series = task_series([plain, random])[0]
    assert sorted(s.label for s in series) == ["rope L=64", "rope L=64 · random_positions=256"]
    md = task_markdown(series)
    rows = [line for line in md if line.startswith("| rope")]
    assert sorted(row.split(" | ")[2] for row in rows) == ["-", "256"]


def test_a_length_with_one_series_is_not_bolded(tmp_path):
    # at 32 only rope is applicable: nothing to be best against
    md = "\n".join(task_markdown(task_series(copy_runs(tmp_path))[0]))
    assert "| 0.10 [0.05, 0.17] |" in md and "**0.10**" not in md


# --- summary.csv ---------------------------------------------------------------------------
def test_summary_csv_has_a_row_per_task_point_beside_the_perplexity_rows(tmp_path):
    make_run(tmp_path / "runs", "corpus", ppl={16: 5.0, 32: 6.0})
    corpus_runs, _ = load_runs(tmp_path / "runs")
    runs = corpus_runs + copy_runs(tmp_path / "runs")
    write_tables(runs, [], tmp_path, "t")
    with (tmp_path / "summary.csv").open() as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == CSV_COLUMNS
        rows = list(reader)
    assert [(r["run"], r["mode"], r["task"], r["length"]) for r in rows] == [
        ("corpus", "nonoverlapping", "", "16"), ("corpus", "nonoverlapping", "", "32"),
        ("rope", "", "copy", "8"), ("rope", "", "copy", "16"), ("rope", "", "copy", "32"),
        ("alibi", "", "copy", "8"), ("alibi", "", "copy", "16"), ("alibi", "", "copy", "32")]
    assert rows[0]["exact"] == "" and float(rows[0]["ppl"]) == 5.0
    row = rows[6]  # alibi at 16
    assert {k: row[k] for k in ("series", "encoding", "train_seq_len", "train_max_length",
                                "depth", "count", "eval_seed", "tokens", "applicable",
                                "reason", "ppl", "stride")} == {
        "series": "alibi L=64", "encoding": "alibi", "train_seq_len": "64",
        "train_max_length": "31", "depth": "", "count": "100", "eval_seed": "7",
        "tokens": "34", "applicable": "True", "reason": "", "ppl": "", "stride": ""}
    assert [float(row[k]) for k in ("exact", "exact_low", "exact_high", "token_acc",
                                    "answer_loss", "chance_exact", "chance_token")] == \
        pytest.approx([0.93, 0.88, 0.96, 0.965, 0.07, 0.125, 0.04])
    na = rows[7]
    assert (na["applicable"], na["reason"], na["exact"]) == ("False", "no position beyond 20",
                                                             "")


# --- figures -------------------------------------------------------------------------------
def test_passkey_grid_holds_each_length_and_depth_averaged_over_seeds(tmp_path):
    values = {0: {(64, 0.0): 1.0, (64, 0.5): 0.8, (128, 0.0): 0.6, (128, 0.5): None},
              1: {(64, 0.0): 0.9, (64, 0.5): 0.4, (128, 0.0): 0.2, (128, 0.5): None}}
    runs = [task_run(tmp_path, f"pk-s{seed}", "passkey",
                     [task_point("passkey", n, v, depth=d, reason="too long")
                      for (n, d), v in points.items()], seed=seed)
            for seed, points in values.items()]
    [s] = task_series(runs)[0]
    lengths, depths, grid = passkey_grid(s)
    assert (lengths, depths) == ([64, 128], [0.0, 0.5])
    np.testing.assert_allclose(grid, [[0.95, 0.4], [0.6, np.nan]])


def test_a_length_n_a_for_every_curve_for_one_reason_is_one_line(tmp_path):
    """Addition's 28 digits are past the task's limit for every arm: one caption line says
    so for every curve, not one line an arm."""
    limit = "addition: 28 digits is past the 20-digit limit"
    runs = [task_run(tmp_path, name, "addition", [
        task_point("addition", 7, exact), task_point("addition", 28, None, reason=limit)],
        encoding=name) for name, exact in (("rope", 1.0), ("alibi", 0.6), ("nope", 0.1))]
    text = caption(task_figure(task_series(runs)[0], "addition"))
    assert text.count("n/a (") == 1 and f"n/a ({limit}): every curve at 28" in text
    # a reason two of three curves share names both
    runs[2] = task_run(tmp_path, "nope", "addition", [task_point("addition", 7, 0.1),
                                                      task_point("addition", 28, 0.0)],
                       encoding="nope")
    text = caption(task_figure(task_series(runs)[0], "addition"))
    assert f"n/a ({limit}): rope L=64; alibi L=64 at 28" in text


def test_n_a_lengths_are_left_out_of_the_line_and_named_in_the_caption(tmp_path):
    learned = task_run(tmp_path, "learned", "copy", [
        task_point("copy", n, None, reason="no position beyond 16") for n in (8, 16, 32)],
        encoding="learned")
    runs = [*copy_runs(tmp_path), learned]
    fig = task_figure(task_series(runs)[0], "copy")
    [ax] = panels(fig)
    lines = {line.get_label(): line for line in curves_drawn(ax)}
    assert set(lines) == {"rope L=64", "alibi L=64"}  # learned: nothing applicable
    assert list(lines["alibi L=64"].get_xdata()) == [8, 16]
    assert list(lines["alibi L=64"].get_ydata()) == [1.0, 0.93]
    assert list(lines["rope L=64"].get_xdata()) == [8, 16, 32]
    text = caption(fig)
    assert "n/a (no position beyond 20): alibi L=64 at 32" in text
    assert (f"not drawn, no length applicable (no position beyond 16): learned L=64 "
            f"({tmp_path / 'learned'})") in text
    # the chance level at each length, and the longest training instance
    [chance] = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert list(chance.get_ydata()) == [0.25, 0.125, 0.0] and chance.get_color() == GREY
    assert [line.get_xdata()[0] for line in ax.get_lines()
            if line.get_linestyle() == ":"] == [31]


def test_a_task_with_nothing_applicable_draws_no_figure(tmp_path):
    run = task_run(tmp_path, "learned", "copy",
                   [task_point("copy", 64, None, reason="no position beyond 16")])
    assert task_figure(task_series([run])[0], "copy") is None


# --- whole reports -------------------------------------------------------------------------
def write_task_run(run: RunResult) -> None:
    """``run`` as a completed data=task run directory: config.yaml, run.json, eval.json."""
    text = config_text((f"encoding={run.encoding}", f"train.seq_len={run.train_len}",
                        f"seed={run.seed}", *SMALL, "data=task",
                        f"task={run.identity['task.name']}"))
    run.path.mkdir(parents=True)
    (run.path / "config.yaml").write_text(text)
    (run.path / "run.json").write_text(json.dumps(run.info))
    (run.path / "eval.json").write_text(json.dumps({"curve": [], "per_position": [],
                                                    "tasks": run.tasks}))


def task_only(root: Path) -> list[RunResult]:
    """copy_runs, rope and alibi on passkey, and a learned run of parity that is n/a at every
    length, written to ``root`` and read back."""
    passkey = [task_run(root, f"pk-{enc}", "passkey",
                        [task_point("passkey", n, 1.0 if n <= 64 else 0.5, 0.9, 1.0, depth=d)
                         for n in (32, 64, 128) for d in (0.0, 0.5, 1.0)], encoding=enc)
               for enc in ("rope", "alibi")]
    parity = task_run(root, "parity-learned", "parity",
                      [task_point("parity", n, None, reason="too long") for n in (8, 16)],
                      encoding="learned")
    for run in [*copy_runs(root), *passkey, parity]:
        write_task_run(run)
    runs, not_done = load_runs(root)
    assert not_done == []
    return runs


TASK_FILES = {f"{name}.{ext}" for name in ("tasks-copy", "tasks-passkey",
                                           "tasks-passkey-heatmap") for ext in ("png", "svg")}


def test_report_of_task_runs_only(tmp_path):
    runs = task_only(tmp_path / "runs")
    files = write_report(runs, [], tmp_path / "report", "t")
    assert {f.name for f in files} == {"summary.csv", "summary.md", "summary.tex", *TASK_FILES}
    assert {f.name for f in (tmp_path / "report").iterdir()} == {f.name for f in files}
    md = (tmp_path / "report" / "summary.md").read_text()
    assert [line for line in md.splitlines() if line.startswith("###")] == [
        "### copy: exact match by letters", "### parity: exact match by bits",
        "### passkey: exact match by tokens of context"]
    assert (f"* not drawn, no length applicable (too long): learned L=64 "
            f"({tmp_path / 'runs' / 'parity-learned'})") in md
    table = terminal_table(runs)
    assert "perplexity" not in table
    lines = table.splitlines()
    assert lines[0] == "exact match on copy (mean over seeds)"
    assert [line.split() for line in lines[1:4]] == [
        ["series", "8", "16", "32"], ["rope", "L=64", "1.00", "0.50", "0.10"],
        ["alibi", "L=64", "1.00", "0.93", "n/a"]]


def test_report_of_task_and_corpus_runs(tmp_path):
    make_run(tmp_path / "runs", "corpus", ppl={16: 5.0, 32: 6.0})
    runs = task_only(tmp_path / "runs")
    assert len(runs) == 6
    files = write_report(runs, [], tmp_path / "report", "t")
    assert {f.name for f in files} == {
        "summary.csv", "summary.md", "summary.tex", "extrapolation_nonoverlapping.png",
        "extrapolation_nonoverlapping.svg", "per_position.png", "per_position.svg",
        *TASK_FILES}
    md = (tmp_path / "report" / "summary.md").read_text()
    assert "## nonoverlapping: perplexity" in md and "## Task accuracy" in md
    # the corpus run's figure names no task run as unscored in its mode
    assert "not scored" not in md
    table = terminal_table(runs)
    assert table.startswith("perplexity (nonoverlapping; mean over seeds)")
    assert "exact match on passkey (mean over seeds, and depths)" in table
