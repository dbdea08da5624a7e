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
  checkpoint.pt   weights + optimizer + data-sampler state (loads with weights_only=True);
                  a completed run without it is a run record (Run.is_record)
```
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import json
import os
import pickle
import platform
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from omegaconf import DictConfig, OmegaConf

from posexp.config.identity import LEGACY, LEGACY_BY_DEVICE, identity_diff, own_scaling_params
from posexp.errors import InUse, PosexpError, UsageError
from posexp.runs.configs import encoding_module, file_identity, identity_sha256, read_config
from posexp.runs.files import (
    CHECKPOINT,
    CONFIG,
    EVAL,
    METRICS,
    RUN,
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    code_record,
    code_text,
    is_regular,
    now,
    require_regular,
    shorten,
)
from posexp.runs.kind import config_kind
from posexp.runs.points import point_key, point_scaling, region, task_point_key
from posexp.runs.records import contents_sha256, read_eval
from posexp.scaling import order as scaling_order
from posexp.version import PROTOCOL


class Run:
    """One run directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._eval_afresh = False  # the next write_eval starts eval.json anew (restart_eval)

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
        ident = run.identity()  # as config.yaml holds it: what every later open compares
        run.write_info({"status": "running", "kind": config_kind(cfg), "started_at": now(),
                        "identity": ident,
                        "identity_sha256": identity_sha256(ident),
                        "code": code_record(encoding_module(cfg)), "protocol": PROTOCOL})
        for name in (EVAL, CHECKPOINT, METRICS):
            (path / name).unlink(missing_ok=True)
        return run

    def previous(self) -> tuple[dict, dict] | None:
        """(run.json, identity) of a run already here, or None if there is none.  A damaged
        one is a PosexpError naming the file: it is not ours to overwrite."""
        if not os.path.lexists(self.path / RUN):
            return None
        info = self.info()
        if not isinstance(info.get("status"), str):
            raise PosexpError(f"{self.path / RUN} is damaged (no status)")
        return info, self.check_identity(info)

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
        names the holder, for the message a second process gets.  The lock is keyed on the
        resolved directory, so a symbolic link to the run, ``.`` from inside it or a
        relative path all take the same lock, in <experiment>/.locks/, never inside the run."""
        real = self.path.resolve()
        lock_file = real.parent / ".locks" / f"{real.name}.lock"
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
                if not is_regular(holder):  # a FIFO there would block the read
                    raise ValueError("not a regular file")
                who = json.loads(holder.read_text())
                by = (f" by pid {who['pid']} on {who['host']} ({who['command']}, since "
                      f"{who['since']})")
            except (OSError, ValueError, KeyError, TypeError):
                by = ""
            raise InUse(f"{self.path} is in use{by}; wait for it to finish, or choose "
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
        if is_regular(self.path / METRICS):  # anything else holds no records to keep
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
        info = self.info()
        code = code_record(encoding_module(cfg))
        codes = info.get("resumed_code") if isinstance(info.get("resumed_code"), list) else []
        if isinstance(info.get("code"), dict) and code != info["code"]:
            codes = [*codes, code]  # the codes that trained it, beside the one it started with
        self.update(status="running", reason=None, resumed_at=now(), resumed_from_step=step,
                    **({"resumed_code": codes} if codes else {}))

    @classmethod
    def open(cls, path: Path) -> Run:
        """An existing run, for ``posexp eval`` and ``posexp.load_model``; a directory that
        is not one is a usage error, one whose config.yaml was edited since it started or
        whose encoding module has changed is refused (check_identity, check_code).  A
        completed run without its checkpoint (a record) opens: what needs its weights asks
        require_checkpoint."""
        if not path.is_dir():
            raise UsageError(f"{path} is not a directory")
        names = (CONFIG, RUN, CHECKPOINT)
        missing = [n for n in names if not os.path.lexists(path / n)]
        if any(n != CHECKPOINT for n in missing):
            raise UsageError(f"{path} is not a finished posexp run (missing {', '.join(missing)})")
        for name in names:
            require_regular(path / name)
        run = cls(path)
        info = run.info()
        if missing and info.get("status") != "completed":
            raise UsageError(f"{path} is not a finished posexp run (missing {CHECKPOINT})")
        run.check_identity(info)
        run.check_code(info, encoding_module(run.config()))
        return run

    def is_record(self, info: dict) -> bool:
        """Whether this is a run record: completed, its checkpoint not here (records travel
        in git without it, results/.gitignore).  It reads back as any completed run."""
        return info.get("status") == "completed" and not os.path.lexists(self.path / CHECKPOINT)

    def require_checkpoint(self, needs: str) -> None:
        """A PosexpError, in one line, when this is a record: ``needs`` (what the caller
        does) needs the weights, and the line names the command that trains them again."""
        if self.is_record(self.info()):
            from posexp.runs.rebuild import rebuild_command  # composes configs: on refusal only

            raise PosexpError(f"{self.path} is a run record without its checkpoint "
                              f"({CHECKPOINT} is missing): {needs} needs the trained weights; "
                              f"train them again with: "
                              f"{rebuild_command(self.path, self.config())}")

    # --- run.json -----------------------------------------------------------------------
    def info(self) -> dict:
        require_regular(self.path / RUN)
        try:
            info = json.loads((self.path / RUN).read_text())
        except (OSError, ValueError, RecursionError) as e:
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
        return read_config(self.path / CONFIG)

    def identity(self, info: dict | None = None) -> dict:
        """The identity (config.identity) of the run config.yaml describes; ``info``, its
        run.json, says which device an older run trained on (identity.LEGACY_BY_DEVICE)."""
        device = (info or {}).get("device")
        return file_identity(self.path / CONFIG, device if isinstance(device, str) else None)

    def check_identity(self, info: dict) -> dict:
        """The identity of config.yaml, after checking that it is the one run.json recorded
        when the run started: a config.yaml edited since (``base: 3.0``, ``lr: 0.5``) would
        have the run scored or resumed as something it was not trained as.  A run started
        before posexp recorded identities has no record and is taken as it is (no record is
        added: posexp cannot vouch for a config.yaml it did not see written).  A key posexp
        added to identities since, at the value older runs trained with (LEGACY), is no
        change, as are the numerics an older run trained in (LEGACY_BY_DEVICE): its record
        lacks them, and config.identity fills them from the device it trained on."""
        current = self.identity(info)
        recorded, digest = info.get("identity"), info.get("identity_sha256")
        if recorded is None and digest is None:
            return current
        if not isinstance(recorded, dict) or digest != identity_sha256(recorded):
            raise PosexpError(f"{self.path / RUN} is damaged: its identity record does not "
                              "match its identity_sha256")
        # recorded before a scaling's identity held only its own method's parameters
        recorded = own_scaling_params(recorded)
        ours = {k: v for k, v in current.items()
                if k in recorded or k not in LEGACY or LEGACY[k] != v}
        if "train.precision" not in recorded:
            ours = {k: v for k, v in ours.items() if k not in LEGACY_BY_DEVICE}
        differ = identity_diff(recorded, ours)  # by value, as existing runs are compared:
        if differ:  # base 10000 and 10000.0 are one identity
            shown = "; ".join(differ[:3]) + (f"; and {len(differ) - 3} more"
                                             if len(differ) > 3 else "")
            raise PosexpError(f"{self.path / CONFIG} is not the config this run was trained "
                              f"with: it was edited after the run started ({shown}); put "
                              "the values back")
        return current

    def check_code(self, info: dict, module: str | None) -> None:
        """The encoding module of the user's own that this process runs (``module``) is the
        source the run started with: its weights were trained by that code, and a score or
        a resume by other code would not be this run's.  Nothing is compared when run.json
        predates code records or the source cannot be found."""
        was = info.get("code") if isinstance(info.get("code"), dict) else {}
        if not module or not was.get("encoding_module_sha256"):
            return
        now_code = code_record(module)
        if now_code.get("encoding_module_sha256") not in (None, was["encoding_module_sha256"]):
            raise PosexpError(f"the encoding module {module} has changed since {self.path} "
                              f"started (source sha256 {was['encoding_module_sha256'][:12]} "
                              f"then, {now_code['encoding_module_sha256'][:12]} now): its "
                              "weights belong to the old code; restore the module, or train "
                              "the run again (train.resume=false moves it aside)")

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
        "spans" beside those of older points.  eval.json's "code" names the code that
        scored its points: points of other code are never merged in (the run layer sets
        such an eval.json aside first, saying so; this is the last guard)."""
        data = {"curve": [], "per_position": [], "tasks": [], "spans": {}} \
            if self._eval_afresh else self.read_eval()
        other = self.other_code(data)
        if other:
            raise PosexpError(f"{self.path / EVAL} holds points scored by other code "
                              f"({other}): posexp does not mix them in one run")
        data["code"] = self.code()
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
        data["sha256"] = contents_sha256(data)
        atomic_write_json(self.path / EVAL, data)
        self._eval_afresh = False
        return data

    def code(self) -> dict:
        """The code this process scores this run with (files.code_record)."""
        return code_record(encoding_module(self.config()))

    def other_code(self, data: dict) -> str | None:
        """When eval.json (``data``, as read_eval gives it) holds points scored by other code
        than this process's -- another posexp source or encoding module, or no code recorded
        (an eval.json of an older posexp) -- the two codes in words; else None.  Whoever adds
        points first sets such an eval.json aside (restart_eval), saying so."""
        code = self.code()
        if not scored_points(data) or data.get("code") == code:
            return None
        return f"{code_text(data.get('code'))}; this is {code_text(code)}"

    def restart_eval(self, why: str) -> Path:
        """Copy eval.json to eval.json.<why>-<UTC time>, whole, and have the next write_eval
        start it anew: until then eval.json stays as it was, so a command stopped before its
        first point leaves the run's points where they were, never a run without them."""
        aside = self._aside_name(why)
        data = (self.path / EVAL).read_bytes()
        atomic_write(aside, lambda fh: fh.write(data))
        self._eval_afresh = True
        return aside

    def set_aside_eval(self, why: str = "damaged") -> Path:
        """Rename eval.json out of the way -- damaged, or scored by other code -- to
        eval.json.<why>-<UTC time>: kept for inspection, never read again."""
        aside = self._aside_name(why)
        os.replace(self.path / EVAL, aside)
        return aside

    def _aside_name(self, why: str) -> Path:
        """eval.json.<why>-<UTC time>, with a count when that is taken."""
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        aside = self.path / f"{EVAL}.{why}-{stamp}"
        for i in range(2, 1000):
            if not os.path.lexists(aside):
                break
            aside = self.path / f"{EVAL}.{why}-{stamp}-{i}"
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
        require_regular(path)  # a FIFO would block the read
        self.require_checkpoint("posexp")
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
        self._check_weights(state["model"])
        return state

    def _check_weights(self, weights: dict) -> None:
        """The checkpoint holds the weights run.json names (``weights_sha256``, recorded
        when training ended): a checkpoint copied in from another run, or changed on disk,
        is never scored, resumed or fine-tuned as this run's.  A run whose run.json has no
        hash (training not finished, or an older posexp) is taken as it is."""
        recorded = self.info().get("weights_sha256") if os.path.lexists(self.path / RUN) \
            else None
        if recorded is None:
            return
        if not isinstance(recorded, str):
            raise PosexpError(f"{self.path / RUN} is damaged: 'weights_sha256' is "
                              f"{recorded!r:.40}, not a string")
        try:
            found = weights_sha256(weights)
        except (AttributeError, TypeError, RuntimeError):  # not tensors: not its weights
            found = "not tensors"
        if found != recorded:
            raise PosexpError(f"{self.path / CHECKPOINT} does not hold the weights "
                              f"{self.path / RUN} names (sha256 {found[:12]}, run.json has "
                              f"{recorded[:12]}); the run is damaged: restore its checkpoint, "
                              "or train it again (train.resume=false moves it aside)")


def weights_sha256(weights: dict) -> str:
    """SHA-256 over every tensor of a state dict, name and bytes, in order: equal hashes,
    equal weights: the hash run.json's weights_sha256 holds, of a trained model
    (run.training.weights_hash), a checkpoint or a fine-tune's parent."""
    import torch  # not at the top: reading runs back (ls, report) never needs it

    digest = hashlib.sha256()
    for name, tensor in weights.items():
        digest.update(name.encode())
        flat = tensor.detach().cpu().contiguous().reshape(-1)  # a 0-dim tensor has no byte view
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def scored_points(data: dict) -> bool:
    """Whether eval.json (records.read_eval) holds any point or per-position record."""
    return bool(data["curve"] or data["tasks"] or data["per_position"])
