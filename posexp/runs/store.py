"""One run directory: its lock, its status in run.json, its config, training curve,
evaluation points and checkpoint, each written atomically (files.py) and read back checked
(records.py).

```
<results_dir>/<experiment>/<run-name>/
  config.yaml     resolved config, exactly what ran
  run.json        status (running|completed|failed|diverged|interrupted), timings, versions,
                  corpus
  metrics.jsonl   training curve, one JSON object per line, appended and flushed
  eval.json       extrapolation curve(s) and per-position loss; a task run's task points
  checkpoint.pt   weights + optimizer + data-sampler state (loads with weights_only=True)
```
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import pickle
import platform
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from filelock import FileLock, Timeout
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posexp.config.identity import identity as config_identity
from posexp.errors import PosexpError, UsageError, first_line
from posexp.runs.files import (
    CHECKPOINT,
    CONFIG,
    EVAL,
    METRICS,
    RUN,
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    now,
    shorten,
)
from posexp.runs.points import point_key, point_scaling, region, task_point_key
from posexp.runs.records import read_eval
from posexp.scaling import order as scaling_order


class Run:
    """One run directory."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, path: Path, cfg: DictConfig) -> Run:
        """Start a run at ``path``, which holds nothing or an unfinished attempt of the same
        identity with nothing worth keeping (no checkpoint): its files are cleared after
        run.json says running, so that nothing of it can be read as this run's result."""
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"results_dir: cannot create {path}: {e.strerror}") from None
        if not os.access(path, os.W_OK):
            raise UsageError(f"results_dir: {path} is not writable")
        run = cls(path)
        # config.yaml first: a run.json is never left without the config it belongs to
        atomic_write_text(path / CONFIG, OmegaConf.to_yaml(cfg, resolve=True))
        run.write_info({"status": "running", "started_at": now()})
        for name in (EVAL, CHECKPOINT, METRICS):
            (path / name).unlink(missing_ok=True)
        return run

    def previous(self) -> tuple[dict, dict] | None:
        """(run.json, identity) of a run already here, or None if there is none.  A damaged
        one is a PosexpError naming the file: it is not ours to overwrite."""
        if not (self.path / RUN).exists():
            return None
        info = self.info()
        if not isinstance(info.get("status"), str):
            raise PosexpError(f"{self.path / RUN} is damaged (no status)")
        return info, self.identity()

    def move_aside(self) -> Path:
        """Move this run to <experiment>/.replaced/<name>-<UTC time>, keeping every file;
        report and sweeps do not look inside dot-directories."""
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        aside = self.path.parent / ".replaced" / f"{self.path.name}-{stamp}"
        for i in range(2, 1000):
            if not aside.exists():
                break
            aside = aside.with_name(f"{self.path.name}-{stamp}-{i}")
        try:
            aside.parent.mkdir(exist_ok=True)
            os.rename(self.path, aside)
        except OSError as e:
            raise PosexpError(f"cannot move {self.path} aside to {aside}: {e.strerror}") from None
        return aside

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold this run's lock: one writer (train, resume, eval) at a time.  The lock is an
        OS file lock, so one left by a killed process never blocks; beside it a small file
        names the holder, for the message a second process gets."""
        lock_file = self.path.parent / ".locks" / f"{self.path.name}.lock"
        holder = lock_file.with_suffix(".holder")
        try:
            lock_file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"results_dir: cannot create {lock_file.parent}: {e.strerror}"
                             ) from None
        lock = FileLock(lock_file, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            try:
                who = json.loads(holder.read_text())
                by = (f" by pid {who['pid']} on {who['host']} ({who['command']}, since "
                      f"{who['since']})")
            except (OSError, ValueError, KeyError, TypeError):
                by = ""
            raise PosexpError(f"{self.path} is in use{by}; wait for it to finish, or choose "
                              "another run_name= or experiment=") from None
        try:
            atomic_write_json(holder, {"pid": os.getpid(), "host": platform.node(),
                                       "command": shorten(" ".join(["posexp", *sys.argv[1:]]), 100),
                                       "since": now()})
            yield
        finally:
            lock.release()

    def resume(self, step: int, cfg: DictConfig) -> None:
        """Continue this run from its checkpoint at ``step`` under ``cfg`` (same identity; its
        other settings, such as evaluation lengths, are what this attempt runs): drop
        temporaries a killed writer left, and training-curve records from after the
        checkpoint (they will be redone)."""
        atomic_write_text(self.path / CONFIG, OmegaConf.to_yaml(cfg, resolve=True))
        for tmp in self.path.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
        records = []
        if (self.path / METRICS).exists():
            for line in (self.path / METRICS).read_text(errors="replace").splitlines():
                try:
                    record = json.loads(line)
                except ValueError:  # a line cut short by a kill
                    continue
                if isinstance(record, dict) and isinstance(record.get("step", 0), int) \
                        and record.get("step", 0) <= step:
                    records.append(line + "\n")
        atomic_write_text(self.path / METRICS, "".join(records))
        (self.path / EVAL).unlink(missing_ok=True)
        self.update(status="running", reason=None, resumed_at=now(), resumed_from_step=step)

    @classmethod
    def open(cls, path: Path) -> Run:
        """An existing run, for ``posexp eval``; a directory that is not one is a usage error."""
        if not path.is_dir():
            raise UsageError(f"{path} is not a directory")
        missing = [n for n in (CONFIG, RUN, CHECKPOINT) if not (path / n).is_file()]
        if missing:
            raise UsageError(f"{path} is not a finished posexp run (missing {', '.join(missing)})")
        return cls(path)

    # --- run.json -----------------------------------------------------------------------
    def info(self) -> dict:
        try:
            info = json.loads((self.path / RUN).read_text())
        except (OSError, ValueError) as e:
            raise PosexpError(f"{self.path / RUN} is unreadable: {e}") from None
        if not isinstance(info, dict):
            raise PosexpError(f"{self.path / RUN} is damaged: not a JSON object")
        return info

    def write_info(self, info: dict) -> None:
        atomic_write_json(self.path / RUN, info)

    def update(self, **fields: Any) -> dict:
        info = self.info() if (self.path / RUN).exists() else {}
        info.update(fields)
        self.write_info(info)
        return info

    def finish(self, status: str, reason: str | None = None, **fields: Any) -> None:
        self.update(status=status, reason=reason, finished_at=now(), **fields)

    # --- files --------------------------------------------------------------------------
    def config(self) -> DictConfig:
        try:
            cfg = OmegaConf.load(self.path / CONFIG)
        except (OSError, ValueError, OmegaConfBaseException, yaml.YAMLError) as e:
            raise PosexpError(f"{self.path / CONFIG} is unreadable: {first_line(e)}") from None
        if not isinstance(cfg, DictConfig):
            raise PosexpError(f"{self.path / CONFIG} is damaged: not a mapping")
        return cfg

    def identity(self) -> dict:
        """The identity (config.identity) of the run config.yaml describes."""
        cfg = self.config()
        try:
            return config_identity(cfg)
        except Exception as e:  # a key missing or of another type: whatever OmegaConf raises
            raise PosexpError(f"{self.path / CONFIG}: cannot tell the run's identity: "
                              f"{first_line(e)}") from None

    def log(self, record: dict) -> None:
        try:
            with (self.path / METRICS).open("a") as fh:
                fh.write(json.dumps(record) + "\n")
                fh.flush()
        except OSError as e:
            raise PosexpError(f"cannot write {self.path / METRICS}: {e.strerror}") from None

    def read_eval(self) -> dict:
        """eval.json, checked (records.read_eval); empty when there is none yet."""
        return read_eval(self.path / EVAL)

    def write_eval(self, curve: list[dict], per_position: dict | None,
                   tasks: list[dict] = (), spans: tuple[str, dict] | None = None,
                   **fields: Any) -> dict:
        """Merge new curve points and task points into eval.json; a curve point with the same
        mode, length, stride, scored region and RoPE scaling replaces the old one, a task
        point with the same task_point_key too; others stay beside them.  ``spans`` is the
        (id, record) of the layout the new points name (posexp/spans.py), kept under
        "spans" beside those of older points."""
        data = self.read_eval()
        if spans is not None:
            data["spans"] = {**data["spans"], spans[0]: spans[1]}
        new = {point_key(p) for p in curve}
        data["curve"] = [p for p in data["curve"] if point_key(p) not in new] + curve
        data["curve"].sort(key=lambda p: (p["mode"], scaling_order(point_scaling(p)),
                                          p["stride"] if p["mode"] == "sliding" else 0,
                                          p["length"]))
        new = {task_point_key(p) for p in tasks}
        data["tasks"] = [p for p in data["tasks"] if task_point_key(p) not in new] + list(tasks)
        data["tasks"].sort(key=lambda p: (p["task"], scaling_order(point_scaling(p)),
                                          p["count"], p["eval_seed"], p["length"],
                                          -1.0 if p.get("depth") is None else p["depth"]))
        if per_position is not None:
            data["per_position"] = [
                p for p in data["per_position"]
                if (p.get("length"), region(p)) != (per_position["length"], region(per_position))
            ] + [per_position]
        data.update(fields, updated_at=now())
        atomic_write_json(self.path / EVAL, data)
        return data

    def set_aside_eval(self) -> Path:
        """Rename a damaged eval.json out of the way (kept for inspection, never read)."""
        aside = self.path / f"{EVAL}.damaged-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}"
        os.replace(self.path / EVAL, aside)
        return aside

    def save_checkpoint(self, state: dict) -> None:
        # serialised in memory first: torch's zip writer turns a failed write (a full disk)
        # into an opaque RuntimeError, while a plain write reports the OSError itself
        import torch  # not at the top: reading runs back (ls, report) never needs it

        buffer = io.BytesIO()
        torch.save(state, buffer)
        atomic_write(self.path / CHECKPOINT, lambda fh: fh.write(buffer.getbuffer()))

    def load_checkpoint(self) -> dict:
        import torch

        path = self.path / CHECKPOINT
        try:
            with path.open("rb") as fh:
                magic = fh.read(4)
        except OSError as e:
            raise PosexpError(f"cannot load {path}: {e.strerror}") from None
        if magic != b"PK\x03\x04":  # torch.save writes a zip archive; torch's own error
            # for anything else advises weights_only=False, which posexp never does
            raise PosexpError(f"cannot load {path}: it is not a torch checkpoint (empty, "
                              "zeroed, cut short or another kind of file)")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            raise PosexpError(f"refusing to load {path}: it holds pickled objects other than "
                              "tensors and plain data (posexp loads with weights_only=True)"
                              ) from None
        except Exception as e:  # torch raises many types for a damaged or foreign file
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise PosexpError(f"cannot load {path}: {first}") from None
        if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
            raise PosexpError(f"cannot load {path}: it holds no model weights")
        return state
