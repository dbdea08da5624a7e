"""Plots and tables across runs, read through posexp.runs (run.json, config.yaml, eval.json).

A report is built once from the completed runs (base.Report): their series (series.py), one
per identity but the seed, mode, scored region and RoPE scaling, and their task series
(tasks.py).  Tables (tables.py) and every figure of the registry (base.FIGURES: figures.py,
task_figures.py) are drawn from it.  Only completed runs are plotted; the others, damaged ones
included, are listed with their reason, and a run without points of a mode is named under
that mode's figure and table, never silently left out.  Legends and captions sit outside
the axes, so they hide no point.  ``posexp report --include/--exclude/--label`` choose and
rename series (select.py); ``--style paper`` draws the figures for a paper (style.py).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from posexp.errors import PosexpError, UsageError
from posexp.report import figures, task_figures, training  # noqa: F401 -- they register figures
from posexp.report.base import FIGURES, Figure, Report, register_figure
from posexp.report.latex import summary_tex
from posexp.report.plotting import save
from posexp.report.select import Selection
from posexp.report.style import SCREEN, Look, using
from posexp.report.tables import csv_text, markdown, terminal_table, tidy_rows
from posexp.report.tasks import EXACT, named_tasks
from posexp.runs import DAMAGED, RUN, RunResult, atomic_write_text
from posexp.runs import load_runs as read_runs

__all__ = ["FIGURES", "Figure", "Report", "load_runs", "register_figure", "terminal_table",
           "tidy_rows", "write_report", "write_tables"]


def warn(message: str) -> None:
    print(f"posexp: warning: {message}", file=sys.stderr)


def load_runs(root: Path) -> tuple[list[RunResult], list[RunResult]]:
    """(completed runs, the others) under ``root`` as a report reads them: a run whose
    record would name a report file with something other than a plain name is damaged."""
    runs, not_done = read_runs(root)
    runs, unnamed = named_tasks(runs)
    return runs, [*not_done, *unnamed]


# a figure's file name: one plain name, inside the report directory
FILE_STEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,199}")


def write_report(runs: list[RunResult], not_done: list[RunResult], out: Path,
                 title: str, task_metrics: tuple[str, ...] = (EXACT,), look: Look = SCREEN,
                 selection: Selection | None = None, command: str | None = None) -> list[Path]:
    """Figures and tables for ``runs`` (completed, from load_runs), written to ``out``; each
    damaged run in ``not_done`` gets one warning line; task accuracy in ``task_metrics``.
    Figures in ``look`` (style.py), of the series ``selection`` keeps and names; ``command``
    (default ``title``) is what a paper's caption files say made them.  With no run at all,
    a PosexpError and nothing written; a UsageError when ``out`` is a run directory or
    inside one, or the selection names no series."""
    if not runs and not not_done:
        raise PosexpError(f"no posexp runs to report in {out}")
    check_report_dir(out)
    runs, unnamed = named_tasks(runs)
    not_done = [*not_done, *unnamed]
    for r in not_done:
        if r.status == DAMAGED:
            warn(f"not included: {r.reason}")
    report = (selection or Selection()).apply(Report.of(runs, not_done, task_metrics))
    out.mkdir(parents=True, exist_ok=True)
    written = write_tables(report, out, title)
    with using(look):
        for figure in FIGURES:
            for stem, fig in figure.draw(report):
                if not FILE_STEM.fullmatch(stem):  # names come from run records: never a path
                    raise PosexpError(f"figure {figure.name}: {stem[:60]!r} is not a file name")
                written += save(fig, out / stem, command or title)
    return written


def check_report_dir(out: Path) -> None:
    """A report never writes into a run: ``out`` must not be a run directory (a run named
    ``report``, say) nor lie inside one."""
    for here in dict.fromkeys((Path(os.path.abspath(out)), Path(os.path.realpath(out)))):
        run = next((d for d in (here, *here.parents) if (d / RUN).is_file()), None)
        if run is not None:
            break
    else:
        return  # as written and with its links followed, no run holds it
    problem = (f"is the directory of the run {run.name!r}" if run == here
               else f"is inside the run directory {run}")
    raise UsageError(f"the report directory {out} {problem}; a report never writes into a "
                     "run: choose another (posexp report ROOT --out DIR; in a preset, "
                     "report: NAME)")


def write_tables(report: Report, out: Path, title: str) -> list[Path]:
    """summary.csv, summary.md and summary.tex; runs of one config and seed are named in one
    warning."""
    for group in report.duplicates:
        warn(f"{', '.join(str(r.path) for r in group)} are runs of the same config and seed "
             f"({group[0].seed}); counted once")
    atomic_write_text(out / "summary.csv", csv_text(tidy_rows(report)))
    atomic_write_text(out / "summary.md", markdown(report, title))
    atomic_write_text(out / "summary.tex", summary_tex(report, title))
    return [out / "summary.csv", out / "summary.md", out / "summary.tex"]
