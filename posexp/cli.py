"""The command line: the only place that parses argv, and the one place (``fail``) that turns
an error into one line on stderr and an exit code -- 2 for usage, 1 at run time, 128 + n for a
signal.  ``POSEXP_DEBUG=1`` adds the traceback.

``posexp train`` and ``posexp sweep`` take Hydra overrides and some of Hydra's flags.  Before
Hydra runs anything, posexp composes the config itself (``compose``): it parses every
override, refuses the ones that would run code named in the config (``_target_``,
``hydra.callbacks``, logging handlers, ``--experimental-rerun``) or add keys posexp would
ignore, resolves every interpolation, and checks every value (config.check).  Only a config
that passed all of it reaches Hydra's entry point.
"""

from __future__ import annotations

import contextlib
import os
import re
import string
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from importlib.resources import files
from pathlib import Path
from typing import NoReturn

import typer
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from typer.core import TyperCommand

import posexp
from posexp import config as C
from posexp.errors import PosexpError, UsageError

CONFIG_DIR = str(files("posexp.configs"))
DEBUG = "POSEXP_DEBUG"

# --- errors ---------------------------------------------------------------------------------


def fail(error: BaseException) -> NoReturn:
    """Print one line for ``error`` and exit with its code; POSEXP_DEBUG=1 adds the
    traceback.  Every command ends here when something goes wrong."""
    if isinstance(error, SystemExit):
        raise error
    if os.environ.get(DEBUG):
        traceback.print_exception(error)
    if isinstance(error, PosexpError):
        typer.echo(f"posexp: {error.label}{flat(str(error))}", err=True)
        raise SystemExit(error.exit_code)
    if isinstance(error, KeyboardInterrupt):
        typer.echo("posexp: stopped by SIGINT (Ctrl-C)", err=True)
        raise SystemExit(130)
    if isinstance(error, OSError) and error.strerror:
        where = f"{error.filename}: " if error.filename else ""
        typer.echo(f"posexp: error: {where}{error.strerror}", err=True)
        raise SystemExit(1)
    if isinstance(error, MemoryError):
        typer.echo("posexp: error: out of memory; lower the batch (train.batch_tokens, "
                   "eval.batch_tokens), the model or the lengths", err=True)
        raise SystemExit(1)
    detail = flat(str(error))
    typer.echo(f"posexp: error: {type(error).__name__}: {detail} "
               f"({DEBUG}=1 shows the traceback)", err=True)
    raise SystemExit(1)


def flat(text: str) -> str:
    """One line: the lines of a message joined, tabs and runs of blanks collapsed."""
    return " ".join(part.strip() for part in text.strip().splitlines() if part.strip()) \
        .replace("\t", " ")


TYPE_WORDS = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false",
              "String": "a string"}


def one_line(error: BaseException) -> str:
    """What a user needs of a Hydra or OmegaConf error, on one line, naming the key."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import (
        ConfigKeyError,
        GrammarParseError,
        InterpolationResolutionError,
        OmegaConfBaseException,
        ValidationError,
    )

    if isinstance(error, MissingConfigException):
        if error.options is not None:
            group, _, name = (error.missing_cfg_file or "").rpartition("/")
            return no_such_option(group, name, error.options)
        return (f"there is no config {error.missing_cfg_file!r} in posexp's configs or "
                "--config-dir")
    cause = error.__cause__ if isinstance(error.__cause__, OmegaConfBaseException) else error
    if isinstance(cause, OmegaConfBaseException):
        key = cause.full_key or ""
        message = flat(str(cause).split("\n    full_key:")[0])
        message = message.split(" full_key:")[0].strip()
        if isinstance(cause, GrammarParseError):
            return (f"{key or 'a value'}: cannot read the interpolation in its value "
                    f"({message}); a literal '${{' is written '\\${{'")
        if isinstance(cause, InterpolationResolutionError):  # resolve_all names the value
            return f"{key or 'a value'} cannot be resolved: {message}"
        if isinstance(cause, ValidationError):
            for kind, words in TYPE_WORDS.items():
                if message.endswith(f"could not be converted to {kind}"):
                    got = message.split("Value ", 1)[-1].split(" of type")[0]
                    return f"{key} must be {words}, got {got}"
            if "is not a valid bool" in message:
                got = message.split("Value ", 1)[-1].split(" is not")[0]
                return f"{key} must be true or false, got {got}"
            if "is not a ListConfig, list or tuple" in message:
                return f"{key} must be a list, e.g. {key}=[64,128]"
            if "expected one of" in message:
                got = message.split("'")[1] if "'" in message else message
                options = message.split("expected one of [", 1)[-1].rstrip("]")
                return f"{key} must be one of {options}; got {got!r}"
            return f"{key}: {message}" if key else message
        if "not in struct" in message and key.startswith("encoding.hparams."):
            return (f"the encoding has no hyperparameter {key}; its hyperparameters are "
                    "under encoding.hparams in: posexp train encoding=NAME --cfg job")
        if isinstance(cause, ConfigKeyError) and "not in struct" in message:
            problem = C.unknown_key(key) if key else None
            return problem or message
        if key and key not in message:
            return f"{key}: {message}"
        return message
    text = flat(str(error))
    unknown = re.search(r"Key '([^']*)' not in '\w+' full_key: (\S+)", text)
    if unknown:
        where = re.match(r"In '([^']+)'", text)
        problem = C.unknown_key(unknown.group(2)) or f"{unknown.group(2)} is not a key"
        return f"{where.group(1) + ': ' if where else ''}{problem}"
    must = re.match(r"You must specify '([^']+)', e\.g, \S+ Available options: (.*)", text)
    if must:
        options = [o for o in must.group(2).split() if not o.endswith("_schema")]
        return f"choose a {must.group(1)}: {must.group(1)}=OPTION, one of {', '.join(options)}"
    if text.startswith("Could not append to config. An item is already at"):
        key = text.split("'")[1]
        return f"{key} is set already; change it without '+': {key}=VALUE"
    return text.replace("Available options in", "available options in")


def no_such_option(group: str, name: str, options: list[str]) -> str:
    shown = [o for o in sorted(options) if not o.endswith("_schema")]
    return (f"there is no {group or 'config'} {name!r}; available options in '{group}': "
            f"{', '.join(shown)}")


# --- the command line of train and sweep ------------------------------------------------------
# Hydra's flags that posexp passes on, by their long names; -x are their short forms.
VALUE_FLAGS = {"--cfg": ("job", "hydra", "all"), "--package": None, "--config-dir": None,
               "--config-name": None}
SWITCHES = {"--resolve", "--run", "--multirun", "--hydra-help", "--help", "--version"}
INFO = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
SHORT = {"-c": "--cfg", "-p": "--package", "-cd": "--config-dir", "-cn": "--config-name",
         "-r": "--run", "-m": "--multirun", "-h": "--help", "-i": "--info"}
REFUSED = {
    "--experimental-rerun": "--experimental-rerun is refused: it unpickles a file, which can "
                            "run any code; run the same command again instead",
    "--config-path": "--config-path would replace posexp's own configs; add yours with "
                     "--config-dir DIR",
    "-cp": "-cp (--config-path) would replace posexp's own configs; add yours with "
           "--config-dir DIR",
    "--shell-completion": "posexp has no shell completion",
    "-sc": "posexp has no shell completion",
}


@dataclass
class Args:
    """A train/sweep command line: overrides, and Hydra's flags by their long names."""

    overrides: list[str] = field(default_factory=list)
    flags: dict[str, str] = field(default_factory=dict)

    def hydra_argv(self, drop: tuple[str, ...] = ()) -> list[str]:
        """The command line Hydra gets: overrides and flags in their long, exact form."""
        out = list(self.overrides)
        for flag, value in self.flags.items():
            if flag not in drop:
                out += [flag, value] if value else [flag]
        return out


def parse_args(args: list[str], command: str) -> Args:
    """Split a command line into overrides and known Hydra flags; anything else that starts
    with '-' is refused by name (argparse would take an abbreviation of any flag)."""
    out, i = Args(), 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-"):
            out.overrides.append(scaling_sugar(arg))
            continue
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        name = SHORT.get(name, name)
        if name in REFUSED:
            raise UsageError(REFUSED[name])
        if name in VALUE_FLAGS:
            if not eq:
                if i >= len(args) or args[i].startswith("-"):
                    choices = VALUE_FLAGS[name]
                    raise UsageError(f"{name} needs a value" + (
                        f": {', '.join(choices)}" if choices else ""))
                value, i = args[i], i + 1
            choices = VALUE_FLAGS[name]
            if choices and value not in choices:
                raise UsageError(f"{name} takes {', '.join(choices)}; got {value!r}")
            out.flags[name] = value
        elif name == "--info":
            if not eq and i < len(args) and args[i] in INFO:
                value, i = args[i], i + 1
            if value and value not in INFO:
                raise UsageError(f"--info takes {', '.join(INFO)}; got {value!r}")
            out.flags[name] = value or "all"
        elif name in SWITCHES and not eq:
            out.flags[name] = ""
        else:
            raise UsageError(f"posexp {command} has no option {arg!r}; it takes key=value "
                             f"overrides and --cfg job, --config-dir DIR, --config-name NAME "
                             f"(posexp {command} --help)")
    if command == "train" and "--multirun" in out.flags:
        raise UsageError("posexp train runs one config; posexp sweep runs several "
                         "(the same overrides, with comma-separated values)")
    if command == "sweep" and "--run" in out.flags:
        raise UsageError("posexp sweep runs several configs; posexp train runs one")
    return out


# --- overrides -------------------------------------------------------------------------------
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
USER_GROUPS = (*C.GROUPS, "sweep")


def _keys_in(value: object) -> list[str]:
    """Every key of a (nested) dict or list value."""
    if isinstance(value, dict):
        return [str(k) for k in value] + [k for v in value.values() for k in _keys_in(v)]
    if isinstance(value, list):
        return [k for v in value for k in _keys_in(v)]
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
        if "_target_" in parts or "_target_" in _keys_in(value):
            raise UsageError(f"{arg!r} is refused: {CODE}")
        if any(key == k or key.startswith((k + ".", k + "/")) for k in REFUSED_HYDRA):
            what = ("add config files with --config-dir DIR" if "searchpath" in key else
                    "posexp sweep runs several configs" if key == "hydra.mode" else CODE)
            raise UsageError(f"{key} cannot be set: {what}")
        if key.startswith("hydra.job.env_set"):
            names = [parts[-1]] if len(parts) > 3 else _keys_in(value)
            for name in names:
                if name.upper().startswith(UNSAFE_ENV):
                    raise UsageError(f"hydra.job.env_set.{name} is refused: it would make the "
                                     "processes posexp starts load other code")
        if not key:
            raise UsageError(f"{arg!r} has no key before '='")
        if parts[:2] == ["encoding", "module"]:
            raise UsageError(f"{key} names Python code to import: set it in a config file "
                             "under --config-dir (README: adding an encoding), not on the "
                             "command line")
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
        problem = C.unknown_key(key)
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
    if "." in node or node not in ("", *C.GROUPS):
        return
    kind = C.schema_keys(node).get(leaf)
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
        raise UsageError(f"hydra: {one_line(e)}") from None
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


@contextlib.contextmanager
def hydra_context(config_dir: str | None) -> Iterator[None]:
    """Hydra initialised as its entry point would be for posexp: posexp's configs, and a
    --config-dir added where Hydra's main adds it (so --config-name finds a file there)."""
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
    Hydra.create_main_hydra2(task_name="cli", config_search_path=search_path)
    try:
        yield
    finally:
        restore_gh_from_backup(backup)


def compose_overrides(overrides: list[str], flags: dict[str, str],
                      with_hydra: bool = False, command: str = "train",
                      resolve: bool = True) -> DictConfig:
    """The config Hydra would compose for ``overrides`` (and --config-dir, --config-name in
    ``flags``), every interpolation resolved (unless not ``resolve``: a sweep's common part,
    whose interpolations may name swept keys); a UsageError for anything that cannot compose,
    would run code, or adds a key posexp does not have.  Values are checked by config.check."""
    from hydra import compose as hydra_compose
    from hydra.core.hydra_config import HydraConfig

    check_overrides(overrides, command)
    extra_dir = flags.get("--config-dir") or flags.get("-cd")
    if extra_dir:
        scan_config_dir(Path(extra_dir))
    name = flags.get("--config-name") or flags.get("-cn") or "config"
    try:
        with hydra_context(extra_dir):
            cfg = hydra_compose(name, overrides=overrides, return_hydra_config=True)
    except UsageError:
        raise
    except Exception as e:
        task_keys = [o.partition("=")[0] for o in overrides if o.startswith("task.")]
        if task_keys and not any(o.startswith("task=") for o in overrides):
            # Hydra's own words would be "Unexpected type for root: NoneType"
            raise UsageError(f"{task_keys[0]} is set, but no task is chosen: add data=task "
                             "task=NAME") from None
        raise UsageError(one_line(e)) from None
    check_hydra(cfg)
    try:
        with open_dict(cfg):
            hydra_node = cfg.hydra
            del cfg["hydra"]
        if resolve:
            C.check_set(cfg)
            full = cfg.copy()
            with open_dict(full):
                full.hydra = hydra_node
            HydraConfig.instance().set_config(full)  # run names may use ${hydra:runtime...}
            resolve_all(cfg)
        C.check_keys(cfg)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(one_line(e)) from None
    for o in overrides:
        C.check_task_eval_key(cfg, o.partition("=")[0].lstrip("+~"))
    if with_hydra:
        with open_dict(cfg):
            cfg.hydra = hydra_node
    return cfg


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


def compose(args: list[str], command: str = "train") -> DictConfig:
    """The checked config a Hydra run of ``args`` (overrides and flags) would get, or a
    UsageError.  Also the composer of posexp reproduce."""
    a = parse_args(args, command)
    cfg = compose_overrides(a.overrides, a.flags, command=command)
    C.check(cfg)
    return cfg


def hydra_main(task: Callable[[DictConfig], object], args: list[str]) -> None:
    """Run ``task`` under Hydra's own entry point with ``args`` as its command line; an error
    anywhere ends in ``fail``, never in Hydra's report."""
    import hydra

    @hydra.main(config_path=CONFIG_DIR, config_name="config", version_base="1.3")
    def entry(cfg: DictConfig) -> None:
        try:
            task(cfg)
        except BaseException as e:
            fail(e)

    sys.argv = ["posexp", *args]
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises, and fail() prints one line
    try:
        entry()
    except BaseException as e:
        fail(e)


def print_config(cfg: DictConfig, package: str | None) -> None:
    """--cfg job: the config a run gets, every derived value filled in (config.resolve)."""
    cfg = C.resolve(cfg)
    if package:
        node = OmegaConf.select(cfg, package, default=None)
        if node is None:
            raise UsageError(f"--package {package!r}: the config has no such key")
        cfg = OmegaConf.create({package.rsplit(".", 1)[-1]: node}) if not isinstance(
            node, DictConfig) else node
    typer.echo(OmegaConf.to_yaml(cfg, resolve=True).rstrip())


# --- help ------------------------------------------------------------------------------------
class Command(TyperCommand):
    """Plain click help: arguments named RUN_DIR, not {run_dir}; the docstring's paragraphs
    rewrapped as whole sentences; example blocks (\\b) kept as written."""

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        pieces = [p.replace("{", "").replace("}", "") for p in super().collect_usage_pieces(ctx)]
        return pieces + (["[KEY=VALUE ...]"] if ctx.allow_extra_args else [])


# The main keys of posexp train's help page, in order, and what each does.
MAIN_KEYS = [
    ("encoding.name", "the positional encoding (encoding=NAME chooses it)"),
    ("train.seq_len", "training window"),
    ("train.tokens", "training budget in tokens"),
    ("train.batch_tokens", "tokens a step, a multiple of seq_len (or train.batch_size)"),
    ("train.lr", "AdamW peak learning rate; warmup, then cosine decay"),
    ("model.d_model", "width (model.n_layer, model.n_head, model.d_ff: see --cfg job)"),
    ("eval.lengths", "evaluation windows (default 1-16 x train.seq_len)"),
    ("eval.mode", "nonoverlapping | sliding (eval.stride)"),
    ("eval.tokens", "the last validation tokens, scored at every length"),
    ("data.tokenizer", "byte | bpe (data.vocab_size) | file (data.tokenizer_path)"),
    ("seed", "weights and batch order"),
    ("device", "auto | cpu | cuda | cuda:N | mps"),
    ("attention", "score-bias kernel: auto | sdpa | flex | flash"),
    ("results_dir", "runs go to results_dir/experiment/run_name"),
    ("experiment", ""), ("run_name", ""),
]
HELP_GROUPS = (*C.GROUPS, "hydra/launcher")


def group_options(group: str, config_dir: str | None) -> list[str]:
    """A config group's options (posexp's and --config-dir's), its schema left out; none for
    a key that is not a group."""
    from hydra.core.global_hydra import GlobalHydra

    with hydra_context(config_dir):
        loader = GlobalHydra.instance().config_loader()
        return sorted(o for o in loader.get_group_options(group) if not o.endswith("_schema"))


def help_page(a: Args, command: str) -> str:
    """posexp train's -h page: Hydra's help template (hydra.help.template in
    configs/config.yaml), with $APP_CONFIG_GROUPS the groups a user chooses from and $CONFIG
    the main keys with the values this command line would use."""
    cfg = compose_overrides(a.overrides, a.flags, with_hydra=True, command=command)
    choices = cfg.hydra.runtime.choices
    groups = []
    for group in HELP_GROUPS:
        chosen = choices.get(group)
        shown = ", ".join(f"[{o}]" if o == chosen else o
                          for o in group_options(group, a.flags.get("--config-dir")))
        groups.append(f"  {group + '=':16}{shown}")
    job = C.resolve(cfg)
    keys = []
    for key, what in MAIN_KEYS:
        value = OmegaConf.select(cfg if key == "train.batch_tokens" else job, key)
        if isinstance(value, ListConfig):
            text = f"[{','.join(map(str, value))}]"
        else:
            text = "null" if value is None else str(getattr(value, "value", value))
        keys.append(f"  {key + '=' + text:32} {what}".rstrip())
    template = string.Template(cfg.hydra.help.template)
    return template.safe_substitute(APP_CONFIG_GROUPS="\n".join(groups),
                                    CONFIG="\n".join(keys), FLAGS_HELP="")


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"posexp {posexp.__version__}")
        raise typer.Exit()


HELP = {"help_option_names": ["-h", "--help"], "max_content_width": 92}
EXTRA = {**HELP, "allow_extra_args": True, "ignore_unknown_options": True}

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=HELP,
)


@app.callback()
def main_options(
    version: bool = typer.Option(False, "--version", callback=version_callback,
                                 is_eager=True, help="Print posexp's version and exit."),
) -> None:
    """Which positional encoding keeps working past the length it was trained on?

    posexp trains small GPT-style decoders with each positional encoding (learned,
    sinusoidal, rope, alibi, nope) on short windows, scores the same held-out tokens with
    longer windows, and writes the extrapolation curve. Every command takes --help.

    \b
    Examples:
      posexp train encoding=alibi               one run, about 2 minutes on a CPU
      posexp sweep encoding=rope,alibi seed=0,1 four runs
      posexp report results/default             plots and tables of every run there
    """


@app.command(cls=Command, context_settings={**EXTRA, "help_option_names": []},
             short_help="Train one model on short windows and evaluate it at longer ones.")
def train(ctx: typer.Context) -> None:
    """Train one model on short windows and evaluate it at longer ones.

    Takes Hydra overrides (key=value, group=option) and --cfg job; posexp train --help
    lists them.
    """
    try:
        a = parse_args(ctx.args, "train")
        if "--version" in a.flags:
            typer.echo(f"posexp {posexp.__version__}")
            return
        if "--help" in a.flags:
            typer.echo(help_page(a, "train"))
            return
        cfg = compose(a.hydra_argv(), "train")
        if a.flags.get("--cfg") == "job":
            print_config(cfg, a.flags.get("--package"))
            return
        if not any(f in a.flags for f in ("--cfg", "--info", "--hydra-help")):
            from posexp.train import pick_device

            C.check_paths(cfg.data)  # a missing corpus, a FIFO, /dev/zero: refused now
            pick_device(cfg)  # device=cuda:3 on a machine with one GPU: refused now
        from posexp.experiment import run
    except BaseException as e:
        fail(e)
    hydra_main(run, a.hydra_argv())


@app.command("eval", cls=Command, context_settings=EXTRA)
def eval_(
    ctx: typer.Context,
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", show_default=False,
                                   help="A run directory written by posexp train."),
) -> None:
    """Score a trained run again: at other lengths, in another mode, with another stride.

    Nothing is retrained. Overrides may change eval.*, device and attention; the new
    points are written to eval.json beside the old ones (a point of the same mode, length,
    stride, scored tokens and RoPE scaling is replaced). A RoPE run can be scored with
    context-extension scalings: eval.rope_scaling=METHOD (linear, ntk, dynamic, yarn,
    llama3; plain: as trained) and eval.rope_scaling.factor=S, each a comma list whose every
    combination is scored by this one process, on the same tokens. A task run (data=task)
    is scored at eval.task_lengths, on task.eval_count held-out instances of
    task.eval_seed (passkey: at each of task.depths); only the task points eval.json lacks
    are scored. --cfg job prints the config it would use.

    \b
    Examples:
      posexp eval results/default/alibi-L64-s0 eval.lengths=[64,128,4096]
      posexp eval results/default/nope-L64-s0 eval.task_lengths=[16,32,64,128]
      posexp eval results/default/alibi-L64-s0 eval.mode=sliding eval.stride=32
      posexp eval results/default/rope-L64-s0 eval.rope_scaling=yarn eval.rope_scaling.factor=8
      posexp eval results/default/rope-L64-s0 eval.rope_scaling=linear,ntk,dynamic,yarn
                  eval.rope_scaling.factor=2,4,8,16
      posexp eval results/default/rope-L64-s0 device=cuda:1 --cfg job
    """
    try:
        from posexp.runs import Run

        overrides, show = saved_run_args(ctx.args, "eval", "RUN_DIR, overrides of eval.*, "
                                         "device and attention")
        run = Run.open(run_dir)
        cfg = apply_overrides(run.config(), overrides, allowed=EVAL_KEYS, run_dir=run_dir)
        C.check_device_name(cfg.device)
        C.check_eval(cfg)
        C.check_attention(cfg)
        if show:
            print_config(cfg, None)
            return
        from posexp.experiment import evaluate_dir

        evaluate_dir(run_dir, cfg)
    except BaseException as e:
        fail(e)


def saved_run_args(args: list[str], command: str, takes: str) -> tuple[list[str], bool]:
    """The overrides of a command on a saved run (eval, finetune), and whether --cfg job asks
    for its config instead of running it; any other option is refused by name."""
    overrides = [a for a in args if a not in ("--cfg", "-c", "job", "--resolve")]
    unknown = [a for a in overrides if a.startswith("-")]
    if unknown:
        raise UsageError(f"posexp {command} has no option {unknown[0]!r}; it takes {takes}, "
                         "and --cfg job")
    return overrides, "--cfg" in args or "-c" in args


@app.command(cls=Command, context_settings=EXTRA)
def sweep(ctx: typer.Context) -> None:
    """Train and evaluate a grid of runs: every comma-separated override is an axis.

    Takes posexp train's overrides (posexp train --help lists groups and keys) with
    comma-separated values. Every job is composed and checked before the first one starts.
    Each job gets its own run directory (swept keys beyond encoding, length and seed are
    added to its name); a completed run of the same identity is skipped, so a re-run
    finishes only what is missing. encoding=glob(*) is every encoding there is a config for
    (the presets' default). Presets: sweep=encodings (the default), lengths, seeds, grid.
    Launchers: hydra/launcher=basic (one job after another), joblib (parallel on this
    machine), submitit_local, submitit_slurm. --cfg job prints every job's config and runs
    nothing.

    \b
    Examples:
      posexp sweep encoding=alibi,rope train.seq_len=64,128 seed=0,1,2
      posexp sweep sweep=lengths hydra/launcher=joblib
      posexp sweep model.d_model=64,128 --cfg job
      posexp sweep 'encoding=glob(*,exclude=nope)' seed=0,1
    """
    try:
        a = parse_args(ctx.args, "sweep")
        if "--version" in a.flags:
            typer.echo(f"posexp {posexp.__version__}")
            return
        if "--info" in a.flags or "--hydra-help" in a.flags:  # composed by Hydra, run nothing
            check_overrides(a.overrides, "sweep")
            compose_overrides([o for o in a.overrides if not parse_override(o)
                               .is_sweep_override()], a.flags, command="sweep", resolve=False)
            hydra_main(lambda cfg: None, a.hydra_argv(drop=("--multirun",)))
            return
        jobs, extra = plan_sweep(a)
        if "--cfg" in a.flags:
            for i, job in enumerate(jobs, 1):
                typer.echo(f"# job {i}/{len(jobs)}: {' '.join(job.overrides)}")
                if a.flags["--cfg"] in ("hydra", "all"):
                    typer.echo(OmegaConf.to_yaml({"hydra": job.hydra}).rstrip())
                if a.flags["--cfg"] in ("job", "all"):
                    print_config(job.cfg, a.flags.get("--package"))
            return
        from posexp.sweep import is_glob, summarize, sweep_job
    except BaseException as e:
        fail(e)
    typer.echo(f"posexp sweep: {len(jobs)} runs", err=True)
    # globs go to Hydra spelled out (in extra): exactly the options planned
    argv = replace(a, overrides=[o for o in a.overrides if not is_glob(o)]).hydra_argv(
        drop=("--multirun",))
    hydra_main(sweep_job, ["--multirun", *argv, *extra])
    try:
        summarize([job.cfg for job in jobs])
    except BaseException as e:
        fail(e)


@dataclass
class Job:
    """One job of a sweep: its overrides, its checked config, and Hydra's part of it."""

    overrides: list[str]
    cfg: DictConfig
    hydra: DictConfig


def plan_sweep(a: Args) -> tuple[list[Job], list[str]]:
    """Every job's overrides and composed, checked config, before the first one starts, and
    the overrides posexp adds to the sweep (the run name, globs spelled out).  Two jobs
    never share a directory: unless run_name is given, it grows with every swept key of the
    identity that the default name does not already hold, in Hydra's override_dirname style
    (rope-L64-s0,d_model=32,lr=0.001); a plan that still puts two jobs in one directory is
    refused."""
    from posexp.experiment import existing
    from posexp.runs import Run
    from posexp.sweep import grid, run_name_override
    from posexp.train import pick_device

    check_overrides(a.overrides, "sweep")
    fixed = [o for o in a.overrides if not parse_override(o).is_sweep_override()]
    preset = compose_overrides(fixed, a.flags, with_hydra=True, command="sweep", resolve=False)
    params = preset.hydra.sweeper.params or {}
    jobs, globs = grid(a.overrides, {str(k): str(v) for k, v in params.items()},
                       lambda group: group_options(group, a.flags.get("--config-dir")))
    run_name = run_name_override(jobs)
    planned, where, devices = [], {}, set()
    for job in jobs:
        try:
            cfg = compose_overrides([*job, *run_name], a.flags, with_hydra=True,
                                    command="sweep")
            with open_dict(cfg):
                hydra_node = cfg.hydra
                del cfg["hydra"]
            C.check(cfg)
        except PosexpError as e:
            raise UsageError(f"{' '.join(job)}: {e}") from None
        if "--cfg" not in a.flags and (cfg.device, cfg.attention) not in devices:
            try:
                pick_device(cfg)
            except PosexpError as e:
                raise UsageError(f"{' '.join(job)}: {e}") from None
            devices.add((cfg.device, cfg.attention))
        path = Path(cfg.results_dir) / cfg.experiment / cfg.run_name
        if path in where:
            first = [o for o in where[path] if o not in job]
            second = [o for o in job if o not in where[path]]
            raise UsageError(f"two jobs of this sweep would share the run directory {path}: "
                             f"[{' '.join(first)}] and [{' '.join(second)}]; give each its "
                             "own run_name= or experiment= (e.g. run_name='${encoding.name}-"
                             "${train.lr}'), or sweep evaluation settings with posexp eval")
        where[path] = job
        planned.append(Job(job, cfg, hydra_node))
    for j in planned:  # before any job runs: a directory holding another identity
        if j.cfg.train.resume:
            existing(Run(Path(j.cfg.results_dir) / j.cfg.experiment / j.cfg.run_name), j.cfg)
    return planned, [*run_name, *globs]


@app.command(cls=Command)
def report(
    root: Path = typer.Argument(Path("results"), metavar="ROOT", show_default=False,
                                help="Directory searched for runs (default: results)."),
    out: Path | None = typer.Option(None, metavar="DIR",
                                    help="Where to write (default: ROOT/report)."),
    wandb: bool = typer.Option(False, "--wandb", help="Also log figures and tables to W&B "
                               "(WANDB_MODE=offline: for a later wandb sync)."),
    wandb_project: str | None = typer.Option(None, metavar="NAME", show_default=False,
                                             help="W&B project for --wandb (default: "
                                                  "WANDB_PROJECT, else W&B's default)."),
) -> None:
    """Plots and tables across every run under ROOT.

    Writes extrapolation_<mode>.png/.svg (perplexity against evaluation length),
    per_position.png/.svg, summary.csv and summary.md. Runs that failed, are unfinished or
    damaged are listed, not plotted. With --wandb, W&B's files go beside the report
    (ROOT/report/wandb, or under WANDB_DIR when that is set).

    \b
    Examples:
      posexp report
      posexp report results/my-sweep --out figures
      posexp report results --wandb --wandb-project my-project
    """
    try:
        from posexp.report import load_runs, upload_to_wandb, write_report

        if not root.is_dir():
            raise UsageError(f"{root} is not a directory")
        target = out or root / "report"
        if target.exists() and not target.is_dir():
            raise UsageError(f"--out {target} is a file; --out names a directory to write the "
                             "report into")
        runs, not_done = load_runs(root)
        written = write_report(runs, not_done, target, f"posexp report: {root}")
        typer.echo(f"posexp report: {len(runs)} completed runs, {len(not_done)} not included "
                   f"-> {target}")
        for f in written:
            typer.echo(f"  {f}")
        if wandb:
            try:
                went = upload_to_wandb(written, runs, target, wandb_project)
                if went:
                    typer.echo(went, err=True)
            except Exception as e:
                typer.echo(f"posexp: warning: W&B upload failed ({type(e).__name__}: "
                           f"{str(e).strip()[:200]}); the local report is complete", err=True)
    except BaseException as e:
        fail(e)


@app.command("ls", cls=Command)
def ls(
    root: Path = typer.Argument(Path("results"), metavar="DIR", show_default=False,
                                help="Directory searched for runs (default: results)."),
) -> None:
    """One line per run under DIR: what it is, how it ended, how well it extrapolates.

    Columns: experiment/run, encoding, training length L, seed, model size (width x
    layers), status (completed, running, interrupted, failed, diverged, or damaged, with
    the reason), perplexity at L and at the longest length scored (nonoverlapping windows,
    with the 95% interval where eval.json has one). Colour and cut to fit on a terminal,
    plain in a pipe.

    \b
    Examples:
      posexp ls
      posexp ls results/my-sweep
      posexp ls | grep -v completed
    """
    try:
        import shutil

        from posexp.listing import coloured, ls_lines, plain

        terminal = sys.stdout.isatty()
        style = coloured if terminal and not os.environ.get("NO_COLOR") else plain
        width = shutil.get_terminal_size().columns if terminal else None
        typer.echo("\n".join(ls_lines(root, style, width)))
    except BaseException as e:
        fail(e)


@app.command(cls=Command)
def compare(
    run_a: Path = typer.Argument(..., metavar="RUN_A", show_default=False,
                                 help="A completed run directory."),
    run_b: Path = typer.Argument(..., metavar="RUN_B", show_default=False,
                                 help="Another completed run directory."),
) -> None:
    """Two runs side by side: the config keys that differ, then both curves and B/A.

    Identity keys (what determines the weights) come first, then the others, such as
    evaluation settings. Each evaluation length of each mode gets a row with both
    perplexities, their 95% intervals, and the ratio B/A with its paired interval (the
    same blocks of tokens resampled for both) when both points scored the same tokens;
    points scored on different tokens, or runs of different corpora, are said not to be
    comparable.

    \b
    Examples:
      posexp compare results/default/rope-L64-s0 results/default/alibi-L64-s0
      posexp compare results/a/rope-L64-s0 results/b/rope-L64-s0
    """
    try:
        from posexp.listing import compare_lines

        typer.echo("\n".join(compare_lines(run_a, run_b)))
    except BaseException as e:
        fail(e)


@app.command(cls=Command)
def reproduce(
    preset: str = typer.Option("cpu", metavar="NAME|FILE", show_default=False,
                               help="cpu, gpu, rope-scaling, encodings, tasks (each "
                                    "with its -gpu preset) "
                                    "(configs/reproduce/), or a YAML file of the same shape "
                                    "(default: cpu)."),
    results_dir: Path = typer.Option(Path("results"), metavar="DIR", show_default=False,
                                     help="Root for the runs and the report (default: "
                                          "results)."),
) -> None:
    """Run a claim suite and print the verdicts.

    The cpu and gpu presets test the claims of Press et al. (ALiBi, ICLR 2022) and two
    about NoPE; rope-scaling and rope-scaling-gpu those about RoPE context extension (PI,
    NTK-aware, YaRN, with and without fine-tuning); encodings and encodings-gpu those about
    the later encodings and randomized positions; tasks and tasks-gpu those about length
    generalization on algorithmic tasks (Kazemnejad et al. 2023: NoPE against absolute
    positions; Ruoss et al. 2023: randomized positions). Trains the runs the preset lists (a
    completed run of the same identity is reused), fine-tunes what it lists, scores each
    run, and writes the report, verdicts.md and verdicts.json under
    RESULTS_DIR/<experiment>/report.

    \b
    Examples:
      posexp reproduce                  the cpu preset: about 15-20 minutes on 2 cores
      posexp reproduce --preset rope-scaling
      posexp reproduce --preset tasks   about 25 minutes on 2 cores
      posexp reproduce --preset gpu
      posexp reproduce --preset my_claims.yaml --results-dir out
    """
    try:
        from posexp.reproduce import reproduce as run_claims

        check_preset(preset)
        run_claims(preset, results_dir, Path(CONFIG_DIR), compose, finetune_config)
    except BaseException as e:
        fail(e)


# the shipped preset each claim set's presets must have the shape of
CLAIM_SHAPES = {"press": "cpu.yaml", "rope-scaling": "rope-scaling.yaml",
                "encodings": "encodings.yaml", "tasks": "tasks.yaml"}
# keys a preset may leave out: seeds default to [0], the report directory to report, sliding
# to true, every_encoding to false; the press set has claims 7 to 9 only with their thresholds
OPTIONAL_PRESET_KEYS = ("description", "seeds", "report", "every_encoding", "sliding",
                        "t5_flat_at", "t5_flat", "fair_baseline")


def check_preset(name: str) -> None:
    """A preset file reads as YAML and has every key of the shipped preset of its claim set
    (cpu.yaml, rope-scaling.yaml, encodings.yaml, tasks.yaml) but the optional ones, with
    lists where it has lists: one line naming the file and the key otherwise."""
    import yaml

    path = Path(name) if name.endswith((".yaml", ".yml")) else (
        Path(CONFIG_DIR) / "reproduce" / f"{name}.yaml")
    if not path.is_file():
        return  # reproduce names the presets there are
    try:
        tree = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"preset {path}: cannot read it ({e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise UsageError(f"preset {path} is not valid YAML{at}: "
                         f"{getattr(e, 'problem', None) or flat(str(e))}") from None
    claims = tree.get("claims", "press") if isinstance(tree, dict) else "press"
    if claims not in CLAIM_SHAPES:
        raise UsageError(f"preset {path}: claims must be one of {', '.join(CLAIM_SHAPES)}, "
                         f"got {claims!r}")
    shape_file = Path(CONFIG_DIR) / "reproduce" / CLAIM_SHAPES[claims]
    shape = yaml.safe_load(shape_file.read_text())

    def compare(have: object, want: object, where: str) -> None:
        if isinstance(want, dict):
            if not isinstance(have, dict):
                raise UsageError(f"preset {path}: {where or 'the file'} must be a mapping")
            for key, sub in want.items():
                if key in OPTIONAL_PRESET_KEYS and have.get(key) is None:
                    continue
                if key not in have or have[key] is None:
                    raise UsageError(f"preset {path} has no {where}{key} (see {shape_file})")
                compare(have[key], sub, f"{where}{key}.")
        elif isinstance(want, list) and not isinstance(have, list):
            raise UsageError(f"preset {path}: {where.rstrip('.')} must be a list")
        elif isinstance(want, (int, float)) and not isinstance(want, bool) and (
                isinstance(have, bool) or not isinstance(have, (int, float))):
            raise UsageError(f"preset {path}: {where.rstrip('.')} must be a number, "
                             f"got {have!r}")

    compare(tree, shape, "")
    for i, run in enumerate(tree["runs"], 1):
        if not isinstance(run, list) or not all(isinstance(o, str) for o in run):
            raise UsageError(f"preset {path}: run {i} must be a list of overrides, got {run!r}")
    if not all(isinstance(o, str) for o in tree["overrides"]):
        raise UsageError(f"preset {path}: overrides must be a list of key=value strings")
    for i, entry in enumerate(tree.get("finetunes") or [], 1):
        if not (isinstance(entry, dict) and all(
                isinstance(entry.get(k), list) and all(isinstance(o, str) for o in entry[k])
                for k in ("parent", "overrides"))):
            raise UsageError(f"preset {path}: fine-tune {i} must be a mapping of parent and "
                             f"overrides, each a list of overrides, got {entry!r}")


@app.command(cls=Command)
def resume(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", show_default=False,
                                   help="A run directory written by posexp train."),
) -> None:
    """Continue an interrupted run from its last checkpoint, with the config it was given.

    Running the same posexp train command again does the same; resume needs only the
    directory, also after it was moved.

    \b
    Examples:
      posexp resume results/default/rope-L64-s0
      posexp resume results/my-sweep/alibi-L128-s1
    """
    try:
        from posexp.experiment import run
        from posexp.runs import Run

        if not (run_dir / "config.yaml").is_file():
            raise UsageError(f"{run_dir} is not a posexp run (no config.yaml)")
        cfg = apply_overrides(Run(run_dir).config(), [], allowed=(), run_dir=run_dir)
        if Path(cfg.results_dir) / cfg.experiment / cfg.run_name != run_dir:
            # the run was moved: continue it where it is now
            cfg.results_dir, cfg.experiment = str(run_dir.parent.parent), run_dir.parent.name
            cfg.run_name = run_dir.name
        cfg.train.resume = True
        run(cfg)
    except BaseException as e:
        fail(e)


# a task run's evaluation settings are eval.task_lengths and these of the task group
EVAL_KEYS = ("eval.", "device", "attention", "task.eval_count", "task.eval_seed", "task.depths")
# what a fine-tune may change of its parent's config: how it trains on, not what it is
FINETUNE_KEYS = ("train.", "eval.", "encoding.scaling", "seed", "device", "attention",
                 "logger.", "results_dir", "experiment", "run_name")


@app.command(cls=Command, context_settings=EXTRA)
def finetune(
    ctx: typer.Context,
    parent_dir: Path = typer.Argument(..., metavar="PARENT_RUN", show_default=False,
                                      help="A completed run directory to continue."),
) -> None:
    """Continue a completed run from its weights: at a longer length, with RoPE scaling.

    Trains a new run, in the parent's experiment, that starts from the parent's trained
    weights with a fresh optimizer and learning-rate schedule for train.tokens, then scores
    it like posexp train. Overrides may change train.*, eval.*, encoding.scaling.*, seed,
    device, attention, logger.*, results_dir, experiment and run_name; the rest is the
    parent's. encoding.scaling=METHOD (linear, ntk, dynamic, yarn, llama3) with
    encoding.scaling.factor=S trains RoPE scaled, L being the length the weights were first
    trained at. The run's identity includes the parent's identity and weights hash; its
    default name is PARENT-ft, with -L<seq_len> and -<method><factor> when they change.
    Checkpoints, resume (run the same command again, or posexp resume), the lock and the
    errors are posexp train's. --cfg job prints the config it would use.

    \b
    Examples:
      posexp finetune results/default/rope-L64-s0 train.seq_len=256 train.tokens=200000
      posexp finetune results/default/rope-L64-s0 train.seq_len=256 train.tokens=200000
                      encoding.scaling=linear encoding.scaling.factor=4
    """
    try:
        overrides, show = saved_run_args(ctx.args, "finetune", "PARENT_RUN, overrides")
        cfg = finetune_config(parent_dir, overrides)
        if show:
            print_config(cfg, None)
            return
        from posexp.experiment import run
        from posexp.train import pick_device

        pick_device(cfg)
        run(cfg)
    except BaseException as e:
        fail(e)


def finetune_config(parent_dir: Path, overrides: list[str]) -> DictConfig:
    """The checked config of a fine-tune of the completed run in ``parent_dir``: the parent's
    config (its evaluation without the parent's RoPE-scaling variants) with ``overrides``,
    written beside the parent unless results_dir, experiment or run_name say otherwise, and
    the parent's identity, weights hash and original length in parent.*."""
    from posexp.experiment import parent_record
    from posexp.runs import Run

    parent = parent_record(parent_dir)
    saved = Run(parent_dir).config()
    home = parent_dir.absolute()
    with open_dict(saved):
        saved.eval.rope_scaling = OmegaConf.structured(C.EvalScalingConfig)
        saved.results_dir = str(home.parent.parent if parent_dir.is_absolute()
                                else os.path.relpath(home.parent.parent))
        saved.experiment = home.parent.name
        saved.train.resume = True
        if saved.train.get("batch_tokens") is None:  # resolved: the batch in tokens again,
            # so that a step holds as many tokens at the new length
            saved.train.batch_tokens = saved.train.batch_size * saved.train.seq_len
            saved.train.batch_size = None
    cfg = apply_overrides(saved, overrides, allowed=FINETUNE_KEYS, run_dir=parent_dir,
                          command="finetune")
    OmegaConf.update(cfg, "parent", parent, merge=True)
    if not any(parse_override(scaling_sugar(o)).key_or_group == "run_name" for o in overrides):
        parts = [f"L{cfg.train.seq_len}"] * (cfg.train.seq_len != saved.train.seq_len)
        scaling = C.train_scaling(cfg)
        if scaling is not None:
            parts.append(f"{scaling['method']}{scaling['factor']:g}")
        cfg.run_name = "-".join([parent_dir.name, "ft", *parts])
    C.check(cfg)
    return cfg


def apply_overrides(saved: DictConfig, args: list[str], allowed: tuple[str, ...],
                    run_dir: Path = Path("."), command: str = "eval") -> DictConfig:
    """The schema-checked config of a saved run with Hydra-syntax overrides applied, every
    interpolation resolved; ``allowed`` are the key prefixes ``command`` may change."""
    from posexp.runs import CONFIG

    try:
        cfg = OmegaConf.merge(OmegaConf.structured(C.Config), saved)
    except Exception as e:
        raise PosexpError(f"{run_dir / CONFIG} does not fit posexp's config: "
                          f"{one_line(e)}") from None
    OmegaConf.set_struct(cfg, True)
    try:
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
            problem = C.unknown_key(key)
            if problem:
                raise UsageError(problem)
            if key.startswith("task.") and cfg.get("task") is None:
                raise UsageError(f"{key}: this run has no task; it trains on "
                                 f"data={cfg.data.name}, not on a task (data=task)")
            C.check_task_eval_key(cfg, key)
            value = o.value()
            if "_target_" in _keys_in(value):
                raise UsageError(f"{arg!r} is refused: {CODE}")
            check_bool(key, value)
            OmegaConf.update(cfg, key, value, merge=False)
        resolve_all(cfg)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(one_line(e)) from None
    return cfg


def main(args: list[str] | None = None) -> NoReturn:
    """The posexp command (``args`` default to sys.argv[1:]); always ends in SystemExit.
    The parser's own errors (an unknown option of report, a missing RUN_DIR, a misspelt
    command) are one line too."""
    C.register()
    command = typer.main.get_command(app)
    try:
        code = command.main(args=args, prog_name="posexp", standalone_mode=False)
    except SystemExit:
        raise
    except BaseException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `posexp` alone: the help
            typer.echo(e.format_message())  # type: ignore[attr-defined]
            raise SystemExit(0) from None
        if type(e).__name__ == "Abort":
            fail(KeyboardInterrupt())
        if hasattr(e, "format_message") and getattr(e, "exit_code", None) == 2:
            ctx = getattr(e, "ctx", None)
            path = ctx.command_path if ctx is not None else "posexp"
            fail(UsageError(f"{flat(e.format_message()).rstrip('.')}; see {path} --help"))
        if hasattr(e, "format_message"):
            fail(PosexpError(flat(e.format_message())))
        fail(e)
    raise SystemExit(code if isinstance(code, int) else 0)
