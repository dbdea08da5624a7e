"""What a user needs of a Hydra or OmegaConf error, on one line that names the key.

The wording is chosen by the exception's type and the fields it carries (the key, the value,
the schema's type of the key); Hydra's message text is read only where Hydra raises a bare
``ConfigCompositionException`` with nothing else to go on.
"""

from __future__ import annotations

import re
import types
import typing
from enum import Enum

from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    GrammarParseError,
    InterpolationResolutionError,
    OmegaConfBaseException,
    ValidationError,
)

from posexp.config.keys import schema_keys, unknown_key
from posexp.errors import flat

# what a value of each schema type must be, in words
TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def composition_error(error: BaseException) -> str:
    """One line for an error Hydra or OmegaConf raised while composing or reading a config."""
    if isinstance(error, MissingConfigException):
        return _missing_config(error)
    cause = error if isinstance(error, OmegaConfBaseException) else error.__cause__
    if isinstance(cause, OmegaConfBaseException):
        return _omegaconf_error(cause)
    if isinstance(error, ConfigCompositionException):
        return _composition_text(flat(str(error)))
    return flat(str(error))


def no_such_option(group: str, name: str, options: list[str]) -> str:
    shown = [o for o in sorted(options) if not o.endswith("_schema")]
    return (f"there is no {group or 'config'} {name!r}; available options in '{group}': "
            f"{', '.join(shown)}")


def _missing_config(error: MissingConfigException) -> str:
    if error.options is not None:
        group, _, name = (error.missing_cfg_file or "").rpartition("/")
        return no_such_option(group, name, error.options)
    return (f"there is no config {error.missing_cfg_file!r} in posexp's configs or "
            "--config-dir")


def _message(cause: OmegaConfBaseException) -> str:
    """OmegaConf's own message without the key, type and value lines it appends."""
    return flat(str(cause).split("\n    full_key:")[0]).split(" full_key:")[0].strip()


def _omegaconf_error(cause: OmegaConfBaseException) -> str:
    key = cause.full_key or ""
    if isinstance(cause, GrammarParseError):
        return (f"{key or 'a value'}: cannot read the interpolation in its value "
                f"({_message(cause)}); a literal '${{' is written '\\${{'")
    if isinstance(cause, InterpolationResolutionError):  # resolve_all names the value
        return f"{key or 'a value'} cannot be resolved: {_message(cause)}"
    if isinstance(cause, ValidationError):
        return _invalid_value(key, cause)
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and key:
        if key.startswith("encoding.hparams."):
            return (f"the encoding has no hyperparameter {key}; its hyperparameters are "
                    "under encoding.hparams in: posexp train encoding=NAME --cfg job")
        problem = unknown_key(key)
        if problem:
            return problem
    message = _message(cause)
    return f"{key}: {message}" if key and key not in message else message


def _declared(key: str) -> object:
    """The schema's type of a dotted key, or of an item of a list (eval.lengths[0]); None
    where the schema does not say."""
    item = re.fullmatch(r"(.*)\[\d+\]", key)
    node, _, leaf = (item.group(1) if item else key).rpartition(".")
    try:
        kind = schema_keys(node).get(leaf)
    except (KeyError, TypeError):
        return None
    if item:  # list[int] | None -> int
        options = (kind,) if typing.get_origin(kind) is list else typing.get_args(kind)
        lists = [a for a in options if typing.get_origin(a) is list]
        return typing.get_args(lists[0])[0] if lists else None
    return kind


def _invalid_value(key: str, cause: ValidationError) -> str:
    """A value the schema's type of ``key`` cannot hold: what that type takes."""
    kind = _declared(key)
    union = typing.get_origin(kind) in (typing.Union, types.UnionType)  # X | None, not list[X]
    args = [a for a in typing.get_args(kind) if a is not type(None)] if union else [kind]
    declared = args[0] if len(args) == 1 else None
    got = cause.value
    if isinstance(declared, type) and issubclass(declared, Enum):
        options = ", ".join(m.value for m in declared)
        return f"{key} must be one of {options}; got '{got}'"
    if typing.get_origin(declared) is list or declared is list:
        return f"{key} must be a list, e.g. {key}=[{_list_example(declared, got)}]"
    if declared in TYPE_WORDS:
        return f"{key} must be {TYPE_WORDS[declared]}, got '{got}'"
    return f"{key}: {_message(cause)}" if key else _message(cause)


def _list_example(declared: object, got: object) -> str:
    """The items of an example list for a key declared ``list[X]``: the value given, where
    it is one item of the list's type (task.depths=0.5 -> [0.5]), else two of that type."""
    item = (typing.get_args(declared) or (int,))[0]
    fallback = "0.25,0.5" if item is float else "64,128"
    try:
        return str(got) if item in (int, float) and str(item(got)) == str(got) else fallback
    except (TypeError, ValueError):
        return fallback


def _composition_text(text: str) -> str:
    """A ConfigCompositionException without a cause: Hydra says what is wrong only in
    words (a config file's unknown key, a group left ???, a '+' on a key that exists)."""
    unknown = re.search(r"Key '([^']*)' not in '\w+' full_key: (\S+)", text)
    if unknown:
        where = re.match(r"In '([^']+)'", text)
        problem = unknown_key(unknown.group(2)) or f"{unknown.group(2)} is not a key"
        return f"{where.group(1) + ': ' if where else ''}{problem}"
    must = re.match(r"You must specify '([^']+)', e\.g, \S+ Available options: (.*)", text)
    if must:
        options = [o for o in must.group(2).split() if not o.endswith("_schema")]
        return f"choose a {must.group(1)}: {must.group(1)}=OPTION, one of {', '.join(options)}"
    if text.startswith("Could not append to config. An item is already at"):
        key = text.split("'")[1]
        return f"{key} is set already; change it without '+': {key}=VALUE"
    return text.replace("Available options in", "available options in")
