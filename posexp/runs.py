"""The run directory: its layout, atomic writes, status, and loading it back.

```
<results_dir>/<experiment>/<run-name>/
  config.yaml     resolved config, exactly what ran
  run.json        status (running|completed|failed|diverged), timings, versions, corpus
  metrics.jsonl   training curve, one JSON object per line, appended and flushed
  eval.json       extrapolation curve(s) and per-position loss; a task run's task points
  checkpoint.pt   weights + optimizer + data-sampler state (loads with weights_only=True)
```

Every whole-file write goes to a temporary file in the same directory and is renamed over
the target, so a crash leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import pickle
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml
from filelock import FileLock, Timeout
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import posexp
from posexp.config import SCALING_METHODS, EvalMode, ScalingParams, scaling_record
from posexp.config import identity as config_identity
from posexp.errors import PosexpError, UsageError

CONFIG, RUN, METRICS, EVAL, CHECKPOINT = (
    "config.yaml", "run.json", "metrics.jsonl", "eval.json", "checkpoint.pt",
)


# A curve point is one (mode, length, stride) scored on one region of the validation
# stream: the targets first_token+1 .. first_token+tokens; and with one RoPE scaling, or as
# trained (rope_scaling null, or absent in eval.json written before posexp had scalings).
POINT_KEYS = frozenset({"mode", "length", "stride", "first_token", "tokens"})
Scaling = tuple | None  # scaling_key of a point's rope_scaling


def scaling_key(record: dict | None) -> Scaling:
    """A RoPE scaling record (config.scaling_record) as a hashable key; None as trained."""
    if record is None:
        return None
    return tuple(sorted((k, v if isinstance(v, str) else float(v)) for k, v in record.items()))


def point_scaling(p: dict) -> Scaling:
    return scaling_key(p.get("rope_scaling"))


def point_key(p: dict) -> tuple:
    return (p["mode"], p["length"], p["stride"], p["first_token"], p["tokens"],
            point_scaling(p))


def task_point_key(p: dict) -> tuple:
    """A task point's key (TASK_POINT_KEYS and its RoPE scaling): a point of the same task,
    length, depth, instance count, eval seed and scaling replaces it."""
    depth = p.get("depth")
    return (p["task"], p["length"], None if depth is None else float(depth), p["count"],
            p["eval_seed"], point_scaling(p))


def scaling_order(scaling: Scaling) -> tuple:
    """A sort key: as trained first, then by method (config.SCALING_METHODS) and factor."""
    if scaling is None:
        return (0, 0, 0.0, "")
    record = dict(scaling)
    method = record["method"]
    rank = SCALING_METHODS.index(method) if method in SCALING_METHODS else len(SCALING_METHODS)
    return (1, rank, record["factor"], str(scaling))


SCALING_NAMES = {"linear": "PI", "ntk": "NTK-aware", "dynamic": "dynamic NTK", "yarn": "YaRN",
                 "llama3": "Llama 3"}


def scaling_text(scaling: Scaling) -> str:
    """A scaling in words: its method's name, the multiplication sign and its factor, and
    the parameters that differ from the papers' defaults."""
    if scaling is None:
        return "as trained"
    record = dict(scaling)
    defaults = ScalingParams()
    params = [f"{k} {v:g}" for k, v in record.items()
              if k not in ("method", "factor") and v != getattr(defaults, k)]
    name = SCALING_NAMES.get(record["method"], record["method"])
    return f"{name} \u00d7{record['factor']:g}" + (f" ({', '.join(params)})" if params else "")


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


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
    """The git commit of posexp's own source tree when it runs from a checkout of it, else the
    package version (a git repository that merely encloses an installed posexp -- a project
    whose .venv holds it -- says nothing about posexp's code)."""
    src = Path(posexp.__file__).resolve().parent
    if not (src.parent / "pyproject.toml").is_file() or not (src.parent / ".git").exists():
        return posexp.__version__
    try:
        out = subprocess.run(
            ["git", "-C", str(src.parent), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True, text=True, timeout=5, check=True,
        )
        return f"{posexp.__version__}+git.{out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        return posexp.__version__


def versions() -> dict[str, str]:
    import hydra
    import numpy
    import torch

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
            raise PosexpError(f"{self.path / CONFIG} is unreadable: {_first_line(e)}") from None
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
                              f"{_first_line(e)}") from None

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
            return {"curve": [], "per_position": [], "tasks": []}
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise PosexpError(f"{path} is unreadable: {e}") from None
        if not (isinstance(data, dict) and isinstance(data.get("curve"), list)
                and all(isinstance(p, dict) and p.keys() >= POINT_KEYS for p in data["curve"])):
            raise PosexpError(f"{path} is damaged: no list of curve points with "
                              f"{', '.join(sorted(POINT_KEYS))}")
        data.setdefault("per_position", [])
        data.setdefault("tasks", [])
        if not (isinstance(data["tasks"], list) and all(
                isinstance(p, dict) and p.keys() >= TASK_POINT_KEYS for p in data["tasks"])):
            raise PosexpError(f"{path} is damaged: no list of task points with "
                              f"{', '.join(sorted(TASK_POINT_KEYS))}")
        return data

    def write_eval(self, curve: list[dict], per_position: dict | None,
                   tasks: list[dict] = (), **fields: Any) -> dict:
        """Merge new curve points and task points into eval.json; a curve point with the same
        mode, length, stride, scored region and RoPE scaling replaces the old one, a task
        point with the same task_point_key too; others stay beside them."""
        data = self.read_eval()
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
                if (p.get("length"), p.get("first_token"), p.get("tokens"))
                != (per_position["length"], per_position["first_token"], per_position["tokens"])
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


# --- reading runs back ----------------------------------------------------------------------
# All reading and writing of run files lives in runs.py; report, reproduce and sweep read
# through it.  Reading never raises for one damaged run: it comes back with status "damaged"
# and a reason that names the file and what is wrong, so one bad directory cannot stop a
# report of the others.



DAMAGED, MISSING = "damaged", "missing"
MODES = tuple(m.value for m in EvalMode)

# (first_token, tokens): a point scores the validation targets first_token+1 .. first_token+tokens
Region = tuple[int, int]

INT, NUM, STR, BOOL, OBJ, LIST = (
    "an integer", "a number", "a string", "true or false", "an object", "a list")
_KINDS: dict[str, Callable[[object], bool]] = {
    # JSON true/false are Python bools, which are ints too: never a length or a count
    INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
    NUM: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    STR: lambda v: isinstance(v, str),
    BOOL: lambda v: isinstance(v, bool),
    OBJ: lambda v: isinstance(v, dict),
    LIST: lambda v: isinstance(v, list),
}

# The keys of each file that report, reproduce and sweep read, and their kinds.  A key may be
# absent or null unless required; present, it must be of its kind.
RUN_KINDS = {"status": STR, "reason": STR, "name": STR, "experiment": STR, "encoding": STR,
             "parent": STR, "seq_len": INT, "seed": INT, "n_params": INT, "steps": INT,
             "tokens_trained": INT, "device": STR, "model": OBJ, "corpus": OBJ, "versions": OBJ}
MODEL_KINDS = {"d_model": INT, "n_layer": INT, "n_head": INT}
CORPUS_KINDS = {"name": STR, "fingerprint": STR, "tokenizer": STR,
                "tokenizer_fingerprint": STR, "vocab_size": INT, "val_tokens": INT,
                "task": STR, "max_train_length": INT}
POINT_KINDS = {"mode": STR, "length": INT, "stride": INT, "first_token": INT, "tokens": INT,
               "applicable": BOOL, "reason": STR, "loss": NUM, "ppl": NUM,
               "bits_per_token": NUM, "bits_per_byte": NUM, "seconds": NUM,
               "ppl_low": NUM, "ppl_high": NUM, "block_loss": LIST, "block_tokens": LIST,
               "rope_scaling": OBJ}
SCALING_KINDS = {"method": STR, "factor": NUM, "beta_fast": NUM, "beta_slow": NUM,
                 "low_freq_factor": NUM, "high_freq_factor": NUM}
POSITION_KINDS = {"mode": STR, "length": INT, "first_token": INT, "tokens": INT,
                  "position": LIST, "position_end": LIST, "loss": LIST, "loss_se": LIST}
# A task point (data=task): accuracy on the held-out instances of one length (and depth, for
# passkey), scored as trained or with a RoPE scaling.  exact is the fraction of instances
# whose every answer token is the model's argmax (teacher forced, which is greedy decoding's
# exact match); token_acc the mean per-instance fraction of answer tokens right; *_low/_high
# their 95% intervals (Wilson for exact, a bootstrap over instances for token_acc);
# answer_loss nats per answer token; chance_* the best constant predictor's accuracy on the
# same instances; instances_sha256 the hash of those instances (data.tasks.instances_sha256),
# so that two runs' points are seen to score the same ones.  Identified by TASK_POINT_KEYS and
# rope_scaling (runs.task_point_key).
TASK_POINT_KEYS = frozenset({"task", "length", "depth", "count", "eval_seed"})
TASK_POINT_KINDS = {"task": STR, "length": INT, "depth": NUM, "count": INT, "eval_seed": INT,
                    "tokens": INT, "applicable": BOOL, "reason": STR, "exact": NUM,
                    "exact_low": NUM, "exact_high": NUM, "token_acc": NUM, "token_acc_low": NUM,
                    "token_acc_high": NUM, "answer_loss": NUM, "chance_exact": NUM,
                    "chance_token": NUM, "seconds": NUM, "rope_scaling": OBJ,
                    "instances_sha256": STR}
# identity keys the report reads (labels, table columns), beyond being compared
IDENTITY_KINDS = {"encoding.name": STR, "train.seq_len": INT, "seed": INT,
                  "model.d_model": INT, "model.n_layer": INT, "model.n_head": INT,
                  "task.name": STR}


@dataclass
class RunResult:
    """One run directory read back: run.json (``info``), and for a completed run its identity
    (config.identity of config.yaml) and eval.json's curve points, per-position records and
    task points (a task run's; its curve is empty).
    A run that cannot be read has ``info`` {"status": "damaged", "reason": ...}."""

    path: Path
    info: dict
    identity: dict = field(default_factory=dict)
    curve: list[dict] = field(default_factory=list)
    per_position: list[dict] = field(default_factory=list)
    tasks: list[dict] = field(default_factory=list)  # task points (TASK_POINT_KINDS)

    @property
    def status(self) -> str:
        return self.info.get("status", DAMAGED)

    @property
    def reason(self) -> str | None:
        return self.info.get("reason")

    @property
    def name(self) -> str:
        return self.info.get("name") or self.path.name

    @property
    def encoding(self) -> str | None:
        return self.identity.get("encoding.name", self.info.get("encoding"))

    @property
    def task(self) -> str | None:
        """The task of a task run (data=task); None for a corpus run."""
        return self.identity.get("task.name")

    @property
    def train_len(self) -> int | None:
        return self.identity.get("train.seq_len", self.info.get("seq_len"))

    @property
    def seed(self) -> int | None:
        return self.identity.get("seed", self.info.get("seed"))

    @property
    def fine_tune(self) -> tuple[int, Scaling] | None:
        """A fine-tune's (root training length, its training-time RoPE scaling); None for a
        run trained from scratch."""
        if self.identity.get("parent.identity") is None:
            return None
        method = self.identity.get("encoding.scaling.method")
        params = {k.rsplit(".", 1)[1]: v for k, v in self.identity.items()
                  if k.startswith("encoding.scaling.")}
        return (self.identity.get("parent.original_len"),
                scaling_key(scaling_record(method, params["factor"], params))
                if method else None)

    def scalings(self, mode: str) -> list[Scaling]:
        """The RoPE scalings this run holds points of ``mode`` with, as trained first."""
        return sorted({point_scaling(p) for p in self.curve if p["mode"] == mode},
                      key=scaling_order)

    def regions(self, mode: str, scaling: Scaling = None) -> list[Region]:
        """The scored regions this run holds points of ``mode`` (and ``scaling``) on."""
        return sorted({(p["first_token"], p["tokens"]) for p in self.curve
                       if p["mode"] == mode and point_scaling(p) == scaling})

    def points(self, mode: str, region: Region, scaling: Scaling = None) -> dict[int, dict]:
        """length -> the point of ``mode`` scored on ``region`` (as trained, or with RoPE
        ``scaling``); with several sliding strides at one length, the smallest stride (the
        most context per token) stands for that length."""
        out: dict[int, dict] = {}
        ours = (p for p in self.curve
                if p["mode"] == mode and (p["first_token"], p["tokens"]) == region
                and point_scaling(p) == scaling)
        for p in sorted(ours, key=lambda p: -p["stride"]):
            out[p["length"]] = p
        return out


def _check_fields(file: Path, where: str, obj: object, kinds: dict[str, str],
                  required: Iterable[str] = ()) -> None:
    """Raise PosexpError naming ``file`` when ``obj`` is not a JSON object, lacks a required
    key, or holds a key of another kind; ``where`` says which part of the file it is."""
    if not isinstance(obj, dict):
        raise PosexpError(f"{file} is damaged: {where or 'the file '}is not a JSON object")
    for key in sorted(required):
        if obj.get(key) is None:
            raise PosexpError(f"{file} is damaged: {where}no {key!r}")
    for key, kind in kinds.items():
        value = obj.get(key)
        if value is not None and not _KINDS[kind](value):
            raise PosexpError(f"{file} is damaged: {where}{key!r} is {value!r:.40}, not {kind}")


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def read_identity(run: Run, info: dict) -> dict:
    """The identity of the run in config.yaml, which must agree with what run.json says."""
    file = run.path / CONFIG
    if not file.is_file():
        raise PosexpError(f"{file} does not exist")
    ident = run.identity()
    _check_fields(file, "", ident, IDENTITY_KINDS, ("encoding.name", "train.seq_len"))
    for key, field_name in (("encoding.name", "encoding"), ("train.seq_len", "seq_len"),
                            ("seed", "seed")):
        said = info.get(field_name)
        if said is not None and ident.get(key) != said:
            raise PosexpError(f"{file} and {run.path / RUN} disagree: {key} is "
                              f"{ident.get(key)!r}, run.json says {field_name} {said!r}")
    return ident


def _check_blocks(file: Path, where: str, p: dict) -> None:
    """Block losses (for intervals, posexp/stats.py) are optional -- eval.json written before
    posexp recorded them has none -- but present, they must add up to the point's tokens."""
    loss, tokens = p.get("block_loss"), p.get("block_tokens")
    if loss is None and tokens is None:
        return
    if not (isinstance(loss, list) and isinstance(tokens, list) and len(loss) == len(tokens)
            and loss and all(_KINDS[NUM](x) for x in loss)
            and all(_KINDS[INT](n) and n > 0 for n in tokens) and sum(tokens) == p["tokens"]):
        raise PosexpError(f"{file} is damaged: {where}block_loss and block_tokens are not "
                          f"lists of one length whose token counts add up to {p['tokens']}")


def read_curve(file: Path) -> tuple[list[dict], list[dict]]:
    """eval.json's curve points and per-position records, every key the report reads checked."""
    curve, per_position, _ = read_points(file)
    return curve, per_position


def _check_task_points(file: Path, tasks: list) -> None:
    for i, p in enumerate(tasks, 1):
        where = f"task point {i}: "
        _check_fields(file, where, p, TASK_POINT_KINDS,
                      (TASK_POINT_KEYS - {"depth"}) | {"applicable"})
        if p.get("rope_scaling") is not None:
            _check_fields(file, f"{where}rope_scaling: ", p["rope_scaling"], SCALING_KINDS,
                          ("method", "factor"))
        if p["applicable"]:
            _check_fields(file, where, p, {}, ("exact", "token_acc", "answer_loss"))


def read_points(file: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """eval.json's curve points, per-position records and task points, every key the report
    reads checked.  A task run's curve is empty; any other eval.json holds curve points."""
    if not file.is_file():
        raise PosexpError(f"{file} does not exist")
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise PosexpError(f"{file} is unreadable: {e}") from None
    _check_fields(file, "", data, {"curve": LIST, "per_position": LIST, "tasks": LIST},
                  ("curve",))
    tasks = data.get("tasks") or []
    _check_task_points(file, tasks)
    if not data["curve"] and not tasks:
        raise PosexpError(f"{file} is damaged: the curve holds no points")
    for i, p in enumerate(data["curve"], 1):
        _check_fields(file, f"curve point {i}: ", p, POINT_KINDS, POINT_KEYS | {"applicable"})
        if p["mode"] not in MODES:  # it names the report's figure files
            raise PosexpError(f"{file} is damaged: curve point {i}: 'mode' is {p['mode']!r:.40}, "
                              f"not {' or '.join(MODES)}")
        if p.get("rope_scaling") is not None:
            _check_fields(file, f"curve point {i}: rope_scaling: ", p["rope_scaling"],
                          SCALING_KINDS, ("method", "factor"))
        if p["applicable"]:
            _check_fields(file, f"curve point {i}: ", p, {}, ("loss", "ppl"))
            _check_blocks(file, f"curve point {i}: ", p)
    per_position = data.get("per_position") or []
    for i, p in enumerate(per_position, 1):
        where = f"per_position record {i}: "
        _check_fields(file, where, p, POSITION_KINDS, ("length", "position", "position_end",
                                                       "loss"))
        columns = (p["position"], p["position_end"], p["loss"])
        se = p.get("loss_se")
        if len({len(c) for c in columns}) > 1 or not all(_KINDS[NUM](x) for c in columns
                                                          for x in c) \
                or (se is not None and (len(se) != len(p["loss"])
                                        or not all(x is None or _KINDS[NUM](x) for x in se))):
            raise PosexpError(f"{file} is damaged: {where}position, position_end, loss and "
                              "loss_se are not lists of numbers of one length")
    return data["curve"], per_position, tasks


def load_run(path: Path) -> RunResult:
    """The run in ``path`` as a report reads it: a completed run with its identity and curve;
    another status (running, failed, ...) with its reason; a run whose run.json, config.yaml
    or eval.json is unreadable, or holds a key missing or of another type, with status
    "damaged"; a directory without run.json with status "missing".  Never raises for a
    damaged run."""
    if not (path / RUN).is_file():
        return RunResult(path, {"status": MISSING, "reason": f"{path / RUN} does not exist"})
    run = Run(path)
    try:
        info = run.info()
        _check_fields(path / RUN, "", info, RUN_KINDS, ("status",))
        for key, kinds in (("model", MODEL_KINDS), ("corpus", CORPUS_KINDS)):
            if info.get(key) is not None:
                _check_fields(path / RUN, f"{key}: ", info[key], kinds)
        if info["status"] != "completed":
            return RunResult(path, info)
        _check_fields(path / RUN, "", info, {}, ("encoding", "seq_len"))
        ident = read_identity(run, info)
        curve, per_position, tasks = read_points(path / EVAL)
    except PosexpError as e:
        return RunResult(path, {"status": DAMAGED, "reason": str(e)})
    return RunResult(path, info, ident, curve, per_position, tasks)


def run_dirs(root: Path) -> list[Path]:
    """Every directory below ``root`` that holds a run.json, except inside a dot-directory
    (runs moved aside to .replaced/, .locks/) or a W&B folder (wandb/)."""
    found = []
    for file in sorted(root.rglob(RUN)):
        parts = file.relative_to(root).parts[:-1]
        if not any(part.startswith(".") or part == "wandb" for part in parts):
            found.append(file.parent)
    return found


def split_runs(results: list[RunResult]) -> tuple[list[RunResult], list[RunResult]]:
    """(completed runs, runs that are not complete: unfinished, failed, damaged, ...)."""
    done = [r for r in results if r.status == "completed"]
    return done, [r for r in results if r.status != "completed"]


def load_runs(root: Path) -> tuple[list[RunResult], list[RunResult]]:
    """(completed runs, the others) under ``root``; a PosexpError when there is no run at all,
    so that nothing is written for a directory that holds none."""
    dirs = run_dirs(root)
    if not dirs:
        raise PosexpError(f"no posexp runs under {root}")
    return split_runs([load_run(d) for d in dirs])
