"""One run end to end: identity, lock, skip / resume / re-score / refuse, train, evaluate,
record.  `posexp train`, sweep jobs, `posexp resume`, `posexp finetune`, `posexp reproduce`
and the public API all go through ``run``.

What happens to the directory results_dir/experiment/run_name (with train.resume=true, the
default), under its lock:

| what is there                            | what happens                                   |
|------------------------------------------|------------------------------------------------|
| nothing                                  | train, then evaluate                           |
| same identity, completed                 | nothing, or score the evaluation points the    |
|                                          | config asks for that eval.json lacks           |
| same identity, completed, no checkpoint  | nothing; points eval.json lacks are refused,   |
| (a run record, docs/runs.md)             | naming them and the command that retrains it   |
| same identity, unfinished, a checkpoint  | resume from the checkpoint                     |
| same identity, unfinished, no checkpoint | train (nothing of the attempt was kept)        |
| another identity, any status             | refuse (exit 2), naming the keys that differ   |

With train.resume=false whatever is there is moved aside to <experiment>/.replaced/ (never
deleted) and the run starts afresh.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator

import torch

from posexp.config import RunSpec, identity_diff
from posexp.distributed import World, barrier, join, leave
from posexp.errors import PosexpError, Stopped, UsageError
from posexp.run.evaluation import (
    check_data_unchanged,
    check_protocol,
    score_missing,
    signals_interrupt,
    this_code,
)
from posexp.run.finetune import parent_weights
from posexp.run.protocols import Workload
from posexp.run.setup import build_model, check_numerics, pick_device
from posexp.run.training import Diverged, Interrupted, check_checkpoint, fit, weights_hash
from posexp.run.workloads import workload_of
from posexp.runs import CHECKPOINT, RUN, Run, code_text, code_version, now, versions
from posexp.sinks import Sink, open_sink


def run(spec: RunSpec, progress: bool = True, group: str | None = None) -> str:
    """One posexp run, in spec.path: "completed" when it trained (or resumed) and was
    evaluated, "skipped" when a completed run of this identity already held every point
    asked for, "scored" when only missing evaluation points were computed.  ``progress``
    shows a progress bar on a terminal; ``group`` names the W&B group."""
    device = pick_device(spec)
    check_numerics(spec, device)
    this_code(spec)  # source hashed now, while the files are those this process loaded
    # torchrun: rank 0 holds the lock and writes; RANK is set before the process group exists
    main = int(os.environ.get("RANK", "0")) == 0
    with Run(spec.path).lock() if main else contextlib.nullcontext():
        world = join(device.type)
        try:
            return _run_locked(spec, device, world, progress, group)
        finally:
            # every process stays until rank 0 has evaluated: a process that tears its gloo
            # connections down while another still holds them aborts (SIGABRT) at exit
            barrier(world)
            leave(world)


def _run_locked(spec: RunSpec, device: torch.device, world: World, progress: bool,
                group: str | None) -> str:
    run, resume = Run(spec.path), spec.train.resume
    previous = existing(run, spec) if resume else None
    barrier(world)  # every process has read the directory before rank 0 changes it
    if not resume and (spec.path / RUN).exists() and world.main:
        aside = run.move_aside()
        print(f"posexp: {spec.path}: train.resume=false, the run there was moved aside to "
              f"{aside}", file=sys.stderr)
    if previous is not None and previous["status"] == "completed":
        return score_missing(run, spec, device, previous) if world.main else "skipped"
    return train_and_evaluate(spec, run, previous is not None, device, world, progress, group)


def previous_of(run: Run, identity: dict, repair: str, elsewhere: str) -> dict | None:
    """run.json of the run of ``identity`` already in ``run``'s directory, or None when there
    is none.  A run posexp cannot read is refused with ``repair`` (how to clear it), one of
    another identity with the keys that differ and ``elsewhere`` (where this run can go):
    posexp never overwrites a run that is not this one.  Trained and pretrained runs alike."""
    try:
        previous = run.previous()
    except PosexpError as e:
        raise PosexpError(f"{e}; posexp will not overwrite it: {repair}") from None
    if previous is None:
        return None
    info, old = previous
    differ = identity_diff(old, identity)
    if differ:
        shown = "; ".join(differ[:4]) + (f"; and {len(differ) - 4} more"
                                         if len(differ) > 4 else "")
        raise UsageError(f"{run.path} holds a run of another identity ({shown}); {elsewhere}")
    return info


def existing(run: Run, spec: RunSpec) -> dict | None:
    """run.json of the run already in ``run``'s directory (None: there is none), after
    refusing one of another identity, one too damaged to tell, one whose config.yaml was
    edited since it started, or one trained with another source of its encoding module."""
    info = previous_of(
        run, dict(spec.identity), "repair it, or add train.resume=false to move it aside",
        "choose another run_name= or experiment=, or add train.resume=false to move that run "
        f"aside to {run.path.parent / '.replaced'}/ and train this one")
    if info is None:
        return None
    run.check_code(info, spec.encoding.module)
    if info["status"] != "completed":
        check_protocol(run, info, "resuming it")
    return info


def _starting_state(spec: RunSpec, run: Run, same: bool, model, vocab: int,
                    device: torch.device, world: World):
    """(model, checkpoint to resume from or None): an unfinished attempt of this identity
    resumes from its checkpoint; one that cannot is moved aside and the run starts afresh."""
    if not (same and (spec.path / CHECKPOINT).exists()):
        return model, None
    try:
        state = run.load_checkpoint()
        check_checkpoint(state)
        model.load_state_dict(state["model"])
        return model, state
    except (PosexpError, KeyError, RuntimeError) as e:
        if world.main:
            aside = run.move_aside()
            print(f"posexp: warning: {spec.path}: cannot resume ({str(e).splitlines()[0]}); "
                  f"the attempt was moved aside to {aside}, starting afresh", file=sys.stderr)
        torch.manual_seed(spec.seed)
        return build_model(spec, vocab).to(device), None


def _open_run(spec: RunSpec, run: Run, state: dict | None, model, data, device: torch.device,
              work: Workload, world: World) -> Run:
    """run.json says running, with what this attempt is; a line says so on stderr."""
    cfg = spec.cfg
    if state is not None:
        check_data_unchanged(run, run.info(), data, spec.is_task_run)
        was, code = run.info().get("code"), this_code(spec)
        if isinstance(was, dict) and was != code:
            print(f"posexp: warning: {spec.path}: posexp's source has changed since the run "
                  f"started ({code_text(was)} then, {code_text(code)} now); it resumes "
                  "with this code, and run.json records both (code, resumed_code)",
                  file=sys.stderr)
        run.resume(state["step"], cfg)
        print(f"posexp: {spec.path}: resuming from step {state['step']} "
              f"({state['tokens']:,} tokens)", file=sys.stderr)
    else:
        run = Run.create(spec.path, cfg)
    run.update(name=cfg.run_name, experiment=cfg.experiment, encoding=cfg.encoding.name,
               seq_len=cfg.train.seq_len, seed=cfg.seed, batch_size=cfg.train.batch_size,
               device=str(device), n_params=model.n_params(), corpus=data.describe(),
               versions=versions(),
               model={k: cfg.model[k] for k in ("d_model", "n_layer", "n_head")},
               code_version=code_version(),
               **({"parent": cfg.parent.run} if spec.fine_tune else {}))
    print(f"posexp: {cfg.encoding.name}, {model.n_params() / 1e6:.2f}M parameters, "
          f"{work.describe(data)} on {device}"
          + (f" x {world.size} processes" if world.size > 1 else "")
          + f" -> {spec.path}", file=sys.stderr)
    return run


def train_and_evaluate(spec: RunSpec, run: Run, same: bool, device: torch.device,
                       world: World, progress: bool, group: str | None) -> str:
    """Train (afresh, or from the checkpoint of an unfinished run of this identity), then
    evaluate; run.json ends completed, failed, diverged or interrupted."""
    cfg = spec.cfg
    if cfg.train.batch_size % world.size:
        raise UsageError(f"train.batch_size ({cfg.train.batch_size}) must be divisible by the "
                         f"number of processes ({world.size})")
    if world.size > 1 and device.type == "cuda":
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
    work = workload_of(spec)
    data = work.load()
    work.check(data)
    torch.manual_seed(cfg.seed)
    model, state = _starting_state(spec, run, same, build_model(spec, data.vocab_size).to(device),
                                   data.vocab_size, device, world)
    if state is None and spec.fine_tune:
        model.load_state_dict(parent_weights(spec))
    if not world.main:
        fit(model, work, data, spec, None, Sink(), device, False, state, world)
        return "completed"
    run = _open_run(spec, run, state, model, data, device, work, world)
    sink = open_sink(cfg, spec.path, group)
    # the outer handler covers the moments between the training loop's own (which stops
    # after a step, checkpointed) and evaluation's: no signal finds the default handler,
    # which would end the process with run.json still saying running
    with ending(run, sink) as ended, signals_interrupt(
            state["step"] if state else 0, "run the same command again to continue"):
        stats = fit(model, work, data, spec, run, sink, device, progress, state, world)
        run.update(**stats, weights_sha256=weights_hash(model))
        with signals_interrupt(stats["steps"], "during evaluation; training is complete "
                               "and checkpointed; run the same command again to finish "
                               "the evaluation"):
            run.update(eval_started_at=now())
            t0 = time.perf_counter()
            points = work.score(model, data, run, sink, device,
                                work.every(spec.run_scalings), progress)
            ended["eval_seconds"] = round(time.perf_counter() - t0, 2)
    print(work.table(points, data.tokenizer))
    return "completed"


@contextlib.contextmanager
def ending(run: Run, sink: Sink | None = None, completed: bool = False) -> Iterator[dict]:
    """Around the work that ends a run (training and scoring, or a pretrained model's
    scoring): run.json reads completed after it, with the fields the body puts in the dict
    it is handed; diverged, interrupted (a signal, ^C) or failed, with the reason, when it
    raises.  A run ``completed`` before stays completed when stopped or failed: the points
    it scored so far are kept, its training is not undone."""
    fields: dict = {}
    try:
        yield fields
    except Diverged as e:
        end(run, sink, "diverged", str(e), **e.fields)
        raise
    except (Interrupted, Stopped, KeyboardInterrupt) as e:
        if not completed:
            end(run, sink, "interrupted", str(e) or "stopped by the user")
        raise
    except BaseException as e:
        if not completed:
            end(run, sink, "failed", f"{type(e).__name__}: {e}")
        raise
    if not completed:
        end(run, sink, "completed", **fields)


def end(run: Run, sink: Sink | None, status: str, reason: str | None = None,
        **fields) -> None:
    """Record how the run ended; on a full disk even run.json may not be writable, and the
    error that got us here matters more than this one."""
    try:
        run.finish(status, reason, **fields)
    except PosexpError as e:
        print(f"posexp: warning: {e}", file=sys.stderr)
    if sink is not None:
        sink.finish(status)
