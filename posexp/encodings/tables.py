"""The tables of encodings the documents show, written from the registry: the README's (what
each does, its paper, how far it runs past the training length) and docs/encodings.md's
sources (each label and citation).  A document holds a table between ``<!-- encodings: KIND
-->`` and ``<!-- /encodings -->``; ``python -m posexp.claims.digest FILE...`` writes them
again with the verdicts, and a test holds the committed documents to what it writes, so that
no document keeps a list of encodings of its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from posexp.encodings.registry import ENCODINGS, EncodingSpec, in_order

SECTION = re.compile(r"(<!-- encodings: (\w+) -->\n).*?(<!-- /encodings -->)", re.S)


def _table(header: tuple[str, ...], row: Callable[[EncodingSpec], tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row(ENCODINGS[name])) + " |" for name in in_order()]
    return "\n".join(lines) + "\n"


def readme() -> str:
    return _table(("`encoding=`", "what it does", "paper", "past the training length"),
                  lambda s: (f"`{s.name}`", s.summary, s.paper, s.reach))


def sources() -> str:
    return _table(("`encoding=`", "label in reports", "source"),
                  lambda s: (f"`{s.name}`", s.label, s.citation))


TABLES: dict[str, Callable[[], str]] = {"readme": readme, "sources": sources}


def regenerate(text: str) -> str:
    """``text`` with each of its encodings tables written again from the registry."""

    def section(m: re.Match) -> str:
        if m[2] not in TABLES:
            raise ValueError(f"no encodings table {m[2]!r}; the tables: {', '.join(TABLES)}")
        return m[1] + TABLES[m[2]]() + m[3]

    return SECTION.sub(section, text)

