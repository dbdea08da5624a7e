"""Presets: a YAML file (configs/reproduce/<name>.yaml, or any file of the same shape) that
lists a claim suite's runs, seeds, common overrides and thresholds.  It is checked against
the preset schema (``Preset``) and its claim set's thresholds (registry.ClaimSet) before
anything trains: one line naming the file and the key otherwise."""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from posexp.claims.base import Margin
from posexp.claims.gate import COMPRESSORS, Bar
from posexp.claims.margins import load_margins, margins_path
from posexp.claims.registry import CLAIM_SETS, ClaimSet, kind_of
from posexp.config import CONFIG_DIR
from posexp.config.check import check_name
from posexp.config.guards import parse_override
from posexp.errors import UsageError, flat

DEFAULT_SET = "press"
DEFAULT_ENCODING = "rope"  # configs/config.yaml's, for a run that names none


@dataclass
class Preset:
    """The keys every preset has (a default makes one optional); its thresholds are its
    claim set's (ClaimSet.thresholds)."""

    experiment: str  # where its runs and report go, under --results-dir
    train_seq_len: int  # L of its claims
    overrides: list  # common to every run
    runs: list  # each a list of overrides
    thresholds: dict  # the claim set's: from its margins file, or here for a preset of its own
    claims: str = DEFAULT_SET  # its claim set (posexp/claims/registry.py)
    description: str | None = None  # what its runs are, for verdicts.md
    report: str | None = None  # its report directory beside its runs (default report)
    every_encoding: bool | None = None  # also one run per registered encoding it lists not
    seeds: list | None = None  # every run at every seed (default [0])
    sliding: bool | None = None  # score sliding windows too (default true)
    # each {parent: [overrides], overrides: [overrides]} and, optionally, lr_factor: its
    # learning rate as a multiple of its parent's (which learning_rates may set)
    finetunes: list | None = None
    # each encoding's learning rate (encoding -> lr), from the suite's sweep: added to every
    # run (and fine-tune parent) of that encoding that sets none itself
    learning_rates: dict | None = None
    # its margins file (claims/margins.py): the thresholds, fixed before its runs train
    margins: str | None = None
    # other training budgets (train.tokens) every run also trains at, each judged on its own
    # runs: a claim whose verdict differs reads budget-dependent (claims/budgets.py)
    budgets: list | None = None
    # the seeds of the runs at those budgets (default: seeds): others than the seed the
    # learning-rate sweep chose with, whose run cannot be trained again bit for bit on another
    # kind of machine for the points it was not scored at (claims/budgets.py)
    budget_seeds: list | None = None
    # what its runs measured to cost (posexp reproduce -h reads it): hours, on what machine
    cost: str | None = None
    # encodings whose plain runs another suite trained before this suite's margins were
    # fixed, reused here: verdicts.md says so, and times the margins against its own runs
    reused: list | None = None


def preset_path(name: str) -> Path:
    return Path(name) if name.endswith((".yaml", ".yml")) else (
        Path(CONFIG_DIR) / "reproduce" / f"{name}.yaml")


def load_preset(name: str) -> tuple[DictConfig, ClaimSet]:
    """A preset by name from configs/reproduce/, or a YAML file of the same shape, checked;
    and its claim set."""
    path = preset_path(name)
    if not path.is_file():
        found = sorted(p.stem for p in (Path(CONFIG_DIR) / "reproduce").glob("*.yaml"))
        raise UsageError(f"there is no reproduce preset {name!r}; available: {', '.join(found)}")
    try:
        tree = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"preset {path}: cannot read it ({e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise UsageError(f"preset {path} is not valid YAML{at}: "
                         f"{getattr(e, 'problem', None) or flat(str(e))}") from None
    if not isinstance(tree, dict):
        raise UsageError(f"preset {path}: the file must be a mapping")
    name = tree.get("claims") or DEFAULT_SET
    if name not in CLAIM_SETS:
        raise UsageError(f"preset {path}: claims must be one of {', '.join(CLAIM_SETS)}, "
                         f"got {name!r}")
    claim_set = CLAIM_SETS[name]
    if isinstance(tree.get("margins"), str):
        if "thresholds" in tree:
            raise UsageError(f"preset {path}: give its thresholds in its margins file "
                             f"({tree['margins']}) or in the preset, not both")
        tree["thresholds"] = load_margins(path, tree["margins"])
    _check(path, tree, Preset, "", claim_set)
    _check(path, tree["thresholds"], claim_set.thresholds, "thresholds.", claim_set)
    _check_multiples(path, tree["thresholds"])
    _check_lists(path, tree)
    _check_places(path, tree)
    return OmegaConf.create(tree), claim_set


KINDS = {int: "a positive integer", float: "a finite number above 0", list: "a list",
         str: "a string", bool: "true or false", dict: "a mapping",
         Margin: "a mapping of margin (a number, 0 or more) and reason (why that margin)",
         Bar: f"a mapping of compressor ({' or '.join(COMPRESSORS)}) and reason (why it)"}


def _number(value: object) -> bool:
    """A finite number: YAML's .nan and .inf are numbers that no threshold can be."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def _fits(value: object, kind: type) -> bool:
    if kind is int:  # a length, a count, a multiple: int() would cut 1.5 to 1
        return _number(value) and isinstance(value, int) and value > 0
    if kind is float:
        return _number(value) and value > 0
    if kind is Margin:  # a claim's margin is fixed in the preset with its reason
        return isinstance(value, dict) and set(value) == {"margin", "reason"} \
            and _number(value["margin"]) and value["margin"] >= 0 \
            and isinstance(value["reason"], str) and bool(value["reason"].strip())
    if kind is Bar:  # the learning gate's bar, fixed in the margins file with its reason
        return isinstance(value, dict) and set(value) == {"compressor", "reason"} \
            and value["compressor"] in COMPRESSORS \
            and isinstance(value["reason"], str) and bool(value["reason"].strip())
    return isinstance(value, kind)


def _check_multiples(path: Path, thresholds: dict) -> None:
    """A threshold named ``*_at`` is a multiple k of L (or a list of them) where a claim
    reads ppl(kL): an integer, since kL is an evaluated length, and 2 or more, since at k = 1
    every ratio to ppl(L) is 1 and a claim about "past L" would hold by construction.  The
    claim sets' other lists name encodings or tasks."""
    for key, value in thresholds.items():
        if value is None:
            continue
        items = value if isinstance(value, list) else [value]
        if str(key).endswith("_at"):
            if not items or not all(_number(k) and isinstance(k, int) and k >= 2
                                    for k in items):
                raise UsageError(f"preset {path}: thresholds.{key} must be "
                                 f"{'a list of ' * isinstance(value, list)}integer multiples "
                                 f"of L, each 2 or more (a claim past L), got {value!r:.60}")
        elif isinstance(value, list) and not all(isinstance(v, str) and v for v in value):
            raise UsageError(f"preset {path}: thresholds.{key} must be a list of names, got "
                             f"{value!r:.60}")


def _check(path: Path, tree: dict, schema: type, where: str, claim_set: ClaimSet) -> None:
    """Every key of ``schema`` that has no default is in ``tree``, every value of its kind,
    and ``tree`` holds no key the schema lacks."""
    if not isinstance(tree, dict):
        raise UsageError(f"preset {path}: {where.rstrip('.') or 'the file'} must be a mapping")
    hints = typing.get_type_hints(schema)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    for key in tree:
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"its keys: {', '.join(fields)}"
            raise UsageError(f"preset {path}: a {claim_set.name} preset has no key "
                             f"{where}{key}; {hint}")
    for name, f in fields.items():
        value = tree.get(name)
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if value is None:
            if required:
                raise UsageError(f"preset {path} has no {where}{name} (a {claim_set.name} "
                                 "preset needs it)")
            continue
        kind = kind_of(hints[name])
        if not _fits(value, kind):
            raise UsageError(f"preset {path}: {where}{name} must be {KINDS[kind]}, got "
                             f"{value!r:.60}")


def _check_lists(path: Path, tree: dict) -> None:
    """Runs and fine-tunes are lists of overrides (strings); learning rates positive."""
    for budget in tree.get("budgets") or []:
        own = isinstance(budget, dict) and set(budget) == {"tokens", "seeds"}
        if not (_fits(budget, int) or (own and _fits(budget["tokens"], int))):
            raise UsageError(f"preset {path}: budgets must be a list of positive integers "
                             f"(train.tokens) or of {{tokens, seeds}}, got {budget!r:.40}")
        if own and not _distinct_seeds(budget["seeds"]):
            raise UsageError(f"preset {path}: the seeds of budget {budget['tokens']} must be "
                             f"a list of distinct non-negative integers, got "
                             f"{budget['seeds']!r:.40}")
    for encoding, lr in (tree.get("learning_rates") or {}).items():
        if lr is None:  # the suite's sweep has not chosen yet: refused when runs are made
            continue
        if not (_fits(lr, float) and 0 < lr < float("inf")):
            raise UsageError(f"preset {path}: learning_rates.{encoding} must be a positive "
                             f"number, got {lr!r:.40}")
    for i, run in enumerate(tree["runs"], 1):
        if not isinstance(run, list) or not all(isinstance(o, str) for o in run):
            raise UsageError(f"preset {path}: run {i} must be a list of overrides, got {run!r}")
    if not all(isinstance(o, str) for o in tree["overrides"]):
        raise UsageError(f"preset {path}: overrides must be a list of key=value strings")
    for i, entry in enumerate(tree.get("finetunes") or [], 1):
        if not (isinstance(entry, dict) and set(entry) <= {"parent", "overrides", "lr_factor"}
                and all(isinstance(entry.get(k), list)
                        and all(isinstance(o, str) for o in entry[k])
                        for k in ("parent", "overrides"))):
            raise UsageError(f"preset {path}: fine-tune {i} must be a mapping of parent and "
                             "overrides, each a list of overrides (and lr_factor, its "
                             f"learning rate over its parent's), got {entry!r:.200}")
        if "lr_factor" in entry and not (_fits(entry["lr_factor"], float)
                                         and entry["lr_factor"] <= 1000):
            raise UsageError(f"preset {path}: fine-tune {i}'s lr_factor must be a number in "
                             f"(0, 1000], got {entry['lr_factor']!r:.40}")
        if "lr_factor" in entry and any(o.startswith("train.lr=") for o in entry["overrides"]):
            raise UsageError(f"preset {path}: fine-tune {i} sets train.lr and lr_factor; "
                             "give one")


# keys a preset's overrides may not set: where its runs are written is --results-dir's, and
# the token cache is the user's (POSEXP_CACHE)
NOT_IN_PRESETS = {"results_dir": "a preset's runs go under --results-dir: posexp reproduce "
                                 "--results-dir DIR",
                  "data.cache_dir": "the token cache is the user's: POSEXP_CACHE=DIR"}


def _check_places(path: Path, tree: dict) -> None:
    """A preset writes only under --results-dir: its experiment is a plain directory name,
    and no override of its runs or fine-tunes sets results_dir, the token cache, or an
    experiment that is not a plain name."""
    try:
        check_name("experiment", tree["experiment"])
    except UsageError as e:
        raise UsageError(f"preset {path}: {e}") from None
    lists = [("overrides", tree["overrides"])]
    lists += [(f"run {i}", run) for i, run in enumerate(tree["runs"], 1)]
    lists += [(f"fine-tune {i} {k}", entry[k]) for i, entry in
              enumerate(tree.get("finetunes") or [], 1) for k in ("parent", "overrides")]
    for where, overrides in lists:
        for arg in overrides:
            try:
                o = parse_override(arg)
                if o.key_or_group in NOT_IN_PRESETS:
                    raise UsageError(f"{o.key_or_group} cannot be set in a preset "
                                     f"({arg}); {NOT_IN_PRESETS[o.key_or_group]}")
                if o.key_or_group == "experiment" and not o.is_sweep_override():
                    check_name("experiment", o.value())
            except UsageError as e:
                raise UsageError(f"preset {path}: {where}: {e}") from None


def preset_runs(preset: DictConfig) -> list[list[str]]:
    """The preset's runs: those it lists, and with ``every_encoding: true`` one more for each
    registered encoding it does not train as is or with only its own hparams or its run's
    name set (the registry decides; the preset names none of them)."""
    from posexp.encodings import in_order  # the registry imports torch

    runs = [list(run) for run in preset.runs]
    if preset.get("every_encoding"):
        listed = {run[0] for run in runs
                  if all(o.startswith(("encoding.hparams.", "run_name=")) for o in run[1:])}
        runs += [[f"encoding={name}"] for name in in_order()
                 if f"encoding={name}" not in listed]
    return [with_lr(preset, run) for run in runs]


def with_lr(preset: DictConfig, run: list[str]) -> list[str]:
    """``run``'s overrides and, when the preset has learning_rates and the run sets no
    train.lr, its encoding's learning rate; a UsageError when the preset has none for it."""
    rates = preset.get("learning_rates")
    if not rates or any(o.startswith("train.lr=") for o in (*preset.overrides, *run)):
        return list(run)
    encoding = next((o.split("=", 1)[1] for o in reversed([*preset.overrides, *run])
                     if o.startswith("encoding=")), DEFAULT_ENCODING)
    if encoding not in rates:
        raise UsageError(f"preset {preset.get('experiment')}: learning_rates has no rate for "
                         f"encoding {encoding} (every encoding trains at its own, from the "
                         "suite's sweep)")
    if rates[encoding] is None:  # no run trains at a guess
        raise UsageError(f"preset {preset.get('experiment')}: learning_rates.{encoding} is not "
                         "chosen yet: run the learning-rate sweep its comments name and commit "
                         "its choice first")
    return [*run, f"train.lr={rates[encoding]}"]


def margins_file(name: str, preset: DictConfig) -> Path:
    """The file that fixes the preset's margins: its margins file, or the preset itself when
    it holds its thresholds."""
    path = preset_path(name)
    return margins_path(path, preset.margins) if preset.get("margins") else path


def report_dir(preset: DictConfig, name: str) -> str:
    """The name of the preset's report directory beside its runs (``report:``, default
    report): several presets may share runs and each keep its report."""
    report = str(preset.get("report") or "report")
    if "/" in report or "\\" in report or report in (".", "..") or report.startswith("."):
        raise UsageError(f"preset {name}: report must be a directory name beside its runs, "
                         f"got {report!r}")
    return report


def preset_seeds(preset: DictConfig, name: str, key: str = "seeds") -> list[int]:
    """The preset's ``seeds`` (default [0]), or its ``budget_seeds`` (default its seeds)."""
    seeds = preset.get(key)
    if seeds is None:
        return preset_seeds(preset, name) if key != "seeds" else [0]
    seeds = OmegaConf.to_container(seeds) if OmegaConf.is_config(seeds) else seeds
    if not _distinct_seeds(seeds):
        raise UsageError(f"preset {name}: {key} must be a list of distinct non-negative "
                         f"integers, got {seeds!r}")
    if any(str(o).startswith("seed=") for o in (*preset.overrides,
                                                 *(o for run in preset_runs(preset)
                                                   for o in run))):
        raise UsageError(f"preset {name}: set the seeds in its seeds: list, not as seed=")
    return seeds


def _distinct_seeds(seeds: object) -> bool:
    return isinstance(seeds, list) and bool(seeds) and all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds) \
        and len(set(seeds)) == len(seeds)
