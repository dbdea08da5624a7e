"""Hydra's composition, faster where a process composes many configs (a preset's plan, a
sweep, the tests): the part of a config its config-group choices make -- the defaults list
and the files merged along it, about two thirds of a compose -- is composed once per set of
choices and kept; every other override is then applied to a copy by Hydra's own code, as
Hydra applies it after the defaults.  The same overrides give the same config, key for key
and error for error (tests/unit/test_composer.py composes both ways); a config file edited
since (its size or time) is read again.  A sweep override (a,b) goes the whole way."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, open_dict

if TYPE_CHECKING:
    from hydra._internal.hydra import Hydra

_BASES: dict[tuple, DictConfig] = {}
_MAX_BASES = 256  # each some 100 kB; a sweep over groups keeps only its latest


def compose_cached(hydra: Hydra, config_name: str, overrides: list[str],
                   config_dirs: list[str]) -> DictConfig:
    """What ``hydra.compose(config_name, overrides, return_hydra_config=True)`` gives, in
    the context ``hydra`` was created for, whose searched directories are ``config_dirs``."""
    from hydra import compose as hydra_compose
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides=overrides)
    if any(o.is_sweep_override() for o in parsed):
        return hydra_compose(config_name, overrides=overrides, return_hydra_config=True)
    repo = hydra.config_loader.repository
    # an override naming a config group goes with the groups' part (Hydra picks from the
    # defaults with it, or sets the group's keys to a dict given it); every other one sets a
    # key afterwards, as Hydra's loader does (defaults_list.Overrides)
    values = [o for o in parsed if not repo.group_exists(o.key_or_group)]
    groups = [o.input_line for o in parsed if o not in values]
    key = (config_name, tuple(groups), _signature(config_dirs))
    if key not in _BASES:
        if len(_BASES) >= _MAX_BASES:
            _BASES.pop(next(iter(_BASES)))
        _BASES[key] = hydra_compose(config_name, overrides=groups, return_hydra_config=True)
    cfg = copy.deepcopy(_BASES[key])
    _apply(cfg, parsed, values)
    return cfg


def _apply(cfg: DictConfig, parsed: list, values: list) -> None:
    """What Hydra's loader does after composing the defaults (ConfigLoaderImpl
    ._load_configuration_impl): the value overrides, then the runtime record of them."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname

    ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
    app = [o for o in parsed if not o.is_hydra_override()]
    cfg.hydra.overrides.task = [o.input_line for o in app]
    cfg.hydra.overrides.hydra = [o.input_line for o in parsed if o.is_hydra_override()]
    with open_dict(cfg.hydra):
        for name in cfg.hydra.job.env_copy:
            cfg.hydra.job.env_set[name] = os.environ[name]
    cfg.hydra.runtime.cwd = os.getcwd()
    conf = cfg.hydra.job.config.override_dirname
    cfg.hydra.job.override_dirname = get_overrides_dirname(
        overrides=app, kv_sep=conf.kv_sep, item_sep=conf.item_sep,
        exclude_keys=conf.exclude_keys)


def _signature(config_dirs: list[str]) -> tuple:
    """Every config file under the directories, with its size and time: a file added,
    removed or edited composes afresh."""
    found = []
    for directory in config_dirs:
        for root, dirs, names in os.walk(directory):
            dirs.sort()
            for name in sorted(names):
                if name.endswith((".yaml", ".yml")):
                    st = (Path(root) / name).stat()
                    found.append((root, name, st.st_size, st.st_mtime_ns))
    return tuple(found)
