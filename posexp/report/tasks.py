"""Task runs in a report: a run trained on an algorithmic task holds task points, not curve
points -- exact match on held-out instances at each instance length, and for passkey at
each depth of the key in its context.  Its series are grouped as perplexity series are (one
identity but the seed), one per task scored and RoPE scaling, and get a table per task and
metric (here) and a figure per task and metric, and a length x depth heatmap of each task
that hides at depths (task_figures.py).

The metric is the one a reader's conclusions rest on: exact match by default, and in a claim
suite's report the accuracy its verdicts compare (the preset's thresholds.metric: exact or
token_acc), so that a figure never shows one number while the verdict judges another."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from posexp.data.tasks import TASKS
from posexp.report.curves import NO_INTERVAL, PERCENT, cell_text
from posexp.report.series import (
    Region,
    Series,
    _order,
    config_key,
    encoding_colours,
    encoding_rank,
    label_keys,
    label_parts,
    series_identity,
    short_names,
)
from posexp.report.style import colour_curves
from posexp.runs import DAMAGED, EVAL, RunResult, point_scaling
from posexp.scaling import order as scaling_order
from posexp.stats import Interval, t_interval


def takes_depth(task: str) -> bool:
    """Whether ``task``'s points are scored at depths too (the task registry's takes_depth:
    passkey's key is placed at depths of its context)."""
    return task in TASKS and TASKS[task].takes_depth


TASK_MODE = "task"     # a task series' mode, and its region, which holds no meaning there
NO_REGION: Region = (0, 0)
WILSON = "Wilson over one seed's instances"
# a task's name in a run's task points: it names the task's figure (tasks-NAME.png), so it
# is a plain name, as every task of the registry's is (without '-': tasks-passkey-heatmap is
# another figure's)
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]{0,63}")


def named_tasks(runs: list[RunResult]) -> tuple[list[RunResult], list[RunResult]]:
    """(the runs whose task points each name a task plainly, the others as damaged runs):
    eval.json's ``"task": "x/../../OUTSIDE"`` is a damaged record, never a path."""
    ok, damaged = [], []
    for r in runs:
        bad = next(((i, p["task"]) for i, p in enumerate(r.tasks, 1)
                    if not TASK_NAME.fullmatch(p["task"])), None)
        if bad is None:
            ok.append(r)
            continue
        damaged.append(RunResult(r.path, {"status": DAMAGED, "reason": (
            f"{r.path / EVAL} is damaged: task point {bad[0]}: 'task' is {bad[1]!r:.40}, "
            "not a task name")}))
    return ok, damaged


@dataclass
class TaskSeries(Series):
    """A series of task runs: its points are the members' task points of ``task`` with its
    RoPE scaling (``task_points``; the inherited curve ``points`` hold none).
    ``max_length`` is the longest instance length its training drew, None when posexp does
    not know the task."""

    task: str = ""
    max_length: int | None = None

    def task_points(self, run: RunResult) -> dict[tuple[int, float | None], dict]:
        """(length, depth) -> ``run``'s point there; of several (scored with another eval
        seed or count), the one over the most instances."""
        ours = [p for p in run.tasks
                if p["task"] == self.task and point_scaling(p) == self.scaling]
        return {(p["length"], p.get("depth")): p for p in sorted(ours, key=lambda p: p["count"])}


def train_max_length(run: RunResult, task: str) -> int | None:
    """The longest instance length ``run`` trained on: that of its task (identity task.name,
    else ``task``, the one it was scored on) whose instances fit in train.seq_len; for a
    pretrained model (posexp/pretrained, lengths in its tokens) the length it was trained at."""
    from posexp.data.tasks import get_task, max_length_within  # numpy: not at start-up

    if run.train_len is None or "pretrained.id" in run.identity:
        return run.train_len
    try:
        return max_length_within(get_task(run.identity.get("task.name") or task),
                                 run.train_len)
    except ValueError:  # a task posexp does not know, or no instance fits
        return None


def task_rank(task: str) -> tuple[int, str]:
    """The registry's order of the tasks; tasks it does not know after, by name."""
    from posexp.data.tasks import TASKS  # numpy: not at start-up

    names = list(TASKS)
    return (names.index(task) if task in names else len(names), task)


def task_series(runs: list[RunResult]) -> tuple[list[TaskSeries], list[list[RunResult]]]:
    """Every task series of ``runs``, labelled (by what differs between the series of its
    task) and styled (style_tasks), in report order: task, then as build_series orders; and
    the groups of runs of one identity and one seed, of which only the first counts."""
    by_seed: dict[tuple, dict[object, list[RunResult]]] = defaultdict(dict)
    for r in sorted(runs, key=lambda r: str(r.path)):
        for task, scaling in {(p["task"], point_scaling(p)) for p in r.tasks}:
            by_seed[(task, config_key(r), scaling)].setdefault(r.seed, []).append(r)
    series = [TaskSeries(config, scaling, TASK_MODE, NO_REGION,
                         [same[0] for same in seeds.values()], task=task,
                         max_length=train_max_length(next(iter(seeds.values()))[0], task))
              for (task, config, scaling), seeds in by_seed.items()]
    duplicates = {tuple(str(r.path) for r in same): same for seeds in by_seed.values()
                  for same in seeds.values() if len(same) > 1}
    keys: dict[str, list[str]] = {}
    for task in {s.task for s in series}:
        ours = [s for s in series if s.task == task]
        identities = [series_identity(s.members[0]) for s in ours]
        keys[task] = label_keys(identities)
        names = short_names(keys[task], set().union(*identities))
        scalings = any(s.scaling or s.fine_tune for s in ours)
        for s in ours:
            s.parts = label_parts(series_identity(s.members[0]), keys[task], names)
            s.scalings = scalings

    def order(s: TaskSeries) -> tuple:
        ident, tuned = series_identity(s.members[0]), s.fine_tune
        return (task_rank(s.task), encoding_rank(s.encoding), s.encoding, s.root_len,
                tuned is not None, s.train_len, scaling_order(tuned[1]) if tuned else (),
                *(_order(ident.get(k)) for k in keys[s.task]), scaling_order(s.scaling))

    series.sort(key=order)
    style_tasks(series)
    return series, list(duplicates.values())


def style_tasks(series: list[TaskSeries]) -> None:
    """The encoding's colour, shaded where series of one task share it (style.py)."""
    colours = encoding_colours(list(dict.fromkeys(s.encoding for s in series)))
    colour_curves(series, lambda s: colours[s.encoding],
                  lambda s, _: (s.task, s.config, s.scaling), lambda s: s.task)


def task_groups(series: list[TaskSeries]) -> dict[str, list[TaskSeries]]:
    """task -> its series, in report order."""
    groups: dict[str, list[TaskSeries]] = {}
    for s in series:
        groups.setdefault(s.task, []).append(s)
    return groups


@dataclass(frozen=True)
class Metric:
    name: str  # in tables, captions and axis labels
    chance: str  # the task point's key of the best constant answer's score
    what: str  # what it counts, for the table's caption


EXACT = "exact"
METRICS = {
    EXACT: Metric("exact match", "chance_exact", "the share of held-out instances whose whole "
                  "answer is right (teacher-forced argmax, which greedy decoding's exact "
                  "match equals)"),
    "token_acc": Metric("token accuracy", "chance_token", "the share of answer tokens "
                        "right (teacher-forced argmax)"),
}


@dataclass
class TaskCell:
    """One length of a task series: a metric's mean over seeds (for passkey, of each seed's
    mean over depths), and the best constant answer's; ``value`` None where no seed's point
    is applicable, and ``reason`` why."""

    value: Interval | None
    chance: float | None = None
    reason: str | None = None


def metric_interval(by_seed: list[list[dict]], metric: str = EXACT) -> Interval:
    """The mean ``metric`` of applicable points, one list per seed (one point, or one per
    passkey depth): Student-t across two seeds or more, clipped to [0, 1]; one seed's own
    interval, for exact match pooled over the instances of its depths when there are
    several (Wilson), for token accuracy the depths' intervals combined in quadrature."""
    means = [sum(p[metric] for p in points) / len(points) for points in by_seed]
    if len(by_seed) > 1:
        iv = t_interval(means)
        return Interval(iv.value, max(0.0, iv.low), min(1.0, iv.high), iv.n,
                        f"Student-t over {iv.n} seeds, clipped to [0, 1]")
    [points] = by_seed
    low_key, high_key = f"{metric}_low", f"{metric}_high"
    if any(p.get(low_key) is None or p.get(high_key) is None for p in points):
        return Interval(means[0], None, None, 1, NO_INTERVAL)
    if len(points) == 1:
        [p] = points
        return Interval(p[metric], p[low_key], p[high_key], 1, WILSON if metric == EXACT
                        else "one seed's bootstrap over its instances")
    if metric != EXACT:
        n = len(points)
        below = np.sqrt(sum((p[metric] - p[low_key]) ** 2 for p in points)) / n
        above = np.sqrt(sum((p[high_key] - p[metric]) ** 2 for p in points)) / n
        return Interval(means[0], max(0.0, means[0] - below), min(1.0, means[0] + above), 1,
                        "the depths' intervals combined in quadrature")
    from posexp.data.tasks import binomial_interval

    hits = sum(round(p["exact"] * p["count"]) for p in points)
    low, high = binomial_interval(hits, sum(p["count"] for p in points))
    return Interval(means[0], low, high, 1, WILSON + " (pooled over depths)")


def task_cells(s: TaskSeries, metric: str = EXACT) -> dict[int, TaskCell]:
    """length -> the cell of task series ``s`` in ``metric``, at every length one of its
    seeds was scored at."""
    by_run = [s.task_points(r) for r in s.members]
    cells = {}
    for length in sorted({n for points in by_run for n, _ in points}):
        at = [[p for (n, _), p in points.items() if n == length] for points in by_run]
        ok = [ours for points in at if (ours := [p for p in points if p["applicable"]])]
        if not ok:
            reasons = sorted({p.get("reason") or "not applicable" for points in at
                              for p in points})
            cells[length] = TaskCell(None, reason="; ".join(reasons))
            continue
        key = METRICS[metric].chance
        chance = [p[key] for points in ok for p in points if p.get(key) is not None]
        cells[length] = TaskCell(metric_interval(ok, metric),
                                 sum(chance) / len(chance) if chance else None)
    return cells


def passkey_grid(s: TaskSeries) -> tuple[list[int], list[float], np.ndarray]:
    """(lengths, depths, exact) of passkey series ``s``: exact[i, j] is the mean over seeds
    of exact match at depths[i] and lengths[j], NaN where no seed's point is applicable."""
    by_run = [s.task_points(r) for r in s.members]
    lengths = sorted({n for points in by_run for n, _ in points})
    depths = sorted({d for points in by_run for _, d in points if d is not None})
    grid = np.full((len(depths), len(lengths)), np.nan)
    for i, depth in enumerate(depths):
        for j, length in enumerate(lengths):
            ok = [p["exact"] for points in by_run
                  if (p := points.get((length, depth))) and p["applicable"]]
            if ok:
                grid[i, j] = sum(ok) / len(ok)
    return lengths, depths, grid


def acc(x: float) -> str:
    return f"{x:.2f}"


def task_cell_text(cell: TaskCell | None, bold: bool = False, interval: bool = True) -> str:
    if cell is None:
        return ""
    return "n/a" if cell.value is None else cell_text(cell.value, acc, bold, interval)


def seeds_text(s: Series) -> str:
    n = len(s.members)
    return f" ({n} seeds)" if n > 1 else ""


def instances_text(series: list[TaskSeries]) -> str:
    """How many held-out instances, of which eval seed, each point scores."""
    points = [p for s in series for r in s.members for p in s.task_points(r).values()]
    counts = sorted({p["count"] for p in points})
    seeds = sorted({p["eval_seed"] for p in points})
    per = "per length and depth" if takes_depth(series[0].task) else "per length"
    return (f"{' or '.join(map(str, counts))} held-out instances {per} (eval seed"
            f"{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))})")


def length_unit(task: str) -> str | None:
    """What a task's length counts (the task's own words); None for a task posexp does not
    know."""
    from posexp.data.tasks import TASKS

    return TASKS[task].length_unit if task in TASKS else None


def length_text(task: str) -> str:
    unit = length_unit(task)
    return f"instance length in {unit}" if unit else "instance length"


def task_notes(series: list[TaskSeries], cells: list[dict[int, TaskCell]]) -> list[str]:
    """The series not drawn at all, and the lengths not applicable to a series and why: one
    line for each reason and its lengths, naming the series it holds for ("every curve" when
    it holds for all that are drawn, as a task's own length limit does)."""
    lines, drawn = [], []
    by_reason: dict[tuple[str, tuple[int, ...]], list[str]] = defaultdict(list)
    for s, c in zip(series, cells, strict=True):
        if c and all(cell.value is None for cell in c.values()):
            reasons = "; ".join(sorted({cell.reason for cell in c.values()}))
            lines.append(f"not drawn, no length applicable ({reasons}): {s.label} "
                         f"({', '.join(str(r.path) for r in s.members)})")
            continue
        drawn.append(s.label)
        lengths: dict[str, list[int]] = defaultdict(list)
        for length, cell in c.items():
            if cell.value is None:
                lengths[cell.reason].append(length)
        for reason, at in lengths.items():
            by_reason[reason, tuple(at)].append(s.label)
    for (reason, at), labels in by_reason.items():
        who = "every curve" if len(drawn) > 1 and labels == drawn else "; ".join(labels)
        lines.append(f"n/a ({reason}): {who} at {', '.join(map(str, at))}")
    return lines


def task_markdown(series: list[TaskSeries], metrics: tuple[str, ...] = (EXACT,)) -> list[str]:
    """The "Task accuracy" section: per task and metric, its value at each length, one row
    per series (the best at each length in bold where series compete there), and the chance
    level."""
    if not series:
        return []
    lines = ["## Task accuracy", "",
             *(f"{METRICS[m].name.capitalize()}: {METRICS[m].what}." for m in metrics),
             f"Mean over seeds [{PERCENT} interval: Student-t across the seeds with two or "
             f"more, clipped to [0, 1]; with one, over the instances]. Bold: the best at each "
             f"length scored for two series or more. train ≤: the longest instance length "
             f"trained on.", ""]
    for task, ours in task_groups(series).items():
        for metric in metrics:
            lines += _task_table(task, ours, metric)
    return lines


def _task_table(task: str, ours: list[TaskSeries], metric: str) -> list[str]:
    """One task's table of ``metric`` (task_markdown)."""
    cells = [task_cells(s, metric) for s in ours]
    lengths = sorted({n for c in cells for n in c})
    best = {n: max(values) for n in lengths
            if len(values := [c[n].value.value for c in cells
                              if n in c and c[n].value is not None]) > 1}
    reasons = list(dict.fromkeys(cell.reason for c in cells for cell in c.values()
                                 if cell.value is None))
    notes = {reason: f"[^{task}-{metric}-{k}]" for k, reason in enumerate(reasons, 1)}
    extra = [heading for heading, _ in ours[0].columns()]
    words = length_unit(task) or "length"
    lines = [f"### {task}: {METRICS[metric].name} by {words}", "",
             instances_text(ours) + (". Mean over the depths at each length "
                                     f"(tasks-{task}-heatmap shows each depth)."
                                     if takes_depth(task) else "."), "",
             "| " + " | ".join(["encoding", "L_train", *extra, "train ≤", "seeds",
                                *map(str, lengths)]) + " |",
             "|---|---:|" + "---|" * len(extra) + "---:|" * (2 + len(lengths))]
    for s, c in zip(ours, cells, strict=True):
        texts = [(task_cell_text(cell, bold=cell.value is not None
                                 and cell.value.value == best.get(n))
                  + (notes[cell.reason] if cell.value is None else ""))
                 if (cell := c.get(n)) else "" for n in lengths]
        values = [value.replace("|", "/") for _, value in s.columns()]
        lines.append("| " + " | ".join([s.encoding, str(s.train_len), *values,
                                        "?" if s.max_length is None else str(s.max_length),
                                        str(len(s.members)), *texts]) + " |")
    chance = [[cell.chance for c in cells if (cell := c.get(n)) and cell.chance is not None]
              for n in lengths]
    if any(chance):
        lines.append("| " + " | ".join(["chance (best constant answer)",
                                        *[""] * (len(extra) + 3),
                                        *(acc(sum(v) / len(v)) if v else ""
                                          for v in chance)]) + " |")
    lines.append("")
    lines += [f"{mark}: {reason}" for reason, mark in notes.items()]
    lines += [f"* {line}" for line in task_notes(ours, cells)
              if line.startswith("not drawn")]
    lines.append("")
    return lines
