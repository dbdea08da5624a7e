"""Where metrics go besides the run directory: Weights & Biases, when ``logger=wandb``.

The run directory (posexp.runs) is always written first and is the record; a sink is a copy.
A sink that fails warns once and goes quiet, so a W&B outage never costs a run.

W&B is configured as its users expect: a logger key left null (project, entity, mode) is
W&B's to decide -- its environment variable (WANDB_PROJECT, WANDB_ENTITY, WANDB_MODE), else
its own default -- and a key set in the config wins over both.  Its files go under WANDB_DIR
when that is set, else beside what they describe (the run directory, the report), never
into the current directory; W&B's own banner stays off the terminal, and posexp says in one
line where the run went: its URL, or the ``wandb sync`` command of an offline run.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posexp.config.schema import WandbMode
from posexp.errors import flat


def wandb_dir(default: Path) -> Path:
    """The directory W&B writes its ``wandb/`` folder in: WANDB_DIR when set, else
    ``default``."""
    return Path(os.environ.get("WANDB_DIR") or default)


def init_args(logger: DictConfig) -> dict[str, Any]:
    """The wandb.init arguments the config sets; a null one is left out, so W&B takes its
    environment variable or its default (wandb.init ignores arguments that are None)."""
    args = {"project": logger.project, "entity": logger.entity,
            "mode": WandbMode(logger.mode).value if logger.mode is not None else None,
            "tags": list(logger.tags) or None}
    return {k: v for k, v in args.items() if v is not None}


def where_it_went(run: Any) -> str | None:
    """One line saying where a W&B run went: its URL, or for an offline run its directory
    and the command that uploads it (None when W&B is disabled).  Read before run.finish()."""
    if run.disabled:
        return None
    if run.offline:
        where = run.settings.sync_dir
        return f"posexp: W&B run saved offline in {where}; upload it with: " \
               f"wandb sync {shlex.quote(where)}"
    return f"posexp: W&B run: {run.settings.run_url}"


class Sink:
    """The local-only sink: the run directory already has everything."""

    def log(self, record: dict) -> None:
        pass

    def log_eval(self, curve: list[dict], per_position: dict | None) -> None:
        pass

    def finish(self, status: str) -> None:
        pass


def warn(message: str) -> None:
    print(f"posexp: warning: {flat(message)}", file=sys.stderr)


def reason(e: BaseException, limit: int = 200) -> str:
    """An error as part of one line: its type and message, its lines joined, cut at a word
    within ``limit`` characters (W&B's validation errors run to several lines, and a cut
    mid-word reads as garbage)."""
    text = flat(str(e))
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0].rstrip(" ,;:") + " ..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class WandbSink(Sink):
    """One W&B run per posexp run: config, training curve, extrapolation table and plot,
    per-position loss, and ``ppl@L`` summary metrics."""

    def __init__(self, cfg: DictConfig, run_dir: Path, group: str | None) -> None:
        import wandb

        self.wandb = wandb
        lc = cfg.logger
        self.run = wandb.init(
            **init_args(lc),
            group=lc.group or group,
            name=f"{cfg.experiment}/{cfg.run_name}",
            config=OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
            dir=str(wandb_dir(run_dir)),
            reinit="finish_previous",
            settings=wandb.Settings(init_timeout=lc.init_timeout, silent=True),
        )
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log(self, record: dict) -> None:
        self.run.log(dict(record))

    def log_eval(self, curve: list[dict], per_position: dict | None) -> None:
        wandb = self.wandb
        columns = ["mode", "stride", "length", "loss", "ppl", "bits_per_token",
                   "bits_per_byte", "applicable"]
        table = wandb.Table(columns=columns, data=[[p[c] for c in columns] for p in curve])
        logged: dict[str, Any] = {"extrapolation": table}
        for mode in sorted({p["mode"] for p in curve}):
            rows = [[p["length"], p["ppl"]] for p in curve if p["mode"] == mode and p["applicable"]]
            logged[f"extrapolation/{mode}"] = wandb.plot.line(
                wandb.Table(columns=["length", "ppl"], data=rows), "length", "ppl",
                title=f"perplexity vs evaluation length ({mode})")
        if per_position is not None:
            pos = wandb.Table(columns=["position", "loss"],
                              data=list(zip(per_position["position"], per_position["loss"],
                                            strict=True)))
            logged["per_position"] = pos
            logged["per_position/plot"] = wandb.plot.line(
                pos, "position", "loss",
                title=f"loss by position in a {per_position['length']}-token window")
        self.run.log(logged)
        for p in curve:
            if p["applicable"]:
                suffix = "" if p["mode"] == "nonoverlapping" else f"_{p['mode']}"
                self.run.summary[f"ppl{suffix}@{p['length']}"] = p["ppl"]

    def finish(self, status: str) -> None:
        self.run.summary["status"] = status
        went = where_it_went(self.run)
        self.run.finish(exit_code=0 if status == "completed" else 1)
        if went:
            print(went, file=sys.stderr)


class Guarded(Sink):
    """Wraps a sink so that its first failure becomes one warning and it then goes quiet."""

    def __init__(self, inner: Sink, name: str) -> None:
        self.inner: Sink | None = inner
        self.name = name

    def _call(self, method: str, *args: Any) -> None:
        if self.inner is None:
            return
        try:
            getattr(self.inner, method)(*args)
        except Exception as e:
            warn(f"{self.name} failed ({reason(e)}); the run goes on and its local files "
                 "are complete")
            self.inner = None

    def log(self, record: dict) -> None:
        self._call("log", record)

    def log_eval(self, curve: list[dict], per_position: dict | None) -> None:
        self._call("log_eval", curve, per_position)

    def finish(self, status: str) -> None:
        self._call("finish", status)


def open_sink(cfg: DictConfig, run_dir: Path, group: str | None = None) -> Sink:
    if cfg.logger.name != "wandb":
        return Sink()
    try:
        return Guarded(WandbSink(cfg, run_dir, group), "W&B")
    except ImportError:
        warn("logger=wandb needs the wandb package (pip install 'posexp[wandb]'); "
             "logging to local files only")
    except Exception as e:
        warn(f"W&B could not start ({reason(e)}); logging to local files only")
    return Sink()
