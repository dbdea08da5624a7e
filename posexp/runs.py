"""The run directory: its layout, atomic writes, status, and loading it back.

```
<results_dir>/<experiment>/<run-name>/
  config.yaml     resolved config, exactly what ran
  run.json        status (running|completed|failed|diverged), timings, versions, corpus
  metrics.jsonl   training curve, one JSON object per line, appended and flushed
  eval.json       extrapolation curve(s) and per-position loss
  checkpoint.pt   weights + optimizer + data-sampler state (loads with weights_only=True)
```

Every whole-file write goes to a temporary file in the same directory and is renamed over
the target, so a crash leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import pickle
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import posexp
from posexp.errors import PosexpError, UsageError

CONFIG, RUN, METRICS, EVAL, CHECKPOINT = (
    "config.yaml", "run.json", "metrics.jsonl", "eval.json", "checkpoint.pt",
)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


FILE_MODE = _file_mode()  # what open() would give; mkstemp alone makes files private (0600)


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` through a temporary file and a rename.  A failed write (a full disk,
    say) leaves the previous file as it was and raises PosexpError naming the file."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise PosexpError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise PosexpError(f"cannot write {path}: {e.strerror or e}") from None
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda fh: fh.write(text.encode()))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


def code_version() -> str:
    """The git commit of the posexp sources when they are a checkout, else the package version."""
    src = Path(posexp.__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(src), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True, text=True, timeout=5, check=True,
        )
        return f"{posexp.__version__}+git.{out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        return posexp.__version__


def versions() -> dict[str, str]:
    import hydra
    import numpy

    return {
        "posexp": posexp.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "hydra": hydra.__version__,
    }


class Run:
    """One run directory."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, path: Path, cfg: DictConfig) -> Run:
        """Start a run at ``path``: any earlier run there is replaced, beginning with its
        status, so that nothing of it can be read as this run's result."""
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"results_dir: cannot create {path}: {e.strerror}") from None
        if not os.access(path, os.W_OK):
            raise UsageError(f"results_dir: {path} is not writable")
        run = cls(path)
        run.write_info({"status": "running", "started_at": now()})
        for name in (EVAL, CHECKPOINT, METRICS):
            (path / name).unlink(missing_ok=True)
        atomic_write_text(path / CONFIG, OmegaConf.to_yaml(cfg, resolve=True))
        return run

    @classmethod
    def previous(cls, path: Path) -> tuple[dict, DictConfig] | None:
        """(run.json, config.yaml) of a run already at ``path``, or None if there is none or
        either file is damaged (then there is no run to continue, and a warning names it)."""
        if not (path / RUN).exists():
            return None
        try:
            info = json.loads((path / RUN).read_text())
            return info, OmegaConf.load(path / CONFIG)
        except (OSError, ValueError, OmegaConfBaseException) as e:
            print(f"posexp: warning: {path} holds an unreadable run ({type(e).__name__}); "
                  "it is trained afresh", file=sys.stderr)
            return None

    def resume(self, step: int) -> None:
        """Continue this run from its checkpoint at ``step``: drop temporaries a killed writer
        left, and training-curve records from after the checkpoint (they will be redone)."""
        for tmp in self.path.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
        records = []
        if (self.path / METRICS).exists():
            for line in (self.path / METRICS).read_text().splitlines():
                try:
                    record = json.loads(line)
                except ValueError:  # a line cut short by a kill
                    continue
                if record.get("step", 0) <= step:
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
            return json.loads((self.path / RUN).read_text())
        except (OSError, ValueError) as e:
            raise PosexpError(f"{self.path / RUN} is unreadable: {e}") from None

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
        return OmegaConf.load(self.path / CONFIG)

    def log(self, record: dict) -> None:
        try:
            with (self.path / METRICS).open("a") as fh:
                fh.write(json.dumps(record) + "\n")
                fh.flush()
        except OSError as e:
            raise PosexpError(f"cannot write {self.path / METRICS}: {e.strerror}") from None

    def read_eval(self) -> dict:
        path = self.path / EVAL
        if not path.exists():
            return {"curve": [], "per_position": []}
        try:
            return json.loads(path.read_text())
        except ValueError as e:
            raise PosexpError(f"{path} is not valid JSON: {e}") from None

    def write_eval(self, curve: list[dict], per_position: dict | None, **fields: Any) -> dict:
        """Merge new curve points into eval.json; a point with the same mode, length, stride
        and scored tokens replaces the old one, others stay beside it."""
        data = self.read_eval()

        def key(p: dict) -> tuple:
            return (p["mode"], p["length"], p["stride"], p["first_token"], p["tokens"])

        new = {key(p) for p in curve}
        data["curve"] = [p for p in data["curve"] if key(p) not in new] + curve
        data["curve"].sort(key=lambda p: (p["mode"], p["stride"] if p["mode"] == "sliding" else 0,
                                          p["length"]))
        if per_position is not None:
            data["per_position"] = [
                p for p in data["per_position"]
                if (p["length"], p["tokens"]) != (per_position["length"], per_position["tokens"])
            ] + [per_position]
        data.update(fields, updated_at=now())
        atomic_write_json(self.path / EVAL, data)
        return data

    def save_checkpoint(self, state: dict) -> None:
        # serialised in memory first: torch's zip writer turns a failed write (a full disk)
        # into an opaque RuntimeError, while a plain write reports the OSError itself
        buffer = io.BytesIO()
        torch.save(state, buffer)
        atomic_write(self.path / CHECKPOINT, lambda fh: fh.write(buffer.getbuffer()))

    def load_checkpoint(self) -> dict:
        path = self.path / CHECKPOINT
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            raise PosexpError(f"refusing to load {path}: it holds pickled objects other than "
                              "tensors and plain data (posexp loads with weights_only=True)"
                              ) from None
        except Exception as e:  # torch raises many types for a damaged or foreign file
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise PosexpError(f"cannot load {path}: {first}") from None
