"""Plots and tables across runs, read through posexp.runs (run.json, config.yaml, eval.json).

A report is built once from the completed runs (base.Report): their series (series.py), one
per identity but the seed, mode, scored region and RoPE scaling, and their task series
(tasks.py).  Tables (tables.py) and every figure of the registry (base.FIGURES: figures.py,
task_figures.py) are drawn from it.  Only completed runs are plotted; the others, damaged ones
included, are listed with their reason, and a run without points of a mode is named under
that mode's figure and table, never silently left out.  Legends and captions sit outside
the axes, so they hide no point.
"""

from __future__ import annotations

import sys
from pathlib import Path

from posexp.errors import PosexpError
from posexp.report import figures, task_figures, training  # noqa: F401 -- they register figures
from posexp.report.base import FIGURES, Figure, Report, register_figure
from posexp.report.plotting import save
from posexp.report.tables import csv_text, markdown, terminal_table, tidy_rows
from posexp.runs import DAMAGED, RunResult, atomic_write_text, load_runs

__all__ = ["FIGURES", "Figure", "Report", "load_runs", "register_figure", "terminal_table",
           "tidy_rows", "write_report", "write_tables"]


def warn(message: str) -> None:
    print(f"posexp: warning: {message}", file=sys.stderr)


def write_report(runs: list[RunResult], not_done: list[RunResult], out: Path,
                 title: str) -> list[Path]:
    """Figures and tables for ``runs`` (completed, from load_runs), written to ``out``; each
    damaged run in ``not_done`` gets one warning line.  With no run at all, a PosexpError
    and nothing written."""
    if not runs and not not_done:
        raise PosexpError(f"no posexp runs to report in {out}")
    for r in not_done:
        if r.status == DAMAGED:
            warn(f"not included: {r.reason}")
    out.mkdir(parents=True, exist_ok=True)
    report = Report.of(runs, not_done)
    written = write_tables(report, out, title)
    for figure in FIGURES:
        for stem, fig in figure.draw(report):
            written += save(fig, out / stem)
    return written


def write_tables(report: Report, out: Path, title: str) -> list[Path]:
    """summary.csv and summary.md; runs of one config and seed are named in one warning."""
    for group in report.duplicates:
        warn(f"{', '.join(str(r.path) for r in group)} are runs of the same config and seed "
             f"({group[0].seed}); counted once")
    atomic_write_text(out / "summary.csv", csv_text(tidy_rows(report)))
    atomic_write_text(out / "summary.md", markdown(report, title))
    return [out / "summary.csv", out / "summary.md"]
