"""Scoring a trained run again, from its checkpoint: the points a config asks for that
eval.json lacks (``score_missing``, when a completed run is met again), or every point
``posexp eval`` asks for (``evaluate_dir``).  The model is loaded once for every RoPE
scaling; each scaling's points are written as soon as they are scored."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import torch

from posexp import scaling
from posexp.config import RunSpec
from posexp.config.schema import EvalMode
from posexp.errors import PosexpError, UsageError, first_line, on_signals
from posexp.run.protocols import Held, Scored, Wanted
from posexp.run.setup import build_model, pick_device
from posexp.run.training import Interrupted
from posexp.run.workloads import group, wanted_text, workload_of
from posexp.runs import CHECKPOINT, EVAL, Run, code_record, now, point_scaling, region
from posexp.sinks import Sink
from posexp.version import PROTOCOL

SKIP_ADVICE = "skipped (train.resume=false moves it aside and trains it again)"


@contextlib.contextmanager
def raising_on_signals(error_of: Callable[[int], BaseException]) -> Iterator[None]:
    """SIGINT/SIGTERM raise ``error_of(signum)`` in what runs inside, at once; the handlers
    before are put back after.  Outside the main thread signals are left alone."""

    def stop(signum: int, frame: object) -> None:
        raise error_of(signum)

    with on_signals(stop):
        yield


def signals_interrupt(step: int, advice: str) -> contextlib.AbstractContextManager[None]:
    """SIGINT/SIGTERM stop what runs inside at once (evaluation writes nothing half-scored):
    Interrupted, with ``advice`` on what to do next."""
    return raising_on_signals(lambda signum: Interrupted(signum, step, advice))


EMPTY = {"curve": [], "per_position": [], "tasks": [], "spans": {}}


def read_scored(run: Run) -> dict:
    """A run's eval.json; a damaged one is renamed out of the way (kept, never read again)
    so that the run can be scored afresh, and reads as empty."""
    try:
        return run.read_eval()
    except PosexpError as e:
        aside = run.set_aside_eval()
        print(f"posexp: warning: {e}; kept as {aside.name}, scoring the run again",
              file=sys.stderr)
        return {k: type(v)() for k, v in EMPTY.items()}


def this_code(spec: RunSpec) -> dict:
    """The code this process scores with (runs.code_record)."""
    return code_record(spec.encoding.module)


def set_aside_other_code(run: Run, scored: dict, work: Scored,
                         scalings: Iterable[dict | None]) -> tuple[dict, Held]:
    """``scored`` (eval.json) and nothing more to score, or when its points were scored by
    other code than this process's -- another posexp source, or eval.json written before
    posexp recorded its code -- empty, after copying it aside (Run.restart_eval) with one
    line that says so, and the points it held beyond those asked for with ``scalings``, by
    the overrides that score them again (Scored.held): one run's points all come from one
    code, so every point it held is scored again with this code, and none is lost to
    another suite's scoring of the same run.  Refused, before anything moves, when this code
    cannot score some of them again."""
    other = run.other_code(scored)
    if other is None:
        return scored, unfinished(run, scored, work, scalings)
    asked = set(work.requested(scalings, scored) or {})
    held, lost = work.held([p for p in work.points(scored) if work.key(p) not in asked])
    n = sum(len(items) for _, wanted in held for _, items in wanted)
    again, unbuilt = per_position_again(work, scored, held)
    held += again + unfinished(run, scored, work, scalings, say=False)  # a copy's, stopped
    lost += unbuilt
    if lost:
        raise PosexpError(
            f"{run.path}: eval.json holds {len(lost)} {work.what}(s) scored by other code "
            f"({other}) that this posexp cannot score again (the first: "
            f"{json.dumps(lost[0], default=str)[:120]}...), and scoring it now would move "
            "them aside: score it with the posexp that wrote them, or train it again "
            "(train.resume=false)")
    aside = run.restart_eval("other-code")
    records = f" (and {len(again)} per-position record(s))" if again else ""
    also = f", and the {n} others it held{records}, are" if n else " is"
    print(f"posexp: {run.path}: eval.json holds points scored by other code ({other}); it is "
          f"kept as {aside.name}, and every {work.what} asked for{also} scored again with "
          "this code", file=sys.stderr)
    return {k: type(v)() for k, v in EMPTY.items()}, held


def per_position_again(work: Scored, scored: dict, held: Held) -> tuple[Held, list[dict]]:
    """The groups that rebuild each per-position record of ``scored`` (an eval.json of
    other code) that ``held`` would not: a curve scored as trained makes its record at its
    longest length that a span holds (evaluate.windows.per_position_length), so a record at
    another length is scored again from a curve point of its length and region alone; and
    the records no point can rebuild."""
    out, lost = [], []
    for record in scored.get("per_position", []):
        length, where = record["length"], region(record)
        layout = scored.get("spans", {}).get(record.get("spans") or "", {})
        span = max(layout.get("length") or [math.inf])  # its longest span (unknown: none)
        made = {(json.dumps(o, sort_keys=True), max(fit)) for o, wanted in held
                for r, items in wanted if r is None
                and (fit := [n for n in items if isinstance(n, int) and n <= span])}
        same = [p for p in scored.get("curve", []) if p["length"] == length
                and region(p) == where and point_scaling(p) is None
                and p.get("positions") != scaling.CONSECUTIVE]
        same.sort(key=lambda p: p["mode"] != "nonoverlapping")
        groups, _ = work.held(same[:1]) if same else ([], [])
        if not groups:
            lost.append(record)
        elif (json.dumps(groups[0][0], sort_keys=True), length) not in made:
            out += groups
    return out, lost


def check_protocol(run: Run, info: dict, doing: str) -> None:
    """A UsageError, in one line, when the run was trained under another protocol than this
    code's (version.PROTOCOL): ``doing`` it would leave one run with the numbers of two."""
    was = info.get("protocol") or 0
    if was != PROTOCOL:
        raise UsageError(f"{run.path} was trained under protocol {was}, and this posexp "
                         f"computes protocol {PROTOCOL}; {doing} would mix the two: add "
                         "train.resume=false to move it aside and train it afresh, or use "
                         f"the posexp it was trained with (protocol {was})")


def check_run(run: Run, info: dict, spec: RunSpec) -> None:
    """config.yaml still holds the identity the run started with, and an encoding module of
    the user's is the source it was trained with (Run.check_identity, Run.check_code)."""
    run.check_identity(info)
    run.check_code(info, spec.encoding.module)


def requested_points(run: Run, work: Scored, scalings: Iterable[dict | None]) -> list[dict]:
    """The points of eval.json that the config asks for with ``scalings`` -- with several,
    the run's points as trained too: the row their method x length table divides by."""
    scalings = tuple(scalings)
    if len(scalings) > 1 and None not in scalings:
        scalings = (None, *scalings)
    scored = run.read_eval()
    wanted = work.requested(scalings, scored) or {}
    return [p for p in work.points(scored) if work.key(p) in wanted]


def requested_table(run: Run, work: Scored, scalings: Iterable[dict | None],
                    tokenizer: str | None) -> str:
    """The table of the points of eval.json the config asks for (requested_points)."""
    return work.table(requested_points(run, work, scalings), tokenizer)


def unfinished(run: Run, scored: dict, work: Scored, scalings: Iterable[dict | None],
               say: bool = True) -> Held:
    """The points the newest copy of an eval.json of other code (set_aside_other_code's)
    held that eval.json lacks and is not asked for -- a scoring again stopped before it had
    scored them all -- by the overrides that score them again: scored next, so none is left
    in the copy alone."""
    copies = sorted(run.path.glob(f"{EVAL}.other-code-*"))
    try:
        old = json.loads(copies[-1].read_text()) if copies else None
    except (OSError, ValueError):
        old = None
    if not isinstance(old, dict):
        return []
    have = {work.key(p) for p in work.points(scored)} | set(work.requested(scalings, scored)
                                                            or {})
    try:
        held, _ = work.held([p for p in work.points({**EMPTY, **old})
                             if work.key(p) not in have])
    except (KeyError, TypeError):  # not a copy this code reads: left as it is
        return []
    if held and say:
        n = sum(len(items) for _, wanted in held for _, items in wanted)
        print(f"posexp: {run.path}: {copies[-1].name} holds {n} {work.what}(s) eval.json lacks "
              "(its scoring again was stopped); they are scored with this code too",
              file=sys.stderr)
    return held


def points_to_score(run: Run, work: Scored, scalings: Iterable[dict | None],
                    only_missing: bool = True) -> tuple[Wanted, Held]:
    """What to score with ``scalings``: the points eval.json lacks, or with ``only_missing``
    false every one asked for; and after an eval.json of other code is set aside, the points
    it held beside them, by the overrides that score them again (set_aside_other_code)."""
    scored, held = set_aside_other_code(run, read_scored(run), work, scalings)
    wanted = missing_points(work, scalings, scored) if only_missing else work.every(scalings)
    return wanted, held


def score_timed(run: Run, score: Callable[[], object],
                stop: contextlib.AbstractContextManager[None]) -> float:
    """Call ``score`` under ``stop`` (what SIGINT and SIGTERM raise inside), then record in
    run.json when it ended and how many seconds it took; the seconds."""
    with stop:
        t0 = time.perf_counter()
        score()
        seconds = round(time.perf_counter() - t0, 2)
    run.update(last_eval_at=now(), last_eval_seconds=seconds)
    return seconds


def score_missing(run: Run, spec: RunSpec, device: torch.device, info: dict,
                  scalings: tuple[dict | None, ...] | None = None,
                  header: str | None = None) -> str:
    """A completed run of this identity: score only the points the config asks for (with
    ``scalings``, default as trained and eval.rope_scaling's) that eval.json lacks, saying
    which; "skipped" when there are none, else "scored".  ``header`` (posexp eval's) is
    printed before the scoring starts."""
    work = workload_of(spec)
    scalings = spec.run_scalings if scalings is None else scalings
    if run.is_record(info):
        refuse_record(run, spec, work, scalings)
    scored = read_scored(run)
    if not missing_points(work, scalings, scored) and (
            run.is_record(info) or run.other_code(scored) is not None
            or not unfinished(run, scored, work, scalings, say=False)):
        print(f"posexp: {run.path}: already completed, and eval.json holds every {work.what} "
              f"asked for; {'nothing to score' if header else SKIP_ADVICE}", file=sys.stderr)
        print(requested_table(run, work, scalings, (info.get("corpus") or {}).get("tokenizer")))
        return "skipped"
    check_protocol(run, info, "scoring its missing points")
    evaluate(run, spec, device, header=header, scalings=scalings, only_missing=True)
    return "scored"


def refuse_record(run: Run, spec: RunSpec, work: Scored,
                  scalings: tuple[dict | None, ...]) -> None:
    """A run record (no checkpoint) is skipped like any completed run when eval.json holds
    every point asked for; else one line names the points it lacks and the command that
    trains its weights again.  Its eval.json is never set aside: the record would be lost."""
    try:
        scored = run.read_eval()
    except PosexpError as e:
        raise PosexpError(f"{e}; {run.path} is a run record without its checkpoint, so it "
                          "cannot be scored again: restore its eval.json") from None
    wanted = missing_points(work, scalings, scored)
    if wanted:
        mode = "" if spec.is_task_run else f"{EvalMode(spec.eval.mode).value} "
        run.require_checkpoint(
            f"scoring the {sum(len(items) for _, items in wanted)} {mode}{work.what}(s) "
            f"{wanted_text(wanted, work.item_text)} that eval.json lacks")


def missing_points(work: Scored, scalings: Iterable[dict | None], scored: dict) -> Wanted:
    """The points asked for with ``scalings`` that eval.json (``scored``) lacks."""
    asked = work.requested(scalings, scored)
    if asked is None:  # no layout of eval.tokens recorded yet: score everything asked for
        return work.every(scalings)
    have = {work.key(p) for p in work.points(scored)}
    return group(want for key, want in asked.items() if key not in have)


def evaluate(run: Run, spec: RunSpec, device: torch.device, header: str | None = None,
             scalings: tuple[dict | None, ...] | None = None,
             only_missing: bool = False) -> None:
    """Score a completed run's checkpoint -- every point the config asks for with
    ``scalings`` (default eval.rope_scaling's), or with ``only_missing`` those eval.json
    lacks, saying which -- and merge the points into its eval.json; no training.  Nothing
    of the run is changed before its data, checkpoint and weights have passed their checks;
    then an eval.json of other code is set aside.  ``header`` is printed once the
    checkpoint is loaded."""
    work = workload_of(spec)
    scalings = spec.scalings if scalings is None else scalings
    info = run.info()
    data = work.load()
    check_data_unchanged(run, info, data, spec.is_task_run)
    state = run.load_checkpoint()  # refused unless it holds the weights run.json names
    model = build_model(spec, data.vocab_size)
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as e:
        raise PosexpError(f"{run.path / CHECKPOINT} does not match config.yaml: "
                          f"{first_line(e)}") from None
    model.to(device)
    wanted, held = points_to_score(run, work, scalings, only_missing)
    if only_missing:
        print(f"posexp: {run.path}: already completed; scoring the "
              f"{sum(len(items) for _, items in wanted)} missing {work.what}(s) "
              f"{wanted_text(wanted, work.item_text)} from its checkpoint",
              file=sys.stderr)
    if header:
        print(header, file=sys.stderr)

    def score() -> None:
        work.score(model, data, run, Sink(), device, wanted)
        for overrides, again in held:  # an eval.json of other code's points, this code's
            workload_of(spec.scored_as(overrides)).score(model, data, run, Sink(), device,
                                                          again)

    score_timed(run, score,
                signals_interrupt(info.get("steps", 0), "during evaluation; the points scored "
                                  "so far are in eval.json; run the same command again to "
                                  "score the rest"))
    print(requested_table(run, work, scalings, data.tokenizer))


def check_data_unchanged(run: Run, info: dict, data, tasks: bool) -> None:
    """The corpus (or task) and tokenizer (or vocabulary) are those the run was trained on,
    and a corpus's token streams as long as they were: the same text and tokenizer give
    another stream where posexp's tokenizing changed (a long document encoded whole since
    2026-12-07), and the run's numbers belong to the stream it read."""
    trained_on = info.get("corpus") if isinstance(info.get("corpus"), dict) else {}
    for key, what in (("fingerprint", "task" if tasks else "corpus"),
                      ("tokenizer_fingerprint", "vocabulary" if tasks else "tokenizer")):
        was, current = trained_on.get(key), getattr(data, key)
        if was and was != current:
            raise PosexpError(f"the {what} has changed since {run.path} was trained "
                              f"(fingerprint {current[:12]}, run has {str(was)[:12]})")
    if tasks:
        return
    now = data.describe()
    for key in ("train_tokens", "val_tokens"):
        if trained_on.get(key) is not None and trained_on[key] != now[key]:
            raise PosexpError(f"{run.path} was trained on another token stream of this corpus "
                              f"and tokenizer ({key.split('_')[0]}: {now[key]:,} tokens now, "
                              f"{trained_on[key]:,} then; posexp encodes a document longer "
                              "than a block whole since 2026-12-07): train it again, "
                              "train.resume=false moves it aside")


def evaluate_dir(path: Path, spec: RunSpec) -> None:
    """`posexp eval`: under the run's lock, score what the spec's evaluation asks for -- a
    corpus run every point again (a new kernel or device replaces it), a task run the task
    points eval.json lacks -- with a line saying what before it scores."""
    run = Run(path)
    this_code(spec)  # source hashed now, while the files are those this process loaded
    with run.lock():
        info = run.info()
        if info.get("status") != "completed":
            raise UsageError(f"{path} has status {info.get('status')!r}; only completed runs "
                             "can be evaluated")
        check_run(run, info, spec)
        check_protocol(run, info, "scoring it again")
        device = pick_device(spec, training=False)
        if spec.is_task_run:
            t = spec.task_settings
            score_missing(run, spec, device, info, spec.scalings, header=(
                f"posexp eval: {path}: task {t.name}, {t.eval_count} held-out instances "
                f"(eval seed {t.eval_seed}) at length "
                f"{', '.join(map(str, spec.task_lengths))} ({device})"))
            return
        evaluate(run, spec, device, header=corpus_header(path, spec, device))


def corpus_header(path: Path, spec: RunSpec, device: torch.device) -> str:
    e = spec.eval
    stride = "" if EvalMode(e.mode) != EvalMode.sliding else (
        f", stride {e.stride}" if e.stride else ", stride half of each window")
    n = len(spec.scalings)
    variants = "" if spec.scalings == (None,) else (
        f", {n} RoPE scaling{'s' * (n != 1)} ("
        + ", ".join(scaling.text(scaling.key(r)) for r in spec.scalings) + ")")
    text = (f"whole validation documents holding {e.tokens:,} tokens or more, each alone "
            "(lm-evaluation-harness's rolling windows)" if EvalMode(e.mode) == EvalMode.lm_eval
            else f"{e.tokens:,} validation tokens spread over the split")
    return (f"posexp eval: {path}: {EvalMode(e.mode).value}{stride}{variants} at "
            f"{', '.join(map(str, e.lengths))} on {text} ({device})")
