"""The report's tables: summary.csv (one tidy row per run and point), summary.md (per mode,
perplexity and its ratio to ppl(L) at each length with intervals, and the RoPE scalings'
method x length table, scalings.py; then task accuracy), and the table printed at the end
of a sweep.  summary.tex (latex.py) holds the same tables for a paper."""

from __future__ import annotations

import csv
import io

from posexp.report.base import Report
from posexp.report.curves import (
    PERCENT,
    Curve,
    cell_text,
    compression_lines,
    fmt,
    mode_curves,
    notes,
    stride_note,
)
from posexp.report.scalings import scaling_markdown
from posexp.report.series import config_key, describe
from posexp.report.tasks import (
    METRICS,
    takes_depth,
    task_cell_text,
    task_cells,
    task_groups,
    task_markdown,
)
from posexp.runs import point_scaling
from posexp.runs import region as region_of
from posexp.scaling import key as scaling_key
from posexp.scaling import text as scaling_text

CSV_COLUMNS = ["experiment", "run", "series", "encoding", "train_seq_len", "seed", "n_params",
               "d_model", "n_layer", "n_head", "corpus", "corpus_fingerprint", "tokenizer",
               "tokenizer_fingerprint", "steps", "tokens_trained", "parent", "mode",
               "rope_scaling", "rope_scaling_factor", "positions", "positions_seed", "stride",
               "length", "spans", "documents", "first_token", "tokens", "applicable", "loss",
               "ppl", "ppl_low", "ppl_high", "bits_per_token", "bits_per_byte", "reason"]
POINT_COLUMNS = [c for c in CSV_COLUMNS[CSV_COLUMNS.index("mode"):]
                 if not c.startswith("rope_scaling")]
# a task point's own fields (runs.TASK_POINT_KINDS), after the perplexity columns; a row of
# one kind leaves the other kind's columns empty
TASK_COLUMNS = ["task", "train_max_length", "depth", "count", "eval_seed", "exact",
                "exact_low", "exact_high", "token_acc", "token_acc_low", "token_acc_high",
                "answer_loss", "chance_exact", "chance_token", "instances_sha256"]
CSV_COLUMNS += TASK_COLUMNS


def tidy_rows(report: Report) -> list[dict]:
    """One row per run x curve point, then per run x task point, with the label of the
    series the point belongs to; every row holds every column (None where it does not
    apply)."""
    labels = {(s.config, s.scaling, s.mode, s.region): s.label for s in report.series}
    tasks = {(s.task, s.config, s.scaling): s for s in report.tasks}
    rows = []
    for r in report.runs:
        model = r.info.get("model") or {}
        corpus = r.info.get("corpus") or {}
        run_fields = {
            **dict.fromkeys(CSV_COLUMNS),
            "experiment": r.info.get("experiment"), "run": r.name, "encoding": r.encoding,
            "train_seq_len": r.train_len, "seed": r.seed, "n_params": r.info.get("n_params"),
            **{k: r.identity.get(f"model.{k}", model.get(k))
               for k in ("d_model", "n_layer", "n_head")},
            "corpus": corpus.get("name", r.identity.get("data.name")),
            "corpus_fingerprint": corpus.get("fingerprint"),
            "tokenizer": corpus.get("tokenizer"),
            "tokenizer_fingerprint": corpus.get("tokenizer_fingerprint"),
            "steps": r.info.get("steps"), "tokens_trained": r.info.get("tokens_trained"),
            "parent": r.info.get("parent"),
        }
        for p in r.curve:
            label = labels[(config_key(r), point_scaling(p), p["mode"], region_of(p))]
            rows.append({**run_fields, "series": label, **scaling_cells(p),
                         **{k: p.get(k) for k in POINT_COLUMNS}})
        for p in r.tasks:
            s = tasks[(p["task"], config_key(r), point_scaling(p))]
            rows.append({**run_fields, "series": s.label, **scaling_cells(p),
                         **{k: p.get(k) for k in ("length", "tokens", "applicable", "reason",
                                                  "positions", "positions_seed",
                                                  *TASK_COLUMNS)},
                         "train_max_length": s.max_length})
    return rows


def scaling_cells(p: dict) -> dict:
    """A point's RoPE scaling columns: the method in words and its factor (empty as
    trained)."""
    scaling = p.get("rope_scaling")
    return {"rope_scaling": scaling_text(scaling_key(scaling)) if scaling else None,
            "rope_scaling_factor": (scaling or {}).get("factor")}


def csv_text(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _ratiofmt(x: float) -> str:
    return f"{x:.3f}"


def _table(curves: list[Curve], lengths: list[int], stride_column: bool,
           ratios: bool) -> list[str]:
    extra = [heading for heading, _ in curves[0].series.columns()]
    extra += ["stride"] * stride_column
    lines = ["| " + " | ".join(["encoding", "L_train", *extra, "seeds", *map(str, lengths)])
             + " |",
             "|---|---:|" + "---|" * len(extra) + "---:|" * (1 + len(lengths))]
    for c in curves:
        s = c.series
        values = [value.replace("|", "/") for _, value in s.columns()]
        values += [str(c.stride)] * stride_column
        cells = []
        for length in lengths:
            cell, at_train_len = c.cells.get(length), length == s.train_len
            if cell is None:
                cells.append("")
            elif cell.ppl is None:
                cells.append("n/a")
            elif ratios:  # 1 at the training length, by definition: no interval to give
                cells.append(cell_text(cell.ratio, _ratiofmt, at_train_len,
                                        interval=not at_train_len))
            else:
                cells.append(cell_text(cell.ppl, fmt, at_train_len))
        lines.append("| " + " | ".join([s.encoding, str(s.train_len), *values,
                                        str(len(s.members)), *cells]) + " |")
    return lines


def reference_line(series: list) -> list[str]:
    """What zlib and xz make of the same scored text, beside the models' bits per byte."""
    references = compression_lines(series)
    if not references:
        return []
    return ["Reference on the same scored text: " + ", ".join(
        f"{what} {bits:.3f} bits/byte (a byte perplexity of {2 ** bits:.3f})"
        for _, what, bits in references) + ".", ""]


def markdown(report: Report, title: str) -> str:
    """Per mode, the tables a paper prints: perplexity at each length, and its ratio to the
    perplexity at the training length, each with its 95% interval, one row per curve; a
    column for each key that tells series apart."""
    series, duplicates, not_done = report.series, report.duplicates, report.not_done
    lines = [f"# {title}", ""]
    if series:
        lines += [describe(series), ""]
    for mode in report.modes:
        curves = mode_curves(series, mode)
        lengths = sorted({length for c in curves for length in c.cells})
        several = len({c.stride for c in curves}) > 1
        heading = f"{mode}{stride_note(curves)}"
        uses = (" Below 1: the longer windows use their extra context (every token has at "
                "least L-S tokens before it at every length; Press et al. §5)."
                if mode == "sliding" else "")
        lines += [f"## {heading}: perplexity", "",
                  f"Mean over seeds (geometric) [{PERCENT} interval over seeds and the "
                  "scored documents together; with one seed, the cluster bootstrap over the "
                  "documents]. Bold: at the training length.", "",
                  *_table(curves, lengths, several, ratios=False), "",
                  *reference_line(series),
                  f"## {heading}: perplexity / perplexity at the training length", "",
                  f"Mean over seeds [{PERCENT} interval as above, paired: the same documents "
                  f"drawn at both lengths].{uses}", "",
                  *_table(curves, lengths, several, ratios=True), ""]
        lines += [f"* {line}" for line in notes(curves, series, mode)]
        lines.append("")
        lines += scaling_markdown(series, mode, heading)
    lines += task_markdown(report.tasks, report.task_metrics)
    if duplicates:
        lines += ["Runs of the same config and seed, counted once (the first of each line):", ""]
        lines += [f"* {', '.join(str(r.path) for r in group)}" for group in duplicates]
        lines.append("")
    if not_done:
        lines += ["## Runs not included", "", "| run | status | reason |", "|---|---|---|"]
        for r in not_done:
            reason = str(r.reason or "").replace("|", "/").replace("\n", " ")
            lines.append(f"| {r.path} | {r.status} | {reason} |")
        lines.append("")
    return "\n".join(lines)


def _plain_table(heading: str, lengths: list[int], rows: list[tuple[str, list[str]]]) -> str:
    width = max([len("series"), *(len(label) for label, _ in rows)]) + 2
    lines = [heading, f"{'series':<{width}}" + "".join(f"{length:>10}" for length in lengths)]
    lines += [f"{label:<{width}}" + "".join(f"{cell:>10}" for cell in cells)
              for label, cells in rows]
    return "\n".join(lines)


def terminal_table(report: Report, mode: str = "nonoverlapping") -> str:
    """curve x length -> perplexity (mean over seeds), for the end of a sweep; and for task
    runs, per task, series x length -> the report's first task metric (mean over seeds)."""
    curves = mode_curves(report.series, mode)
    tables = []
    by_task = task_groups(report.tasks)
    if curves or not by_task:
        lengths = sorted({length for c in curves for length in c.cells})
        tables.append(_plain_table(
            f"perplexity ({mode}{stride_note(curves)}; mean over seeds)", lengths,
            [(c.label, ["" if (cell := c.cells.get(length)) is None else "n/a"
                        if cell.ppl is None else fmt(cell.ppl.value) for length in lengths])
             for c in curves]))
    metric = report.task_metrics[0]
    for task, ours in by_task.items():
        cells = [(s.label, task_cells(s, metric)) for s in ours]
        lengths = sorted({length for _, c in cells for length in c})
        tables.append(_plain_table(
            f"{METRICS[metric].name} on {task} (mean over seeds"
            f"{', and depths' * takes_depth(task)})",
            lengths, [(label, [task_cell_text(c.get(length), interval=False)
                               for length in lengths]) for label, c in cells]))
    return "\n\n".join(tables)
