"""A run resolved once: RunSpec holds the config read-only, every derived value filled in
(derive.resolve), with the values derived from it, computed once.  Code downstream of the
config (the run, evaluation, fine-tunes, the public API) reads the spec; it never derives a
default again."""

from __future__ import annotations

import functools
import typing
from dataclasses import dataclass, fields, make_dataclass
from pathlib import Path
from types import MappingProxyType

from omegaconf import DictConfig, OmegaConf

from posexp.config.derive import (
    encoding_hparams,
    eval_scalings,
    is_task_run,
    original_len,
    resolve,
    run_path,
    task_max_length,
    task_of,
    train_scaling,
)
from posexp.config.identity import identity
from posexp.config.schema import (
    EncodingConfig,
    EvalConfig,
    ModelConfig,
    TaskConfig,
    TrainConfig,
)

if typing.TYPE_CHECKING:
    from posexp.data.tasks import Task


@functools.cache
def frozen_twin(schema: type) -> type:
    """A frozen dataclass with the fields of the schema's dataclass ``schema``: TrainConfig's
    is TrainSpec."""
    return make_dataclass(schema.__name__.replace("Config", "Spec"),
                          [(f.name, f.type) for f in fields(schema)], frozen=True)


TrainSpec = frozen_twin(TrainConfig)
EvalSpec = frozen_twin(EvalConfig)
ModelSpec = frozen_twin(ModelConfig)
EncodingGroup = frozen_twin(EncodingConfig)  # not encodings.EncodingSpec, the registry's entry
TaskSettings = frozen_twin(TaskConfig)  # a task run's task group (``task`` is the Task)


def frozen(schema: type, node: DictConfig) -> typing.Any:
    """A group of a resolved config as the frozen twin of its schema: typed values (enums
    as their members), lists as tuples, a nested group as a mapping nobody can change."""
    values = OmegaConf.to_container(node, resolve=True, enum_to_str=False)

    def fixed(value: object) -> object:
        if isinstance(value, list):
            return tuple(value)
        return MappingProxyType(value) if isinstance(value, dict) else value

    return frozen_twin(schema)(**{f.name: fixed(values.get(f.name, getattr(
        schema, f.name, None))) for f in fields(schema)})


@dataclass(frozen=True)
class RunSpec:
    """One run, resolved: ``cfg`` is the config exactly as config.yaml holds it (every
    derived value filled in, read-only), the other fields what is derived from it.

    Build one with ``RunSpec.of(cfg)`` from a checked config (config.check)."""

    cfg: DictConfig
    path: Path
    identity: typing.Mapping[str, object]
    eval_lengths: tuple[int, ...]  # corpus lengths scored (1-16 x seq_len by default)
    scalings: tuple[dict | None, ...]  # what eval.rope_scaling asks for (None: as trained)
    train_scaling: dict | None  # a fine-tune's encoding.scaling as a record
    original_len: int  # the L of RoPE scaling
    encoding_hparams: typing.Mapping[str, object]
    task: Task | None = None  # a task run's task
    n_max: int | None = None  # a task run's longest training length
    task_lengths: tuple[int, ...] = ()  # a task run's lengths scored
    fine_tune: bool = False
    # the groups the run, the model and evaluation read, frozen and typed
    train: TrainSpec | None = None
    eval: EvalSpec | None = None
    model: ModelSpec | None = None
    encoding: EncodingGroup | None = None
    task_settings: TaskSettings | None = None
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps, as given (run.setup.pick_device)
    attention: str = "auto"

    @classmethod
    def of(cls, cfg: DictConfig) -> RunSpec:
        resolved = resolve(cfg)
        OmegaConf.resolve(resolved)
        ident = identity(resolved)
        OmegaConf.set_readonly(resolved, True)
        task = task_of(resolved) if is_task_run(resolved) else None
        return cls(
            cfg=resolved, path=run_path(resolved), identity=MappingProxyType(ident),
            eval_lengths=tuple(resolved.eval.lengths), scalings=tuple(eval_scalings(resolved)),
            train_scaling=train_scaling(resolved), original_len=original_len(resolved),
            encoding_hparams=MappingProxyType(encoding_hparams(resolved)), task=task,
            n_max=task_max_length(resolved) if task else None,
            task_lengths=tuple(resolved.eval.task_lengths) if task else (),
            fine_tune=OmegaConf.select(resolved, "parent.identity") is not None,
            train=frozen(TrainConfig, resolved.train), eval=frozen(EvalConfig, resolved.eval),
            model=frozen(ModelConfig, resolved.model),
            encoding=frozen(EncodingConfig, resolved.encoding), seed=int(resolved.seed),
            task_settings=frozen(TaskConfig, resolved.task) if task else None,
            device=str(resolved.device),
            attention=str(getattr(resolved.attention, "value", resolved.attention)))

    @property
    def is_task_run(self) -> bool:
        return self.task is not None

    @property
    def run_scalings(self) -> tuple[dict | None, ...]:
        """What a run (train, sweep, resume, finetune) scores: as trained, always, and what
        eval.rope_scaling asks for."""
        return self.scalings if None in self.scalings else (None, *self.scalings)

    def relocated(self, results_dir: str, experiment: str, run_name: str,
                  eval_lengths: list[int] | None = None) -> RunSpec:
        """The same run written elsewhere (and, with ``eval_lengths``, scored there only):
        what a campaign trains again in a scratch directory for a record's weights."""
        cfg = OmegaConf.merge(self.config(), {"results_dir": results_dir,
                                              "experiment": experiment, "run_name": run_name})
        if eval_lengths is not None:
            cfg.eval.lengths = list(eval_lengths)
        return RunSpec.of(cfg)

    def scored_as(self, overrides: dict) -> RunSpec:
        """The same run scored under other eval.* (or task.*) settings ``overrides``: how
        points of an earlier scoring are scored again (run/evaluation.py)."""
        return RunSpec.of(OmegaConf.merge(self.config(), overrides))

    def config(self) -> DictConfig:
        """A writable copy of the config, to derive another run's from."""
        out = self.cfg.copy()
        OmegaConf.set_readonly(out, False)
        return out
