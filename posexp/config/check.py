"""``check``: a config that composes but cannot run is refused with one line naming the key,
before anything is written.  Types are the schema's; each part's rules live with it (the
data group in data/checks.py, what is trained in check_model.py, what it is scored at in
check_eval.py, RoPE scaling in check_scaling.py); here are the run's own settings and the
order they are checked in."""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Iterable

from omegaconf import DictConfig, ListConfig, OmegaConf

from posexp.config.bounds import (
    MAX_BATCH_TOKENS,
    MAX_EVAL_TOKENS,
    MAX_LENGTH,
    MAX_RANDOM_POSITIONS,
    MAX_SEED,
    MAX_TOKENS,
)
from posexp.config.check_eval import check_eval, check_task, unread_eval_key
from posexp.config.check_model import check_encoding, check_model, unread_encoding_key
from posexp.config.check_scaling import unread_scaling_key
from posexp.config.derive import NUMERICS
from posexp.config.keys import check_keys, check_set
from posexp.config.schema import LOGGER_READS, LOGGERS, Attention, WandbMode, default
from posexp.data.checks import check_data
from posexp.errors import UsageError
from posexp.values import in_range, positive, power

# auto (CUDA when present, else the CPU), cpu, cuda (the current GPU), cuda:N, mps (Apple)
DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d{1,4})?")
PLAIN_NAME = re.compile(r"[\w.,=+-]+")


def plain_name(value: object) -> str:
    """``value`` as a part of a run name: each character a directory name may not hold
    (PLAIN_NAME) becomes '_' -- a swept data.path of c/a.txt names its runs ...,path=c_a.txt.
    Two values made alike so are two jobs in one directory, which sweep.plan refuses."""
    return re.sub(r"[^\w.,=+-]", "_", str(value))


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
    check_wandb_environment(cfg)
    check_data(cfg.data)
    check_encoding(cfg)
    check_model(cfg)
    check_attention(cfg)
    check_train(cfg.train)
    check_task(cfg)
    check_eval(cfg)


def check_given(cfg: DictConfig, keys: Iterable[str]) -> None:
    """The keys a command line sets (``posexp train``'s overrides, a sweep job's, those of
    ``posexp eval`` and ``finetune``), held against what this run reads once composed: a
    value given to a key that the chosen encoding, evaluation mode, task, RoPE scaling or
    logger would not read is refused, naming the key and why -- it would change nothing,
    or (encoding.base is identity) make another run of the same model.  Only given keys
    are held so: a default, a derived value or one a saved run carries is never refused.
    Also refused: the batch given both in tokens and in sequences, and a warm-up given
    longer than the run."""
    from omegaconf.errors import OmegaConfBaseException

    given = {k.lstrip("+~") for k in keys}
    for key in sorted(given):
        try:
            value = OmegaConf.select(cfg, key, default=None)
        except OmegaConfBaseException:
            continue  # an interpolation not resolved yet: the job that resolves it checks
        if isinstance(value, (DictConfig, ListConfig)):
            value = OmegaConf.to_container(value, resolve=True)
        if value is None or value == default(key):
            continue  # a default changes nothing that was not already so
        reason = (unread_logger_key(cfg, key) or unread_encoding_key(cfg, key)
                  or unread_scaling_key(cfg, key) or unread_eval_key(cfg, key))
        if reason:
            raise UsageError(reason)
    t = cfg.train
    if {"train.batch_tokens", "train.batch_size"} <= given and t.batch_tokens is not None \
            and t.batch_size is not None:
        raise UsageError(f"train.batch_tokens={t.batch_tokens} and train.batch_size="
                         f"{t.batch_size} both size the batch; give one of them")
    if "train.warmup_tokens" in given:
        check_warmup(t)


def unread_logger_key(cfg: DictConfig, key: str) -> str | None:
    """Why a logger key given a value is not read by the chosen logger (LOGGER_READS)."""
    part = key.removeprefix("logger.")
    name = cfg.logger.name
    if not key.startswith("logger.") or part == "name" or name not in LOGGER_READS \
            or part in LOGGER_READS[name]:
        return None
    readers = [n for n, reads in LOGGER_READS.items() if part in reads]
    return (f"{key} is set, but logger={name} does not read it (only "
            f"{' and '.join(f'logger={n}' for n in readers)} does): add logger={readers[0]}, "
            f"or leave {key} out")


def check_warmup(t: DictConfig) -> None:
    """A warm-up given that takes every step of the run would leave the learning rate
    rising to the end, never decaying."""
    if not (isinstance(t.warmup_tokens, int) and isinstance(t.tokens, int)) or \
            t.warmup_tokens <= 0:
        return
    per_step = t.seq_len * (t.batch_size if t.batch_size is not None else
                            (t.batch_tokens or t.seq_len) // t.seq_len)
    steps = t.tokens // per_step if per_step > 0 else 0
    if steps and t.warmup_tokens // per_step >= steps:
        raise UsageError(f"train.warmup_tokens ({t.warmup_tokens:,}) covers the whole run "
                         f"(train.tokens={t.tokens:,}: {steps:,} steps of {per_step:,} tokens): "
                         "the learning rate would rise to the last step and never decay; give "
                         f"a shorter warm-up, e.g. train.warmup_tokens={t.tokens // 10}")


def check_wandb_environment(cfg: DictConfig) -> None:
    """With logger=wandb, the environment variables that stand in for logger keys are held
    to what the keys are: W&B would turn a bad WANDB_MODE into a warning after training has
    started, and a WANDB_DIR it cannot write into a silent move of its files to the
    temporary directory."""
    if cfg.logger.name != "wandb":
        return
    mode = os.environ.get("WANDB_MODE")
    if cfg.logger.mode is None and mode is not None and mode not in wandb_modes():
        raise UsageError(f"WANDB_MODE={mode!r} is not a W&B mode ({', '.join(wandb_modes())}); "
                         "set it to one, unset it, or choose with logger.mode=offline")
    folder = os.environ.get("WANDB_DIR")
    if not folder:
        return
    path = os.path.abspath(os.path.expanduser(folder))
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UsageError(f"WANDB_DIR={folder} {'is' if existing == path else 'lies under'} a "
                         f"file{'' if existing == path else f' ({existing})'}, not a directory: "
                         "W&B would write its files to the temporary directory instead; point "
                         "it at a directory, or unset it (W&B's files then go beside the run)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"WANDB_DIR={folder}: cannot write in {existing}; point it at a "
                         "directory you can write, or unset it")


def wandb_modes() -> tuple[str, ...]:
    """The modes W&B accepts (its settings' own list where it can be read; W&B is imported
    only when WANDB_MODE is not one of posexp's logger.mode values)."""
    ours = tuple(m.value for m in WandbMode)
    if os.environ.get("WANDB_MODE") in ours:
        return ours
    try:
        from wandb.sdk.wandb_settings import Settings

        accepted = typing.get_args(Settings.model_fields["mode"].annotation)
        return tuple(accepted) or ours
    except Exception:  # another W&B version, or none: posexp's modes
        return ours


def check_name(key: str, value: str | None) -> None:
    """run_name and experiment are one directory each, inside results_dir."""
    if (not isinstance(value, str) or not value or not PLAIN_NAME.fullmatch(value)
            or value.startswith(".") or len(value.encode()) > 200):
        shown = value if not isinstance(value, str) or len(value) <= 60 else value[:60] + "..."
        raise UsageError(f"{key} must be a plain directory name (letters, digits, . _ - , = +; "
                         f"not starting with '.'; at most 200 bytes), got {shown!r}")


def check_train(t: DictConfig) -> None:
    positive("train.seq_len", t.seq_len, MAX_LENGTH)
    if t.get("device_kind") is not None and t.device_kind not in NUMERICS:
        raise UsageError(f"train.device_kind must be null, {', '.join(NUMERICS)}, got "
                         f"{t.device_kind!r}")
    for key in ("tokens", "val_every_tokens", "checkpoint_every", "log_every"):
        positive(f"train.{key}", t[key], MAX_TOKENS)
    positive("train.val_tokens", t.val_tokens, MAX_EVAL_TOKENS)
    batch = _check_batch(t)
    if t.warmup_tokens is not None and (isinstance(t.warmup_tokens, bool) or not isinstance(
            t.warmup_tokens, int) or not 0 <= t.warmup_tokens <= MAX_TOKENS):
        raise UsageError(f"train.warmup_tokens must be an integer in [0, {power(MAX_TOKENS)}] "
                         f"or null (100,000 or a tenth of the run), got {t.warmup_tokens}")
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
    """The batch in sequences (train.batch_size) when that is set -- a value given wins over
    the default in tokens, and check_given refuses the two given at once -- else in tokens;
    its sequences a step."""
    if t.batch_tokens is None and t.batch_size is None:
        raise UsageError("set the batch size: train.batch_tokens=N or train.batch_size=N")
    if t.batch_size is None:
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
