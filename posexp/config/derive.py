"""The values a config leaves to posexp, derived in one place: ``resolve`` fills them into
the config (what config.yaml records), and RunSpec (spec.py) holds the rest.  Only the
config layer calls these; code downstream reads the spec."""

from __future__ import annotations

import math
import typing
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from posexp import scaling
from posexp.data.checks import is_task_data

if typing.TYPE_CHECKING:
    from posexp.data.tasks import Task

# The multiples of the training length a corpus run is scored at, and of the longest task
# length a task run trained on, when the config does not list its lengths.  A task's are
# dense just past n_max, where the length-generalization literature finds the differences
# between encodings (Zhou et al. 2024; Ruoss et al. 2023): most fail by 2 x n_max.
EVAL_MULTIPLES = (1, 2, 4, 8, 16)
TASK_MULTIPLES = (1, 1.25, 1.5, 2, 4)
TASK_MULTIPLES_TEXT = "1, 1.25, 1.5, 2 and 4 x n_max"
# train.warmup_tokens by default: this many tokens, or a tenth of the run where that is fewer
WARMUP_TOKENS, WARMUP_SHARE = 100_000, 10


def is_task_run(cfg: DictConfig) -> bool:
    """Whether the run trains on an algorithmic task (data=task) rather than a corpus."""
    return is_task_data(cfg.data)


def eval_lengths(cfg: DictConfig) -> list[int]:
    lengths = cfg.eval.lengths
    if lengths is None:
        return [cfg.train.seq_len * k for k in EVAL_MULTIPLES]
    return list(lengths)


def task_of(cfg: DictConfig) -> Task:
    """The task of a data=task run."""
    from posexp.data.tasks import get_task  # numpy and the generators: not for ls

    return get_task(cfg.task.name)


def task_max_length(cfg: DictConfig) -> int:
    """n_max: the longest task length whose instances fit in train.seq_len tokens; training
    draws lengths up to it."""
    from posexp.data.tasks import max_length_within

    return max_length_within(task_of(cfg), cfg.train.seq_len)


def task_lengths(cfg: DictConfig) -> list[int]:
    """The task lengths a data=task run is scored at: eval.task_lengths, by default
    TASK_MULTIPLES x n_max (task_max_length), each rounded up -- so that every multiple
    above 1 is a length past n_max -- and each length once (a small n_max makes some
    equal)."""
    lengths = cfg.eval.get("task_lengths")
    if lengths is None:
        n_max = task_max_length(cfg)
        return sorted({math.ceil(n_max * k) for k in TASK_MULTIPLES})
    return list(lengths)


def positions_trained(cfg: DictConfig) -> int:
    """How many positions training reads: train.seq_len, or M with train.random_positions=M
    (learned's table gets a row for each)."""
    return cfg.train.get("random_positions") or cfg.train.seq_len


def warmup_tokens(cfg: DictConfig) -> int:
    """train.warmup_tokens as given, or by default WARMUP_TOKENS or a tenth of train.tokens,
    whichever is fewer: a run of 30,000 tokens would otherwise warm up to its last step and
    never decay.  Runs of 1M tokens or more warm up for 100,000 as before."""
    given = cfg.train.get("warmup_tokens")
    return given if given is not None else min(WARMUP_TOKENS, cfg.train.tokens // WARMUP_SHARE)


def original_len(cfg: DictConfig) -> int:
    """The L of RoPE scaling: the length the weights were first trained at (a fine-tune's
    root run's train.seq_len, else the run's own)."""
    return OmegaConf.select(cfg, "parent.original_len", default=None) or cfg.train.seq_len


def train_scaling(cfg: DictConfig) -> dict | None:
    """encoding.scaling as a record (posexp/scaling.py), None when it is off."""
    node = OmegaConf.select(cfg, "encoding.scaling", default=None)
    if node is None or node.method is None:
        return None
    return scaling.record(node.method, node.factor, node)


def as_list(value: object) -> list:
    return list(value) if isinstance(value, (list, ListConfig)) else [value]


def eval_scalings(cfg: DictConfig) -> list[dict | None]:
    """The RoPE scalings cfg.eval asks for, in order: None for the run as trained, a record
    for each method at each factor; [None] when eval.rope_scaling is off."""
    node = OmegaConf.select(cfg, "eval.rope_scaling", default=None)
    if node is None or node.method is None:
        return [None]
    out: list[dict | None] = []
    for method in as_list(node.method):
        for rec in [None] if method == scaling.PLAIN else [scaling.record(method, f, node)
                                                           for f in as_list(node.factor)]:
            if rec not in out:  # a method without a factor (ReRoPE) is scored once
                out.append(rec)
    return out


# The numerics each kind of device trains in: bf16 autocast on CUDA, fp32 elsewhere (bf16 is
# far slower on AVX2 CPUs) -- what evaluate.autocast does, and train.precision records.
NUMERICS = {"cpu": "fp32", "cuda": "bf16", "mps": "fp32"}


def device_kind(device: str) -> str:
    """cpu, cuda or mps: the kind of device ``device`` (auto | cpu | cuda | cuda:N | mps)
    trains on; auto is CUDA where torch sees a GPU, as run.setup.pick_device picks."""
    if device == "auto":
        import torch  # only a config still to be resolved asks, never ls or report

        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if device.startswith("cuda") else str(device)


def encoding_hparams(cfg: DictConfig) -> dict:
    """encoding.hparams as a plain dict (empty in the configs of runs that predate it)."""
    hparams = cfg.encoding.get("hparams")
    return OmegaConf.to_container(hparams, resolve=True) if hparams else {}


def resolve(cfg: DictConfig, devices: bool = True) -> DictConfig:
    """The config with every derived value filled in -- the one place they are decided:
    eval.lengths (1-16 x seq_len), eval.task_lengths of a task run (1-4 x n_max),
    model.d_ff (4 x d_model), train.warmup_tokens (warmup_tokens), encoding.max_positions
    (seq_len; a pretrained model's stays its own, null for one without a table of
    positions), train.batch_size (batch_tokens / seq_len, unless given), and
    train.device_kind (device's) and train.precision (that kind's numerics, NUMERICS).
    Idempotent; ``cfg`` is checked.  ``devices`` false leaves the device's numerics as given
    (posexp train -h shows the main keys without importing torch to ask for a GPU)."""
    out = cfg.copy()
    OmegaConf.set_readonly(out, False)  # a spec's config is read-only; its copy need not be
    with open_dict(out):
        out.eval.lengths = eval_lengths(cfg)
        if is_task_run(cfg) and cfg.get("task") is not None:
            out.eval.task_lengths = task_lengths(cfg)
        out.model.d_ff = cfg.model.d_ff or 4 * cfg.model.d_model
        if "warmup_tokens" in cfg.train:  # a pretrained run trains nothing: it has none
            out.train.warmup_tokens = warmup_tokens(cfg)
        if cfg.get("pretrained") is None:  # a pretrained model's is its own: a table's rows
            out.encoding.max_positions = cfg.encoding.max_positions or positions_trained(cfg)
        if cfg.train.get("batch_tokens") is not None:  # absent in configs of older runs
            # the batch in sequences, when given, wins over the default in tokens
            if cfg.train.batch_size is None:
                out.train.batch_size = cfg.train.batch_tokens // cfg.train.seq_len
            out.train.batch_tokens = None
        # absent in configs of older runs: identity.LEGACY_BY_DEVICE
        if devices and "precision" in cfg.train:
            kind = cfg.train.device_kind or device_kind(str(cfg.device))
            out.train.device_kind = kind
            if str(getattr(cfg.train.precision, "value", cfg.train.precision)) == "auto":
                out.train.precision = NUMERICS.get(kind, "fp32")
    return out


def run_path(cfg: DictConfig) -> Path:
    """Where a run is written: results_dir/experiment/run_name."""
    return Path(cfg.results_dir) / cfg.experiment / cfg.run_name


