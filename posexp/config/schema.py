"""Structured-config schemas, registered with Hydra's ConfigStore.

The YAML files under ``configs/`` pick values; these dataclasses say which keys exist and
what type each has, so a misspelt key or a wrong type fails while Hydra composes the
config.  The rules that types alone cannot say live in ``check.py`` (and, for a part's own
settings, with that part: data/checks.py, the encodings' configs, posexp/scaling.py).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field, make_dataclass
from enum import Enum

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from posexp import scaling
from posexp.data.tokenizer import TokenizerKind

__all__ = ["Attention", "Config", "DataConfig", "EncodingConfig", "EvalConfig",
           "EvalMode", "EvalScalingConfig", "Init", "LoggerConfig", "ModelConfig", "ParentConfig",
           "Precision", "ScalingParams", "TaskConfig", "TokenizerKind", "TrainConfig",
           "TrainScalingConfig", "WandbMode", "register"]


class Attention(str, Enum):
    """The kernel of a score-bias encoding's attention (posexp/attention.py); other encodings
    always run SDPA's causal kernel."""

    auto = "auto"  # flash if installed, else flex, on CUDA; sdpa on the CPU
    sdpa = "sdpa"  # SDPA with an additive bias, one block of queries at a time
    flex = "flex"  # FlexAttention, compiled, with a causal block mask
    flash = "flash"  # flash-attn's alibi_slopes (CUDA, needs the flash-attn package)


class Init(str, Enum):
    """How the model's weights start (model.init), one policy for every encoding; an
    encoding's own parameters start as its paper says, under either."""

    gpt2 = "gpt2"  # N(0, 0.02) for linears and embeddings; residual projections / sqrt(2 layers)
    torch = "torch"  # PyTorch's defaults: nn.Linear Kaiming-uniform, nn.Embedding N(0, 1)


class Precision(str, Enum):
    """The numerics a run trains in (train.precision), part of its identity: CUDA trains in
    bf16 autocast, every other device in fp32 (derive.NUMERICS)."""

    auto = "auto"  # the device's: what config.yaml records is the resolved one
    fp32 = "fp32"
    bf16 = "bf16"


class EvalMode(str, Enum):
    nonoverlapping = "nonoverlapping"
    sliding = "sliding"
    lm_eval = "lm_eval"  # lm-evaluation-harness's rolling windows over whole documents


class WandbMode(str, Enum):
    online = "online"
    offline = "offline"
    disabled = "disabled"


@dataclass
class ModelConfig:
    d_model: int = 128
    n_layer: int = 4
    n_head: int = 4
    d_ff: int | None = None  # default 4 * d_model
    dropout: float = 0.0
    init: Init = Init.torch  # one initialisation for every encoding (docs/encodings.md)
    tie_weights: bool = False  # whether the output head shares the token embeddings, for all
    # SSMax (Nakanishi 2025): every layer's logits x s_h log n, n the keys a query attends
    # to, with s_h learned per head; false: softmax (and neither key is identity)
    ssmax: bool = False
    ssmax_init: float | None = None  # s_h at the start; null: 1 / ln L (softmax's, at n = L)


# The parameters of every RoPE scaling method (posexp/scaling.py's table, the papers'
# defaults); each method reads its own.
ScalingParams = make_dataclass(
    "ScalingParams", [(p.name, float, field(default=p.default)) for p in scaling.all_params()])


@dataclass
class TrainScalingConfig(ScalingParams):
    """encoding.scaling: a fine-tune's RoPE scaling (posexp finetune), part of its identity."""

    method: str | None = None  # a method of posexp/scaling.py; null: none
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
    # paper's defaults; configs/encoding/<name>.yaml lists them); checked by the encoding
    hparams: dict[str, typing.Any] = field(default_factory=dict)
    scaling: TrainScalingConfig = field(default_factory=TrainScalingConfig)
    # An encoding of your own: the dotted path of a Python module (importable from the working
    # directory) that registers encoding.name (docs: adding an encoding).  Only a config
    # file may name it, never the command line.
    module: str | None = None


@dataclass
class DataConfig:
    name: str = MISSING  # the corpus, as runs and the token cache name it
    source: str | None = None  # a corpus kind (posexp/data/kinds.py) or task; default: data.name
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

    name: str = MISSING  # a task of posexp/data/tasks (TASKS)
    eval_count: int = 500  # held-out instances per length (and depth)
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
    # linear warm-up; null: 100,000 tokens or a tenth of train.tokens, whichever is fewer
    # (derive.warmup_tokens), so that a short run warms up and then decays
    warmup_tokens: int | None = None
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
    # It is scored so too (eval.positions, evaluate/positions.py).
    random_positions: int | None = None
    # Which numerics train the run, and on what kind of device (cpu | cuda | mps; null: the
    # kind of `device`, auto's as this machine has it): identity, so that a GPU's bf16 run is
    # never taken for, resumed as, or compared with a CPU's fp32 run of the same config.
    precision: Precision = Precision.auto
    device_kind: str | None = None


@dataclass
class EvalConfig:
    lengths: list[int] | None = None  # default 1, 2, 4, 8, 16 x train.seq_len
    mode: EvalMode = EvalMode.nonoverlapping
    stride: int | None = None  # sliding: default half of each window
    tokens: int = 32_768
    batch_tokens: int = 32_768  # tokens per forward pass
    per_position_buckets: int = 4  # per doubling of position (evaluate.bucket_edges)
    rope_scaling: EvalScalingConfig = field(default_factory=EvalScalingConfig)
    # null: the positions the run was trained at (a train.random_positions=M run at sorted
    # random positions below M, as Ruoss et al. score it); consecutive: such a run at
    # 0..n-1, a variant that judges no claim (evaluate/positions.py)
    positions: str | None = None
    # data=task: the task lengths scored; default 1, 1.25, 1.5, 2, 4 x the longest trained on
    task_lengths: list[int] | None = None


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
    weights_sha256: str | None = None  # its trained weights (run.training.weights_hash)
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
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    attention: Attention = Attention.auto
    results_dir: str = "results"
    experiment: str = "default"
    run_name: str = "${encoding.name}-L${train.seq_len}-s${seed}"
    parent: ParentConfig = field(default_factory=ParentConfig)


# The config groups a user chooses an option of (configs/<group>/), each with its schema.
GROUPS = {"model": ModelConfig, "encoding": EncodingConfig, "data": DataConfig,
          "train": TrainConfig, "eval": EvalConfig, "logger": LoggerConfig, "task": TaskConfig}
LOGGERS = ("local", "wandb")  # posexp/sinks.py
# The logger keys each logger reads besides its name: local files need none, W&B reads every
# other key of the group (posexp/sinks.py), so a new key of LoggerConfig is W&B's.
LOGGER_READS = {"local": (), "wandb": tuple(f.name for f in dataclasses.fields(LoggerConfig)
                                           if f.name != "name")}


def default(key: str) -> object:
    """The schema's default of a dotted key (``encoding.base``, ``eval.rope_scaling.beta_fast``),
    MISSING where it has none: what a key holds when no file or override sets it, so that a
    check can tell a value given from the default (configs/ repeat the schema's defaults)."""
    node: object = Config
    value: object = MISSING
    for part in key.split("."):
        if not dataclasses.is_dataclass(node):
            return MISSING
        hints = typing.get_type_hints(node)
        found = {f.name: f for f in dataclasses.fields(node)}.get(part)
        if found is None:
            return MISSING
        if found.default is not dataclasses.MISSING:
            value = found.default
        elif found.default_factory is not dataclasses.MISSING:
            value = found.default_factory()
        else:
            value = MISSING
        kind = hints[part]
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        node = args[0] if len(args) == 1 and dataclasses.is_dataclass(args[0]) else kind
    return getattr(value, "value", value)  # an enum as its value


def register() -> None:
    """Store the schemas in Hydra's ConfigStore (configs/*.yaml name them in defaults)."""
    cs = ConfigStore.instance()
    cs.store(name="posexp_schema", node=Config)
    for group, node in GROUPS.items():
        cs.store(group=group, name=f"{group}_schema", node=node)
