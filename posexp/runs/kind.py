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
    try:
        recorded = json.loads((Path(path) / RUN).read_text()).get("kind")
    except (OSError, ValueError, AttributeError, RecursionError):
        recorded = None
    if recorded in (TRAINED, PRETRAINED):
        return recorded
    try:
        cfg = yaml.safe_load((Path(path) / CONFIG).read_text())
    except (OSError, ValueError, yaml.YAMLError, RecursionError):
        return TRAINED
    named = isinstance(cfg, dict) and isinstance(cfg.get("pretrained"), dict) \
        and bool(cfg["pretrained"].get("weights_sha256"))
    return PRETRAINED if named else TRAINED
