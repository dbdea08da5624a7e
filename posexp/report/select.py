"""Which series a report shows and what it calls them: ``posexp report --include PATTERN
--exclude PATTERN --label OLD=NEW``.

Patterns are shell-style (fnmatch, ``*`` and ``?``) over the series' labels as the whole
report would print them, so a researcher copies them from a first report's legend; a
series is kept when some --include matches it (or none is given) and no --exclude does.
The kept series are shaded again among themselves (style.py), so that fewer series get
more distinct shades, while line style and marker keep their role.  Labels hold '='
("rope L=16"), so OLD=NEW splits at the '=' after which the text before is a label.  A
pattern or an OLD label that matches nothing is a mistake, not a no-op: it is refused, as
is OLD=NEW without its '=' or with an empty side, and a NEW that another series is called.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fnmatch import fnmatchcase

from posexp.errors import UsageError
from posexp.report.base import Report
from posexp.report.series import style_series
from posexp.report.tasks import style_tasks

SHOWN = 6  # labels a refusal names, of the report's


@dataclass(frozen=True)
class Selection:
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()  # OLD=NEW, split where OLD is a label (labels hold '=')

    @classmethod
    def parse(cls, include: list[str], exclude: list[str], labels: list[str]) -> Selection:
        """The selection the options give; a UsageError for a --label without OLD=NEW."""
        for text in labels:
            if not 0 < text.find("=") <= text.rfind("=") < len(text) - 1:
                raise UsageError(f"--label {text!r}: write --label OLD=NEW, OLD a series' "
                                 "label as the report prints it")
        return cls(tuple(include), tuple(exclude), tuple(labels))

    def apply(self, report: Report) -> Report:
        """``report`` with only the chosen series, relabelled, and the runs they hold;
        itself when nothing is chosen or renamed."""
        if not (self.include or self.exclude or self.labels):
            return report
        every = [*report.series, *report.tasks]
        labels = list(dict.fromkeys(s.label for s in every))
        for option, patterns in (("--include", self.include), ("--exclude", self.exclude)):
            for pattern in patterns:
                if not any(fnmatchcase(label, pattern) for label in labels):
                    raise UsageError(f"{option} {pattern!r} matches no series; "
                                     f"{_labels_text(labels)}")

        def kept(label: str) -> bool:
            return ((not self.include or any(fnmatchcase(label, p) for p in self.include))
                    and not any(fnmatchcase(label, p) for p in self.exclude))

        series = [s for s in report.series if kept(s.label)]
        tasks = [s for s in report.tasks if kept(s.label)]
        if not series and not tasks:
            raise UsageError(f"--include/--exclude leave no series; {_labels_text(labels)}")
        left = list(dict.fromkeys(s.label for s in [*series, *tasks]))
        names = dict(_split(text, left) for text in self.labels)
        _check_distinct({label: names.get(label, label) for label in left})
        for s in [*series, *tasks]:
            s.name = names.get(s.label, s.name)
        style_series(series)
        style_tasks(tasks)
        paths = {str(r.path) for s in [*series, *tasks] for r in s.members}
        return replace(report, runs=[r for r in report.runs if str(r.path) in paths],
                       series=series, tasks=tasks)


def _split(text: str, labels: list[str]) -> tuple[str, str]:
    """(OLD, NEW) of ``text``: OLD the longest label before one of its '=' ("rope L=16=RoPE"
    renames "rope L=16"); a UsageError when no label is."""
    cuts = [k for k, c in enumerate(text) if c == "=" and text[:k] in labels]
    if not cuts:
        raise UsageError(f"--label {text!r}: no series is labelled what comes before any of "
                         f"its '='; {_labels_text(labels)}")
    return text[:cuts[-1]], text[cuts[-1] + 1:]


def _check_distinct(final: dict[str, str]) -> None:
    """Two series the --label options would call alike are refused: a legend or table with
    one label twice cannot say which curve is which."""
    seen: dict[str, str] = {}
    for label, shown in final.items():
        if shown in seen:
            raise UsageError(f"--label would call two series {shown!r} ({seen[shown]!r} and "
                             f"{label!r}); give each its own label")
        seen[shown] = label


def _labels_text(labels: list[str]) -> str:
    more = f" and {len(labels) - SHOWN} more" if len(labels) > SHOWN else ""
    return "the report's labels: " + "; ".join(labels[:SHOWN]) + more
