"""Runs read back: a run directory as a RunResult (its status, identity and points), every
run under a directory, completed or not.  Reading never raises for one damaged run: it comes
back with status "damaged" and a reason that names the file and what is wrong, so one bad
directory cannot stop a report of the others."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from posexp.errors import PosexpError
from posexp.runs.files import CONFIG, EVAL, RUN
from posexp.runs.points import Region, point_scaling
from posexp.runs.points import region as region_of
from posexp.runs.records import (
    CORPUS_KINDS,
    IDENTITY_KINDS,
    MODEL_KINDS,
    RUN_KINDS,
    check_fields,
    check_finite,
    read_eval,
)
from posexp.runs.store import Run
from posexp.scaling import CONSECUTIVE
from posexp.scaling import Key as ScalingKey
from posexp.scaling import key as scaling_key
from posexp.scaling import order as scaling_order
from posexp.scaling import record as scaling_record

DAMAGED, MISSING = "damaged", "missing"


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
    # spans id -> what general-purpose compressors make of that scored text, in bits per
    # byte ({"zlib": ..., "xz": ...}: posexp/spans.py compression), where recorded
    compression: dict = field(default_factory=dict)
    # spans id -> its layout's counts: documents (holding a span), text_documents (of the
    # split, where recorded) and effective_documents (1/sum(w^2) of their shares)
    layouts: dict = field(default_factory=dict)

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
    def protocol(self) -> int:
        """The protocol of posexp (version.PROTOCOL) that trained it; 0 before run.json
        recorded one."""
        return self.info.get("protocol") or 0

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
    def fine_tune(self) -> tuple[int, ScalingKey, int] | None:
        """A fine-tune's (root training length, its training-time RoPE scaling, its tokens);
        None for a run trained from scratch."""
        if self.identity.get("parent.identity") is None:
            return None
        method = self.identity.get("encoding.scaling.method")
        params = {k.rsplit(".", 1)[1]: v for k, v in self.identity.items()
                  if k.startswith("encoding.scaling.")}
        return (self.identity.get("parent.original_len"),
                scaling_key(scaling_record(method, params["factor"], params))
                if method else None, self.identity.get("train.tokens"))

    def scalings(self, mode: str) -> list[ScalingKey]:
        """The RoPE scalings this run holds points of ``mode`` with, as trained first."""
        return sorted({point_scaling(p) for p in self.curve if p["mode"] == mode},
                      key=scaling_order)

    def regions(self, mode: str, scaling: ScalingKey = None) -> list[Region]:
        """The scored regions this run holds points of ``mode`` (and ``scaling``) on."""
        return sorted({region_of(p) for p in self.curve
                       if p["mode"] == mode and point_scaling(p) == scaling})

    def points(self, mode: str, region: Region, scaling: ScalingKey = None) -> dict[int, dict]:
        """length -> the point of ``mode`` scored on ``region`` (as trained, or with RoPE
        ``scaling``); with several sliding strides at one length, the smallest stride (the
        most context per token) stands for that length."""
        out: dict[int, dict] = {}
        ours = (p for p in self.curve
                if p["mode"] == mode and region_of(p) == region
                and point_scaling(p) == scaling)
        for p in sorted(ours, key=lambda p: -p["stride"]):
            out[p["length"]] = p
        return out


def read_identity(run: Run, info: dict) -> dict:
    """The identity of the run in config.yaml, which must agree with what run.json says."""
    file = run.path / CONFIG
    if not os.path.lexists(file):
        raise PosexpError(f"{file} does not exist")
    ident = run.check_identity(info)  # config.yaml is still what the run was trained as
    check_fields(file, "", ident, IDENTITY_KINDS, ("encoding.name", "train.seq_len"))
    for key, field_name in (("encoding.name", "encoding"), ("train.seq_len", "seq_len"),
                            ("seed", "seed")):
        said = info.get(field_name)
        if said is not None and ident.get(key) != said:
            raise PosexpError(f"{file} and {run.path / RUN} disagree: {key} is "
                              f"{ident.get(key)!r}, run.json says {field_name} {said!r}")
    return ident




def read_points(file: Path) -> dict:
    """A completed run's eval.json (records.read_eval): it exists and holds points."""
    if not os.path.lexists(file):
        raise PosexpError(f"{file} does not exist")
    data = read_eval(file)
    if not data["curve"] and not data["tasks"]:
        raise PosexpError(f"{file} is damaged: the curve holds no points")
    return data


def legacy_positions(data: dict) -> None:
    """A randomized run's points scored before posexp scored such runs at sampled positions
    say nothing of their positions: they were scored at consecutive ones, a variant, not the
    run as trained (evaluate/positions.py).  So they are marked, and their per-position
    records, of those positions, left out."""
    for p in (*data["curve"], *data["tasks"]):
        p.setdefault("positions", CONSECUTIVE)
    data["per_position"] = [p for p in data["per_position"] if p.get("positions")]


def load_run(path: Path) -> RunResult:
    """The run in ``path`` as a report reads it: a completed run with its identity and curve;
    another status (running, failed, ...) with its reason; a run whose run.json, config.yaml
    or eval.json is unreadable, or holds a key missing or of another type, with status
    "damaged"; a directory without run.json with status "missing".  Never raises for a
    damaged run."""
    if not os.path.lexists(path / RUN):
        return RunResult(path, {"status": MISSING, "reason": f"{path / RUN} does not exist"})
    run = Run(path)
    try:
        info = run.info()  # a FIFO or a directory there: damaged, never opened
        check_fields(path / RUN, "", info, RUN_KINDS, ("status",))
        check_finite(path / RUN, info)
        for key, kinds in (("model", MODEL_KINDS), ("corpus", CORPUS_KINDS)):
            if info.get(key) is not None:
                check_fields(path / RUN, f"{key}: ", info[key], kinds)
        if info["status"] != "completed":
            return RunResult(path, info)
        check_fields(path / RUN, "", info, {}, ("encoding", "seq_len"))
        ident = read_identity(run, info)
        data = read_points(path / EVAL)
    except PosexpError as e:
        return RunResult(path, {"status": DAMAGED, "reason": str(e)})
    if ident.get("train.random_positions") is not None:
        legacy_positions(data)
    compression = {name: record["compression"] for name, record in data["spans"].items()
                   if isinstance(record.get("compression"), dict)}
    layouts = {name: {"documents": len(set(record.get("document") or ())),
                      **{k: record.get(k) for k in ("text_documents", "effective_documents")}}
               for name, record in data["spans"].items()}
    return RunResult(path, info, ident, data["curve"], data["per_position"], data["tasks"],
                     compression, layouts)


def run_dirs(root: Path) -> list[Path]:
    """Every directory below ``root`` that holds a run.json, except inside a dot-directory
    (runs moved aside to .replaced/, .locks/) or a W&B folder (wandb/).  A symbolic link to
    a run, or to a directory of runs, is followed: its runs are listed under the link's
    path, each run once -- by its real path, found first without following links, so a
    link to a run that is under ``root`` anyway adds nothing, and a link that loops back
    is not walked again."""
    found: dict[str, Path] = {}
    for follow in (False, True):
        walked: set[str] = set()
        for top, dirs, files in os.walk(root, followlinks=follow):
            real = os.path.realpath(top)
            if real in walked:  # a link back up, or a second link to one directory
                dirs[:] = []
                continue
            walked.add(real)
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "wandb")
            if RUN in files:
                found.setdefault(real, Path(top))
                if follow:  # a link is followed to runs, not into what a run links to
                    dirs[:] = []
    return sorted(found.values())


def split_runs(results: list[RunResult]) -> tuple[list[RunResult], list[RunResult]]:
    """(completed runs, runs that are not complete: unfinished, failed, damaged, ...): what
    reports, claims and sweeps' summaries compare, so completed runs of two protocols are
    refused here (one_protocol)."""
    done = [r for r in results if r.status == "completed"]
    one_protocol(done)
    return done, [r for r in results if r.status != "completed"]


def continues_protocol(runs: list[RunResult], protocol: int) -> None:
    """A PosexpError, in one line, when a run already in ``runs`` (any status) was trained
    under another protocol than ``protocol``, this code's: a campaign continued by code that
    computes other numbers would join runs of two protocols."""
    other = next((r for r in runs if r.status not in (MISSING, DAMAGED)
                  and r.protocol != protocol), None)
    if other is not None:
        raise PosexpError(f"{other.path} was trained under protocol {other.protocol}, and this "
                          f"posexp computes protocol {protocol}: runs of the two cannot be "
                          "combined; continue with the posexp of protocol "
                          f"{other.protocol}, or move the older runs aside")


def one_protocol(runs: list[RunResult]) -> None:
    """A PosexpError, in one line naming both protocols and a run of each, when ``runs``
    were trained under more than one (version.PROTOCOL): their numbers differ by what the
    code computes, not by what the runs are."""
    first: dict[int, RunResult] = {}
    for r in runs:
        first.setdefault(r.protocol, r)
    if len(first) > 1:
        (a, ra), (b, rb) = sorted(first.items())[:2]
        raise PosexpError(f"runs of protocol {a} ({ra.path}) and protocol {b} ({rb.path}) "
                          "cannot be compared: their training and scoring compute different "
                          "numbers; retrain the older ones (train.resume=false) or report "
                          "them apart")


def load_runs(root: Path) -> tuple[list[RunResult], list[RunResult]]:
    """(completed runs, the others) under ``root``; a PosexpError when there is no run at all,
    so that nothing is written for a directory that holds none."""
    dirs = run_dirs(root)
    if not dirs:
        raise PosexpError(f"no posexp runs under {root}")
    return split_runs([load_run(d) for d in dirs])
