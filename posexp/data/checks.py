"""The checks of the data group (configs/data/): a corpus or a task, a tokenizer, files that
exist.  They read the group as a mapping and import nothing of the config layer."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from posexp.data.source import DataSource
from posexp.data.tokenizer import TokenizerKind
from posexp.errors import UsageError
from posexp.values import check_path, in_range, positive

MAX_VOCAB = 2**18  # data.vocab_size (the largest vocabularies in use are about 256k)


def data_source(d: Mapping) -> DataSource:
    """The source of the data group ``d``: data.source, by default data.name."""
    value = d.get("source") or d["name"]
    try:
        return DataSource(value)
    except ValueError:
        raise UsageError(f"data.source must be one of {', '.join(s.value for s in DataSource)}; "
                         f"got {value!r}") from None


def check_data(d: Mapping) -> None:
    """The data group can be read: a plain name, what its source needs, a tokenizer that
    fits (a task keeps its own vocabulary)."""
    if not re.fullmatch(r"[\w.-]+", d["name"] or "") or d["name"].startswith("."):
        raise UsageError(f"data.name must be a plain name (letters, digits, . _ -), got "
                         f"{d['name']!r}")
    source = data_source(d)
    if (d["name"] == DataSource.task.value) != (source == DataSource.task):
        raise UsageError(f"data.source={source.value} contradicts data={d['name']}: "
                         + ("data=task generates a task's instances; drop data.source, or "
                            "choose a corpus with data=NAME (posexp train --help lists them)"
                            if d["name"] == DataSource.task.value else
                            "a task is chosen with data=task task=NAME"))
    _check_source(d, source)
    # a file or dataset that this source would not read: set by mistake, silently ignored
    reads = {DataSource.text: ("path", "train_path", "val_path"), DataSource.enwik8: ("path",),
             DataSource.hub: ("hf_name", "hf_config")}.get(source, ())
    for key in ("path", "train_path", "val_path", "hf_name", "hf_config"):
        if d[key] and key not in reads:
            raise UsageError(f"data.{key} is set, but data={d['name']} does not read it "
                             "(data=text reads data.path, data=hf data.hf_name)")
    in_range("data.val_fraction", d["val_fraction"], 0.0, 1.0, low_open=True, high_open=True)
    _check_tokenizer(d, source)


def _check_source(d: Mapping, source: DataSource) -> None:
    name = d["name"]
    if source == DataSource.text:
        if not d["path"] and not (d["train_path"] and d["val_path"]):
            raise UsageError(f"data={name} needs data.path=FILE_OR_DIR, or both "
                             "data.train_path and data.val_path")
        if d["path"] and (d["train_path"] or d["val_path"]):
            raise UsageError("data.path and data.train_path/data.val_path exclude each other; "
                             "set one or the other")
        glob = d["glob"]
        if not glob or os.path.isabs(glob) or ".." in glob.split("/"):
            raise UsageError("data.glob must be a pattern relative to data.path (e.g. "
                             f"'**/*.txt'), got {glob!r}")
    if source == DataSource.enwik8 and not d["path"]:
        raise UsageError(f"data={name} needs data.path=ENWIK8_FILE (unzipped from "
                         "http://mattmahoney.net/dc/enwik8.zip)")
    if source == DataSource.hub:
        if not d["hf_name"]:
            raise UsageError(f"data={name} needs data.hf_name=DATASET (a Hugging Face Hub id)")
        for key in ("train_split", "val_split", "text_column"):
            if not d[key]:
                raise UsageError(f"data.{key} must not be empty")


def _check_tokenizer(d: Mapping, source: DataSource) -> None:
    tokenizer = TokenizerKind(d["tokenizer"])
    if source == DataSource.task:
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
    source = data_source(d)
    keys = (("path", "train_path", "val_path") if source == DataSource.text
            else ("path",) if source == DataSource.enwik8 else ())
    for key in keys:
        if d[key]:
            check_path(f"data.{key}", d[key])
    if TokenizerKind(d["tokenizer"]) == TokenizerKind.file and d["tokenizer_path"]:
        check_path("data.tokenizer_path", d["tokenizer_path"])
        if os.path.isdir(os.path.expanduser(d["tokenizer_path"])):
            raise UsageError(f"data.tokenizer_path {d['tokenizer_path']!r} is a directory; it "
                             "names a tokenizer.json file")


def is_task_data(d: Mapping) -> bool:
    """Whether the data group is an algorithmic task (data=task) rather than a corpus."""
    return (d.get("source") or d["name"]) == DataSource.task.value
