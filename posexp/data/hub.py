"""Hugging Face Hub corpora through ``datasets``: WikiText, PG-19, or any dataset by name.

``datasets`` downloads a dataset once into its own cache ($HF_HOME) and memory-maps it from
there, so it loads offline afterwards (HF_HUB_OFFLINE=1).  Each row of ``data.text_column``
is one document, unless ``data.join_rows`` says the rows are the lines of one text
(WikiText), in which case each split is one document.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from omegaconf import DictConfig

from posexp.data.kinds import CorpusKind, register_corpus_kind
from posexp.data.source import Document, Source, cut_blocks
from posexp.errors import PosexpError, UsageError

ROWS_PER_BATCH = 256


@contextmanager
def quiet_retries() -> Iterator[None]:
    """huggingface_hub logs a warning for each retry of a request that fails (without a
    network: several, over about 25 seconds); posexp ends with one line instead."""
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def load_split(cfg: DictConfig, split: str):
    import datasets
    from datasets.exceptions import DatasetNotFoundError
    from huggingface_hub.errors import LocalEntryNotFoundError

    dataset = f"{cfg.hf_name!r}" + (f" ({cfg.hf_config})" if cfg.hf_config else "")
    try:
        with quiet_retries():
            ds = datasets.load_dataset(cfg.hf_name, cfg.hf_config, split=split)
    except (ConnectionError, LocalEntryNotFoundError):
        raise PosexpError(
            f"data={cfg.name} needs a download of the Hugging Face Hub dataset {dataset}, and "
            "there is no network and no cached copy; offline options: data=stdlib, or "
            "data=text data.path=FILE_OR_DIR"
        ) from None
    except DatasetNotFoundError as e:
        raise UsageError(f"data.hf_name: {str(e).splitlines()[0]}") from None
    except ValueError as e:  # an unknown config or split
        raise UsageError(f"data={cfg.name}, {dataset}: {str(e).splitlines()[0]}") from None
    if cfg.text_column not in ds.column_names:
        raise UsageError(f"data.text_column={cfg.text_column!r} is not a column of {dataset}; "
                         f"its columns: {', '.join(ds.column_names)}")
    return ds.select_columns([cfg.text_column])


def rows(ds, column: str) -> Iterator[bytes]:
    for batch in ds.iter(batch_size=ROWS_PER_BATCH):
        for text in batch[column]:
            if text:
                yield text.encode()


def hub_source(cfg: DictConfig) -> Source:
    loaded = {"train": load_split(cfg, cfg.train_split), "val": load_split(cfg, cfg.val_split)}

    def documents(ds) -> Iterator[Document]:
        if cfg.join_rows:
            yield cut_blocks(rows(ds, cfg.text_column))
        else:
            for text in rows(ds, cfg.text_column):
                yield cut_blocks([text])

    return Source(cfg.name, {split: lambda ds=ds: documents(ds) for split, ds in loaded.items()})


def check_hub(d: Mapping) -> None:
    if not d["hf_name"]:
        raise UsageError(f"data={d['name']} needs data.hf_name=DATASET (a Hugging Face Hub id)")
    for key in ("train_split", "val_split", "text_column"):
        if not d[key]:
            raise UsageError(f"data.{key} must not be empty")


register_corpus_kind(CorpusKind("hub", hub_source, ("hf_name", "hf_config"), (), check_hub))
