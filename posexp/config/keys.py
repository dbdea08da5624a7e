"""The keys of posexp's schema: which exist, of what type, and the closest to a misspelt one.
A composed config holds no key posexp would silently ignore (``check_keys``)."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import typing

from omegaconf import DictConfig, OmegaConf

from posexp.config.schema import Config
from posexp.errors import UsageError


def _optional(kind: object) -> object:
    """The node type of an optional node (``TaskConfig | None``); any other type as it is."""
    args = typing.get_args(kind)
    if len(args) == 2 and type(None) in args:
        node = next(a for a in args if a is not type(None))
        if dataclasses.is_dataclass(node):
            return node
    return kind


@functools.cache
def schema_keys(node: str = "") -> dict[str, object]:
    """{key: type} of the schema node ``node`` ("" for the top level, "train",
    "eval.rope_scaling", ...); an optional node (task) by its node type."""
    schema: object = Config
    for part in filter(None, node.split(".")):
        schema = _optional(typing.get_type_hints(schema)[part])
    hints = typing.get_type_hints(schema)
    return {f.name: _optional(hints[f.name]) for f in dataclasses.fields(schema)}


def is_node(kind: object) -> bool:
    """Whether a schema type is a node of keys (a config group, eval.rope_scaling, ...)."""
    return dataclasses.is_dataclass(kind)


def unknown_key(key: str) -> str | None:
    """Why ``key`` (dotted) is not a key of posexp's schema, with the closest key; None if it
    is one.  A node's name (``encoding``, ``eval.rope_scaling``) is a key too."""
    parts = key.split(".")
    node = ""
    for depth, part in enumerate(parts):
        keys = schema_keys(node)
        if part not in keys:
            where = f"{node} has no key" if node else "posexp's config has no key"
            close = difflib.get_close_matches(part, keys, n=1, cutoff=0.6)
            hint = (f"did you mean '{close[0]}'?" if close
                    else f"its keys: {', '.join(keys)}")
            return f"{where} {part!r}; {hint}"
        if is_node(keys[part]):
            node = f"{node}.{part}" if node else part
            continue
        rest = parts[depth + 1:]
        if not rest or (len(rest) == 1 and rest[0].isdigit() and "list" in str(keys[part])):
            return None  # a value, or an item of a list (eval.lengths.0)
        if len(rest) == 1 and "dict" in str(keys[part]):
            return None  # a key of a mapping (encoding.hparams.*: the encoding checks them)
        name = f"{node}.{part}" if node else part
        return f"{name} is a single value, not a group of keys (got {key!r})"
    return None


def check_keys(cfg: DictConfig, node: str = "") -> None:
    """Every key of a composed config is one of the schema's: ``+key=value`` and config files
    cannot add keys that posexp would silently ignore."""
    for key in cfg:
        if key == "hydra":
            continue
        name = f"{node}.{key}" if node else str(key)
        problem = unknown_key(name)
        if problem:
            raise UsageError(problem)
        kinds = schema_keys(node)
        if is_node(kinds[str(key)]) and not OmegaConf.is_missing(cfg, key) \
                and isinstance(cfg[key], DictConfig):
            check_keys(cfg[key], name)


def check_set(cfg: DictConfig) -> None:
    """Every value is set (none is ???), found without resolving an interpolation."""
    missing = []

    def walk(node: DictConfig, prefix: str) -> None:
        for k in node:
            if OmegaConf.is_missing(node, k):
                missing.append(f"{prefix}{k}")
            elif isinstance(node._get_node(k), DictConfig):
                walk(node._get_node(k), f"{prefix}{k}.")

    walk(cfg, "")
    if missing:
        raise UsageError(f"{', '.join(missing)} must be set (e.g. {missing[0]}=...)")


def flatten(tree: dict, prefix: str = "") -> dict:
    """{dotted key: value} of a nested dict."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
