"""The registry of corpus kinds: where a corpus comes from (data.source, by default
data.name).  A kind is one module of posexp/data that registers a CorpusKind -- its reader,
the data.* keys it reads, the files among them that must exist, and what else it checks --
plus its YAML under configs/data/; the checks (checks.py) and the loader (``load_corpus``)
read it from here and name no kind.  ``task`` is not a kind: data=task generates a task's
instances (posexp/data/tasks)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from omegaconf import DictConfig

from posexp.data.source import Source

TASK = "task"  # data=task: an algorithmic task, not a corpus


@dataclass(frozen=True)
class CorpusKind:
    name: str  # data.source=NAME
    open: Callable[[DictConfig], Source]  # the data group's corpus as streams (source.py)
    reads: tuple[str, ...] = ()  # data.* keys of the files or datasets it reads
    paths: tuple[str, ...] = ()  # of those, local files or directories that must exist
    # what else its keys need, one line each (a UsageError); None: nothing
    check: Callable[[Mapping], None] | None = None


KINDS: dict[str, CorpusKind] = {}


def register_corpus_kind(kind: CorpusKind) -> CorpusKind:
    if kind.name in KINDS or kind.name == TASK:
        raise ValueError(f"two corpus kinds are called {kind.name!r}")
    KINDS[kind.name] = kind
    return kind


def sources() -> tuple[str, ...]:
    """Every value data.source takes: the kinds, and task."""
    return (*KINDS, TASK)


def read_keys() -> tuple[str, ...]:
    """The data.* keys some kind reads (a kind that does not read one refuses it set)."""
    return tuple(dict.fromkeys(k for kind in KINDS.values() for k in kind.reads))
