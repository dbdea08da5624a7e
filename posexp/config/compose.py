"""Composition: posexp's configs (and a --config-dir's), Hydra overrides applied, every
interpolation resolved, every key one of the schema's -- the config a run of those
overrides gets, or one line saying why there is none.  The command line, sweeps, presets,
fine-tunes and the public API all compose through here; guards.py refuses what would run
code first."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from posexp.config.check import check, check_given, plain_name
from posexp.config.check_eval import check_task_eval_key
from posexp.config.composer import compose_cached
from posexp.config.errors import composition_error
from posexp.config.guards import (
    check_bool,
    check_config_name,
    check_hydra,
    check_module,
    check_overrides,
    parse_override,
    refuse_code,
    scaling_sugar,
    scan_config_dir,
)
from posexp.config.keys import check_keys, check_set, unknown_key
from posexp.config.schema import Config
from posexp.errors import PosexpError, UsageError, flat

if TYPE_CHECKING:
    from hydra._internal.hydra import Hydra

CONFIG_DIR = str(files("posexp.configs"))
# ${plain:KEY} in a run name (sweep.run_name_override): a swept value as a directory name
OmegaConf.register_new_resolver("plain", plain_name, replace=True)


@contextlib.contextmanager
def hydra_context(config_dir: str | None) -> Iterator[Hydra]:
    """Hydra initialised as its entry point would be for posexp (the Hydra object within):
    posexp's configs, and a --config-dir added where Hydra's main adds it (so --config-name
    finds a file there)."""
    from hydra import version
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    backup = get_gh_backup()
    version.setbase("1.3")
    search_path = create_config_search_path(CONFIG_DIR)
    if config_dir:
        search_path.prepend(provider="command-line",
                            path=f"file://{os.path.abspath(config_dir)}",
                            anchor=SearchPathQuery(provider="schema"))
    hydra = Hydra.create_main_hydra2(task_name="cli", config_search_path=search_path)
    try:
        yield hydra
    finally:
        restore_gh_from_backup(backup)


def compose_overrides(overrides: list[str], config_dir: str | None = None,
                      config_name: str | None = None, with_hydra: bool = False,
                      command: str = "train", resolve: bool = True) -> DictConfig:
    """The config Hydra would compose for ``overrides`` (with a --config-dir and a
    --config-name), every interpolation resolved (unless not ``resolve``: a sweep's common
    part, whose interpolations may name swept keys); a UsageError for anything that cannot
    compose, would run code, reads a config from outside posexp's and the --config-dir's,
    names an encoding.module no --config-dir file names, or adds a key posexp does not
    have.  Values are checked by config.check."""
    overrides = [scaling_sugar(o) for o in overrides]
    check_overrides(overrides, command)
    check_config_name(config_name)
    declared = scan_config_dir(Path(config_dir)) if config_dir else set()
    try:
        with hydra_context(config_dir) as hydra:
            cfg = compose_cached(hydra, config_name or "config", overrides,
                                 [CONFIG_DIR, *([config_dir] if config_dir else [])])
    except UsageError:
        raise
    except Exception as e:
        task_keys = [o.partition("=")[0] for o in overrides if o.startswith("task.")]
        if task_keys and not any(o.startswith("task=") for o in overrides):
            # Hydra's own words would be "Unexpected type for root: NoneType"
            raise UsageError(f"{task_keys[0]} is set, but no task is chosen: add data=task "
                             "task=NAME") from None
        raise UsageError(composition_error(e)) from None
    check_hydra(cfg)
    hydra_node = _settle(cfg, resolve)
    if resolve:
        check_module(cfg, declared, config_dir)
    for o in overrides:
        check_task_eval_key(cfg, o.partition("=")[0].lstrip("+~"))
    if resolve:
        check_given(cfg, [o.partition("=")[0] for o in overrides])
    if with_hydra:
        with open_dict(cfg):
            cfg.hydra = hydra_node
    return cfg


def split_hydra(cfg: DictConfig) -> tuple[DictConfig, DictConfig]:
    """A config composed with_hydra, in place: the run's part, and Hydra's node taken out."""
    with open_dict(cfg):
        hydra_node = cfg.hydra
        del cfg["hydra"]
    return cfg, hydra_node


def _settle(cfg: DictConfig, resolve: bool) -> DictConfig:
    """Take Hydra's own node out of a composed config (returned), resolve the rest (unless
    not ``resolve``) and check its keys."""
    from hydra.core.hydra_config import HydraConfig

    with worded():
        cfg, hydra_node = split_hydra(cfg)
        if resolve:
            check_set(cfg)
            full = cfg.copy()
            with open_dict(full):
                full.hydra = hydra_node
            HydraConfig.instance().set_config(full)  # run names may use ${hydra:runtime...}
            resolve_all(cfg)
        check_keys(cfg)
    return hydra_node


@contextlib.contextmanager
def worded() -> Iterator[None]:
    """Any error of Hydra or OmegaConf inside becomes a UsageError in one line."""
    try:
        yield
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(composition_error(e)) from None


def resolve_all(cfg: DictConfig) -> None:
    """Resolve every interpolation of ``cfg`` in place; one that cannot be resolved is a
    UsageError naming its key and what it asked for."""
    from omegaconf.errors import InterpolationToMissingValueError, OmegaConfBaseException

    def walk(node: DictConfig | ListConfig, prefix: str) -> None:
        keys = range(len(node)) if isinstance(node, ListConfig) else list(node.keys())
        for k in keys:
            key = f"{prefix}[{k}]" if isinstance(node, ListConfig) else \
                f"{prefix}.{k}" if prefix else str(k)
            if OmegaConf.is_missing(node, k):
                continue  # ??? : config.check says which key must be set
            raw = node._get_node(k)._value() if node._get_node(k) is not None else None
            try:
                child = node[k]
            except InterpolationToMissingValueError:
                continue  # it names a key left ???: config.check says which must be set
            except OmegaConfBaseException as e:
                message = flat(str(e).split("\n    full_key:")[0]).split(" full_key:")[0]
                message = message.split("while resolving interpolation: ")[-1].strip('"')
                if message.startswith("Environment variable"):
                    name = message.split("'")[1] if "'" in message else "NAME"
                    advice = f"set it, or give a default: ${{oc.env:{name},default}}"
                else:
                    advice = ("an interpolation names another key of the config (--cfg job "
                              "shows them); config values are data, never code")
                raise UsageError(f"{key}={raw} cannot be resolved: {message}; {advice}"
                                 ) from None
            if isinstance(child, (DictConfig, ListConfig)):
                walk(child, key)

    walk(cfg, "")
    OmegaConf.resolve(cfg)


def compose(overrides: list[str], config_dir: str | None = None,
            config_name: str | None = None, command: str = "train") -> DictConfig:
    """The checked config a run of ``overrides`` gets, or a UsageError."""
    cfg = compose_overrides(overrides, config_dir, config_name, command=command)
    check(cfg)
    return cfg


def apply_overrides(saved: DictConfig, args: list[str], allowed: tuple[str, ...],
                    run_dir: Path = Path("."), command: str = "eval") -> DictConfig:
    """The schema-checked config of a saved run with Hydra-syntax overrides applied, every
    interpolation resolved; ``allowed`` are the key prefixes ``command`` may change."""
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(Config), saved)
    except Exception as e:
        raise PosexpError(f"{run_dir / 'config.yaml'} does not fit posexp's config: "
                          f"{composition_error(e)}") from None
    OmegaConf.set_struct(cfg, True)
    with worded():
        for arg in map(scaling_sugar, args):
            o = parse_override(arg)
            key = o.key_or_group
            if not key.startswith(allowed) or o.is_delete() or (o.is_add() and "." not in key):
                keys = ", ".join(f"{k}*" if k.endswith(".") else k for k in allowed)
                raise UsageError(f"posexp {command} can change only {keys}; got {key!r} "
                                 "(another model is another run: posexp train)")
            if o.is_sweep_override():
                several = "evaluations" if command == "eval" else "fine-tunes"
                raise UsageError(f"{arg} asks for several {several}; give one value (a list "
                                 "of lengths is eval.lengths=[64,128])")
            problem = unknown_key(key)
            if problem:
                raise UsageError(problem)
            if key.startswith("task.") and cfg.get("task") is None:
                raise UsageError(f"{key}: this run has no task; it trains on "
                                 f"data={cfg.data.name}, not on a task (data=task)")
            check_task_eval_key(cfg, key)
            refuse_code(arg, o)
            value = o.value()
            check_bool(key, value)
            OmegaConf.update(cfg, key, value, merge=False)
        resolve_all(cfg)
        check_given(cfg, [parse_override(a).key_or_group for a in map(scaling_sugar, args)])
    return cfg


def group_options(group: str, config_dir: str | None = None) -> list[str]:
    """A config group's options (posexp's and --config-dir's), its schema left out; none for
    a key that is not a group."""
    from hydra.core.global_hydra import GlobalHydra

    with hydra_context(config_dir):
        loader = GlobalHydra.instance().config_loader()
        return sorted(o for o in loader.get_group_options(group) if not o.endswith("_schema"))
