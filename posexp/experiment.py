"""One run end to end: identity, lock, skip / resume / re-score / refuse, train, evaluate,
record.  `posexp train`, sweep jobs, `posexp resume`, `posexp finetune`, `posexp reproduce` and
`posexp eval` all go through here; train.py keeps only the training loop.  A fine-tune is a
run like any other whose first attempt starts from its parent's weights (parent_record,
parent_weights); evaluation scores the run as trained and with the RoPE scalings
eval.rope_scaling asks for, the model loaded once.  A task run (data=task) reads no corpus:
it trains on generated instances and is scored by evaluate_tasks, its task points in
eval.json where a corpus run has its curve.

What happens to the directory results_dir/experiment/run_name (with train.resume=true, the
default), under its lock:

| what is there                            | what happens                                   |
|------------------------------------------|------------------------------------------------|
| nothing                                  | train, then evaluate                           |
| same identity, completed                 | nothing, or score the evaluation points the    |
|                                          | config asks for that eval.json lacks           |
| same identity, unfinished, a checkpoint  | resume from the checkpoint                     |
| same identity, unfinished, no checkpoint | train (nothing of the attempt was kept)        |
| another identity, any status             | refuse (exit 2), naming the keys that differ   |

With train.resume=false whatever is there is moved aside to <experiment>/.replaced/ (never
deleted) and the run starts afresh.  A run's identity is what determines its weights
(config.identity); evaluation settings, device, kernel, logging and cache location are not.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from posexp import config as C
from posexp.data import Corpus, load_corpus
from posexp.data.tasks import TaskData
from posexp.distributed import World, barrier, join, leave
from posexp.encodings.rope_scaling import RopeScaling
from posexp.errors import PosexpError, UsageError
from posexp.evaluate import check_val_size, count_windows, extrapolation_curve, scored_region
from posexp.evaluate_tasks import task_curve
from posexp.model import GPT
from posexp.runs import (
    CHECKPOINT,
    CONFIG,
    RUN,
    Run,
    code_version,
    now,
    point_key,
    point_scaling,
    scaling_key,
    scaling_text,
    task_point_key,
    versions,
)
from posexp.sinks import Sink, open_sink
from posexp.train import (
    Diverged,
    Interrupted,
    build_model,
    check_checkpoint,
    fit,
    pick_device,
    state_hash,
    weights_hash,
)

# What to score: (RoPE scaling record, or None for the model as trained; lengths)
Wanted = list[tuple[dict | None, list[int]]]
# What to score of a task run: (RoPE scaling record or None; (length, depth) pairs)
TaskWanted = list[tuple[dict | None, list[tuple[int, float | None]]]]


def run_dir(cfg: DictConfig) -> Path:
    return Path(cfg.results_dir) / cfg.experiment / cfg.run_name


def run(cfg: DictConfig, progress: bool = True, group: str | None = None) -> str:
    """One posexp run, in results_dir/experiment/run_name: "completed" when it trained (or
    resumed) and was evaluated, "skipped" when a completed run of this identity already held
    every point asked for, "scored" when only missing evaluation points were computed.
    ``progress`` shows a progress bar on a terminal; ``group`` names the W&B group."""
    C.check(cfg)
    cfg = C.resolve(cfg)
    path = run_dir(cfg)
    device = pick_device(cfg)
    # torchrun: rank 0 holds the lock and writes; RANK is set before the process group exists
    main = int(os.environ.get("RANK", "0")) == 0
    with Run(path).lock() if main else contextlib.nullcontext():
        world = join(device.type)
        try:
            return _run_locked(cfg, path, device, world, progress, group)
        finally:
            # every process stays until rank 0 has evaluated: a process that tears its gloo
            # connections down while another still holds them aborts (SIGABRT) at exit
            barrier(world)
            leave(world)


def _run_locked(cfg: DictConfig, path: Path, device: torch.device, world: World,
                progress: bool, group: str | None) -> str:
    run = Run(path)
    previous = existing(run, cfg) if cfg.train.resume else None
    barrier(world)  # every process has read the directory before rank 0 changes it
    if not cfg.train.resume and (path / RUN).exists() and world.main:
        aside = run.move_aside()
        print(f"posexp: {path}: train.resume=false, the run there was moved aside to {aside}",
              file=sys.stderr)
    if previous is not None and previous["status"] == "completed":
        return score_missing(run, cfg, device, previous) if world.main else "skipped"
    return train_and_evaluate(cfg, run, previous is not None, device, world, progress, group)


def existing(run: Run, cfg: DictConfig) -> dict | None:
    """run.json of the run already in ``run``'s directory (None: there is none), after
    refusing one of another identity or one too damaged to tell."""
    try:
        previous = run.previous()
    except PosexpError as e:
        raise PosexpError(f"{e}; posexp will not overwrite it: repair it, or add "
                          "train.resume=false to move it aside") from None
    if previous is None:
        return None
    info, old_identity = previous
    differ = C.identity_diff(old_identity, C.identity(cfg))
    if differ:
        shown = "; ".join(differ[:4]) + (f"; and {len(differ) - 4} more"
                                         if len(differ) > 4 else "")
        raise UsageError(f"{run.path} holds a run of another identity ({shown}); choose "
                         "another run_name= or experiment=, or add train.resume=false to move "
                         f"that run aside to {run.path.parent / '.replaced'}/ and train this one")
    return info


def load_data(cfg: DictConfig) -> Corpus | TaskData:
    """The corpus of cfg.data, or a task run's TaskData: a task run reads no corpus."""
    if C.is_task_run(cfg):
        return TaskData(C.task_of(cfg), C.task_max_length(cfg))
    return load_corpus(cfg.data)


def run_scalings(cfg: DictConfig) -> list[dict | None]:
    """The RoPE scalings a run (train, sweep, resume, finetune) scores: as trained, always,
    and those eval.rope_scaling asks for."""
    asked = C.eval_scalings(cfg)
    return asked if None in asked else [None, *asked]


def score_missing(run: Run, cfg: DictConfig, device: torch.device, info: dict) -> str:
    """A completed run of this identity: score only the points cfg.eval asks for that
    eval.json lacks (none: "skipped")."""
    if C.is_task_run(cfg):
        return score_missing_tasks(run, cfg, device, run_scalings(cfg))
    have = scored_points(run)
    scalings = run_scalings(cfg)
    val_tokens = info.get("corpus", {}).get("val_tokens")
    if isinstance(val_tokens, int):
        missing: Wanted = []
        for record in scalings:
            lengths = [L for (_, L), key in requested_points(
                cfg, val_tokens, [record]).items() if key not in have]
            if lengths:
                missing.append((record, lengths))
    else:  # a run.json without the corpus size: score everything asked for
        missing = [(record, C.eval_lengths(cfg)) for record in scalings]
    if not missing:
        print(f"posexp: {run.path}: already completed, and eval.json holds every point asked "
              "for; skipped (train.resume=false moves it aside and trains it again)",
              file=sys.stderr)
        print(format_curve(requested_curve(run, cfg, val_tokens, scalings), cfg.train.seq_len,
                           str(run.path)))
        return "skipped"
    count = sum(len(lengths) for _, lengths in missing)
    where = f"at length {', '.join(map(str, missing[0][1]))}" if scalings == [None] else \
        "(" + "; ".join(f"{scaling_text(scaling_key(record))} at {', '.join(map(str, lengths))}"
                        for record, lengths in missing) + ")"
    print(f"posexp: {run.path}: already completed; scoring the {count} missing "
          f"point(s) {where} from its checkpoint", file=sys.stderr)
    evaluate(run, cfg, device, missing, scalings=scalings)
    return "scored"


def read_scored(run: Run) -> dict:
    """A run's eval.json; a damaged one is renamed out of the way (kept, never read again)
    so that the run can be scored afresh, and reads as empty."""
    try:
        return run.read_eval()
    except PosexpError as e:
        aside = run.set_aside_eval()
        print(f"posexp: warning: {e}; kept as {aside.name}, scoring the run again",
              file=sys.stderr)
        return {"curve": [], "per_position": [], "tasks": []}


def scored_points(run: Run) -> set[tuple]:
    """The keys of the curve points in a run's eval.json (read_scored)."""
    return {point_key(p) for p in read_scored(run)["curve"]}


def score_missing_tasks(run: Run, cfg: DictConfig, device: torch.device,
                        scalings: list[dict | None], header: str | None = None) -> str:
    """A completed task run: score only the task points cfg asks for (with ``scalings``)
    that eval.json lacks, saying which (none: "skipped").  ``header`` (posexp eval's) is
    printed before the scoring starts."""
    have = {task_point_key(p) for p in read_scored(run)["tasks"]}
    missing = [want for key, want in requested_tasks(cfg, scalings).items() if key not in have]
    n_max = C.task_max_length(cfg)
    if not missing:
        print(f"posexp: {run.path}: already completed, and eval.json holds every task point "
              "asked for; " + ("nothing to score" if header else "skipped (train.resume=false "
                               "moves it aside and trains it again)"), file=sys.stderr)
        print(format_tasks(requested_task_points(run, cfg, scalings), n_max, str(run.path)))
        return "skipped"
    wanted = group_wanted(missing)
    print(f"posexp: {run.path}: completed; scoring the {len(missing)} task point(s) that "
          f"eval.json lacks ({wanted_text(wanted)}) from its checkpoint", file=sys.stderr)
    evaluate(run, cfg, device, wanted, header=header, scalings=scalings)
    return "scored"


def requested_tasks(cfg: DictConfig,
                    scalings: list[dict | None]) -> dict[tuple, tuple[dict | None, int,
                                                                      float | None]]:
    """task_point_key -> (scaling record, length, depth) of each task point a task run's
    config asks for: every length of eval.task_lengths (and for passkey every depth of
    task.depths) with each of ``scalings``, on task.eval_count instances of task.eval_seed."""
    task, t = C.task_of(cfg), cfg.task
    depths = [float(d) for d in t.depths] if task.takes_depth else [None]
    return {task_point_key({"task": task.name, "length": length, "depth": depth,
                            "count": t.eval_count, "eval_seed": t.eval_seed,
                            "rope_scaling": record}): (record, length, depth)
            for record in scalings for length in C.task_lengths(cfg) for depth in depths}


def group_wanted(wants: Iterable[tuple[dict | None, int, float | None]]) -> TaskWanted:
    """(record, length, depth) triples as TaskWanted: the pairs of each scaling, in order."""
    grouped: dict[tuple, tuple[dict | None, list]] = {}
    for record, length, depth in wants:
        grouped.setdefault(scaling_key(record), (record, []))[1].append((length, depth))
    return list(grouped.values())


def wanted_text(wanted: TaskWanted) -> str:
    """'length 32, 64' or 'length 64 at depth 0.5, ...', per scaling where there are any."""
    parts = []
    for record, pairs in wanted:
        where = ", ".join(str(n) if d is None else f"{n} at depth {d:g}" for n, d in pairs)
        parts.append(f"length {where}" if record is None and len(wanted) == 1 else
                     f"{scaling_text(scaling_key(record))} at length {where}")
    return "; ".join(parts)


def requested_task_points(run: Run, cfg: DictConfig, scalings: list[dict | None]) -> list[dict]:
    wanted = set(requested_tasks(cfg, scalings))
    return [p for p in run.read_eval()["tasks"] if task_point_key(p) in wanted]


def requested_points(cfg: DictConfig, val_tokens: int,
                     scalings: list[dict | None]) -> dict[tuple, tuple]:
    """(scaling key, length) -> the eval.json key of the point cfg.eval asks for at that
    length with each of ``scalings`` (records, None: as trained)."""
    e = cfg.eval
    first, n = scored_region(val_tokens, e.tokens)
    mode = C.EvalMode(e.mode).value
    return {(scaling_key(record), L): point_key({
        "mode": mode, "length": L, "first_token": first, "tokens": n, "rope_scaling": record,
        "stride": L if mode == "nonoverlapping" else e.stride or max(1, L // 2)})
        for record in scalings for L in C.eval_lengths(cfg)}


def requested_curve(run: Run, cfg: DictConfig, val_tokens: int,
                    scalings: list[dict | None]) -> list[dict]:
    wanted = set(requested_points(cfg, val_tokens, scalings).values())
    return [p for p in run.read_eval()["curve"] if point_key(p) in wanted]


def evaluate(run: Run, cfg: DictConfig, device: torch.device,
             wanted: Wanted | TaskWanted | None = None, header: str | None = None,
             scalings: list[dict | None] | None = None) -> None:
    """Score a completed run's checkpoint (``wanted``, default: every length of cfg.eval
    -- a task run's every task point -- with every scaling of ``scalings``, default
    eval.rope_scaling's) and merge the points into its eval.json; no training.  The model
    is loaded once for every scaling.  ``header`` is printed once the checkpoint is loaded,
    before the scoring starts."""
    scalings = scalings or C.eval_scalings(cfg)
    info = run.info()
    corpus = load_data(cfg)
    tasks = isinstance(corpus, TaskData)
    trained_on = info.get("corpus") if isinstance(info.get("corpus"), dict) else {}
    for key, what in (("fingerprint", "task" if tasks else "corpus"),
                      ("tokenizer_fingerprint", "vocabulary" if tasks else "tokenizer")):
        was, current = trained_on.get(key), getattr(corpus, key)
        if was and was != current:
            raise PosexpError(f"the {what} has changed since {run.path} was trained "
                              f"(fingerprint {current[:12]}, run has {str(was)[:12]})")
    state = run.load_checkpoint()
    scored_points(run)  # a damaged eval.json is set aside before the new points are merged
    model = build_model(cfg, corpus.vocab_size)
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as e:
        raise PosexpError(f"{run.path / CHECKPOINT} does not match config.yaml: "
                          f"{str(e).splitlines()[0]}") from None
    model.to(device)
    if header:
        print(header, file=sys.stderr)
    with signals_interrupt(info.get("steps", 0), "during evaluation; the points scored so "
                           "far are in eval.json; run the same command again to score the "
                           "rest"):
        if tasks:
            _, seconds = score_tasks(model, corpus, cfg, run, device, wanted or group_wanted(
                requested_tasks(cfg, scalings).values()))
        else:
            _, seconds = score(model, corpus, cfg, run, Sink(), device, wanted or [
                (record, C.eval_lengths(cfg)) for record in scalings])
    run.update(last_eval_at=now(), last_eval_seconds=round(seconds, 2))
    if tasks:
        print(format_tasks(requested_task_points(run, cfg, scalings), corpus.n_max,
                           str(run.path)))
    else:
        print(format_curve(requested_curve(run, cfg, len(corpus.val), scalings),
                           cfg.train.seq_len, str(run.path), per_byte=corpus.tokenizer != "byte"))


def evaluate_dir(path: Path, cfg: DictConfig) -> None:
    """`posexp eval`: score every point cfg.eval asks for (again, if eval.json has it: a new
    kernel or device replaces it), under the run's lock; a line says what before it scores."""
    run = Run(path)
    with run.lock():
        info = run.info()
        if info.get("status") != "completed":
            raise UsageError(f"{path} has status {info.get('status')!r}; only completed runs "
                             "can be evaluated")
        cfg = C.resolve(cfg)
        device = pick_device(cfg, training=False)
        if C.is_task_run(cfg):
            scalings = C.eval_scalings(cfg)
            t = cfg.task
            score_missing_tasks(run, cfg, device, scalings, header=(
                f"posexp eval: {path}: task {t.name}, {t.eval_count} held-out instances "
                f"(eval seed {t.eval_seed}) at length {', '.join(map(str, C.task_lengths(cfg)))}"
                f" ({device})"))
            return
        e = cfg.eval
        stride = "" if C.EvalMode(e.mode) == C.EvalMode.nonoverlapping else (
            f", stride {e.stride}" if e.stride else ", stride half of each window")
        scalings = C.eval_scalings(cfg)
        variants = "" if scalings == [None] else (
            f", {len(scalings)} RoPE scalings ("
            + ", ".join(scaling_text(scaling_key(r)) for r in scalings) + ")")
        evaluate(run, cfg, device, header=(
            f"posexp eval: {path}: {C.EvalMode(e.mode).value}{stride}{variants} at "
            f"{', '.join(map(str, e.lengths))} on the last {e.tokens:,} validation tokens "
            f"({device})"))


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


def score(model: GPT, corpus: Corpus, cfg: DictConfig, run: Run, sink: Sink,
          device: torch.device, wanted: Wanted | None = None,
          progress: bool = True) -> tuple[list[dict], float]:
    """The extrapolation curve of every RoPE scaling and lengths of ``wanted`` (default: as
    trained and every scaling eval.rope_scaling asks for, at cfg.eval's lengths), each
    scaling's points written to eval.json as soon as they are scored, and all of them
    returned.  The scalings change only cos and sin: the model is put back as trained.
    ``progress`` shows a bar over the windows scored, on a terminal only."""
    e = cfg.eval
    wanted = wanted or [(record, C.eval_lengths(cfg)) for record in run_scalings(cfg)]
    mode = C.EvalMode(e.mode).value
    trained = C.train_scaling(cfg)
    t0 = time.perf_counter()
    total = sum(count_windows(lengths, mode, e.stride, e.tokens, model.max_positions,
                              per_position=record is None) for record, lengths in wanted)
    curve = []
    with tqdm(total=total, unit="win", desc=f"scoring {mode}", leave=False,
              dynamic_ncols=True, disable=None if progress else True, file=sys.stderr) as bar:
        try:
            for record, lengths in wanted:
                if record is not None:
                    model.set_rope_scaling(RopeScaling(**record), C.original_len(cfg))
                points, per_position = extrapolation_curve(
                    model, corpus.val, lengths, mode, e.stride, e.tokens, e.batch_tokens,
                    e.per_position_buckets, device, corpus.token_bytes, progress=bar.update,
                    rope_scaling=record,
                )
                run.write_eval(points, per_position, train_seq_len=cfg.train.seq_len,
                               encoding=cfg.encoding.name, corpus=corpus.fingerprint)
                if record is None:
                    sink.log_eval(points, per_position)
                curve += points
        finally:
            if any(record is not None for record, _ in wanted):
                model.set_rope_scaling(trained and RopeScaling(**trained), C.original_len(cfg))
    return curve, time.perf_counter() - t0


def score_tasks(model: GPT, data: TaskData, cfg: DictConfig, run: Run, device: torch.device,
                wanted: TaskWanted | None = None, progress: bool = True) -> tuple[list[dict],
                                                                                  float]:
    """A task run's task points (``wanted``, default: every one cfg asks for, as trained and
    with each scaling eval.rope_scaling asks for), each scaling's written to eval.json as soon
    as they are scored, and all of them returned.  The model is put back as trained."""
    t = cfg.task
    wanted = wanted or group_wanted(requested_tasks(cfg, run_scalings(cfg)).values())
    trained = C.train_scaling(cfg)
    t0 = time.perf_counter()
    points = []
    with tqdm(total=sum(len(pairs) for _, pairs in wanted), unit="pt",
              desc=f"scoring {t.name}", leave=False, dynamic_ncols=True,
              disable=None if progress else True, file=sys.stderr) as bar:
        try:
            for record, pairs in wanted:
                if record is not None:
                    model.set_rope_scaling(RopeScaling(**record), C.original_len(cfg))
                new = task_curve(model, data.task, pairs, t.eval_count, t.eval_seed, device,
                                 record, progress=bar.update)
                run.write_eval([], None, tasks=new, train_seq_len=cfg.train.seq_len,
                               encoding=cfg.encoding.name, corpus=data.fingerprint)
                points += new
        finally:
            if any(record is not None for record, _ in wanted):
                model.set_rope_scaling(trained and RopeScaling(**trained), C.original_len(cfg))
    return points, time.perf_counter() - t0


def train_and_evaluate(cfg: DictConfig, run: Run, same: bool, device: torch.device,
                       world: World, progress: bool, group: str | None) -> str:
    """Train (afresh, or from the checkpoint of an unfinished run of this identity), then
    evaluate; run.json ends completed, failed, diverged or interrupted."""
    path = run.path
    if cfg.train.batch_size % world.size:
        raise UsageError(f"train.batch_size ({cfg.train.batch_size}) must be divisible by the "
                         f"number of processes ({world.size})")
    if world.size > 1 and device.type == "cuda":
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
    corpus = load_data(cfg)
    tasks = isinstance(corpus, TaskData)
    if not tasks and len(corpus.train) <= cfg.train.seq_len + 1:
        raise UsageError(f"the training split has {len(corpus.train)} tokens, fewer than one "
                         f"window of train.seq_len={cfg.train.seq_len}")
    if not tasks:
        check_val_size(len(corpus.val), C.eval_lengths(cfg), cfg.eval.tokens)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, corpus.vocab_size).to(device)
    state = None
    if same and (path / CHECKPOINT).exists():
        try:
            state = run.load_checkpoint()
            check_checkpoint(state)
            model.load_state_dict(state["model"])
        except (PosexpError, KeyError, RuntimeError) as e:
            if world.main:
                aside = run.move_aside()
                print(f"posexp: warning: {path}: cannot resume ({str(e).splitlines()[0]}); "
                      f"the attempt was moved aside to {aside}, starting afresh",
                      file=sys.stderr)
            state = None
            torch.manual_seed(cfg.seed)
            model = build_model(cfg, corpus.vocab_size).to(device)
    fine_tune = OmegaConf.select(cfg, "parent.identity") is not None
    if state is None and fine_tune:
        model.load_state_dict(parent_weights(cfg))
    if not world.main:
        fit(model, corpus, cfg, None, Sink(), device, False, state, world)
        return "completed"
    if state is not None:
        run.resume(state["step"], cfg)
        print(f"posexp: {path}: resuming from step {state['step']} "
              f"({state['tokens']:,} tokens)", file=sys.stderr)
    else:
        run = Run.create(path, cfg)
    run.update(name=cfg.run_name, experiment=cfg.experiment, encoding=cfg.encoding.name,
               seq_len=cfg.train.seq_len, seed=cfg.seed, batch_size=cfg.train.batch_size,
               device=str(device), n_params=model.n_params(), corpus=corpus.describe(),
               versions=versions(), model={k: cfg.model[k] for k in ("d_model", "n_layer",
                                                                     "n_head")},
               code_version=code_version(),
               **({"parent": cfg.parent.run} if fine_tune else {}))
    what = (f"task {corpus.task.name} at lengths {corpus.task.min_length}-{corpus.n_max} "
            f"(n_max: instances up to train.seq_len={cfg.train.seq_len} tokens), "
            f"{cfg.train.batch_size} instances a step for "
            f"{cfg.train.tokens // (cfg.train.batch_size * cfg.train.seq_len):,} steps"
            if tasks else f"{cfg.train.tokens:,} tokens at length {cfg.train.seq_len} "
            f"({cfg.train.batch_size} sequences a step)")
    print(f"posexp: {cfg.encoding.name}, {model.n_params() / 1e6:.2f}M parameters, {what} "
          f"on {device}" + (f" x {world.size} processes" if world.size > 1 else "")
          + f" -> {path}", file=sys.stderr)
    sink = open_sink(cfg, path, group)
    try:
        # the outer handler covers the moments between the training loop's own (which stops
        # after a step, checkpointed) and evaluation's: no signal finds the default handler,
        # which would end the process with run.json still saying running
        with signals_interrupt(state["step"] if state else 0, "run the same command again "
                               "to continue"):
            stats = fit(model, corpus, cfg, run, sink, device, progress, state, world)
            run.update(**stats, weights_sha256=weights_hash(model))
            with signals_interrupt(stats["steps"], "during evaluation; training is complete "
                                   "and checkpointed; run the same command again to finish "
                                   "the evaluation"):
                run.update(eval_started_at=now())
                if tasks:
                    curve, seconds = score_tasks(model, corpus, cfg, run, device,
                                                 progress=progress)
                else:
                    curve, seconds = score(model, corpus, cfg, run, sink, device,
                                           progress=progress)
    except Diverged as e:
        end(run, sink, "diverged", str(e), **e.fields)
        raise
    except (Interrupted, KeyboardInterrupt) as e:
        end(run, sink, "interrupted", str(e) or "stopped by the user")
        raise
    except BaseException as e:
        end(run, sink, "failed", f"{type(e).__name__}: {e}")
        raise
    end(run, sink, "completed", eval_seconds=round(seconds, 2))
    if tasks:
        print(format_tasks(curve, corpus.n_max, f"{path}"))
    else:
        print(format_curve(curve, cfg.train.seq_len, f"{path}",
                           per_byte=corpus.tokenizer != "byte"))
    return "completed"


def digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def parent_record(path: Path) -> dict:
    """What a fine-tune records of the run it continues (config.ParentConfig), read under
    that run's lock: a completed run whose checkpoint holds the weights its run.json names;
    a UsageError or PosexpError, in one line, for anything else."""
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory; posexp finetune continues a completed "
                         "run directory")
    missing = [n for n in (CONFIG, RUN) if not (path / n).is_file()]
    if missing:
        raise UsageError(f"{path} is not a posexp run (no {' or '.join(missing)})")
    run = Run(path)
    with run.lock():
        info = run.info()
        status = info.get("status")
        if status != "completed":
            advice = f" (posexp resume {path} finishes it)" if status in (
                "running", "interrupted") else ""
            raise UsageError(f"{path} has status {status!r}; only a completed run can be "
                             f"fine-tuned{advice}")
        identity = run.identity()
        weights = state_hash(run.load_checkpoint()["model"])
    recorded = info.get("weights_sha256")
    if recorded is not None and recorded != weights:
        raise PosexpError(f"{path / CHECKPOINT} does not hold the weights {path / RUN} names "
                          f"(sha256 {weights[:12]}, run.json has {str(recorded)[:12]}); the run "
                          "is damaged")
    return {"run": str(path.resolve()), "identity": digest(identity),
            "config": digest({k: v for k, v in identity.items() if k not in C.SEED_KEYS}),
            "weights_sha256": weights,
            "original_len": identity.get("parent.original_len") or identity["train.seq_len"]}


def parent_weights(cfg: DictConfig) -> dict:
    """The weights a fine-tune starts from: its parent's, as they were when it was set up."""
    parent = Run(Path(cfg.parent.run))
    try:
        state = parent.load_checkpoint()
    except PosexpError as e:
        raise PosexpError(f"cannot start the fine-tune from its parent: {e}") from None
    if state_hash(state["model"]) != cfg.parent.weights_sha256:
        raise PosexpError(f"the weights of {parent.path} have changed since this fine-tune was "
                          "set up; run posexp finetune again to fine-tune them as they are")
    return state["model"]


def end(run: Run, sink: Sink, status: str, reason: str | None = None, **fields) -> None:
    """Record how the run ended; on a full disk even run.json may not be writable, and the
    error that got us here matters more than this one."""
    try:
        run.finish(status, reason, **fields)
    except PosexpError as e:
        print(f"posexp: warning: {e}", file=sys.stderr)
    sink.finish(status)


def format_curve(curve: list[dict], train_len: int, title: str, per_byte: bool = False) -> str:
    """The table printed at the end of a run: length -> loss, perplexity, bits per token, and
    bits per byte when tokens are not bytes; one table per mode and RoPE scaling."""
    lines = []
    extra = f"  {'bits/byte':>9}" if per_byte else ""
    for mode, scaling in dict.fromkeys((p["mode"], point_scaling(p)) for p in curve):
        points = [p for p in curve if p["mode"] == mode and point_scaling(p) == scaling]
        scaled = f", RoPE scaled: {scaling_text(scaling)}" if scaling else ""
        lines.append(f"\n{title}: {mode}{scaled}, {points[0]['tokens']:,} tokens scored at "
                     f"every length (validation targets {points[0]['first_token'] + 1:,}-"
                     f"{points[0]['first_token'] + points[0]['tokens']:,})")
        lines.append(f"{'length':>8}  {'loss (nats)':>11}  {'ppl':>8}  {'bits/token':>10}{extra}")
        for p in points:
            mark = "  <- train length" if p["length"] == train_len else ""
            if p["applicable"]:
                bpb = f"  {p['bits_per_byte']:>9.4f}" if per_byte else ""
                lines.append(f"{p['length']:>8}  {p['loss']:>11.4f}  {p['ppl']:>8.3f}  "
                             f"{p['bits_per_token']:>10.4f}{bpb}{mark}")
            else:
                na = f"  {'n/a':>9}" if per_byte else ""
                lines.append(f"{p['length']:>8}  {'n/a':>11}  {'n/a':>8}  {'n/a':>10}{na}  "
                             f"({p['reason']}){mark}")
    return "\n".join(lines)


def format_tasks(points: list[dict], n_max: int, title: str) -> str:
    """The table printed at the end of a task run: length (and passkey's depth) -> exact
    match and token accuracy with their 95% intervals, loss per answer token, and the chance
    level (exact / token); n/a with its reason.  One table per RoPE scaling."""
    lines = []
    for scaling in dict.fromkeys(point_scaling(p) for p in points):
        ours = [p for p in points if point_scaling(p) == scaling]
        depth = any(p["depth"] is not None for p in ours)
        scaled = f", RoPE scaled: {scaling_text(scaling)}" if scaling else ""
        lines.append(f"\n{title}: task {ours[0]['task']}{scaled}, {ours[0]['count']} held-out "
                     f"instances at every length (eval seed {ours[0]['eval_seed']}); trained "
                     f"on lengths up to {n_max}")
        lines.append(f"{'length':>8}  " + (f"{'depth':>5}  " if depth else "")
                     + f"{'exact [95%]':<21}  {'token acc [95%]':<21}  {'answer loss':>11}  "
                     f"{'chance exact/token':>18}")
        for p in ours:
            head = f"{p['length']:>8}  " + (f"{p['depth']:>5g}  " if depth else "")
            mark = "  <- longest trained" if p["length"] == n_max else ""
            if not p["applicable"]:
                lines.append(f"{head}{'n/a':<21}  ({p['reason']}){mark}")
                continue
            exact = f"{p['exact']:.3f} [{p['exact_low']:.3f}, {p['exact_high']:.3f}]"
            acc = f"{p['token_acc']:.3f} [{p['token_acc_low']:.3f}, {p['token_acc_high']:.3f}]"
            chance = f"{p['chance_exact']:.3f} / {p['chance_token']:.3f}"
            lines.append(f"{head}{exact:<21}  {acc:<21}  {p['answer_loss']:>11.4f}  "
                         f"{chance:>18}{mark}")
    return "\n".join(lines)
