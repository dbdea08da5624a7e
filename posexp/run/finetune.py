"""A fine-tune starts from its parent's weights, as they were when it was set up (its
config is built by runs/parents.py)."""

from __future__ import annotations

from pathlib import Path

from posexp.config import RunSpec
from posexp.errors import PosexpError
from posexp.runs import Run, weights_sha256


def parent_weights(spec: RunSpec) -> dict:
    """The weights a fine-tune starts from: its parent's, as they were when it was set up."""
    cfg = spec.cfg
    parent = Run(Path(cfg.parent.run))
    try:
        state = parent.load_checkpoint()
    except PosexpError as e:
        raise PosexpError(f"cannot start the fine-tune from its parent: {e}") from None
    if weights_sha256(state["model"]) != cfg.parent.weights_sha256:
        raise PosexpError(f"the weights of {parent.path} have changed since this fine-tune was "
                          "set up; run posexp finetune again to fine-tune them as they are")
    return state["model"]
