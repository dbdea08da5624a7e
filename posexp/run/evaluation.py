"""Scoring a trained run again, from its checkpoint: the points a config asks for that
eval.json lacks (``score_missing``, when a completed run is met again), or every point
``posexp eval`` asks for (``evaluate_dir``).  The model is loaded once for every RoPE
scaling; each scaling's points are written as soon as they are scored."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from posexp import scaling
from posexp.config import RunSpec
from posexp.config.schema import EvalMode
from posexp.errors import PosexpError, UsageError, first_line
from posexp.run.setup import build_model, pick_device
from posexp.run.training import Interrupted
from posexp.run.workloads import Wanted, Workload, group, wanted_text, workload_of
from posexp.runs import CHECKPOINT, Run, now
from posexp.sinks import Sink

SKIP_ADVICE = "skipped (train.resume=false moves it aside and trains it again)"


@contextlib.contextmanager
def signals_interrupt(step: int, advice: str) -> Iterator[None]:
    """SIGINT/SIGTERM stop what runs inside at once (evaluation writes nothing half-scored):
    Interrupted, with ``advice`` on what to do next."""

    def stop(signum: int, frame: object) -> None:
        raise Interrupted(signum, step, advice)

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            previous[sig] = signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def read_scored(run: Run) -> dict:
    """A run's eval.json; a damaged one is renamed out of the way (kept, never read again)
    so that the run can be scored afresh, and reads as empty."""
    try:
        return run.read_eval()
    except PosexpError as e:
        aside = run.set_aside_eval()
        print(f"posexp: warning: {e}; kept as {aside.name}, scoring the run again",
              file=sys.stderr)
        return {"curve": [], "per_position": [], "tasks": [], "spans": {}}


def requested_points(run: Run, work: Workload, scalings: Iterable[dict | None]) -> list[dict]:
    """The points of eval.json that the config asks for with ``scalings``."""
    scored = run.read_eval()
    wanted = work.requested(scalings, scored) or {}
    return [p for p in work.points(scored) if work.key(p) in wanted]


def score_missing(run: Run, spec: RunSpec, device: torch.device, info: dict,
                  scalings: tuple[dict | None, ...] | None = None,
                  header: str | None = None) -> str:
    """A completed run of this identity: score only the points the config asks for (with
    ``scalings``, default as trained and eval.rope_scaling's) that eval.json lacks, saying
    which; "skipped" when there are none, else "scored".  ``header`` (posexp eval's) is
    printed before the scoring starts."""
    work = workload_of(spec)
    scalings = spec.run_scalings if scalings is None else scalings
    scored = read_scored(run)
    asked = work.requested(scalings, scored)
    if asked is None:  # no layout of eval.tokens recorded yet: score everything asked for
        missing = work.every(scalings)
    else:
        have = {work.key(p) for p in work.points(scored)}
        missing = group(want for key, want in asked.items() if key not in have)
    if not missing:
        print(f"posexp: {run.path}: already completed, and eval.json holds every {work.what} "
              f"asked for; {'nothing to score' if header else SKIP_ADVICE}", file=sys.stderr)
        print(work.table(requested_points(run, work, scalings),
                         (info.get("corpus") or {}).get("tokenizer")))
        return "skipped"
    count = sum(len(items) for _, items in missing)
    text = wanted_text(missing, getattr(work, "item_text", str))
    print(f"posexp: {run.path}: already completed; scoring the {count} missing "
          f"{work.what}(s) {text} from its checkpoint", file=sys.stderr)
    evaluate(run, spec, device, missing, header=header, scalings=scalings)
    return "scored"


def evaluate(run: Run, spec: RunSpec, device: torch.device, wanted: Wanted | None = None,
             header: str | None = None,
             scalings: tuple[dict | None, ...] | None = None) -> None:
    """Score a completed run's checkpoint (``wanted``, default every point the config asks
    for with ``scalings``, default eval.rope_scaling's) and merge the points into its
    eval.json; no training.  ``header`` is printed once the checkpoint is loaded."""
    work = workload_of(spec)
    scalings = spec.scalings if scalings is None else scalings
    info = run.info()
    data = work.load()
    check_data_unchanged(run, info, data, spec.is_task_run)
    state = run.load_checkpoint()
    read_scored(run)  # a damaged eval.json is set aside before the new points are merged
    model = build_model(spec, data.vocab_size)
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as e:
        raise PosexpError(f"{run.path / CHECKPOINT} does not match config.yaml: "
                          f"{first_line(e)}") from None
    model.to(device)
    if header:
        print(header, file=sys.stderr)
    with signals_interrupt(info.get("steps", 0), "during evaluation; the points scored so "
                           "far are in eval.json; run the same command again to score the "
                           "rest"):
        t0 = time.perf_counter()
        work.score(model, data, run, Sink(), device, wanted or work.every(scalings))
        seconds = time.perf_counter() - t0
    run.update(last_eval_at=now(), last_eval_seconds=round(seconds, 2))
    print(work.table(requested_points(run, work, scalings), data.tokenizer))


def check_data_unchanged(run: Run, info: dict, data, tasks: bool) -> None:
    """The corpus (or task) and tokenizer (or vocabulary) are those the run was trained on."""
    trained_on = info.get("corpus") if isinstance(info.get("corpus"), dict) else {}
    for key, what in (("fingerprint", "task" if tasks else "corpus"),
                      ("tokenizer_fingerprint", "vocabulary" if tasks else "tokenizer")):
        was, current = trained_on.get(key), getattr(data, key)
        if was and was != current:
            raise PosexpError(f"the {what} has changed since {run.path} was trained "
                              f"(fingerprint {current[:12]}, run has {str(was)[:12]})")


def evaluate_dir(path: Path, spec: RunSpec) -> None:
    """`posexp eval`: under the run's lock, score what the spec's evaluation asks for -- a
    corpus run every point again (a new kernel or device replaces it), a task run the task
    points eval.json lacks -- with a line saying what before it scores."""
    run = Run(path)
    with run.lock():
        info = run.info()
        if info.get("status") != "completed":
            raise UsageError(f"{path} has status {info.get('status')!r}; only completed runs "
                             "can be evaluated")
        device = pick_device(spec.cfg, training=False)
        if spec.is_task_run:
            t = spec.cfg.task
            score_missing(run, spec, device, info, spec.scalings, header=(
                f"posexp eval: {path}: task {t.name}, {t.eval_count} held-out instances "
                f"(eval seed {t.eval_seed}) at length "
                f"{', '.join(map(str, spec.task_lengths))} ({device})"))
            return
        evaluate(run, spec, device, header=corpus_header(path, spec, device))


def corpus_header(path: Path, spec: RunSpec, device: torch.device) -> str:
    e = spec.cfg.eval
    stride = "" if EvalMode(e.mode) == EvalMode.nonoverlapping else (
        f", stride {e.stride}" if e.stride else ", stride half of each window")
    variants = "" if spec.scalings == (None,) else (
        f", {len(spec.scalings)} RoPE scalings ("
        + ", ".join(scaling.text(scaling.key(r)) for r in spec.scalings) + ")")
    return (f"posexp eval: {path}: {EvalMode(e.mode).value}{stride}{variants} at "
            f"{', '.join(map(str, e.lengths))} on {e.tokens:,} validation tokens spread over "
            f"the split ({device})")
