"""Structured-config schemas, registered with Hydra's ConfigStore.

The YAML files under ``configs/`` pick values; these dataclasses say which keys exist and
what type each has, so a misspelt key or a wrong type fails while Hydra composes the
config.  ``check`` adds the rules that types alone cannot say (positive lengths, heads that
divide the model width, ...); it runs before anything touches the disk.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import functools
import importlib.util
import math
import os
import re
import stat
import sys
import typing
from dataclasses import dataclass, field
from enum import Enum

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf, open_dict

from posexp.errors import UsageError

if typing.TYPE_CHECKING:
    from posexp.data.tasks import Task

# auto (CUDA when present, else the CPU), cpu, cuda (the current GPU), cuda:N, mps (Apple)
DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d{1,4})?")


class Attention(str, Enum):
    """The kernel of ALiBi's biased attention (posexp/attention.py); other encodings always
    run SDPA's causal kernel."""

    auto = "auto"  # flash if installed, else flex, on CUDA; sdpa on the CPU
    sdpa = "sdpa"  # SDPA with an additive bias, one block of queries at a time
    flex = "flex"  # FlexAttention, compiled, with a causal block mask
    flash = "flash"  # flash-attn's alibi_slopes (CUDA, needs the flash-attn package)


class EvalMode(str, Enum):
    nonoverlapping = "nonoverlapping"
    sliding = "sliding"


class DataSource(str, Enum):
    stdlib = "stdlib"  # the interpreter's standard library
    text = "text"  # local files
    enwik8 = "enwik8"  # the enwik8 file, cut at the standard byte offsets
    hub = "hub"  # a Hugging Face Hub dataset through `datasets`
    task = "task"  # an algorithmic task (the task group), generated (posexp/data/tasks)


class TokenizerKind(str, Enum):
    byte = "byte"  # one token per byte, vocabulary 256
    bpe = "bpe"  # byte-level BPE trained on the training split
    file = "file"  # a tokenizer.json of the `tokenizers` library


@dataclass
class ModelConfig:
    d_model: int = 128
    n_layer: int = 4
    n_head: int = 4
    d_ff: int | None = None  # default 4 * d_model
    dropout: float = 0.0
    tie_weights: bool | None = None  # default: the encoding's (EncodingSpec.tie_weights)


# RoPE context extension (posexp/encodings/rope_scaling.py): its methods, and the parameters
# that only some of them read (the papers' defaults)
SCALING_METHODS = ("linear", "ntk", "dynamic", "yarn", "llama3")
SCALING_PARAMS = {"yarn": ("beta_fast", "beta_slow"),
                  "llama3": ("low_freq_factor", "high_freq_factor")}
PLAIN = "plain"  # in a list of eval.rope_scaling methods: RoPE as trained, unscaled


@dataclass
class ScalingParams:
    beta_fast: float = 32.0  # yarn: pairs turning more often than this over L keep theta
    beta_slow: float = 1.0  # yarn: pairs turning less often than this over L get theta / s
    low_freq_factor: float = 1.0  # llama3: wavelengths above L / this are interpolated
    high_freq_factor: float = 4.0  # llama3: wavelengths below L / this are kept


@dataclass
class TrainScalingConfig(ScalingParams):
    """encoding.scaling: a fine-tune's RoPE scaling (posexp finetune), part of its identity."""

    method: str | None = None  # linear | ntk | dynamic | yarn | llama3; null: none
    factor: float = 1.0


@dataclass
class EvalScalingConfig(ScalingParams):
    """eval.rope_scaling: RoPE scalings a trained run is scored with, besides or instead of
    as trained; every method at every factor."""

    method: typing.Any = None  # a method, or a list of them (plain: as trained); null: plain
    factor: typing.Any = 1.0  # s, or a list of factors


@dataclass
class EncodingConfig:
    name: str = MISSING
    max_positions: int | None = None  # learned: rows in the table; default train.seq_len
    base: float = 10000.0  # rope, xpos, sinusoidal: frequencies base^(-2i/d)
    # the encoding's own hyperparameters (its config in posexp/encodings/<module>.py, the
    # paper's defaults; configs/encoding/<name>.yaml lists them); checked by check_encoding
    hparams: dict[str, typing.Any] = field(default_factory=dict)
    scaling: TrainScalingConfig = field(default_factory=TrainScalingConfig)
    # An encoding of your own: the dotted path of a Python module (importable from the working
    # directory) that registers encoding.name (README: adding an encoding).  Only a config
    # file may name it, never the command line.
    module: str | None = None


@dataclass
class DataConfig:
    name: str = MISSING  # the corpus, as runs and the token cache name it
    source: DataSource | None = None  # where it comes from; default: data.name
    path: str | None = None  # text: a file or a directory; enwik8: the enwik8 file
    train_path: str | None = None  # text: separate training and validation files or directories
    val_path: str | None = None
    glob: str = "**/*"  # text, directory: which files
    val_fraction: float = 0.02  # share of documents held out, chosen by a hash of their name
    hf_name: str | None = None  # hub: dataset id (or a local dataset directory)
    hf_config: str | None = None  # hub: the dataset's configuration (subset)
    train_split: str = "train"  # hub: split expressions, e.g. "train[:10%]"
    val_split: str = "validation"
    text_column: str = "text"  # hub: the column that holds the text
    join_rows: bool = False  # hub: rows are lines of one text (WikiText), not documents
    tokenizer: TokenizerKind = TokenizerKind.byte
    vocab_size: int = 8192  # bpe: vocabulary, 256 bytes included
    tokenizer_path: str | None = None  # file: a tokenizer.json
    cache_dir: str | None = None  # default $POSEXP_CACHE or ~/.cache/posexp


@dataclass
class TaskConfig:
    """task: the algorithmic task of a data=task run (posexp/data/tasks).  Only the name is
    identity; the rest says how the run is evaluated, and is recorded in each task point."""

    name: str = MISSING  # copy | reverse | sort | parity | addition | recall | passkey
    eval_count: int = 200  # held-out instances per length (and depth)
    eval_seed: int = 0  # seeds the held-out instances (data.tasks.heldout)
    depths: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])  # passkey


@dataclass
class TrainConfig:
    seq_len: int = 64
    tokens: int = 2_000_000
    # the batch, in tokens (sequences per step = batch_tokens / seq_len), so runs at different
    # lengths take equal optimizer steps; or in sequences, batch_size; set one, not both
    batch_tokens: int | None = 2048
    batch_size: int | None = None
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_tokens: int = 100_000
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    log_every: int = 20  # steps between training-curve points
    val_every_tokens: int = 500_000
    val_tokens: int = 16_384
    checkpoint_every: int = 500_000  # tokens; also on SIGINT/SIGTERM
    resume: bool = True  # continue a run of the same identity; false: move it aside, start afresh
    compile: bool | None = None  # torch.compile the training step; default: on CUDA only
    # Randomized positions (Ruoss et al., ACL 2023): each training sequence reads a sorted
    # random subset of the positions 0..M-1 (M >= seq_len) instead of 0..seq_len-1; null: off.
    # Evaluation always reads ordinary positions.
    random_positions: int | None = None


@dataclass
class EvalConfig:
    lengths: list[int] | None = None  # default 1, 2, 4, 8, 16 x train.seq_len
    mode: EvalMode = EvalMode.nonoverlapping
    stride: int | None = None  # sliding: default half of each window
    tokens: int = 32_768
    batch_tokens: int = 32_768  # tokens per forward pass
    per_position_buckets: int = 4  # per doubling of position (evaluate.bucket_edges)
    rope_scaling: EvalScalingConfig = field(default_factory=EvalScalingConfig)
    # data=task: the task lengths scored; default 1, 2, 4, 8 x the longest length trained on
    task_lengths: list[int] | None = None


class WandbMode(str, Enum):
    online = "online"
    offline = "offline"
    disabled = "disabled"


@dataclass
class LoggerConfig:
    name: str = "local"  # local | wandb; local files are written either way
    # null: W&B decides (WANDB_PROJECT, WANDB_ENTITY, WANDB_MODE, else its own default)
    project: str | None = None
    entity: str | None = None
    mode: WandbMode | None = None
    tags: list[str] = field(default_factory=list)
    group: str | None = None  # default: the experiment, for runs of a sweep
    init_timeout: float = 60.0  # seconds W&B may take to start before posexp goes on without it


@dataclass
class ParentConfig:
    """The run a fine-tune continues (posexp finetune fills it in; null in any other run)."""

    run: str | None = None  # its directory when the fine-tune was set up (not identity)
    identity: str | None = None  # sha256 of its identity
    config: str | None = None  # sha256 of its identity but the keys that follow the seed
    weights_sha256: str | None = None  # its trained weights (train.weights_hash)
    original_len: int | None = None  # the root run's train.seq_len: RoPE scaling's L


@dataclass
class Config:
    encoding: EncodingConfig = MISSING
    model: ModelConfig = MISSING
    data: DataConfig = MISSING
    train: TrainConfig = MISSING
    eval: EvalConfig = MISSING
    logger: LoggerConfig = MISSING
    task: TaskConfig | None = None  # data=task only: task=NAME chooses it
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps (DEVICE)
    attention: Attention = Attention.auto
    results_dir: str = "results"
    experiment: str = "default"
    run_name: str = "${encoding.name}-L${train.seq_len}-s${seed}"
    parent: ParentConfig = field(default_factory=ParentConfig)


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="posexp_schema", node=Config)
    for group, node in [
        ("model", ModelConfig),
        ("encoding", EncodingConfig),
        ("data", DataConfig),
        ("train", TrainConfig),
        ("eval", EvalConfig),
        ("logger", LoggerConfig),
        ("task", TaskConfig),
    ]:
        cs.store(group=group, name=f"{group}_schema", node=node)


def eval_lengths(cfg: DictConfig) -> list[int]:
    lengths = cfg.eval.lengths
    if lengths is None:
        return [cfg.train.seq_len * k for k in (1, 2, 4, 8, 16)]
    return list(lengths)


def original_len(cfg: DictConfig) -> int:
    """The L of RoPE scaling: the length the weights were first trained at (a fine-tune's
    root run's train.seq_len, else the run's own)."""
    return OmegaConf.select(cfg, "parent.original_len", default=None) or cfg.train.seq_len


def scaling_record(method: str, factor: float, params: typing.Mapping) -> dict:
    """A RoPE scaling as posexp writes it down (eval.json's rope_scaling; the fields of
    encodings.rope_scaling.RopeScaling): the method, its factor, and the parameters that
    method reads (from ``params``)."""
    return {"method": method, "factor": float(factor),
            **{k: float(params[k]) for k in SCALING_PARAMS.get(method, ())}}


def train_scaling(cfg: DictConfig) -> dict | None:
    """encoding.scaling as a record (scaling_record), None when it is off."""
    node = OmegaConf.select(cfg, "encoding.scaling", default=None)
    if node is None or node.method is None:
        return None
    return scaling_record(node.method, node.factor, node)


def _as_list(value: object) -> list:
    return list(value) if isinstance(value, (list, ListConfig)) else [value]


def eval_scalings(cfg: DictConfig) -> list[dict | None]:
    """The RoPE scalings cfg.eval asks for, in order: None for the run as trained, a record
    (scaling_record) for each method at each factor; [None] when eval.rope_scaling is off."""
    node = OmegaConf.select(cfg, "eval.rope_scaling", default=None)
    if node is None or node.method is None:
        return [None]
    out: list[dict | None] = []
    for method in _as_list(node.method):
        out += [None] if method == PLAIN else [scaling_record(method, f, node)
                                               for f in _as_list(node.factor)]
    return out


def positions_trained(cfg: DictConfig) -> int:
    """How many positions training reads: train.seq_len, or M with train.random_positions=M
    (learned's table gets a row for each)."""
    return cfg.train.get("random_positions") or cfg.train.seq_len


def is_task_run(cfg: DictConfig) -> bool:
    """Whether the run trains on an algorithmic task (data=task) rather than a corpus."""
    return (cfg.data.get("source") or cfg.data.name) == DataSource.task.value


def task_of(cfg: DictConfig) -> Task:
    """The task of a data=task run."""
    from posexp.data.tasks import get_task  # not at the top: posexp.data imports this module

    return get_task(cfg.task.name)


def task_max_length(cfg: DictConfig) -> int:
    """n_max: the longest task length whose instances fit in train.seq_len tokens; training
    draws lengths up to it."""
    from posexp.data.tasks import max_length_within

    return max_length_within(task_of(cfg), cfg.train.seq_len)


def task_lengths(cfg: DictConfig) -> list[int]:
    """The task lengths a data=task run is scored at: eval.task_lengths, by default 1, 2, 4
    and 8 x n_max (task_max_length)."""
    lengths = cfg.eval.get("task_lengths")
    if lengths is None:
        return [task_max_length(cfg) * k for k in (1, 2, 4, 8)]
    return list(lengths)


def resolve(cfg: DictConfig) -> DictConfig:
    """The config with every derived value filled in -- the one place they are decided:
    eval.lengths (1-16 x seq_len), eval.task_lengths of a task run (1-8 x n_max),
    model.d_ff (4 x d_model), model.tie_weights (the encoding's), encoding.max_positions
    (seq_len) and train.batch_size (batch_tokens / seq_len).  Idempotent; ``cfg`` is
    checked."""
    out = cfg.copy()
    with open_dict(out):
        out.eval.lengths = eval_lengths(cfg)
        if is_task_run(cfg) and cfg.get("task") is not None:
            out.eval.task_lengths = task_lengths(cfg)
        out.model.d_ff = cfg.model.d_ff or 4 * cfg.model.d_model
        if cfg.model.get("tie_weights") is None:
            from posexp.encodings import ENCODINGS  # the registry (imports torch)

            if cfg.encoding.get("module") is not None:
                import_encoding(cfg.encoding.module, cfg.encoding.name)
            spec = ENCODINGS.get(cfg.encoding.name)  # unknown: check() says so
            out.model.tie_weights = spec.tie_weights if spec else None
        out.encoding.max_positions = cfg.encoding.max_positions or positions_trained(cfg)
        if cfg.train.get("batch_tokens") is not None:  # absent in configs of older runs
            out.train.batch_size = cfg.train.batch_tokens // cfg.train.seq_len
            out.train.batch_tokens = None
    return out


# What a run's weights do not depend on: where it is written, how it is logged, how it is
# evaluated, on which device and kernel, how often it reports or checkpoints, whether it may
# continue an earlier attempt.  Everything else in the config is its identity.
NOT_IDENTITY = ("results_dir", "experiment", "run_name", "device", "attention", "eval",
                "logger", "train.resume", "train.compile", "train.log_every",
                "train.val_every_tokens", "train.val_tokens", "train.checkpoint_every",
                "data.cache_dir", "parent.run", "task.eval_count", "task.eval_seed",
                "task.depths")
# Nodes that are off unless their first key is set: then none of their keys is identity, so a
# run without them has the identity it had before posexp knew them.
OPTIONAL_NODES = (("encoding.scaling", "method"), ("parent", "identity"))
# Keys that are off when null: then they are not identity either (as OPTIONAL_NODES).
OPTIONAL_KEYS = ("train.random_positions", "encoding.module", "task")
# Identity keys that follow the seed: a fine-tune's parent is another run at each seed.
SEED_KEYS = ("seed", "parent.identity", "parent.weights_sha256")


def in_identity(key: str) -> bool:
    """Whether a dotted config key (or config group) is part of a run's identity."""
    return not any(key == k or key.startswith(f"{k}.") for k in NOT_IDENTITY)


def identity(cfg: DictConfig) -> dict:
    """A run's identity: the resolved values of every key that determines its weights
    (model, encoding, data and tokenizer, the training settings that change the weights,
    seed, and a fine-tune's parent and RoPE scaling), as a flat {dotted key: value}."""
    flat = flatten(OmegaConf.to_container(resolve(cfg), resolve=True, enum_to_str=True))
    for node, key in OPTIONAL_NODES:
        if flat.get(f"{node}.{key}") is None:
            flat = {k: v for k, v in flat.items() if not k.startswith(f"{node}.")}
    flat = {k: v for k, v in flat.items() if not (k in OPTIONAL_KEYS and v is None)}
    return {k: v for k, v in flat.items() if in_identity(k)}


def flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def identity_diff(a: dict, b: dict) -> list[str]:
    """'key: old -> new' for each key whose value differs between two identities."""
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]


# --- the schema's keys -------------------------------------------------------------------
GROUPS = ("model", "encoding", "data", "train", "eval", "logger", "task")


def _optional(kind: object) -> object:
    """The node type of an optional node (``TaskConfig | None``); any other type as it is."""
    args = typing.get_args(kind)
    if len(args) == 2 and type(None) in args:
        node = next(a for a in args if a is not type(None))
        if dataclasses.is_dataclass(node):
            return node
    return kind


@functools.cache
def schema_keys(node: str = "") -> dict[str, object]:
    """{key: type} of the schema node ``node`` ("" for the top level, "train",
    "eval.rope_scaling", ...); an optional node (task) by its node type."""
    schema: object = Config
    for part in filter(None, node.split(".")):
        schema = _optional(typing.get_type_hints(schema)[part])
    hints = typing.get_type_hints(schema)
    return {f.name: _optional(hints[f.name]) for f in dataclasses.fields(schema)}


def is_node(kind: object) -> bool:
    """Whether a schema type is a node of keys (a config group, eval.rope_scaling, ...)."""
    return dataclasses.is_dataclass(kind)


def unknown_key(key: str) -> str | None:
    """Why ``key`` (dotted) is not a key of posexp's schema, with the closest key; None if it
    is one.  A node's name (``encoding``, ``eval.rope_scaling``) is a key too."""
    parts = key.split(".")
    node = ""
    for depth, part in enumerate(parts):
        keys = schema_keys(node)
        if part not in keys:
            where = f"{node} has no key" if node else "posexp's config has no key"
            close = difflib.get_close_matches(part, keys, n=1, cutoff=0.6)
            hint = (f"did you mean '{close[0]}'?" if close
                    else f"its keys: {', '.join(keys)}")
            return f"{where} {part!r}; {hint}"
        if is_node(keys[part]):
            node = f"{node}.{part}" if node else part
            continue
        rest = parts[depth + 1:]
        if not rest or (len(rest) == 1 and rest[0].isdigit() and "list" in str(keys[part])):
            return None  # a value, or an item of a list (eval.lengths.0)
        if len(rest) == 1 and "dict" in str(keys[part]):
            return None  # a key of a mapping (encoding.hparams.*: the encoding checks them)
        name = f"{node}.{part}" if node else part
        return f"{name} is a single value, not a group of keys (got {key!r})"
    return None


def check_keys(cfg: DictConfig, node: str = "") -> None:
    """Every key of a composed config is one of the schema's: ``+key=value`` and config files
    cannot add keys that posexp would silently ignore."""
    for key in cfg:
        if key == "hydra":
            continue
        name = f"{node}.{key}" if node else str(key)
        problem = unknown_key(name)
        if problem:
            raise UsageError(problem)
        kinds = schema_keys(node)
        if is_node(kinds[str(key)]) and not OmegaConf.is_missing(cfg, key) \
                and isinstance(cfg[key], DictConfig):
            check_keys(cfg[key], name)


# --- values -------------------------------------------------------------------------------
# Bounds of the values that size memory or time; far above any sensible run, and small
# enough that nothing downstream overflows an int64 or allocates without end.
MAX_SEED = 2**63 - 1
MAX_TOKENS = 2**50  # train.tokens and the other budgets in tokens
MAX_LENGTH = 2**30  # train.seq_len, each of eval.lengths, eval.stride
MAX_RANDOM_POSITIONS = 2**16  # train.random_positions: its tables are built for M positions
MAX_EVAL_TOKENS = 2**40
MAX_BATCH_TOKENS = 2**26  # tokens in one training or evaluation batch
MAX_BUCKETS = 64  # eval.per_position_buckets, per doubling of position
MAX_VOCAB = 2**18  # data.vocab_size (the largest vocabularies in use are about 256k)
MAX_PARAMS = 10**10  # the model, counted from its shape
MAX_TASK_LENGTH = 2**20  # each of eval.task_lengths (a task's own length, not tokens)
MAX_TASK_COUNT = 2**16  # task.eval_count, held-out instances per length
MAX_TASK_TOKENS = 2**28  # the held-out instances of one length, all in memory (int64)
LOGGERS = ("local", "wandb")  # posexp/sinks.py


def _positive(name: str, value: object, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UsageError(f"{name} must be a positive integer, got {value!r}")
    if high is not None and value > high:
        raise UsageError(f"{name} must be at most {high:,} ({_power(high)}), got {value:,}")


def _power(n: int) -> str:
    return f"2**{n.bit_length() - 1}" if n & (n - 1) == 0 else f"{n:.0e}".replace("e+", "e")


def _in_range(name: str, value: float, low: float, high: float, *, low_open: bool = False,
              high_open: bool = False) -> None:
    """A finite value within [low, high] (an open end excludes its bound)."""
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
          and (value > low if low_open else value >= low)
          and (value < high if high_open else value <= high))
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise UsageError(f"{name} must be a finite number in {interval}, got {value}")


PLAIN_NAME = re.compile(r"[\w.,=+-]+")


def check_name(key: str, value: str | None) -> None:
    """run_name and experiment are one directory each, inside results_dir."""
    if (not isinstance(value, str) or not value or not PLAIN_NAME.fullmatch(value)
            or value.startswith(".") or len(value.encode()) > 200):
        shown = value if not isinstance(value, str) or len(value) <= 60 else value[:60] + "..."
        raise UsageError(f"{key} must be a plain directory name (letters, digits, . _ - , = +; "
                         f"not starting with '.'; at most 200 bytes), got {shown!r}")


def check_path(key: str, value: str) -> None:
    """``value`` names an existing regular file or directory (not a FIFO, a device, a
    dangling link or a loop of links): what a corpus or tokenizer file can be."""
    path = os.path.expanduser(value)
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"{key} {value!r} is a loop of symbolic links") from None
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            what = "is a broken symbolic link" if os.path.islink(path) else "does not exist"
            raise UsageError(f"{key} {value!r} {what}") from None
        raise UsageError(f"{key}: cannot read {value!r}: {e.strerror}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise UsageError(f"{key} {value!r} is not a regular file or directory")


def check_set(cfg: DictConfig) -> None:
    """Every value is set (none is ???), found without resolving an interpolation."""
    missing = []

    def walk(node: DictConfig, prefix: str) -> None:
        for k in node:
            if OmegaConf.is_missing(node, k):
                missing.append(f"{prefix}{k}")
            elif isinstance(node._get_node(k), DictConfig):
                walk(node._get_node(k), f"{prefix}{k}.")

    walk(cfg, "")
    if missing:
        raise UsageError(f"{', '.join(missing)} must be set (e.g. {missing[0]}=...)")


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
    _in_range("logger.init_timeout", cfg.logger.init_timeout, 0.0, 3600.0, low_open=True)
    check_data(cfg.data)
    check_encoding(cfg)
    check_model(cfg)
    check_attention(cfg)
    check_train(cfg.train)
    check_task(cfg)
    check_eval(cfg)


def check_task(cfg: DictConfig) -> None:
    """data=task and a task (task=NAME) come together; the task is one posexp has, and its
    shortest instance fits in train.seq_len."""
    from posexp.data.tasks import TASKS, max_length_within

    node = cfg.get("task")
    if not is_task_run(cfg):
        if node is not None:
            raise UsageError(f"task={node.name} is set, but this run trains on "
                             f"data={cfg.data.name}; add data=task to train on the task")
        return
    if node is None:
        raise UsageError(f"data=task needs a task: add task=NAME, one of {', '.join(TASKS)}")
    if node.name not in TASKS:
        raise UsageError(f"task.name {node.name!r} is not a task posexp has; known: "
                         f"{', '.join(TASKS)}")
    try:
        max_length_within(TASKS[node.name], cfg.train.seq_len)
    except ValueError as e:
        raise UsageError(f"train.seq_len is too short for the task: {e}") from None


# eval keys that say how a corpus run's windows are scored; a task run has none of them
CORPUS_EVAL_KEYS = ("eval.lengths", "eval.mode", "eval.stride", "eval.tokens",
                    "eval.per_position_buckets")


def check_task_eval_key(cfg: DictConfig, key: str) -> None:
    """A key set on the command line that a task run would ignore is refused, not dropped."""
    if key in CORPUS_EVAL_KEYS and is_task_run(cfg):
        raise UsageError(f"{key} sets how a corpus run's windows are scored; this run trains "
                         "on a task (data=task): its lengths are eval.task_lengths")


def check_task_eval(cfg: DictConfig) -> None:
    """eval.task_lengths and the task's evaluation settings (count, seed, passkey depths)."""
    lengths = cfg.eval.get("task_lengths")
    if lengths is not None and not is_task_run(cfg):
        raise UsageError("eval.task_lengths is set, but this run is not a task run "
                         "(data=task task=NAME); its lengths are eval.lengths")
    if lengths is not None:
        if not lengths:
            raise UsageError("eval.task_lengths is empty")
        for length in lengths:
            _positive("each of eval.task_lengths", length, MAX_TASK_LENGTH)
        twice = sorted({n for n in lengths if list(lengths).count(n) > 1})
        if twice:
            raise UsageError(f"eval.task_lengths lists {', '.join(map(str, twice))} more than "
                             "once; list each length once")
    node = cfg.get("task")
    if node is None:
        return
    if not is_task_run(cfg):
        raise UsageError(f"task.* is set, but this run trains on data={cfg.data.name}, not "
                         "on a task (data=task)")
    _positive("task.eval_count", node.eval_count, MAX_TASK_COUNT)
    from posexp.data.tasks import TASKS

    if lengths and node.name in TASKS:
        tokens = node.eval_count * TASKS[node.name].tokens_for(max(lengths))
        if tokens > MAX_TASK_TOKENS:
            raise UsageError(f"task.eval_count x the tokens of an instance at the longest of "
                             f"eval.task_lengths ({tokens:,}) must be at most "
                             f"{MAX_TASK_TOKENS:,} ({_power(MAX_TASK_TOKENS)}): the instances "
                             "of a length are held in memory")
    if isinstance(node.eval_seed, bool) or not isinstance(node.eval_seed, int) or not (
            0 <= node.eval_seed <= MAX_SEED):
        raise UsageError(f"task.eval_seed must be an integer in [0, 2**63 - 1], "
                         f"got {node.eval_seed}")
    depths = list(node.depths)
    if not depths:
        raise UsageError("task.depths is empty (passkey's depths, each in [0, 1])")
    for depth in depths:
        _in_range("each of task.depths", depth, 0.0, 1.0)
    twice = sorted({d for d in depths if depths.count(d) > 1})
    if twice:
        raise UsageError(f"task.depths lists {', '.join(f'{d:g}' for d in twice)} more than "
                         "once; list each depth once")


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


MODULE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def import_encoding(module: str, name: str) -> None:
    """Import ``module`` (encoding.module, from a config file), which registers encoding
    ``name``, from the working directory or the installed packages."""
    from posexp.encodings import ENCODINGS

    if not isinstance(module, str) or not MODULE_PATH.fullmatch(module):
        raise UsageError(f"encoding.module must be a dotted Python module path such as "
                         f"my_encodings.cope, got {module!r}")
    if os.getcwd() not in sys.path:  # as python -m does: a module beside your configs
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(module)
    except Exception as error:  # the module's own code failed: say where, in one line
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise UsageError(f"encoding.module {module}: {type(error).__name__}"
                         + (f": {first}" if first else "")) from None
    if name not in ENCODINGS:
        raise UsageError(f"encoding.module {module} registers no encoding {name!r} (it must "
                         "call posexp.encodings.registry.register with that name)")
    if ENCODINGS[name].module.__module__.startswith("posexp."):
        raise UsageError(f"{name} is posexp's own encoding: encoding.module adds encodings, "
                         f"it does not replace one (give yours another name)")


def check_encoding(cfg: DictConfig) -> None:
    """The encoding is one posexp has, its hyperparameters are its own and in range, and an
    attention kernel asked for can apply its score bias."""
    from posexp.encodings import ENCODINGS, encoding_config  # the registry

    e = cfg.encoding
    if e.get("module") is not None:
        import_encoding(e.module, e.name)
    if e.name not in ENCODINGS:
        raise UsageError(f"encoding.name {e.name!r} is not an encoding posexp has; known: "
                         f"{', '.join(sorted(ENCODINGS))} (to add one, a config file under "
                         "--config-dir names its module in encoding.module)")
    if e.max_positions is not None:
        _positive("encoding.max_positions", e.max_positions, MAX_LENGTH)
    _in_range("encoding.base", e.base, 1.0, 1e12, low_open=True)
    try:
        encoding_config(e.name, encoding_hparams(cfg), e.base,
                        e.max_positions or cfg.train.seq_len)
    except ValueError as error:
        raise UsageError(str(error)) from None
    kernels, kernel = ENCODINGS[e.name].module.bias_kernels, Attention(cfg.attention)
    if kernels and kernel != Attention.auto and kernel.value not in kernels:
        raise UsageError(f"attention={kernel.value} cannot apply {e.name}'s score bias; it runs "
                         f"on {', '.join(kernels)} (attention=auto picks the fastest)")
    fine_tune = OmegaConf.select(cfg, "parent.identity", default=None) is not None
    table = "max_positions" in {f.name for f in dataclasses.fields(ENCODINGS[e.name].config)}
    random = cfg.train.get("random_positions")
    if random is not None and not ENCODINGS[e.name].reads_positions:
        raise UsageError(f"train.random_positions has nothing to randomize: {e.name} reads no "
                         "positions")
    if table and e.max_positions is not None and e.max_positions < positions_trained(cfg):
        raise UsageError(
            f"encoding.max_positions ({e.max_positions}) is less than "
            + (f"train.random_positions ({random})" if random else
               f"train.seq_len ({cfg.train.seq_len})")
            + f": {e.name} has no position past its table"
            + (", and a fine-tune keeps its parent's table (rows past it would start "
               "untrained)" if fine_tune else ""))
    check_train_scaling(cfg, fine_tune)


def check_train_scaling(cfg: DictConfig, fine_tune: bool) -> None:
    """encoding.scaling: off, or one method at one factor for a fine-tune of a RoPE run."""
    node = OmegaConf.select(cfg, "encoding.scaling", default=None)
    if node is None:
        return
    if node.method is None:
        if node.factor != 1.0:
            raise UsageError("encoding.scaling.factor is set but encoding.scaling.method is "
                             f"not; add encoding.scaling=METHOD ({', '.join(SCALING_METHODS)})")
        return
    if not isinstance(node.method, str) or node.method not in SCALING_METHODS:
        raise UsageError(f"encoding.scaling.method must be one of {', '.join(SCALING_METHODS)}, "
                         f"got {node.method!r}")
    if cfg.encoding.name != "rope":
        raise UsageError(f"encoding.scaling needs encoding=rope (it rescales RoPE's "
                         f"frequencies); this run is encoding={cfg.encoding.name}")
    if not fine_tune:
        raise UsageError("encoding.scaling is for fine-tuning a trained run at a longer "
                         "length: posexp finetune PARENT_RUN encoding.scaling=METHOD "
                         "encoding.scaling.factor=S")
    _scaling_numbers("encoding.scaling", node, [node.factor])
    _check_scaling("encoding.scaling", [train_scaling(cfg)])


def _scaling_numbers(key: str, node: DictConfig, factors: list) -> None:
    for factor in factors:
        _in_range(f"{key}.factor", factor, 1.0, 1e6)
    for param in dataclasses.fields(ScalingParams):
        _in_range(f"{key}.{param.name}", node[param.name], 0.0, 1e6, low_open=True)


def _check_scaling(key: str, records: list[dict]) -> None:
    """Each record is a scaling rope_scaling.py can compute."""
    from posexp.encodings.rope_scaling import RopeScaling

    for record in records:
        try:
            RopeScaling(**record)
        except ValueError as e:
            raise UsageError(f"{key}: {e}") from None


def encoding_hparams(cfg: DictConfig) -> dict:
    """encoding.hparams as a plain dict (empty in the configs of runs that predate it)."""
    hparams = cfg.encoding.get("hparams")
    return OmegaConf.to_container(hparams, resolve=True) if hparams else {}


def encoding_params(cfg: DictConfig) -> int:
    """The parameters of the encoding built for this model's shape.  It is built on the meta
    device, which allocates nothing, so every check its constructor makes (rope and xpos need
    an even head dimension) runs here."""
    import torch

    from posexp.encodings import ModelShape, build_encoding

    e, m = cfg.encoding, cfg.model
    try:
        with torch.device("meta"):
            encoding = build_encoding(e.name, ModelShape(m.d_model, m.n_head, m.n_layer),
                                      encoding_hparams(cfg), e.base,
                                      e.max_positions or cfg.train.seq_len)
    except ValueError as error:
        raise UsageError(str(error)) from None
    return sum(p.numel() for p in encoding.parameters())


def check_model(cfg: DictConfig) -> None:
    m = cfg.model
    _positive("model.d_model", m.d_model, 2**16)
    _positive("model.n_layer", m.n_layer, 2**10)
    _positive("model.n_head", m.n_head, 2**12)
    if m.d_ff is not None:
        _positive("model.d_ff", m.d_ff, 2**18)
    if m.d_model % m.n_head:
        raise UsageError(
            f"model.d_model ({m.d_model}) must be divisible by model.n_head ({m.n_head})"
        )
    _in_range("model.dropout", m.dropout, 0.0, 1.0, high_open=True)
    # parameters counted from the shape: attention 4 d^2, MLP 2 d d_ff, embeddings, encoding
    d, d_ff = m.d_model, m.d_ff or 4 * m.d_model
    vocab = cfg.data.vocab_size if TokenizerKind(cfg.data.tokenizer) != TokenizerKind.byte \
        or is_task_run(cfg) else 256
    params = m.n_layer * (4 * d * d + 2 * d * d_ff) + 2 * vocab * d + encoding_params(cfg)
    if params > MAX_PARAMS:
        raise UsageError(f"this model would have about {params:.2g} parameters, more than "
                         f"posexp trains ({MAX_PARAMS:.0e}); lower model.d_model, model.n_layer "
                         "or model.d_ff")


def check_train(t: DictConfig) -> None:
    _positive("train.seq_len", t.seq_len, MAX_LENGTH)
    for key in ("tokens", "val_every_tokens", "checkpoint_every", "log_every"):
        _positive(f"train.{key}", t[key], MAX_TOKENS)
    _positive("train.val_tokens", t.val_tokens, MAX_EVAL_TOKENS)
    if (t.batch_tokens is None) == (t.batch_size is None):
        raise UsageError("set the batch either in tokens (train.batch_tokens) or in sequences "
                         "(train.batch_size), not both: add train.batch_tokens=null to "
                         "size it in sequences" if t.batch_size is not None else
                         "set the batch size: train.batch_tokens=N or train.batch_size=N")
    if t.batch_tokens is not None:
        _positive("train.batch_tokens", t.batch_tokens, MAX_BATCH_TOKENS)
        if t.batch_tokens % t.seq_len:
            raise UsageError(f"train.batch_tokens ({t.batch_tokens}) must be a multiple of "
                             f"train.seq_len ({t.seq_len}): it holds whole sequences")
        batch = t.batch_tokens // t.seq_len
    else:
        _positive("train.batch_size", t.batch_size, MAX_BATCH_TOKENS)
        batch = t.batch_size
        if batch * t.seq_len > MAX_BATCH_TOKENS:
            raise UsageError(f"train.batch_size x train.seq_len ({batch * t.seq_len:,} tokens "
                             f"a step) must be at most {MAX_BATCH_TOKENS:,} "
                             f"({_power(MAX_BATCH_TOKENS)})")
    if isinstance(t.warmup_tokens, bool) or not isinstance(t.warmup_tokens, int) or not (
            0 <= t.warmup_tokens <= MAX_TOKENS):
        raise UsageError(f"train.warmup_tokens must be an integer in [0, {_power(MAX_TOKENS)}], "
                         f"got {t.warmup_tokens}")
    _in_range("train.lr", t.lr, 0.0, 1e6, low_open=True)
    _in_range("train.min_lr_ratio", t.min_lr_ratio, 0.0, 1.0)
    _in_range("train.weight_decay", t.weight_decay, 0.0, 10.0)
    _in_range("train.beta1", t.beta1, 0.0, 1.0, high_open=True)
    _in_range("train.beta2", t.beta2, 0.0, 1.0, high_open=True)
    _in_range("train.grad_clip", t.grad_clip, 0.0, 1e6, low_open=True)
    if t.get("random_positions") is not None:
        _positive("train.random_positions", t.random_positions, MAX_RANDOM_POSITIONS)
        if t.random_positions < t.seq_len:
            raise UsageError(f"train.random_positions ({t.random_positions}) must be at least "
                             f"train.seq_len ({t.seq_len}): each sequence reads seq_len "
                             "distinct positions below it")
    if t.tokens < t.seq_len * batch:
        raise UsageError(
            f"train.tokens ({t.tokens}) is less than one batch "
            f"({batch} sequences x train.seq_len = {batch * t.seq_len} tokens)"
        )


def flash_attn_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def check_attention(cfg: DictConfig) -> None:
    kernel = Attention(cfg.attention)
    # which device a kernel can run on is checked once the device is known (train.pick_device)
    if kernel == Attention.flash and not flash_attn_installed():
        raise UsageError("attention=flash needs the flash-attn package (pip install "
                         "flash-attn); attention=auto picks the best kernel installed")
    if kernel == Attention.flex and cfg.model.dropout > 0:
        raise UsageError(f"attention=flex has no dropout (model.dropout={cfg.model.dropout}); "
                         "use attention=sdpa or flash")


def data_source(d: DictConfig) -> DataSource:
    value = d.source or d.name
    try:
        return DataSource(value)
    except ValueError:
        raise UsageError(f"data.source must be one of {', '.join(s.value for s in DataSource)}; "
                         f"got {value!r}") from None


def check_data(d: DictConfig) -> None:
    if not re.fullmatch(r"[\w.-]+", d.name or "") or d.name.startswith("."):
        raise UsageError(f"data.name must be a plain name (letters, digits, . _ -), got {d.name!r}")
    source = data_source(d)
    if source == DataSource.text:
        if not d.path and not (d.train_path and d.val_path):
            raise UsageError(f"data={d.name} needs data.path=FILE_OR_DIR, or both "
                             "data.train_path and data.val_path")
        if d.path and (d.train_path or d.val_path):
            raise UsageError("data.path and data.train_path/data.val_path exclude each other; "
                             "set one or the other")
        if not d.glob or os.path.isabs(d.glob) or ".." in d.glob.split("/"):
            raise UsageError("data.glob must be a pattern relative to data.path (e.g. "
                             f"'**/*.txt'), got {d.glob!r}")
    if source == DataSource.enwik8 and not d.path:
        raise UsageError(f"data={d.name} needs data.path=ENWIK8_FILE (unzipped from "
                         "http://mattmahoney.net/dc/enwik8.zip)")
    if source == DataSource.hub:
        if not d.hf_name:
            raise UsageError(f"data={d.name} needs data.hf_name=DATASET (a Hugging Face Hub id)")
        for key in ("train_split", "val_split", "text_column"):
            if not d[key]:
                raise UsageError(f"data.{key} must not be empty")
    # a file or dataset that this source would not read: set by mistake, silently ignored
    reads = {DataSource.text: ("path", "train_path", "val_path"), DataSource.enwik8: ("path",),
             DataSource.hub: ("hf_name", "hf_config")}.get(source, ())
    for key in ("path", "train_path", "val_path", "hf_name", "hf_config"):
        if d[key] and key not in reads:
            raise UsageError(f"data.{key} is set, but data={d.name} does not read it (data=text "
                             "reads data.path, data=hf data.hf_name)")
    _in_range("data.val_fraction", d.val_fraction, 0.0, 1.0, low_open=True, high_open=True)
    tokenizer = TokenizerKind(d.tokenizer)
    if source == DataSource.task:
        from posexp.data.tasks import VOCAB_SIZE

        if tokenizer != TokenizerKind.byte or d.vocab_size != VOCAB_SIZE:
            raise UsageError(f"data=task has its own vocabulary of {VOCAB_SIZE} tokens: "
                             "data.tokenizer and data.vocab_size stay as configs/data/task.yaml "
                             "sets them")
    _positive("data.vocab_size", d.vocab_size, MAX_VOCAB)
    if tokenizer == TokenizerKind.bpe and d.vocab_size <= 256:
        raise UsageError(f"data.vocab_size must be above 256 (the byte alphabet) for "
                         f"data.tokenizer=bpe, got {d.vocab_size}")
    if tokenizer == TokenizerKind.file and not d.tokenizer_path:
        raise UsageError("data.tokenizer=file needs data.tokenizer_path=TOKENIZER_JSON")
    if tokenizer != TokenizerKind.file and d.tokenizer_path:
        raise UsageError(f"data.tokenizer_path is set, but data.tokenizer={tokenizer.value} "
                         "does not read it (add data.tokenizer=file)")


def check_paths(d: DictConfig) -> None:
    """The files ``d`` (the data group) names exist and are regular files or directories.
    posexp train checks them before it starts; in a sweep each job meets them when it loads
    its corpus (data/text.py), so one job's missing file fails that job only."""
    source = data_source(d)
    keys = (("path", "train_path", "val_path") if source == DataSource.text
            else ("path",) if source == DataSource.enwik8 else ())
    for key in keys:
        if d[key]:
            check_path(f"data.{key}", d[key])
    if TokenizerKind(d.tokenizer) == TokenizerKind.file and d.tokenizer_path:
        check_path("data.tokenizer_path", d.tokenizer_path)
        if os.path.isdir(os.path.expanduser(d.tokenizer_path)):
            raise UsageError(f"data.tokenizer_path {d.tokenizer_path!r} is a directory; it "
                             "names a tokenizer.json file")


def check_eval(cfg: DictConfig) -> None:
    e = cfg.eval
    lengths = eval_lengths(cfg)
    if not lengths:
        raise UsageError("eval.lengths is empty")
    for length in lengths:
        _positive("each of eval.lengths", length, MAX_LENGTH)
    twice = sorted({L for L in lengths if lengths.count(L) > 1})
    if twice:
        raise UsageError(f"eval.lengths lists {', '.join(map(str, twice))} more than once; "
                         "list each length once")
    _positive("eval.tokens", e.tokens, MAX_EVAL_TOKENS)
    _positive("eval.batch_tokens", e.batch_tokens, MAX_BATCH_TOKENS)
    _positive("eval.per_position_buckets", e.per_position_buckets, MAX_BUCKETS)
    mode = EvalMode(e.mode)
    if e.stride is not None:
        _positive("eval.stride", e.stride, MAX_LENGTH)
        if mode == EvalMode.sliding and e.stride >= min(lengths):
            raise UsageError(
                f"eval.stride ({e.stride}) must be smaller than every window; "
                f"the shortest of eval.lengths is {min(lengths)}"
            )
    if mode == EvalMode.sliding and e.stride is None and min(lengths) < 2:
        raise UsageError("sliding evaluation needs windows of at least 2 tokens")
    check_task_eval(cfg)
    check_eval_scaling(cfg)


def check_eval_scaling(cfg: DictConfig) -> None:
    """eval.rope_scaling: methods (plain among them) and factors, each listed once, every
    scaling computable, and a RoPE run to apply them to."""
    key = "eval.rope_scaling"
    node = OmegaConf.select(cfg, key, default=None)
    if node is None:
        return
    if node.method is None:
        if _as_list(node.factor) != [1.0]:
            raise UsageError(f"{key}.factor is set but {key}.method is not; add "
                             f"{key}=METHOD ({', '.join(SCALING_METHODS)})")
        return
    methods, factors = _as_list(node.method), _as_list(node.factor)
    known = (PLAIN, *SCALING_METHODS)
    for name, values in (("method", methods), ("factor", factors)):
        if not values:
            raise UsageError(f"{key}.{name} is an empty list")
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:
            raise UsageError(f"{key}.{name} lists {', '.join(twice)} more than once; list "
                             "each once")
    for method in methods:
        if not isinstance(method, str) or method not in known:
            raise UsageError(f"{key}.method must be one of {', '.join(known)} or a list of "
                             f"them (e.g. {key}=linear,yarn), got {method!r}")
    _scaling_numbers(key, node, factors)
    if set(methods) == {PLAIN} and factors != [1.0]:
        raise UsageError(f"{key}.factor is set but the only method is {PLAIN}, which has none")
    scaled = [m for m in methods if m != PLAIN]
    if scaled and cfg.encoding.name != "rope":
        raise UsageError(f"{key}={','.join(scaled)} needs encoding=rope (it rescales RoPE's "
                         f"frequencies); this run is encoding={cfg.encoding.name}")
    _check_scaling(key, [r for r in eval_scalings(cfg) if r is not None])
