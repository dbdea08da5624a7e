"""The command that rebuilds a run record's weights.  A record -- a completed run without its
checkpoint, as committed to git (docs/runs.md) -- is read back like any run, but what needs
its weights (eval, resume, finetune, load_model, scoring points it lacks) cannot run; the line
that refuses names the command that trains it again.  config.yaml holds the resolved config,
not the overrides that made it, so they are found again: the run's groups composed afresh,
then a key=value for each identity key that still differs, until the composed identity is
the run's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from posexp.config.identity import identity
from posexp.config.keys import flatten
from posexp.runs.files import CONFIG

# keys whose values the config derives from others (derive.resolve): set only when setting
# the others has not made them agree already
DERIVED = ("encoding.max_positions", "model.d_ff", "train.batch_size", "train.batch_tokens")
PLAIN = re.compile(r"[A-Za-z_][\w./-]*")  # a string Hydra reads as itself, unquoted
WORDS = ("null", "true", "false", "nan", "inf")


def hydra_value(value: object) -> str:
    """``value`` as a Hydra override writes it: 10000.0, [16,32], null, 'a b'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, str) and not (PLAIN.fullmatch(value) and value.lower() not in WORDS):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)


def compose(overrides: list[str]) -> DictConfig:
    """config.compose of ``overrides``, also inside posexp train's Hydra app, whose global
    Hydra is set aside meanwhile (config.hydra_context would refuse it) and put back."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    from posexp.config import compose as compose_config

    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        return compose_config(overrides)
    finally:
        restore_gh_from_backup(backup)


def _overrides(want: dict, base: list[str]) -> list[str] | None:
    """key=value overrides that, after ``base``, compose a config of identity ``want``;
    None when none are found (a key posexp composes no more, an encoding of the user's)."""
    found: list[str] = []
    for _ in range(3):  # the set keys, then the derived ones they left different
        try:
            got = identity(compose([*base, *found]))
        except Exception:  # whatever composing raises: no command can be vouched for
            return None
        differ = [k for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k)]
        if not differ:
            return found
        chosen = [k for k in differ if k not in DERIVED] or differ
        found += [f"{k}={hydra_value(want.get(k))}" for k in chosen]
    return None


def _train_command(run_dir: Path, cfg: DictConfig) -> str:
    """posexp train with the overrides that compose the run's identity, where it is now,
    with train.resume=false (which moves the record aside to .replaced/ first)."""
    base = [f"encoding={cfg.encoding.name}", f"data={cfg.data.name}"]
    if cfg.get("task") is not None:
        base.append(f"task={cfg.task.name}")
    found = _overrides(identity(cfg), base)
    if found is None:
        return (f"posexp train with the identity config.yaml holds (results_dir, experiment "
                f"and run_name naming {run_dir}) and train.resume=false")
    where = compose([*base, *found])
    for key, value in (("results_dir", str(run_dir.parent.parent)),
                       ("experiment", run_dir.parent.name), ("run_name", run_dir.name)):
        if str(where[key]) != value:
            found.append(f"{key}={hydra_value(value)}")
    return shlex.join(["posexp", "train", *base, *found, "train.resume=false"])


def _finetune_command(run_dir: Path, cfg: DictConfig) -> str:
    """posexp finetune of the parent, with the training keys that differ from the parent's;
    the parent is looked for beside the run first (records travel between machines, and the
    recorded path is the machine's it was trained on)."""
    parent = Path(str(cfg.parent.run))
    if (run_dir.parent / parent.name).is_dir():
        parent = run_dir.parent / parent.name
    want = identity(cfg)
    try:  # its whole config: keys off in its identity (encoding.scaling.*) have values too
        was = flatten(OmegaConf.to_container(OmegaConf.load(parent / CONFIG), resolve=True))
    except Exception:  # the parent is not here, or unreadable: its values are unknown
        was = {}
    keys = [k for k in sorted(want) if k.startswith(("train.", "encoding.scaling.", "seed"))
            and k not in DERIVED and want[k] != was.get(k)]
    return shlex.join(["posexp", "finetune", str(parent),
                       *(f"{k}={hydra_value(want[k])}" for k in keys),
                       f"run_name={run_dir.name}", "train.resume=false"])


def rebuild_command(run_dir: Path, cfg: DictConfig) -> str:
    """The command that trains the run of ``cfg`` (its config.yaml) in ``run_dir`` again."""
    if cfg.get("parent") is not None and cfg.parent.get("identity") is not None:
        return _finetune_command(run_dir, cfg)
    return _train_command(run_dir, cfg)
