"""Hydra's machinery, handed what posexp has already composed and checked: one run as
Hydra's job (its run directory, its logging, hydra.job.env_set), the planned jobs of a
sweep or a campaign to Hydra's launcher, and what --info and --cfg hydra show.  Nothing
here composes a run's config again: the task is given the config posexp planned; Hydra's
launcher composes only its own bookkeeping (a job's directory, its environment), as it
must on another machine."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from posexp.config.compose import hydra_context


class JobFailed(BaseException):
    """A task's error carried out of Hydra's job, which would otherwise keep it and go on to
    the next job; ``launch`` and ``run_job`` raise the error itself."""


def _carried(task: Callable[[Any], object]) -> Callable[[Any], object]:
    def job(payload: Any) -> object:
        try:
            return task(payload)
        except Exception as e:
            raise JobFailed() from e
    return job


def run_job(task: Callable[[DictConfig], object], cfg: DictConfig, hydra_node: DictConfig,
            config_dir: str | None = None) -> object:
    """``task(cfg)`` run as Hydra runs a job (hydra.run.dir, hydra/job_logging,
    hydra.job.env_set), ``cfg`` being the config posexp composed with ``hydra_node``, Hydra's
    part of the same composition; the task's error is raised as it was."""
    from hydra.core.utils import run_job as hydra_run_job
    from hydra.types import HydraContext

    full = cfg.copy()
    with open_dict(full):
        full.hydra = hydra_node
    with hydra_context(config_dir) as hydra:
        try:
            ret = hydra_run_job(
                hydra_context=HydraContext(config_loader=hydra.config_loader,
                                           callbacks=_no_callbacks()),
                task_function=_carried(task), config=full, job_dir_key="hydra.run.dir",
                job_subdir_key=None)
        except JobFailed as e:
            raise e.__cause__ from None
    return ret.return_value


def launch(task: Callable[[Any], object], payloads: Sequence[Any],
           job_overrides: Sequence[Sequence[str]], hydra_overrides: Sequence[str],
           config_dir: str | None = None, config_name: str | None = None) -> list[object]:
    """``task(payloads[i])`` for every job, run by the launcher ``hydra_overrides`` choose
    (hydra/launcher=..., hydra.launcher.*, hydra.sweep.*; the hydra.* overrides every job
    gets), job i being Hydra's job of ``job_overrides[i]``, which names its directory; the
    statuses in order.  Payloads travel to the launcher's workers with the task.  The first
    job's error is raised as it was, once the launcher is done."""
    from hydra.core.plugins import Plugins
    from hydra.types import HydraContext, RunMode

    planned = list(payloads)

    def job(_: DictConfig) -> object:
        from hydra.core.hydra_config import HydraConfig

        return task(planned[HydraConfig.get().job.num])

    with hydra_context(config_dir) as hydra:
        base = hydra.compose_config(config_name or "config",
                                    overrides=[*hydra_overrides, *job_overrides[0]],
                                    with_log_configuration=True, run_mode=RunMode.MULTIRUN)
        launcher = Plugins.instance().instantiate_launcher(
            config=base, task_function=_carried(job),
            hydra_context=HydraContext(config_loader=hydra.config_loader,
                                       callbacks=_no_callbacks()))
        try:
            returns = launcher.launch([list(o) for o in job_overrides], initial_job_idx=0)
        except JobFailed as e:  # a launcher that runs jobs in this process: at once
            raise e.__cause__ from None
    return [_returned(r) for r in returns]


def _returned(ret: Any) -> object:
    """A job's status, or its error raised as the task raised it."""
    from hydra.core.utils import JobStatus

    if ret.status == JobStatus.COMPLETED:
        return ret.return_value
    error = ret._return_value  # the error Hydra kept; its getter writes a line of its own
    raise error.__cause__ if isinstance(error, JobFailed) else error


def _no_callbacks() -> Any:
    from hydra._internal.callbacks import Callbacks

    return Callbacks()  # hydra.callbacks run code: config.guards refuses them


def show_info(info: str, overrides: list[str], config_dir: str | None,
              config_name: str | None) -> None:
    """--info ITEM: how Hydra composes the config of ``overrides`` (its defaults, search
    path, plugins), in Hydra's words; nothing runs."""
    with hydra_context(config_dir) as hydra:
        hydra.show_info(info, config_name=config_name or "config", overrides=overrides)


def hydra_part(hydra_node: DictConfig) -> DictConfig:
    """Hydra's part of a composed config as --cfg hydra shows it: its own help texts left
    out, as Hydra leaves them out."""
    node = OmegaConf.create(OmegaConf.to_container(hydra_node, resolve=False))
    for key in ("help", "hydra_help"):
        node.pop(key, None)
    return OmegaConf.create({"hydra": node})


def show_hydra_help(overrides: list[str], config_dir: str | None) -> None:
    """--hydra-help: Hydra's own help, for the config of ``overrides``; nothing runs."""
    import argparse

    from hydra._internal.utils import get_args_parser

    with hydra_context(config_dir) as hydra:
        hydra.hydra_help(config_name=None, args_parser=get_args_parser(),
                         args=argparse.Namespace(overrides=overrides))
