"""What the documentation quotes from committed reports and the registry of encodings,
generated or checked, never typed: a number typed by hand drifts from the report it came
from (the README once did), a list of encodings from the registry.

* A verdict table sits between ``<!-- verdicts: DIR -->`` and ``<!-- /verdicts -->``, and is
  written from DIR/verdicts.json (``regenerate``; ``python -m posexp.claims.digest FILE...``
  writes the sections again after a report is).
* A paragraph after ``<!-- numbers: DIR -->`` may quote numbers of DIR's report in prose,
  each after the name of the statistic it is, in a comment the page does not show:
  ``<!-- At 16M tokens > nope L=128 -->1.791``.  The name is a line of the report
  (verdicts.md, then summary.md) -- the first line holding its first part, then the next
  holding each part after ``>`` -- and every decimal number up to the next name must be
  printed on that line, as there or rounded to fewer places (``unquoted``).

* A table of encodings sits between ``<!-- encodings: KIND -->`` and ``<!-- /encodings -->``
  (posexp/encodings/tables.py), written from the registry by the same command.

DIR is relative to the repository root.  tests/unit/test_committed_results.py holds the
documents to both."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from posexp.claims.base import HOLDS

SECTION = re.compile(r"(<!-- verdicts: (\S+) -->\n).*?(<!-- /verdicts -->)", re.S)
PARAGRAPH = re.compile(r"<!-- numbers: (\S+) -->\n(.*?)(?:\n\n|\Z)", re.S)
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.]*\d)")
QUOTED = re.compile(rf"<!-- (.+?) -->|{DECIMAL.pattern}")  # a statistic's name, or a number
REPORT_FILES = ("summary.md", "verdicts.md")


def digest(verdicts: dict) -> str:
    """A report's verdicts as the documentation tables them: each claim as numbered in its
    report, what was measured with its interval, the verdict, and where the report has
    them, the verdict after Holm's correction and its stability across training budgets."""
    rows = verdicts["verdicts"]
    holm = any(v.get("holm") for v in rows)
    budget = any(v.get("budget") for v in rows)
    lines = ["| claim | measured (95% interval) | verdict |" + " Holm |" * holm
             + " budgets |" * budget, "|---|---|---|" + "---|" * (holm + budget)]
    for v in rows:
        cells = [v["claim"], v["measured"], bold(v["verdict"])]
        cells += [bold(v.get("holm") or "—")] * holm + [v.get("budget") or "—"] * budget
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def bold(verdict: str) -> str:
    """A verdict as the tables print it: holds plain, anything else in bold."""
    return verdict if verdict in (HOLDS, "—") else f"**{verdict}**"


def regenerate(text: str, root: Path) -> str:
    """``text`` with every verdicts section written again from its report under ``root``."""
    def section(m: re.Match) -> str:
        data = json.loads((root / m[2] / "verdicts.json").read_text())
        return f"{m[1]}{digest(data)}\n{m[3]}"
    return SECTION.sub(section, text)


def _matches(quoted: str, printed: str) -> bool:
    """Whether ``quoted`` is ``printed`` (a number of the report), or it rounded to fewer
    decimal places."""
    places = len(quoted.split(".")[1])
    have = len(printed.split(".")[1])
    return quoted == printed or (places < have
                                 and f"{float(printed):.{places}f}" == quoted)


def named_line(report: Path, name: str) -> str | None:
    """The line of ``report`` that ``name`` names: in verdicts.md, else summary.md, the
    first line holding its first part, then the next line holding each part after ``>``."""
    for file in REPORT_FILES:
        lines = (report / file).read_text().splitlines() if (report / file).is_file() else []
        at = 0
        for part in (p.strip() for p in name.split(" > ")):
            at = next((i for i in range(at, len(lines)) if part in lines[i]), -1)
            if at < 0:
                break
        else:
            return lines[at]
    return None


def unquoted(text: str, root: Path) -> list[str]:
    """The decimal numbers of ``text``'s numbers paragraphs that are not the statistic
    they follow the name of (named_line), or follow none, each as 'DIR: NUMBER (why)'."""
    missing = []
    for m in PARAGRAPH.finditer(text):
        report, name, line = root / m[1], None, None
        for token in QUOTED.finditer(m[2]):
            if token[1] is not None:
                name, line = token[1], named_line(report, token[1])
                continue
            q = token[0]
            why = ("names no statistic: put <!-- its line in the report --> before it"
                   if name is None else f"no line {name!r} in the report" if line is None
                   else None if any(_matches(q, p) for p in DECIMAL.findall(line))
                   else f"not on the report's line {name!r}")
            if why:
                missing.append(f"{m[1]}: {q} ({why})")
    return missing


def main(files: list[str]) -> int:
    """Write the verdicts sections of ``files`` again, from the reports under the current
    directory (the repository root), and their tables of encodings from the registry."""
    from posexp.encodings import tables  # the registry imports torch: only when writing

    for name in files:
        path = Path(name)
        path.write_text(tables.regenerate(regenerate(path.read_text(), Path.cwd())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
