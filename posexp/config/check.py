"""``check``: a config that composes but cannot run is refused with one line naming the key,
before anything is written.  Types are the schema's; each part's rules live with it (the
data group in data/checks.py, what is trained in check_model.py, what it is scored at in
check_eval.py, RoPE scaling in check_scaling.py); here are the run's own settings and the
order they are checked in."""

from __future__ import annotations

import os
import re

from omegaconf import DictConfig

from posexp.config.bounds import (
    MAX_BATCH_TOKENS,
    MAX_EVAL_TOKENS,
    MAX_LENGTH,
    MAX_RANDOM_POSITIONS,
    MAX_SEED,
    MAX_TOKENS,
)
from posexp.config.check_eval import check_eval, check_task
from posexp.config.check_model import check_encoding, check_model
from posexp.config.keys import check_keys, check_set
from posexp.config.schema import LOGGERS, Attention
from posexp.data.checks import check_data
from posexp.errors import UsageError
from posexp.values import in_range, positive, power

# auto (CUDA when present, else the CPU), cpu, cuda (the current GPU), cuda:N, mps (Apple)
DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d{1,4})?")
PLAIN_NAME = re.compile(r"[\w.,=+-]+")


def check(cfg: DictConfig) -> None:
    """Reject configs that compose but cannot run, with one line naming the key.  Every
    value is checked -- types by the schema, ranges, bounds on what sizes memory or time,
    names in their registries -- before anything is written."""
    check_set(cfg)
    check_keys(cfg)
    check_name("experiment", cfg.experiment)
    check_name("run_name", cfg.run_name)
    if not cfg.results_dir:
        raise UsageError("results_dir must not be empty (results_dir=. for this directory)")
    long = [part for part in str(cfg.results_dir).split("/") if len(part.encode()) > 255]
    if long or len(os.path.abspath(os.path.expanduser(cfg.results_dir)).encode()) > 3800:
        raise UsageError("results_dir is too long for a path (a part over 255 bytes, or over "
                         f"3800 bytes in all): {str(cfg.results_dir)[:60]}...")
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or not (
            0 <= cfg.seed <= MAX_SEED):
        raise UsageError(f"seed must be an integer in [0, 2**63 - 1], got {cfg.seed}")
    check_device_name(cfg.device)
    if cfg.logger.name not in LOGGERS:
        raise UsageError(f"logger.name must be one of {', '.join(LOGGERS)}, got "
                         f"{cfg.logger.name!r} (logger=wandb chooses W&B)")
    in_range("logger.init_timeout", cfg.logger.init_timeout, 0.0, 3600.0, low_open=True)
    check_data(cfg.data)
    check_encoding(cfg)
    check_model(cfg)
    check_attention(cfg)
    check_train(cfg.train)
    check_task(cfg)
    check_eval(cfg)


def check_name(key: str, value: str | None) -> None:
    """run_name and experiment are one directory each, inside results_dir."""
    if (not isinstance(value, str) or not value or not PLAIN_NAME.fullmatch(value)
            or value.startswith(".") or len(value.encode()) > 200):
        shown = value if not isinstance(value, str) or len(value) <= 60 else value[:60] + "..."
        raise UsageError(f"{key} must be a plain directory name (letters, digits, . _ - , = +; "
                         f"not starting with '.'; at most 200 bytes), got {shown!r}")


def check_train(t: DictConfig) -> None:
    positive("train.seq_len", t.seq_len, MAX_LENGTH)
    for key in ("tokens", "val_every_tokens", "checkpoint_every", "log_every"):
        positive(f"train.{key}", t[key], MAX_TOKENS)
    positive("train.val_tokens", t.val_tokens, MAX_EVAL_TOKENS)
    batch = _check_batch(t)
    if isinstance(t.warmup_tokens, bool) or not isinstance(t.warmup_tokens, int) or not (
            0 <= t.warmup_tokens <= MAX_TOKENS):
        raise UsageError(f"train.warmup_tokens must be an integer in [0, {power(MAX_TOKENS)}], "
                         f"got {t.warmup_tokens}")
    in_range("train.lr", t.lr, 0.0, 1e6, low_open=True)
    in_range("train.min_lr_ratio", t.min_lr_ratio, 0.0, 1.0)
    in_range("train.weight_decay", t.weight_decay, 0.0, 10.0)
    in_range("train.beta1", t.beta1, 0.0, 1.0, high_open=True)
    in_range("train.beta2", t.beta2, 0.0, 1.0, high_open=True)
    in_range("train.grad_clip", t.grad_clip, 0.0, 1e6, low_open=True)
    if t.get("random_positions") is not None:
        positive("train.random_positions", t.random_positions, MAX_RANDOM_POSITIONS)
        if t.random_positions < t.seq_len:
            raise UsageError(f"train.random_positions ({t.random_positions}) must be at least "
                             f"train.seq_len ({t.seq_len}): each sequence reads seq_len "
                             "distinct positions below it")
    if t.tokens < t.seq_len * batch:
        raise UsageError(
            f"train.tokens ({t.tokens}) is less than one batch "
            f"({batch} sequences x train.seq_len = {batch * t.seq_len} tokens)"
        )


def _check_batch(t: DictConfig) -> int:
    """The batch is set once, in tokens or in sequences; its sequences a step."""
    if (t.batch_tokens is None) == (t.batch_size is None):
        raise UsageError("set the batch either in tokens (train.batch_tokens) or in sequences "
                         "(train.batch_size), not both: add train.batch_tokens=null to "
                         "size it in sequences" if t.batch_size is not None else
                         "set the batch size: train.batch_tokens=N or train.batch_size=N")
    if t.batch_tokens is not None:
        positive("train.batch_tokens", t.batch_tokens, MAX_BATCH_TOKENS)
        if t.batch_tokens % t.seq_len:
            raise UsageError(f"train.batch_tokens ({t.batch_tokens}) must be a multiple of "
                             f"train.seq_len ({t.seq_len}): it holds whole sequences")
        return t.batch_tokens // t.seq_len
    positive("train.batch_size", t.batch_size, MAX_BATCH_TOKENS)
    if t.batch_size * t.seq_len > MAX_BATCH_TOKENS:
        raise UsageError(f"train.batch_size x train.seq_len ({t.batch_size * t.seq_len:,} "
                         f"tokens a step) must be at most {MAX_BATCH_TOKENS:,} "
                         f"({power(MAX_BATCH_TOKENS)})")
    return t.batch_size


def check_attention(cfg: DictConfig) -> None:
    from posexp.attention import flash_attn_installed  # torch: not for ls

    kernel = Attention(cfg.attention)
    # which device a kernel can run on is checked once the device is known (pick_device)
    if kernel == Attention.flash and not flash_attn_installed():
        raise UsageError("attention=flash needs the flash-attn package (pip install "
                         "flash-attn); attention=auto picks the best kernel installed")
    if kernel == Attention.flex and cfg.model.dropout > 0:
        raise UsageError(f"attention=flex has no dropout (model.dropout={cfg.model.dropout}); "
                         "use attention=sdpa or flash")


def check_device_name(device: str) -> None:
    if not isinstance(device, str) or not DEVICE.fullmatch(device):
        raise UsageError(f"device must be auto, cpu, cuda, cuda:N (a GPU's index) or mps, "
                         f"got {device!r}")


def check_device(device: str, cuda_count: int, mps: bool) -> None:
    """``device`` exists on a machine with ``cuda_count`` CUDA GPUs (and Apple's MPS)."""
    check_device_name(device)
    if device.startswith("cuda"):
        gpus = (f"{cuda_count} CUDA GPU{'s' if cuda_count > 1 else ''} ("
                + (", ".join(f"cuda:{i}" for i in range(cuda_count)) if cuda_count < 5 else
                   f"cuda:0 ... cuda:{cuda_count - 1}") + ")")
        if not cuda_count:
            raise UsageError(f"device={device} but torch sees no CUDA GPU; use device=auto or "
                             "device=cpu")
        index = int(device.partition(":")[2] or 0)
        if index >= cuda_count:
            raise UsageError(f"device={device} but torch sees {gpus}; use one of them, "
                             "device=auto or device=cpu")
    if device == "mps" and not mps:
        raise UsageError("device=mps but torch has no MPS device here (Apple silicon only); "
                         "use device=auto or device=cpu")
