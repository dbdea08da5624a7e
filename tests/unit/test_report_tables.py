"""Tables a paper prints: summary.tex (booktabs, one row per series, intervals, escaped
names), the RoPE scalings' method x length table with the paired ratio to plain (in the
report and in the terminal after posexp eval), and task tables in the metric the verdicts
judge.  Runs are written as posexp writes them, with chosen perplexities."""

import math
import re

import torch
from omegaconf import OmegaConf

from posexp import scaling
from posexp.claims.preset import load_preset
from posexp.claims.suite import judged_metrics
from posexp.config import RunSpec
from posexp.report import Report, write_tables
from posexp.report.latex import escape
from posexp.report.tables import markdown
from posexp.report.task_figures import task_figure
from posexp.report.tasks import task_markdown, task_series
from posexp.run.evaluation import corpus_header
from posexp.run.tables import format_curve
from posexp.runs import RunResult, load_runs
from tests.conftest import compose_args
from tests.unit.test_reproduce import PARAMS, SMALL, curve, make_run

PI, NTK = (scaling.record(m, 4, PARAMS) for m in ("linear", "ntk"))


def scaled(ppl: dict, record: dict) -> list[dict]:
    return [{**p, "rope_scaling": record} for p in curve(ppl)]


def scaled_runs(root):
    """RoPE at L=16, two seeds, scored as trained and with PI and NTK-aware x4; and ALiBi."""
    for seed, f in ((0, 1.0), (1, 1.2)):
        make_run(root, "rope", 16, seed, [
            *curve({16: 5.0 * f, 64: 9.0 + f - 1}),
            *scaled({16: 10.0 * f, 64: 11.0 + f - 1}, PI),
            *scaled({16: 5.5 * f, 64: 6.0 * f}, NTK)])
        make_run(root, "alibi", 16, seed, curve({16: 5.0 * f, 64: 5.1 * f}))
    return load_runs(root)[0]


# --- summary.tex ------------------------------------------------------------------------
def tabulars(tex: str) -> list[list[str]]:
    """The lines of each tabular of ``tex``."""
    return [block.split("\n") for block in
            re.findall(r"\\begin\{tabular\}.*?\\end\{tabular\}", tex, re.S)]


def test_summary_tex_is_booktabs_with_a_row_per_series_and_intervals(tmp_path):
    report = Report.of(scaled_runs(tmp_path / "runs"))
    (tmp_path / "out").mkdir()
    write_tables(report, tmp_path / "out", "report_1 & 50%")
    tex = (tmp_path / "out" / "summary.tex").read_text()
    # balanced: environments, and braces once the escaped ones are taken out
    for env in ("table", "tabular"):
        assert tex.count(rf"\begin{{{env}}}") == tex.count(rf"\end{{{env}}}") > 0
    bare = tex.replace(r"\{", "").replace(r"\}", "")
    assert bare.count("{") == bare.count("}")
    assert tex.startswith("% report_1 & 50%: ")  # a comment: LaTeX reads nothing in it
    ppl, scalings = tabulars(tex)
    for lines in (ppl, scalings):
        rules = [line for line in lines if line in (r"\toprule", r"\midrule", r"\bottomrule")]
        assert rules == [r"\toprule", r"\midrule", r"\bottomrule"]
    rows = ppl[ppl.index(r"\midrule") + 1:ppl.index(r"\bottomrule")]
    # one row per series: rope as trained, with PI, with NTK-aware; alibi
    assert len(rows) == len(report.series) == 4
    assert all(row.endswith(r" \\") and row.count("&") == 3 for row in rows)
    assert all(row.count(r"\scriptsize[") == 2 for row in rows)  # every cell's interval
    assert rows[1].startswith(r"rope L=16 + PI $\times$4 & 2 & \textbf{10.95}")


def test_escape_makes_every_special_character_literal():
    assert escape("a_b & 50% $x #1 {y} ~^\\ \u00d7\u2192") == (
        r"a\_b \& 50\% \$x \#1 \{y\} \textasciitilde{}\textasciicircum{}\textbackslash{} "
        r"$\times$$\rightarrow$")


# --- the method x length table ----------------------------------------------------------
def test_report_has_one_method_by_length_table_with_the_paired_ratio_to_plain(tmp_path):
    md = markdown(Report.of(scaled_runs(tmp_path)), "t").split("\n")
    start = md.index("## nonoverlapping: RoPE scalings by length")
    table = md[start:md.index("", md.index("### rope L=16", start) + 2)]
    assert sum(line.startswith("### ") for line in table) == 1  # alibi has no scaling
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in table
            if line.startswith("| ") and not line.startswith("| method")}
    assert list(rows) == ["plain", "PI \u00d74", "NTK-aware \u00d74"]
    assert "\u00d7" not in rows["plain"][1]  # 1 by definition
    # PI at 64: geometric means of 11, 11.2 (ppl) and 11/9, 11.2/9.2 (ratio), each seed's
    # ratio over its own plain point
    ratio = math.sqrt(11 / 9 * 11.2 / 9.2)
    cell = re.fullmatch(r"(\S+) \[\S+, \S+\] \(\u00d7(\S+) \[(\S+), (\S+)\]\) \|", rows[
        "PI \u00d74"][1])
    assert cell and float(cell[1]) == round(math.sqrt(11 * 11.2), 2)
    assert float(cell[2]) == round(ratio, 3) and float(cell[3]) < ratio < float(cell[4])


def test_a_yarn_row_says_how_many_pairs_it_keeps_blends_and_interpolates(tmp_path):
    yarn = scaling.record("yarn", 4, PARAMS)
    make_run(tmp_path, "rope", 16, 0, curve({16: 5.0, 64: 9.0}) + scaled({16: 5.2, 64: 7.0},
                                                                         yarn))
    md = markdown(Report.of(load_runs(tmp_path)[0]), "t")
    # the runs' model: d_model 32, 2 heads -> head size 16, 8 pairs; at L=16 no pair turns
    # 32 times over L: YaRN keeps pair 0 only (the ramp's end rounded down) and interpolates
    # the rest -- nearly PI
    bands = scaling.yarn_bands(16, 10000.0, 16)
    assert bands == (1, 0, 7)
    shares = " / ".join(f"{100 * n / 8:.0f}%" for n in bands)
    assert (f"YaRN's frequency pairs at L=16, head size 16: {shares} kept / blended / "
            f"interpolated ({bands[0]}, {bands[1]}, {bands[2]} of 8); Llama 2 at L=4096, "
            "head size 128: 33% / 39% / 28%.") in md
    assert markdown(Report.of(scaled_runs(tmp_path / "no-yarn")), "t").count("YaRN's") == 0


def test_eval_prints_one_method_by_length_table_for_several_scalings(tmp_path):
    [run] = [r for r in scaled_runs(tmp_path) if r.name == "rope-L16-s0"]
    text = format_curve(run.curve, 16, "RUN")
    assert text.count("RoPE scalings by length") == 1 and "RoPE scaled:" not in text
    lines = text.split("\n")
    body = lines[lines.index(next(x for x in lines if x.startswith("method"))) + 1:]
    assert [line[:12].rstrip() for line in body[:5]] == [
        "plain", "PI \u00d74", "  / plain", "NTK-aware \u00d74", "  / plain"]
    # PI over plain: 10 / 5 and 11 / 9, paired on the same documents: no spread
    assert body[2].split()[2:] == ["2.000", "[2.000,", "2.000]", "1.222", "[1.222,", "1.222]"]
    # one scaling alone: its own table, as before
    alone = [{**p, "bits_per_token": p["loss"] / math.log(2)} for p in run.curve
             if p.get("rope_scaling") == PI]
    assert format_curve(alone, 16, "RUN").split("\n")[1].startswith(
        "RUN: nonoverlapping, RoPE scaled: PI \u00d74, at every length")


def test_the_eval_header_counts_one_scaling_in_the_singular(tmp_path):
    def header(*overrides: str) -> str:
        cfg = compose_args(["encoding=rope", *SMALL, f"results_dir={tmp_path}", *overrides])
        return corpus_header(tmp_path, RunSpec.of(cfg), torch.device("cpu"))

    assert ", 1 RoPE scaling (PI \u00d74)" in header("eval.rope_scaling=linear",
                                                      "eval.rope_scaling.factor=4")
    assert ", 2 RoPE scalings (as trained, PI \u00d74)" in header(
        "eval.rope_scaling=plain,linear", "eval.rope_scaling.factor=4")


# --- tasks: the metric the verdicts use -------------------------------------------------
def copy_run(root) -> RunResult:
    """A copy run scored at length 8: exact match 0.5, token accuracy 0.75."""
    point = {"task": "copy", "length": 8, "depth": None, "count": 100, "eval_seed": 7,
             "tokens": 18, "rope_scaling": None, "applicable": True, "reason": None,
             "exact": 0.5, "exact_low": 0.4, "exact_high": 0.6, "token_acc": 0.75,
             "token_acc_low": 0.7, "token_acc_high": 0.8, "answer_loss": 0.5,
             "chance_exact": 0.0, "chance_token": 0.04}
    identity = {"encoding.name": "rope", "train.seq_len": 64, "seed": 0, "data.name": "task",
                "task.name": "copy", "model.d_model": 32}
    info = {"status": "completed", "name": "copy", "encoding": "rope", "seq_len": 64,
            "seed": 0}
    return RunResult(root / "copy", info, identity, [], [], [point])


def test_task_tables_and_figures_show_the_metric_asked_for(tmp_path):
    series = task_series([copy_run(tmp_path)])[0]
    md = task_markdown(series, ("token_acc",))
    assert "### copy: token accuracy by letters" in md and not any(
        "exact match by" in line for line in md)
    assert any(line.startswith("| rope") and "| 0.75 [0.70, 0.80] |" in line for line in md)
    both = task_markdown(series, ("exact", "token_acc"))
    assert [line for line in both if line.startswith("### ")] == [
        "### copy: exact match by letters", "### copy: token accuracy by letters"]
    fig = task_figure(series, "copy", "token_acc")
    [ax] = [a for a in fig.axes if a.get_ylabel()]
    assert ax.get_ylabel().startswith("token accuracy")
    assert [list(line.get_ydata()) for line in ax.get_lines()
            if line.get_label() == "rope L=64"] == [[0.75]]


def test_a_claim_suites_report_shows_the_metric_its_verdicts_compare():
    tasks = load_preset("tasks")[0]
    assert judged_metrics(tasks) == (tasks.thresholds.metric,)
    assert judged_metrics(OmegaConf.create({"thresholds": {"metric": "token_acc"}})) == (
        "token_acc",)
    assert judged_metrics(load_preset("cpu")[0]) == ("exact",)  # no task claims
