"""A pretrained run's config: what config.yaml holds, built from MODEL and the overrides of
``posexp pretrained``, changed by those of ``posexp eval``, and checked.

config.yaml has the shape every run's has, so that ``ls``, ``compare``, ``report`` and the
identity read it as any run's (posexp/config/identity.py: every key but where it is
written and how it is scored):

```
pretrained:  id, revision, weights_sha256, config_sha256, tokenizer_sha256, architecture,
             positions                                             the model: its identity
encoding:    name (the model's name, as tables and figures call it), max_positions, base
model:       d_model, n_layer, n_head, d_ff, tie_weights, init      its shape, from config.json
train:       seq_len                                               the length it was trained at
data:        the corpus it is scored on (posexp's data group; tokenizer: file = the model's)
eval:        posexp's eval group, and eval.task: passkey or a RULER task (not identity)
device, attention, results_dir, experiment, run_name
```

It never trains: there is no training setting, and no seed.  The data group is identity as
in every run (a run holds the points of one corpus); evaluation settings are not.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from types import MappingProxyType

import yaml
from omegaconf import MISSING, DictConfig, OmegaConf

from posexp import scaling
from posexp.config.bounds import MAX_LENGTH
from posexp.config.check import check_device_name, check_name
from posexp.config.check_eval import check_positions, check_task_settings, check_windows
from posexp.config.compose import worded
from posexp.config.derive import as_list, run_path
from posexp.config.guards import parse_override, refuse_code, scaling_sugar
from posexp.config.identity import identity
from posexp.config.schema import (
    Attention,
    DataConfig,
    EncodingConfig,
    EvalConfig,
    ModelConfig,
    TaskConfig,
    TrainConfig,
)
from posexp.config.spec import RunSpec, frozen
from posexp.data.tasks import PasskeyTask
from posexp.errors import UsageError
from posexp.pretrained.ruler import TASKS as RULER_TASKS
from posexp.values import in_range, listed_once, positive

# settings posexp pretrained takes (eval takes the evaluation ones); task=passkey and task.*
# are eval.task and eval.task.* (a pretrained run's task is how it is scored)
CREATE_KEYS = ("data", "eval.", "task", "device", "attention", "results_dir", "experiment",
               "run_name")
EVAL_KEYS = ("eval.", "task", "device", "attention")
# data settings that are the model's own
MODEL_DATA = ("data.tokenizer", "data.vocab_size", "data.tokenizer_path")
# what a pretrained run is scored on, in its own words: passkey and RULER's tasks
TASKS = (PasskeyTask.name, *RULER_TASKS)
MULTIPLES = (0.25, 0.5, 1, 2, 4)  # default eval.lengths: x the length it was trained at
TASK_MULTIPLES = (0.5, 1, 2, 4)  # default task.lengths


@dataclass
class SourceConfig:
    """The model: hub id (or a local directory's name), commit, and its files' hashes."""

    id: str = MISSING
    revision: str | None = None
    weights_sha256: str = MISSING
    config_sha256: str = MISSING
    tokenizer_sha256: str = MISSING
    architecture: str = MISSING
    positions: str = MISSING  # rope | learned | other


def read_from_model(name: str, schema: type, *keys: str,
                    **changed: tuple[object, object]) -> type:
    """``name``, a group of a pretrained run's config: the ``keys`` of the trained runs'
    group ``schema``, with their types and no default (the model's config.json gives each),
    and ``changed``, key=(type, default), where a pretrained model's key differs."""
    hints = typing.get_type_hints(schema)
    group = make_dataclass(name, [
        *((key, hints[key], field(default=MISSING)) for key in keys),
        *((key, kind, field(default=default)) for key, (kind, default) in changed.items())])
    group.__module__ = __name__  # where pickle and error messages find it
    return group


# encoding: the model's name (what tables, figures and ls call the run), a learned table's
# rows (null: any length) and RoPE's rope_theta (null: no RoPE)
PositionsConfig = read_from_model("PositionsConfig", EncodingConfig, "name", "max_positions",
                                  base=(float | None, MISSING))
# model: its shape; init says its weights are the model's (posexp's runs: gpt2 | torch)
ShapeConfig = read_from_model("ShapeConfig", ModelConfig, "d_model", "n_layer", "n_head",
                              "d_ff", "tie_weights", init=(str, "pretrained"))
# train: the length it was trained at, RoPE scaling's L
ContextConfig = read_from_model("ContextConfig", TrainConfig, "seq_len")


@dataclass
class PromptTaskConfig(TaskConfig):
    """eval.task: passkey retrieval or a RULER task (pretrained/ruler.py) at each length (in
    the model's tokens) and, where it takes one, depth; the task group's settings
    (TaskConfig: instances, their seed, depths) and the lengths -- and passkey's key's
    digits -- the model's own tokenizer needs."""

    name: str = PasskeyTask.name
    eval_count: int = 20  # instances per length and depth
    lengths: list[int] | None = None  # default 1/2, 1, 2, 4 x train.seq_len
    digits: int = 5  # the key's digits


@dataclass
class PretrainedEvalConfig(EvalConfig):
    task: PromptTaskConfig | None = None


@dataclass
class PretrainedConfig:
    pretrained: SourceConfig = field(default_factory=SourceConfig)
    encoding: PositionsConfig = field(default_factory=PositionsConfig)
    model: ShapeConfig = field(default_factory=ShapeConfig)
    train: ContextConfig = field(default_factory=ContextConfig)
    data: DataConfig = MISSING
    eval: PretrainedEvalConfig = field(default_factory=PretrainedEvalConfig)
    device: str = "auto"
    attention: Attention = Attention.auto
    results_dir: str = "results"
    experiment: str = "default"
    run_name: str = MISSING


def preset(name: str) -> tuple[str, str | None, list[str]]:
    """(MODEL, revision, overrides) of a preset: configs/pretrained/NAME.yaml, or a YAML file
    with ``model``, ``revision`` (optional) and ``overrides`` (a list of key=value)."""
    from posexp.config.compose import CONFIG_DIR

    path = Path(name) if name.endswith((".yaml", ".yml")) else \
        Path(CONFIG_DIR) / "pretrained" / f"{name}.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        known = sorted(p.stem for p in (Path(CONFIG_DIR) / "pretrained").glob("*.yaml"))
        raise UsageError(f"--preset {name}: cannot read {path} ({e.strerror}); presets: "
                         f"{', '.join(known)}, or a YAML file") from None
    except yaml.YAMLError as e:
        raise UsageError(f"--preset {name}: {path} is not valid YAML ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model"), str) or set(data) - {
            "model", "revision", "overrides"} or not isinstance(data.get("overrides", []), list)\
            or not all(isinstance(o, str) for o in data.get("overrides", [])):
        raise UsageError(f"--preset {name}: {path} must hold model (a string), revision and "
                         "overrides (a list of key=value strings), and nothing else")
    return data["model"], data.get("revision"), list(data.get("overrides", []))


def structured(saved: DictConfig) -> DictConfig:
    """config.yaml of a pretrained run, on its schema (types checked, struct)."""
    with worded():
        cfg = OmegaConf.merge(OmegaConf.structured(PretrainedConfig), saved)
    OmegaConf.set_struct(cfg, True)
    return cfg


def split(overrides: list[str], allowed: tuple[str, ...],
          command: str) -> tuple[list[str], list[str]]:
    """(data overrides, the others) of a command line, each checked for code and for a key
    the command may set."""
    data, rest = [], []
    for arg in map(scaling_sugar, overrides):
        o = parse_override(arg)
        refuse_code(arg, o)
        key = o.key_or_group
        if key.startswith(MODEL_DATA):
            raise UsageError(f"{key} is the model's own: a pretrained model reads its own "
                             "tokenizer (tokenizer.json)")
        if not key.startswith(allowed) or o.is_delete() or o.is_add():
            keys = ", ".join(f"{k}*" if k.endswith(".") else k for k in allowed)
            raise UsageError(f"posexp {command} of a pretrained model can set only {keys}; "
                             f"got {key!r} (the model, its shape and positions are MODEL's; "
                             "it never trains)")
        if o.is_sweep_override():
            raise UsageError(f"{arg} asks for several runs; give one value (a list is "
                             "key=[a,b]; eval.rope_scaling and its factor take a,b)")
        (data if key == "data" or key.startswith("data.") else rest).append(arg)
    return data, rest


def apply(cfg: DictConfig, overrides: list[str]) -> None:
    """Set each override (split's others) in ``cfg``: task=NAME is eval.task.name, and
    task.KEY eval.task.KEY; task=null scores no task."""
    given = set()
    for arg in overrides:
        o = parse_override(arg)
        key, value = o.key_or_group, o.value()
        given.add(key)
        if key == "task" or key.startswith("task."):
            if key == "task" and value is not None and value not in TASKS:
                raise UsageError(f"task={value}: a pretrained model is scored on "
                                 f"{', '.join(TASKS)} (posexp's other tasks need their own "
                                 "vocabulary and training)")
            if key != "task" and cfg.eval.task is None:
                raise UsageError(f"{key} is set, but no task is chosen: add task=NAME, one of "
                                 f"{', '.join(TASKS)}")
            if key == "task":
                cfg.eval.task = None if value is None else (cfg.eval.task or PromptTaskConfig())
                if value is not None:
                    cfg.eval.task.name = value
                continue
            key = f"eval.{key}"
        with worded():
            OmegaConf.update(cfg, key, value, merge=False)
    refuse_unread(cfg.eval.task, given)


def refuse_unread(task: DictConfig | None, given: set[str]) -> None:
    """task.digits is passkey's; task.depths is read by the tasks that hide at depths."""
    if task is None or task.name not in RULER_TASKS:
        return
    if "task.digits" in given:
        raise UsageError(f"task.digits is passkey's key length; task={task.name} does not "
                         "read it: leave it out")
    if "task.depths" in given and not RULER_TASKS[task.name].takes_depth:
        deep = [n for n, t in RULER_TASKS.items() if t.takes_depth]
        raise UsageError(f"task.depths is set, but task={task.name} has no depth (passkey, "
                         f"{' and '.join(deep)} hide at depths): leave task.depths out")


def defaults(cfg: DictConfig) -> None:
    """Fill eval.lengths and eval.task.lengths from the length the model was trained at."""
    L = cfg.train.seq_len
    if cfg.eval.lengths is None:
        cfg.eval.lengths = sorted({max(2, int(L * k)) for k in MULTIPLES})
    if cfg.eval.task is not None and cfg.eval.task.lengths is None:
        cfg.eval.task.lengths = sorted({max(2, int(L * k)) for k in TASK_MULTIPLES})


def check(cfg: DictConfig) -> None:
    """Every setting of a pretrained run a user can change: where it goes, the device, and
    how it is scored."""
    check_name("experiment", cfg.experiment)
    check_name("run_name", cfg.run_name)
    if not cfg.results_dir:
        raise UsageError("results_dir must not be empty (results_dir=. for this directory)")
    check_device_name(cfg.device)
    check_windows(cfg.eval, list(cfg.eval.lengths))
    check_positions(cfg.eval, None, "a pretrained model")
    if cfg.eval.task is not None:
        check_task(cfg.eval.task)
    scalings(cfg)


def check_task(t: DictConfig) -> None:
    """Passkey's settings: the task group's (check_task_settings), its lengths and digits."""
    check_task_settings(t)
    if not t.lengths:
        raise UsageError("task.lengths is empty")
    for length in t.lengths:
        positive("each of task.lengths", length, MAX_LENGTH)
    listed_once("task.lengths", list(t.lengths), "length")
    positive("task.digits", t.digits, 20)


def scalings(cfg: DictConfig) -> list[dict | None]:
    """The RoPE scalings eval.rope_scaling asks for, in order: None for the model as
    published, a record (posexp/scaling.py) for each method at each factor."""
    node = cfg.eval.rope_scaling
    if node.method is None:
        return [None]
    methods, factors = as_list(node.method), as_list(node.factor)
    listed_once("eval.rope_scaling.method", methods, "method")
    listed_once("eval.rope_scaling.factor", factors, "factor", shown=lambda f: f"{f:g}")
    for factor in factors:
        in_range("eval.rope_scaling.factor", factor, 1.0, 1e6)
    out: list[dict | None] = []
    for method in methods:
        if method == scaling.PLAIN:
            out.append(None)
        elif method in scaling.METHODS and scaling.METHODS[method].eval_only:
            raise UsageError(f"eval.rope_scaling={method} runs in posexp's own attention, and "
                             "a pretrained model attends with transformers' code, which posexp "
                             "does not patch; score a run trained here with it")
        elif method in scaling.METHODS and scaling.METHODS[method].model_factors:
            out += [{"method": method, "factor": float(f)} for f in factors]
        elif method in scaling.METHODS:
            for f in factors:
                try:
                    out.append(scaling.RopeScaling(**scaling.record(method, f, node)).record())
                except ValueError as e:
                    raise UsageError(f"eval.rope_scaling: {e}") from None
        else:
            raise UsageError(f"eval.rope_scaling.method must be {scaling.PLAIN} or one of "
                             f"{', '.join(scaling.METHODS)}; got {method!r}")
    return out


def spec_of(cfg: DictConfig) -> RunSpec:
    """The run's RunSpec, from a checked config (``check``): the spec a trained run has, with
    what scoring reads frozen and typed -- eval, the model's name and positions (encoding),
    passkey's settings (task_settings), the scalings and the length it was trained at
    (original_len) -- and no training, model or task run to read."""
    cfg = cfg.copy()
    OmegaConf.set_readonly(cfg, True)
    task = cfg.eval.task
    return RunSpec(
        cfg=cfg, path=run_path(cfg), identity=MappingProxyType(identity(cfg)),
        eval_lengths=tuple(cfg.eval.lengths), scalings=tuple(scalings(cfg)),
        train_scaling=None, original_len=int(cfg.train.seq_len),
        encoding_hparams=MappingProxyType({}), eval=frozen(EvalConfig, cfg.eval),
        encoding=frozen(PositionsConfig, cfg.encoding),
        task_settings=None if task is None else frozen(PromptTaskConfig, task),
        device=str(cfg.device), attention=str(getattr(cfg.attention, "value", cfg.attention)))
