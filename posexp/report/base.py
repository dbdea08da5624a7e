"""What every table and figure of a report is drawn from, built once (``Report.of``): the
completed runs and the others, their perplexity series and task series, and the groups of
runs of one config and seed that count once; and the registry of figures that
``write_report`` walks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from posexp.report.series import Series, build_series
from posexp.report.tasks import EXACT, TaskSeries, task_series
from posexp.runs import MODES, RunResult


@dataclass
class Report:
    runs: list[RunResult]  # completed
    not_done: list[RunResult]  # unfinished, failed, damaged, ...
    series: list[Series]
    tasks: list[TaskSeries]
    duplicates: list[list[RunResult]]  # runs of one config and seed: the first counts
    # the accuracies task tables and figures show (tasks.METRICS): a claim suite's report
    # shows the one its verdicts judge
    task_metrics: tuple[str, ...] = (EXACT,)

    @classmethod
    def of(cls, runs: list[RunResult], not_done: list[RunResult] = (),
           task_metrics: tuple[str, ...] = (EXACT,)) -> Report:
        series, duplicates = build_series(runs)
        tasks, task_duplicates = task_series(runs)
        groups = {tuple(str(r.path) for r in group): group
                  for group in duplicates + task_duplicates}
        return cls(runs, list(not_done), series, tasks, list(groups.values()),
                   tuple(task_metrics))

    @property
    def modes(self) -> list[str]:
        """The evaluation modes the runs hold points of, in MODES order."""
        found = {p["mode"] for r in self.runs for p in r.curve}
        return [m for m in MODES if m in found]


@dataclass(frozen=True)
class Figure:
    """A kind of figure: ``draw`` gives (file stem, matplotlib figure) for each figure of its
    kind that a report holds (none, where it has nothing to show)."""

    name: str
    order: int  # where it stands among a report's files
    draw: Callable[[Report], Iterator[tuple[str, object]]]


FIGURES: list[Figure] = []


def register_figure(figure: Figure) -> Figure:
    if any(f.name == figure.name for f in FIGURES):
        raise ValueError(f"two figures are called {figure.name!r}")
    FIGURES.append(figure)
    FIGURES.sort(key=lambda f: f.order)
    return figure
