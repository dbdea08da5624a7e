"""A run's kind: what made it, and so what scores it again.  A *trained* run is posexp's own
(posexp train, sweep, finetune); a *pretrained* run holds a Hugging Face model posexp scores
and never trains (posexp pretrained).  run.json records it from the start (Run.create); a run
written before it did is told by its config, whose ``pretrained`` node names the model's
weights.  Commands that take a run directory (eval, resume, finetune) dispatch on it."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from omegaconf import DictConfig

from posexp.runs.files import CONFIG, RUN

TRAINED, PRETRAINED = "trained", "pretrained"


def config_kind(cfg: DictConfig | dict) -> str:
    """The kind of a run of ``cfg``: a pretrained run's config has its ``pretrained`` node."""
    return PRETRAINED if "pretrained" in cfg else TRAINED


def run_kind(path: Path) -> str:
    """The kind of the run in ``path`` as run.json records it, else as its config.yaml tells
    (runs written before run.json said); trained where neither can be read -- the command then
    meets the damage itself and says what it is."""
    return _recorded(Path(path) / RUN) or _told(Path(path) / CONFIG)


def _recorded(file: Path) -> str | None:
    if not file.is_file():  # a FIFO would block the read; missing: the command says so
        return None
    try:
        recorded = json.loads(file.read_text()).get("kind")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return recorded if recorded in (TRAINED, PRETRAINED) else None


def _told(file: Path) -> str:
    if not file.is_file():
        return TRAINED
    try:
        cfg = yaml.safe_load(file.read_text())
    except (OSError, ValueError, yaml.YAMLError, RecursionError):
        return TRAINED
    named = isinstance(cfg, dict) and isinstance(cfg.get("pretrained"), dict) \
        and bool(cfg["pretrained"].get("weights_sha256"))
    return PRETRAINED if named else TRAINED
