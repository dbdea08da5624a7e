"""The checks of the data group (configs/data/): a corpus or a task, a tokenizer, files that
exist.  They read the group as a mapping and import nothing of the config layer."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from posexp.data.kinds import KINDS, TASK, read_keys, sources
from posexp.data.tokenizer import TokenizerKind
from posexp.errors import UsageError
from posexp.values import check_path, in_range, positive

MAX_VOCAB = 2**18  # data.vocab_size (the largest vocabularies in use are about 256k)


def data_source(d: Mapping) -> str:
    """The source of the data group ``d``: data.source, by default data.name -- a corpus
    kind of the registry (kinds.py), or task."""
    value = str(d.get("source") or d["name"])
    if value not in sources():
        raise UsageError(f"data.source must be one of {', '.join(sources())}; got "
                         f"{value!r}")
    return value


def check_data(d: Mapping) -> None:
    """The data group can be read: a plain name, what its source needs, a tokenizer that
    fits (a task keeps its own vocabulary)."""
    if not re.fullmatch(r"[\w.-]+", d["name"] or "") or d["name"].startswith("."):
        raise UsageError(f"data.name must be a plain name (letters, digits, . _ -), got "
                         f"{d['name']!r}")
    source = data_source(d)
    if (d["name"] == TASK) != (source == TASK):
        raise UsageError(f"data.source={source} contradicts data={d['name']}: "
                         + ("data=task generates a task's instances; drop data.source, or "
                            "choose a corpus with data=NAME (posexp train --help lists them)"
                            if d["name"] == TASK else
                            "a task is chosen with data=task task=NAME"))
    kind = KINDS.get(source)
    if kind is not None and kind.check is not None:
        kind.check(d)
    # a file or dataset that this source would not read: set by mistake, silently ignored
    reads = kind.reads if kind is not None else ()
    for key in read_keys():
        if d[key] and key not in reads:
            raise UsageError(f"data.{key} is set, but data={d['name']} does not read it "
                             "(data=text reads data.path, data=hf data.hf_name)")
    in_range("data.val_fraction", d["val_fraction"], 0.0, 1.0, low_open=True, high_open=True)
    _check_tokenizer(d, source)


def _check_tokenizer(d: Mapping, source: str) -> None:
    tokenizer = TokenizerKind(d["tokenizer"])
    if source == TASK:
        from posexp.data.tasks import VOCAB_SIZE

        if tokenizer != TokenizerKind.byte or d["vocab_size"] != VOCAB_SIZE:
            raise UsageError(f"data=task has its own vocabulary of {VOCAB_SIZE} tokens: "
                             "data.tokenizer and data.vocab_size stay as configs/data/task.yaml "
                             "sets them")
    positive("data.vocab_size", d["vocab_size"], MAX_VOCAB)
    if tokenizer == TokenizerKind.bpe and d["vocab_size"] <= 256:
        raise UsageError(f"data.vocab_size must be above 256 (the byte alphabet) for "
                         f"data.tokenizer=bpe, got {d['vocab_size']}")
    if tokenizer == TokenizerKind.file and not d["tokenizer_path"]:
        raise UsageError("data.tokenizer=file needs data.tokenizer_path=TOKENIZER_JSON")
    if tokenizer != TokenizerKind.file and d["tokenizer_path"]:
        raise UsageError(f"data.tokenizer_path is set, but data.tokenizer={tokenizer.value} "
                         "does not read it (add data.tokenizer=file)")


def check_paths(d: Mapping) -> None:
    """The files ``d`` (the data group) names exist and are regular files or directories.
    posexp train checks them before it starts; in a sweep each job meets them when it loads
    its corpus (data/text.py), so one job's missing file fails that job only."""
    kind = KINDS.get(data_source(d))
    for key in kind.paths if kind is not None else ():
        if d[key]:
            check_path(f"data.{key}", d[key])
    if TokenizerKind(d["tokenizer"]) == TokenizerKind.file and d["tokenizer_path"]:
        check_path("data.tokenizer_path", d["tokenizer_path"])
        if os.path.isdir(os.path.expanduser(d["tokenizer_path"])):
            raise UsageError(f"data.tokenizer_path {d['tokenizer_path']!r} is a directory; it "
                             "names a tokenizer.json file")


def is_task_data(d: Mapping) -> bool:
    """Whether the data group is an algorithmic task (data=task) rather than a corpus."""
    return (d.get("source") or d["name"]) == TASK
