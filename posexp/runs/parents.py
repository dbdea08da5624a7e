"""A fine-tune's config, from its parent run: the parent read under its lock and checked
whole (``parent_record``), its config.yaml with the fine-tune's overrides (``finetune_config``).
The fine-tune's identity holds its parent's identity and weights hash.  posexp finetune, the
claim suites and their campaigns build a fine-tune here; run/finetune.py starts it from the
parent's weights."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from posexp.config import apply_overrides, check
from posexp.config.derive import train_scaling
from posexp.config.guards import parse_override, scaling_sugar
from posexp.config.identity import SEED_KEYS
from posexp.config.schema import EvalScalingConfig
from posexp.errors import UsageError
from posexp.runs.configs import encoding_module
from posexp.runs.files import CONFIG, RUN
from posexp.runs.store import Run, weights_sha256

# what a fine-tune may change of its parent's config: how it trains on, not what it is
FINETUNE_KEYS = ("train.", "eval.", "encoding.scaling", "seed", "device", "attention",
                 "logger.", "results_dir", "experiment", "run_name")


def digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def parent_record(path: Path, record: bool = False) -> dict:
    """What a fine-tune records of the run it continues (config.ParentConfig), read under
    that run's lock: a completed run whose config.yaml is the one it was trained with, whose
    encoding module (one of the user's) is the source it was trained with, and whose
    checkpoint holds the weights its run.json names (Run.load_checkpoint checks them); a
    UsageError or PosexpError, in one line, for anything else.  With ``record``, a parent
    without its checkpoint (a run record) is taken at run.json's weights_sha256: enough to
    tell the fine-tune's identity, so that reproduce finds a fine-tune's record complete;
    training it still needs the parent's weights (parent_weights)."""
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory; posexp finetune continues a completed "
                         "run directory")
    missing = [n for n in (CONFIG, RUN) if not os.path.lexists(path / n)]
    if missing:
        raise UsageError(f"{path} is not a posexp run (no {' or '.join(missing)})")
    run = Run(path)
    with run.lock():
        info = run.info()  # a FIFO or a directory there is refused, never opened
        status = info.get("status")
        if status != "completed":
            advice = f" (posexp resume {path} finishes it)" if status in (
                "running", "interrupted") else ""
            raise UsageError(f"{path} has status {status!r}; only a completed run can be "
                             f"fine-tuned{advice}")
        identity = run.check_identity(info)
        run.check_code(info, encoding_module(run.config()))
        if record and run.is_record(info) and isinstance(info.get("weights_sha256"), str):
            weights = info["weights_sha256"]
        else:
            run.require_checkpoint("posexp finetune")
            weights = weights_sha256(run.load_checkpoint()["model"])
    return {"run": str(path.resolve()), "identity": digest(identity),
            "config": digest({k: v for k, v in identity.items() if k not in SEED_KEYS}),
            "weights_sha256": weights,
            "original_len": identity.get("parent.original_len") or identity["train.seq_len"]}


def finetune_config(parent_dir: Path, overrides: list[str], record: bool = False) -> DictConfig:
    """The checked config of a fine-tune of the completed run in ``parent_dir``: the parent's
    config (its evaluation without the parent's RoPE-scaling variants) with ``overrides``,
    written beside the parent unless results_dir, experiment or run_name say otherwise, and
    the parent's identity, weights hash and original length in parent.*; ``record``: a
    parent without its checkpoint is taken at its recorded weights (parent_record)."""
    parent = parent_record(parent_dir, record)
    saved = Run(parent_dir).config()
    home = parent_dir.absolute()
    with open_dict(saved):
        saved.eval.rope_scaling = OmegaConf.structured(EvalScalingConfig)
        saved.results_dir = str(home.parent.parent if parent_dir.is_absolute()
                                else os.path.relpath(home.parent.parent))
        saved.experiment = home.parent.name
        saved.train.resume = True
        # the fine-tune trains in its own device's numerics (its identity), not its parent's
        saved.train.precision = "auto"
        saved.train.device_kind = None
        if saved.train.get("batch_tokens") is None:  # resolved: the batch in tokens again,
            # so that a step holds as many tokens at the new length
            saved.train.batch_tokens = saved.train.batch_size * saved.train.seq_len
            saved.train.batch_size = None
    cfg = apply_overrides(saved, overrides, allowed=FINETUNE_KEYS, run_dir=parent_dir,
                          command="finetune")
    OmegaConf.update(cfg, "parent", parent, merge=True)
    if not any(parse_override(scaling_sugar(o)).key_or_group == "run_name" for o in overrides):
        parts = [f"L{cfg.train.seq_len}"] * (cfg.train.seq_len != saved.train.seq_len)
        scaled = train_scaling(cfg)
        if scaled is not None:
            parts.append(f"{scaled['method']}{scaled['factor']:g}")
        # a short fine-tune and continued training of one parent are two runs
        parts += [f"{cfg.train.tokens}tok"] * (cfg.train.tokens != saved.train.tokens)
        cfg.run_name = "-".join([parent_dir.name, "ft", *parts])
    check(cfg)
    return cfg
