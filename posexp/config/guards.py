"""Guards of composition: overrides and config files that would run code, import modules,
redirect what runs, load configs from outside posexp's and --config-dir's, or add keys
posexp would ignore are refused -- before Hydra composes anything (``check_overrides``,
``check_config_name``, ``scan_config_dir``) and once it has (``check_hydra``,
``check_module``).  A key refused as a dotted key is refused inside a value too.  Config
values are data, never code."""

from __future__ import annotations

import os
import re
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


def set_keys(key: str, value: object) -> list[str]:
    """Every key an override sets: its own, and for a dict value (or a list of dicts) the key
    of each entry below it, dotted -- ``encoding={name:x,module:y}`` sets encoding.module."""
    out = [key]
    if isinstance(value, dict):
        for k, v in value.items():
            out += set_keys(f"{key.replace('/', '.')}.{k}" if key else str(k), v)
    elif isinstance(value, list):
        for v in value:
            out += [k for k in set_keys(key, v) if k != key]
    return out


def override_values(o) -> list[object]:
    """The values an override gives: its one value, or each value of a sweep (a glob or an
    interval chooses among options or numbers: no value of its own; a range's values are
    numbers, and range(0,10**12) is not listed); none for a delete."""
    from hydra.core.override_parser.types import ValueType

    if o.is_delete() or o.value_type in (ValueType.GLOB_CHOICE_SWEEP,
                                         ValueType.INTERVAL_SWEEP, ValueType.RANGE_SWEEP):
        return []
    return list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()]


def refuse_code(arg: str, o) -> None:
    """Refuse an override that sets, by its key or by a key inside its value, anything that
    would run code, import a module or redirect what runs: ``_target_``, Hydra's callbacks,
    logging and search path, unsafe environment variables, encoding.module, parent.*.  One
    rule for a dotted key and for the same key inside a dict or list value."""
    package = (o.package or "").removeprefix("_global_").lstrip(".")
    bases = [o.key_or_group] + ([package] if package else [])
    values = override_values(o) or [None]
    keys = dict.fromkeys(k for base in bases for v in values for k in set_keys(base, v))
    for key in keys:
        parts = key.replace("/", ".").split(".")
        nested = key not in bases  # a key inside the value: config keys, never group choices
        name = key.replace("/", ".") if nested else key
        if "_target_" in parts:
            raise UsageError(f"{arg!r} is refused: {CODE}")
        if any(name == k or name.startswith((k + ".", k + "/")) for k in REFUSED_HYDRA):
            what = ("add config files with --config-dir DIR" if "searchpath" in name else
                    "posexp sweep runs several configs" if name == "hydra.mode" else CODE)
            raise UsageError(f"{name} cannot be set: {what}")
        if name.startswith("hydra.job.env_set.") and len(parts) > 3 \
                and parts[3].upper().startswith(UNSAFE_ENV):
            raise UsageError(f"hydra.job.env_set.{parts[3]} is refused: it would make the "
                             "processes posexp starts load other code")
        if parts[:2] == ["encoding", "module"]:
            raise UsageError(f"{name} names Python code to import: set it in a config file "
                             "under --config-dir (docs/encodings.md: an encoding of your "
                             f"own), not on the command line{f' (inside {arg})' * nested}")
        if parts[0] == "parent":
            raise UsageError(f"{name} is set by posexp finetune, from the run it continues: "
                             "posexp finetune PARENT_RUN [OVERRIDES]")


def check_overrides(overrides: list[str], command: str = "train") -> None:
    """Refuse overrides that would run code, add keys posexp would ignore, or sweep in a
    command that runs one config -- before Hydra composes anything."""
    from hydra.core.override_parser.types import ValueType

    for arg in overrides:
        o = parse_override(arg)
        key = o.key_or_group
        if not key:
            raise UsageError(f"{arg!r} has no key before '='")
        refuse_code(arg, o)
        if o.is_sweep_override() and command != "sweep":
            raw = arg.partition("=")[2]
            raise UsageError(f"{arg} asks for several runs, and posexp {command} runs one: "
                             f"posexp sweep {arg} runs each (to pass it as one value, "
                             f"quote it: {key}='{raw}')")
        if key in USER_GROUPS or "/" in key:
            _check_option_names(arg, o)
        if key.startswith("hydra") or "/" in key:
            continue  # Hydra's own config; checked once composed (check_hydra)
        if key in USER_GROUPS:
            if o.value_type == ValueType.GLOB_CHOICE_SWEEP:
                continue  # chooses among the group's options, schema left out (sweep.grid)
            _check_choice(arg, o, command)
            continue
        problem = unknown_key(key)
        if problem:
            raise UsageError(problem + (" ('+' cannot add keys to posexp's config)"
                                        if o.is_add() else ""))
        if o.is_delete():
            raise UsageError(f"{arg}: posexp's keys cannot be deleted; give {key} a value")
        check_bool(key, None if o.is_sweep_override() else o.value())


def _check_option_names(arg: str, o) -> None:
    """A config group's option is a config file of posexp's or of --config-dir by its name:
    '..' would make Hydra load a file from anywhere."""
    for value in override_values(o):
        if isinstance(value, str) and (value.startswith("/") or ".." in value.split("/")):
            raise UsageError(f"{arg!r}: {value[:80]!r} is not an option of "
                             f"{o.key_or_group}: an option is the name of a config file of "
                             "posexp's or of --config-dir, never a path out of them")


def _check_choice(arg: str, o, command: str) -> None:
    """An override of a config group chooses one of its options (not its schema) and cannot
    remove the group."""
    key = o.key_or_group
    if o.is_delete():
        raise UsageError(f"{arg}: posexp's config groups cannot be removed; choose "
                         f"an option ({key}=OPTION, posexp {command} --help)")
    choices = (list(o.sweep_string_iterator()) if o.is_sweep_override()
               else [o.get_value_element_as_str()])
    for choice in choices:
        if choice.endswith("_schema"):
            raise UsageError(f"there is no {key} {choice!r}; {key}_schema is the "
                             f"schema of the {key} options, not one of them "
                             f"(posexp {command} --help lists them)")


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


MAX_CONFIG_FILES = 10_000  # YAML files a --config-dir may hold: each one is read and checked
MAX_CONFIG_ENTRIES = 100_000  # files and directories walked to find them (--config-dir /)
# --config-name: a config of posexp's or of --config-dir by its name, never a path out of them
CONFIG_NAME = re.compile(r"[A-Za-z0-9_][\w.-]*(/[A-Za-z0-9_][\w.-]*)*")


def check_config_name(name: str | None) -> None:
    """--config-name names a primary config inside posexp's configs or --config-dir: a
    relative name without '..' (Hydra would load a file anywhere, and its search path
    imports packages before posexp checks anything)."""
    if name is not None and (not CONFIG_NAME.fullmatch(name) or len(name) > 200):
        raise UsageError(f"--config-name {name[:80]!r} is not the name of a config: name one "
                         "of posexp's configs or a file of --config-dir, without a directory "
                         "(--config-dir DIR --config-name mine reads DIR/mine.yaml)")


def scan_config_dir(directory: Path) -> set[str]:
    """Refuse a --config-dir whose YAML files name code to run (_target_, hydra callbacks,
    logging handlers and factories, search paths that import packages), reading every file
    Hydra could (directories behind symbolic links too); the modules its files name in
    ``module:`` keys, the only ones an encoding may import (``check_module``)."""
    import yaml

    if not directory.is_dir():
        raise UsageError(f"--config-dir {str(directory)!r} is not a directory")
    modules: set[str] = set()
    for path in _yaml_files(directory):
        try:
            tree = yaml.safe_load(path.read_text())
        except (OSError, ValueError, yaml.YAMLError):
            continue  # Hydra reports it if the file is used
        problem = _code_in(tree)
        if problem:
            raise UsageError(f"--config-dir: {path} sets {problem}; {CODE}")
        outside = _outside(tree)
        if outside:
            raise UsageError(f"--config-dir: {path} lists {outside[:80]!r} in its defaults; "
                             "a default names a config of posexp's or of --config-dir, never "
                             "a path out of them ('..')")
        modules |= set(_modules_in(tree))
    return modules


def _yaml_files(directory: Path) -> list[Path]:
    """The YAML files under ``directory``, following symbolic links to directories as Hydra
    does (each real directory once); a UsageError past MAX_CONFIG_FILES rather than files
    left unread."""
    found, seen, walked = [], set(), 0
    for root, dirs, names in os.walk(directory, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        walked += 1 + len(names)
        found += [Path(root) / n for n in sorted(names)
                  if n.endswith((".yaml", ".yml")) and (Path(root) / n).is_file()]
        if len(found) > MAX_CONFIG_FILES or walked > MAX_CONFIG_ENTRIES:
            raise UsageError(f"--config-dir {str(directory)!r} holds more than "
                             f"{MAX_CONFIG_FILES:,} YAML files or {MAX_CONFIG_ENTRIES:,} "
                             "entries; posexp reads and checks every config file in it, so "
                             "give it the directory of your configs alone")
    return found


def _outside(tree: object) -> str | None:
    """The first entry of a config file's defaults list that climbs out of the config
    directories with '..' (Hydra would load that file from anywhere), or None."""
    defaults = tree.get("defaults") if isinstance(tree, dict) else None
    for entry in defaults if isinstance(defaults, list) else []:
        texts = [*map(str, entry.keys()), *map(str, entry.values())] \
            if isinstance(entry, dict) else [str(entry)]
        for text in texts:
            if ".." in re.split(r"[/@:\s]+", text):
                return text
    return None


def _modules_in(tree: object) -> list[str]:
    """The string values of every ``module`` key in a config file's tree."""
    if isinstance(tree, list):
        return [m for v in tree for m in _modules_in(v)]
    if not isinstance(tree, dict):
        return []
    return [v for k, v in tree.items() if k == "module" and isinstance(v, str)] + [
        m for v in tree.values() for m in _modules_in(v)]


def check_module(cfg: DictConfig, declared: set[str], config_dir: str | None) -> None:
    """encoding.module, where the composed config names one, comes from a config file under
    the --config-dir the user gave: whatever else put it there (a value smuggled past the
    override guards, an interpolation) is refused before anything imports it."""
    module = cfg.encoding.get("module") if "encoding" in cfg else None
    if module is not None and module not in declared:
        where = (f"no config file under --config-dir {config_dir} names it" if config_dir
                 else "no --config-dir was given")
        raise UsageError(f"encoding.module {str(module)[:80]!r} is refused: {where}; posexp "
                         "imports an encoding's module only where a config file of your "
                         "--config-dir names it (docs/encodings.md)")


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


