"""summary.tex: the report's tables as a paper prints them, so that nobody rebuilds them by
hand from summary.csv (and lets a number drift on the way).  Booktabs tables (``\\toprule``,
``\\midrule``, ``\\bottomrule``; the preamble needs ``\\usepackage{booktabs}``), each a
``table`` float to ``\\input`` whole or copy: per mode, perplexity at each length with its
interval, one row per series (the numbers of summary.md's first table); the RoPE scalings'
method x length table (scalings.py); and per task, the accuracy the report shows.  Every
text that comes from a run -- labels, encodings, task names -- is escaped, so a ``_`` or
``%`` in a name cannot break the document."""

from __future__ import annotations

import re
from collections.abc import Callable

from posexp.report.base import Report
from posexp.report.curves import PERCENT, fmt, mode_curves, stride_note
from posexp.report.scalings import cell_text, scaling_tables
from posexp.report.tasks import METRICS, acc, task_cells, task_groups
from posexp.stats import Interval

# LaTeX's special characters, and the non-ASCII signs posexp's labels use, as pdflatex reads
# them without extra packages
SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
           "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
           "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}",
           "|": r"\textbar{}", "\u00d7": r"$\times$", "→": r"$\rightarrow$", "·": r"$\cdot$",
           "≤": r"$\leq$", "≥": r"$\geq$", "—": "---", "\u2013": "--"}


def escape(text: object) -> str:
    """``text`` as LaTeX typesets it literally."""
    return "".join(SPECIAL.get(c, c) for c in str(text))


def value_text(iv: Interval | None, form: Callable[[float], str], bold: bool = False) -> str:
    """A value with its interval in small type after it; bold for the training length."""
    if iv is None:
        return "---"
    value = rf"\textbf{{{form(iv.value)}}}" if bold else form(iv.value)
    if iv.low is None or iv.high is None:
        return value
    return rf"{value}\,{{\scriptsize[{form(iv.low)}, {form(iv.high)}]}}"


def table(caption: str, label: str, head: list[str], rows: list[list[str]]) -> list[str]:
    """A booktabs table float: the first column left-aligned, the others right-aligned;
    ``head`` and ``rows`` are typeset as given (escape them first)."""
    return [r"\begin{table}[t]", r"\centering", r"\small",
            rf"\caption{{{caption}}}", rf"\label{{tab:{re.sub(r'[^A-Za-z0-9:-]', '-', label)}}}",
            rf"\begin{{tabular}}{{l{'r' * (len(head) - 1)}}}", r"\toprule",
            " & ".join(head) + r" \\", r"\midrule",
            *(" & ".join(row) + r" \\" for row in rows),
            r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]


def perplexity_tables(report: Report) -> list[str]:
    """Per mode, perplexity at each length, one row per curve of the mode."""
    lines = []
    for mode in report.modes:
        curves = mode_curves(report.series, mode)
        lengths = sorted({n for c in curves for n in c.cells})
        rows = [[escape(c.label), str(len(c.series.members)),
                 *(("" if (cell := c.cells.get(n)) is None else "n/a" if cell.ppl is None
                    else value_text(cell.ppl, fmt, n == c.series.train_len))
                   for n in lengths)] for c in curves]
        caption = escape(f"Perplexity ({mode}{stride_note(curves)}): mean over seeds "
                         f"(geometric) [{PERCENT} interval over seeds and scored documents]; "
                         "bold: at the training length; n/a: no position that far.")
        lines += table(caption, f"ppl-{mode}", ["series", "seeds", *map(str, lengths)], rows)
    return lines


def scaling_latex(report: Report) -> list[str]:
    """Per mode and model, the RoPE scalings' method x length table."""
    lines = []
    for mode in report.modes:
        for t in scaling_tables(report.series, mode):
            rows = [[escape(label), *(cell_text(cells.get(n), i == 0, value_text, r"$\times$")
                                        for n in t.lengths)]
                    for i, (label, cells) in enumerate(t.rows)]
            caption = escape(f"RoPE scalings of {t.model} ({mode}): perplexity [{PERCENT} "
                             "interval] and \u00d7 its ratio to the plain row at the same length "
                             f"[{PERCENT} interval, paired over each run's documents].")
            lines += table(caption, f"scalings-{mode}-{t.model}",
                           ["method", *map(str, t.lengths)], rows)
    return lines


def task_latex(report: Report) -> list[str]:
    """Per task and metric the report shows, accuracy at each length, one row per series."""
    lines = []
    for task, ours in task_groups(report.tasks).items():
        for metric in report.task_metrics:
            cells = [task_cells(s, metric) for s in ours]
            lengths = sorted({n for c in cells for n in c})
            rows = [[escape(s.label), str(len(s.members)),
                     *(("" if (cell := c.get(n)) is None else "n/a" if cell.value is None
                        else value_text(cell.value, acc)) for n in lengths)]
                    for s, c in zip(ours, cells, strict=True)]
            caption = escape(f"{METRICS[metric].name.capitalize()} on {task}: mean over "
                             f"seeds [{PERCENT} interval]; n/a: not applicable.")
            lines += table(caption, f"{task}-{metric}", ["series", "seeds",
                                                         *map(str, lengths)], rows)
    return lines


def summary_tex(report: Report, title: str) -> str:
    """summary.tex: every table above, after a comment naming the report and the package."""
    return "\n".join([f"% {title.replace(chr(10), ' ')}: tables written by posexp report",
                      r"% needs \usepackage{booktabs}", "",
                      *perplexity_tables(report), *scaling_latex(report),
                      *task_latex(report)])
