"""Corpora written by tests: deterministic English-like text, and data configs of it."""

from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from posexp.config.schema import DataConfig

VOCABULARY = ("the of and to in a is that for it as was with be by on not he this are or his "
              "from at which but have an they you were her she there been one all we their "
              "position rotary attention window length sequence token model train")


def write_words(path: Path, n_bytes: int, seed: int = 0) -> bytes:
    """Deterministic English-like text of about n_bytes, in lines of a few words."""
    rng, words = np.random.default_rng(seed), VOCABULARY.split()
    lines, size = [], 0
    while size < n_bytes:
        line = " ".join(words[i] for i in rng.integers(0, len(words), rng.integers(3, 15)))
        lines.append(line.capitalize() + ".\n")
        size += len(lines[-1])
    text = "".join(lines).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    return text


def data_cfg(**kw):
    return OmegaConf.merge(OmegaConf.structured(DataConfig), kw)


def cache_entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name != ".locks")


def word_files(root: Path, count: int, size: int) -> Path:
    """``count`` documents of about ``size`` bytes each under ``root``."""
    for i in range(count):
        write_words(root / f"doc{i:02d}.txt", size, seed=i)
    return root
