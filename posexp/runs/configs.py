"""A run's config.yaml read back: the config (read_config), and its identity, worked out once
a process for each text the file holds (file_identity) -- a reproduce over a finished suite
asks for each run's several times, and parsing YAML is most of what that costs."""

from __future__ import annotations

import copy
import functools
import hashlib
import io
import json
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posexp.config.identity import identity
from posexp.errors import PosexpError, first_line
from posexp.runs.files import require_regular


def read_config(file: Path) -> DictConfig:
    """A run's config.yaml; a PosexpError naming it when it cannot be read as a mapping."""
    return _parsed(file, _text(file))


def file_identity(file: Path, trained_on: str | None) -> dict:
    """The identity (config.identity) of the run config.yaml ``file`` describes, trained on
    ``trained_on`` (run.json's device: the numerics of a run that predates them)."""
    return copy.deepcopy(_identity(file, _text(file), trained_on))


@functools.lru_cache(maxsize=1024)
def _identity(file: Path, text: str, trained_on: str | None) -> dict:
    """file_identity of the file's text as read: keyed by the text itself, so that no edit,
    however quick or in place, is ever answered from before it."""
    cfg = _parsed(file, text)
    try:
        return identity(cfg, trained_on)
    except Exception as e:  # a key missing or of another type: whatever OmegaConf raises
        raise PosexpError(f"{file}: cannot tell the run's identity: {first_line(e)}") from None


def _text(file: Path) -> str:
    require_regular(file)
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, ValueError) as e:
        raise PosexpError(f"{file} is unreadable: {first_line(e)}") from None


def _parsed(file: Path, text: str) -> DictConfig:
    try:
        cfg = OmegaConf.load(io.StringIO(text))
    except (ValueError, OmegaConfBaseException, yaml.YAMLError) as e:
        raise PosexpError(f"{file} is unreadable: {first_line(e)}") from None
    if not isinstance(cfg, DictConfig):
        raise PosexpError(f"{file} is damaged: not a mapping")
    return cfg


def identity_sha256(ident: dict) -> str:
    """SHA-256 of an identity (config.identity), as run.json records it."""
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()


def encoding_module(cfg: DictConfig) -> str | None:
    """encoding.module of a run's config: an encoding of the user's own, or None."""
    encoding = cfg.get("encoding")
    return encoding.get("module") if isinstance(encoding, DictConfig) else None
