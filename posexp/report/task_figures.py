"""The figures of task runs: accuracy against instance length per task and metric the
report shows (tasks.py: exact match, or the metric a claim suite's verdicts use), and for
each task that hides at depths (passkey, the needles) a heatmap of exact match over context
length and depth."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterator

import numpy as np

from posexp.report.base import Figure, Report, register_figure
from posexp.report.plotting import (
    GREY,
    add_caption,
    coinciding,
    draw,
    interval_caption,
    label_axes,
    legend_and_caption,
    log2_x,
    new_figure,
    titled,
    train_lengths,
)
from posexp.report.series import describe
from posexp.report.style import current
from posexp.report.tasks import (
    EXACT,
    METRICS,
    TaskSeries,
    acc,
    instances_text,
    length_text,
    passkey_grid,
    seeds_text,
    takes_depth,
    task_cells,
    task_groups,
    task_notes,
)
from posexp.stats import Interval

MAX_TICKS = 12         # length ticks of a task figure; more evaluated lengths are thinned
ANNOTATED = (8, 6)     # a heatmap of at most this many lengths x depths prints its values
MAX_PANELS = 12        # heatmap panels; the series beyond are named in its caption
PANEL_COLUMNS = 3


def _thinned(lengths: list[int]) -> list[int]:
    """At most about MAX_TICKS of ``lengths``, spread evenly on a log axis, the first and
    the last kept."""
    if len(lengths) <= MAX_TICKS:
        return lengths
    step = math.log2(lengths[-1] / lengths[0]) / MAX_TICKS
    kept = [lengths[0]]
    for n in lengths[1:-1]:
        if math.log2(n / kept[-1]) >= step and math.log2(lengths[-1] / n) >= step:
            kept.append(n)
    return [*kept, lengths[-1]]


def _task_subtitle(series: list[TaskSeries]) -> str:
    return " · ".join(filter(None, [f"{series[0].task} task: {instances_text(series)}",
                                    describe(series)]))


def task_figure(series: list[TaskSeries], task: str, metric: str = EXACT):
    """``metric`` (tasks.METRICS) against instance length on ``task``, one line per series
    (passkey: the mean over depths); None when no series of it has an applicable length."""
    ours = [s for s in series if s.task == task]
    cells = [task_cells(s, metric) for s in ours]
    drawn = [(s, c) for s, c in zip(ours, cells, strict=True)
             if any(cell.value is not None for cell in c.values())]
    if not drawn:
        return None
    name = METRICS[metric].name
    fig, body, [ax] = new_figure(f"{name.capitalize()} on {task} vs {length_text(task)}",
                              _task_subtitle([s for s, _ in drawn]), 5.0)
    shown: list[tuple[str, list[Interval]]] = []
    lines: list[tuple[str, list[int], list[float]]] = []  # label, lengths, values
    for s, c in drawn:
        xs = [n for n, cell in c.items() if cell.value is not None]
        intervals = [c[n].value for n in xs]
        draw(ax, s.colour, s.style, xs, intervals, s.label + seeds_text(s),
             seeds=_seed_values(s, metric))
        shown.append((s.label, intervals))
        lines.append((s.label, xs, [iv.value for iv in intervals]))
    lengths = sorted({n for _, c in drawn for n in c})
    log2_x(ax, _thinned(lengths), lengths[0] / 1.25, lengths[-1] * 1.25)
    ax.set_ylim(-0.03, 1.12)  # room above 1 for the training lines' labels
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1])
    chance = {n: [c[n].chance for _, c in drawn if n in c and c[n].chance is not None]
              for n in lengths}
    chance = {n: sum(v) / len(v) for n, v in chance.items() if v}
    if len({round(v, 6) for v in chance.values()}) == 1:
        ax.axhline(next(iter(chance.values())), color=GREY, linestyle="--", linewidth=1.2,
                   zorder=1)
    elif chance:
        ax.plot(list(chance), list(chance.values()), color=GREY, linestyle="--",
                linewidth=1.2, zorder=1)
    longest = sorted({s.max_length for s, _ in drawn if s.max_length})
    train_lengths([ax], longest, "train ≤ {}")
    label_axes(ax, f"{length_text(task)} (log₂ scale)",
               f"{name} (share of {'instances' if metric == EXACT else 'answer tokens'})")
    caption = interval_caption(shown) + coinciding(lines)
    if takes_depth(task):
        caption.append(f"{'Passkey' if task == 'passkey' else task}: each point is the "
                       "accuracy averaged over the depths of the key "
                       f"(tasks-{task}-heatmap shows each depth).")
    caption += task_notes(ours, cells)
    references = (((":", "longest training instance"),) * bool(longest)
                  + (("--", "chance (best constant answer)"),) * bool(chance))
    legend_and_caption(body, ax, caption, references=references)
    return fig


def _seed_values(s: TaskSeries, metric: str) -> list[tuple[list[int], list[float]]]:
    """(lengths, values) of each seed's own ``metric`` (passkey: its mean over depths)."""
    out = []
    for r in s.members:
        at: dict[int, list[float]] = {}
        for (n, _), p in sorted(s.task_points(r).items(), key=lambda item: item[0][0]):
            if p["applicable"]:
                at.setdefault(n, []).append(p[metric])
        out.append((list(at), [sum(v) / len(v) for v in at.values()]))
    return out


def _panel_text(columns: int) -> tuple[float, float, float, int]:
    """(ticks, labels, cells) in pt and a panel title's characters a line, for heatmap panels
    ``columns`` across: on screen as ever; in a paper the style's sizes, titles wrapped to
    the panel's width (a character is about 0.55 of its size wide)."""
    look = current()
    if look.words_inside:
        return 8, 9, 7, 42
    return (look.small, look.label, look.note - 1,
            int(0.7 * look.width / columns * 72 / (0.55 * look.label)))


def depth_heatmap(series: list[TaskSeries], task: str):
    """Per series of ``task`` (one that hides at depths: passkey, the needles; up to
    MAX_PANELS), exact match over context length x depth, depth 0 (the key at the start) on
    top; None when none has an applicable point."""
    from matplotlib import colormaps, patheffects

    grids = [(s, passkey_grid(s)) for s in series if s.task == task]
    drawn = [(s, g) for s, g in grids if np.isfinite(g[2]).any()]
    if not drawn:
        return None
    caption = ["Cells: exact match, mean over seeds; grey: n/a. Dashed line: the longest "
               "training instance, between the lengths it separates."]
    ours = [s for s, _ in grids]
    caption += task_notes(ours, [task_cells(s) for s in ours])
    caption += [f"not drawn, beyond {MAX_PANELS} panels: {s.label}"
                for s, _ in drawn[MAX_PANELS:]]
    drawn = drawn[:MAX_PANELS]
    # a panel needs about 2 inches: one paper column holds one
    columns = min(PANEL_COLUMNS, len(drawn), max(1, int(current().width // 2)))
    rows = math.ceil(len(drawn) / columns)
    tick, label, cell, wrap = _panel_text(columns)
    title = "Passkey retrieval" if task == "passkey" else task
    fig, body = titled(f"{title}: exact match by context length and depth of the key",
                        _task_subtitle([s for s, _ in drawn]), 3.0 * rows + 0.6)
    axes = body.subplots(rows, columns, squeeze=False)
    cmap = colormaps["viridis"].with_extremes(bad="#dddddd")
    for k, (ax, (s, (lengths, depths, grid))) in enumerate(zip(axes.flat, drawn, strict=False)):
        image = ax.imshow(grid, cmap=cmap, vmin=0, vmax=1, aspect="auto",
                          interpolation="nearest")
        ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], fontsize=tick,
                      rotation=45 * (len(lengths) > 6))
        ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=tick)
        ax.set_title("\n".join(textwrap.wrap(s.label + seeds_text(s)
                                             + (f" · train ≤ {s.max_length}"
                                                if s.max_length else ""), wrap)), fontsize=label)
        if k % columns == 0:
            ax.set_ylabel("depth of the key\n(0: context start)", fontsize=label)
        if k >= len(drawn) - columns:
            ax.set_xlabel("context length (tokens)", fontsize=label)
        if len(lengths) <= ANNOTATED[0] and len(depths) <= ANNOTATED[1]:
            for (i, j), value in np.ndenumerate(grid):
                ax.text(j, i, "n/a" if np.isnan(value) else acc(value), ha="center",
                        va="center", fontsize=cell,
                        color="black" if np.isnan(value) or value > 0.6 else "white")
        within = sum(n <= s.max_length for n in lengths) if s.max_length else 0
        if 0 < within < len(lengths):
            ax.axvline(within - 0.5, color="white", linestyle="--", linewidth=1.5,
                       path_effects=[patheffects.withStroke(linewidth=3, foreground="black")])
    for ax in axes.flat[len(drawn):]:
        ax.set_axis_off()
    body.colorbar(image, ax=axes, label="exact match", shrink=0.9)
    add_caption(body, caption)
    return fig


def _tasks(report: Report) -> Iterator[tuple[str, object]]:
    """tasks-TASK of the report's first metric, tasks-TASK-METRIC of any other."""
    for task in task_groups(report.tasks):
        for k, metric in enumerate(report.task_metrics):
            fig = task_figure(report.tasks, task, metric)
            if fig is not None:
                yield f"tasks-{task}" + (f"-{metric}" if k else ""), fig


def _depth_heatmaps(report: Report) -> Iterator[tuple[str, object]]:
    """tasks-TASK-heatmap of each task that hides at depths."""
    for task in task_groups(report.tasks):
        if takes_depth(task) and (fig := depth_heatmap(report.tasks, task)) is not None:
            yield f"tasks-{task}-heatmap", fig


register_figure(Figure("tasks", 30, _tasks))
register_figure(Figure("depth_heatmaps", 40, _depth_heatmaps))
