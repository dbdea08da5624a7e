"""Guards of composition: overrides and config files that would run code, import modules,
redirect what runs or add keys posexp would ignore are refused -- before Hydra composes
anything (``check_overrides``, ``scan_config_dir``) and once it has (``check_hydra``).
Config values are data, never code."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from posexp.config.errors import composition_error
from posexp.config.keys import schema_keys, unknown_key
from posexp.config.schema import GROUPS
from posexp.errors import UsageError, flat

CODE = ("posexp does not run code named in its config: _target_, hydra.callbacks, logging "
        "handlers and --experimental-rerun are refused")
# Hydra keys an override may not set: each runs code, imports modules or redirects what runs
REFUSED_HYDRA = ("hydra.callbacks", "hydra.job_logging", "hydra.hydra_logging",
                 "hydra.searchpath", "hydra.mode", "hydra/callbacks")
# environment variables that make a later process load code (git, torch's compiler, workers)
UNSAFE_ENV = ("LD_", "DYLD_", "PYTHON", "BASH_ENV", "ENV", "PATH", "PERL5", "NODE_OPTIONS",
              "GIT_")
LAUNCHERS = {
    "hydra._internal.core_plugins.basic_launcher.BasicLauncher",
    "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
}
SWEEPERS = {"hydra._internal.core_plugins.basic_sweeper.BasicSweeper"}
USER_GROUPS = (*GROUPS, "sweep")


def keys_in(value: object) -> list[str]:
    """Every key of a (nested) dict or list value."""
    if isinstance(value, dict):
        return [str(k) for k in value] + [k for v in value.values() for k in keys_in(v)]
    if isinstance(value, list):
        return [k for v in value for k in keys_in(v)]
    return []


# RoPE scaling: `eval.rope_scaling=yarn` is `eval.rope_scaling.method=yarn`, and comma lists of
# evaluation methods and factors are lists of variants scored by one process, not runs
SCALING_NODES = ("eval.rope_scaling", "encoding.scaling")
SCALING_LISTS = ("eval.rope_scaling.method", "eval.rope_scaling.factor")


def scaling_sugar(arg: str) -> str:
    """``arg`` with the RoPE-scaling shorthands written out: NODE=METHOD sets NODE.method,
    and METHOD,METHOD or FACTOR,FACTOR of eval.rope_scaling becomes a list."""
    if not arg.startswith(SCALING_NODES):
        return arg
    o = parse_override(arg)
    key = o.key_or_group
    if key in SCALING_NODES:
        key += ".method"
    if o.is_sweep_override() and key in SCALING_LISTS:
        return f"{key}=[{','.join(o.sweep_string_iterator())}]"
    return f"{key}={arg.partition('=')[2]}" if key != o.key_or_group else arg


def parse_override(arg: str):
    """Hydra's parse of one override, or a UsageError that says what is wrong with it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_override(arg)
    except Exception as e:
        reason = flat(str(e)).removeprefix("Error parsing override ").strip()
        if "=" not in arg and not arg.startswith("~"):
            raise UsageError(f"{arg!r} is not an override: every argument is key=value or "
                             "group=option, and a value with spaces is quoted as a whole, "
                             "e.g. experiment='my exp'") from None
        if "token recognition error" in reason or "no viable alternative" in reason:
            raise UsageError(f"cannot read the override {arg!r} ({reason}); quote a value "
                             "that holds spaces, brackets or quotes: key='a value'") from None
        raise UsageError(f"cannot read the override {arg!r} ({reason})") from None


def check_overrides(overrides: list[str], command: str = "train") -> None:
    """Refuse overrides that would run code, add keys posexp would ignore, or sweep in a
    command that runs one config -- before Hydra composes anything."""
    from hydra.core.override_parser.types import ValueType

    for arg in overrides:
        o = parse_override(arg)
        key = o.key_or_group
        parts = key.replace("/", ".").split(".")
        value = None if o.is_delete() or o.is_sweep_override() else o.value()
        if "_target_" in parts or "_target_" in keys_in(value):
            raise UsageError(f"{arg!r} is refused: {CODE}")
        if any(key == k or key.startswith((k + ".", k + "/")) for k in REFUSED_HYDRA):
            what = ("add config files with --config-dir DIR" if "searchpath" in key else
                    "posexp sweep runs several configs" if key == "hydra.mode" else CODE)
            raise UsageError(f"{key} cannot be set: {what}")
        if key.startswith("hydra.job.env_set"):
            names = [parts[-1]] if len(parts) > 3 else keys_in(value)
            for name in names:
                if name.upper().startswith(UNSAFE_ENV):
                    raise UsageError(f"hydra.job.env_set.{name} is refused: it would make the "
                                     "processes posexp starts load other code")
        if not key:
            raise UsageError(f"{arg!r} has no key before '='")
        if parts[:2] == ["encoding", "module"]:
            raise UsageError(f"{key} names Python code to import: set it in a config file "
                             "under --config-dir (docs/architecture.md: adding an encoding), "
                             "not on the command line")
        if parts[0] == "parent":
            raise UsageError(f"{key} is set by posexp finetune, from the run it continues: "
                             "posexp finetune PARENT_RUN [OVERRIDES]")
        if o.is_sweep_override() and command != "sweep":
            raw = arg.partition("=")[2]
            raise UsageError(f"{arg} asks for several runs, and posexp {command} runs one: "
                             f"posexp sweep {arg} runs each (to pass it as one value, "
                             f"quote it: {key}='{raw}')")
        if key.startswith("hydra") or "@" in key or "/" in key:
            continue  # Hydra's own config; checked once composed (check_hydra)
        if key in USER_GROUPS:
            if o.value_type == ValueType.GLOB_CHOICE_SWEEP:
                continue  # chooses among the group's options, schema left out (sweep.grid)
            choices = (list(o.sweep_string_iterator()) if o.is_sweep_override()
                       else [] if o.is_delete() else [o.get_value_element_as_str()])
            if o.is_delete():
                raise UsageError(f"{arg}: posexp's config groups cannot be removed; choose "
                                 f"an option ({key}=OPTION, posexp {command} --help)")
            for choice in choices:
                if choice.endswith("_schema"):
                    raise UsageError(f"there is no {key} {choice!r}; {key}_schema is the "
                                     f"schema of the {key} options, not one of them "
                                     f"(posexp {command} --help lists them)")
            continue
        problem = unknown_key(key)
        if problem:
            raise UsageError(problem + (" ('+' cannot add keys to posexp's config)"
                                        if o.is_add() else ""))
        if o.is_delete():
            raise UsageError(f"{arg}: posexp's keys cannot be deleted; give {key} a value")
        check_bool(key, value)


def check_bool(key: str, value: object) -> None:
    """OmegaConf turns any number into a bool (model.tie_weights=-1 is true); posexp asks for
    true or false."""
    node, _, leaf = key.rpartition(".")
    if "." in node or node not in ("", *GROUPS):
        return
    kind = schema_keys(node).get(leaf)
    if kind in (bool, bool | None) and isinstance(value, (int, float)) \
            and not isinstance(value, bool):
        raise UsageError(f"{key} must be true or false, got {value}")


def scan_config_dir(directory: Path) -> None:
    """Refuse a --config-dir whose YAML files name code to run (_target_, hydra callbacks,
    logging handlers and factories, search paths that import packages)."""
    import yaml

    if not directory.is_dir():
        raise UsageError(f"--config-dir {str(directory)!r} is not a directory")
    seen = 0
    for root, _, names in os.walk(directory):
        for name in sorted(names):
            if not name.endswith((".yaml", ".yml")):
                continue
            path = Path(root) / name
            seen += 1
            if seen > 10_000 or not path.is_file():
                continue
            try:
                tree = yaml.safe_load(path.read_text())
            except (OSError, ValueError, yaml.YAMLError):
                continue  # Hydra reports it if the file is used
            problem = _code_in(tree)
            if problem:
                raise UsageError(f"--config-dir: {path} sets {problem}; {CODE}")


def _code_in(tree: object, where: str = "") -> str | None:
    """The first key of ``tree`` that would make Hydra or logging run code, or None."""
    if isinstance(tree, list):
        for i, v in enumerate(tree):
            found = _code_in(v, f"{where}[{i}]")
            if found:
                return found
        return None
    if not isinstance(tree, dict):
        if isinstance(tree, str) and "hydra/callbacks" in tree:
            return f"{where} ({tree})"
        return None
    for k, v in tree.items():
        path = f"{where}.{k}" if where else str(k)
        if k in ("_target_", "()", "callbacks", "searchpath", "env_set"):
            return path
        if k == "class" and not str(v).startswith("logging."):
            return f"{path}: {v}"
        if isinstance(v, str) and v.startswith("ext://") and v not in (
                "ext://sys.stdout", "ext://sys.stderr"):
            return f"{path}: {v}"
        found = _code_in(v, path)
        if found:
            return found
    return None


def check_hydra(cfg: DictConfig) -> None:
    """The composed Hydra config runs no code but Hydra's launchers and sweeper: no
    callbacks, known plugin classes, logging by the logging package's own handlers."""
    h = cfg.hydra
    try:  # as written: a _target_ or a handler class must be a literal name, not a ${...}
        callbacks = OmegaConf.to_container(h.callbacks) if "callbacks" in h else {}
        launcher = OmegaConf.to_container(h.launcher)
        sweeper = OmegaConf.to_container(h.sweeper)
        logging = [OmegaConf.to_container(h[k]) for k in ("job_logging", "hydra_logging")
                   if h.get(k) is not None]
        env = OmegaConf.to_container(h.job.env_set) if "job" in h else {}
    except Exception as e:
        raise UsageError(f"hydra: {composition_error(e)}") from None
    if callbacks:
        raise UsageError(f"hydra.callbacks is set ({', '.join(map(str, callbacks))}): {CODE}")
    for what, node, allowed, known in (
            ("hydra/launcher", launcher, LAUNCHERS, "basic, joblib, submitit_local, "
                                                    "submitit_slurm"),
            ("hydra/sweeper", sweeper, SWEEPERS, "basic")):
        target = node.get("_target_") if isinstance(node, dict) else None
        if target not in allowed:
            raise UsageError(f"{what}: {target!r} is not one posexp runs under ({known})")
        nested = _code_in({k: v for k, v in node.items() if k != "_target_"})
        if nested:
            raise UsageError(f"{what} sets {nested}: {CODE}")
    for node in logging:
        found = _code_in({k: v for k, v in node.items()})
        if found:
            raise UsageError(f"hydra logging sets {found}: {CODE}")
    for name in env or {}:
        if str(name).upper().startswith(UNSAFE_ENV):
            raise UsageError(f"hydra.job.env_set.{name} is refused: it would make the "
                             "processes posexp starts load other code")


