"""What a run trains on and is scored by -- its workload.  A corpus run trains on windows of
a token stream and is scored by perplexity at evaluation lengths (evaluate/windows.py); a task run
trains on generated instances of an algorithmic task and is scored by accuracy at task
lengths (evaluate/tasks.py).  Both answer the same questions for the run's lifecycle
(lifecycle.py, evaluation.py): the data, a training batch, the validation loss, the points
its config asks for, how to score them and the table to print.

A *want* is one point asked for: (RoPE scaling record or None, item) where the item is a
corpus length or a task's (length, depth); ``group`` gathers wants by scaling.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

import numpy as np
import torch

from posexp import scaling
from posexp.config import RunSpec
from posexp.config.schema import EvalMode
from posexp.data import Corpus, load_corpus
from posexp.data.tasks import PAD, TaskData, heldout, training_batch
from posexp.errors import UsageError
from posexp.evaluate.positions import PLAIN, EvalPositions
from posexp.evaluate.rolling import LM_EVAL, prefix_token, scored_text
from posexp.evaluate.tasks import answer_loss, task_curve
from posexp.evaluate.windows import (
    Scoring,
    check_val_size,
    curve_windows,
    score_curves,
    score_windows,
    scored_spans,
    span_windows,
    window_stride,
)
from posexp.model import GPT
from posexp.run.protocols import Held, Want, Wanted, Workload
from posexp.run.setup import set_scaling
from posexp.run.tables import format_curve, format_tasks
from posexp.run.training import Progress, to_device
from posexp.runs import Run, point_key, task_point_key
from posexp.sinks import Sink
from posexp.spans import Spans, compression, held_targets

IGNORE = -100  # F.cross_entropy's ignore_index: a target that the loss leaves out
TASK_STREAM = 1  # tells the task batches' generator from random_positions' (both (seed, step))
VAL_INSTANCES = 64  # held-out instances of a task run's validation loss


def group(wants: Iterable[Want]) -> Wanted:
    """Wants as (record, items) of each scaling, in order."""
    grouped: dict[object, tuple[dict | None, list]] = {}
    for record, item in wants:
        grouped.setdefault(scaling.key(record), (record, []))[1].append(item)
    return list(grouped.values())


def wanted_text(wanted: Wanted, item_text=str) -> str:
    """'at length 64, 128', or per scaling '(NTK-aware x4 at 64, 128; ...)'."""
    if len(wanted) == 1 and wanted[0][0] is None:
        return f"at length {', '.join(map(item_text, wanted[0][1]))}"
    return "(" + "; ".join(f"{scaling.text(scaling.key(record))} at "
                           f"{', '.join(map(item_text, items))}"
                           for record, items in wanted) + ")"


@contextlib.contextmanager
def evaluating(model: GPT) -> Iterator[None]:
    """``model`` in eval mode inside (no dropout), its mode put back after."""
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def sample_batch(train: np.ndarray, batch_size: int, seq_len: int,
                 gen: torch.Generator) -> torch.Tensor:
    """[batch, seq_len + 1] tokens from random offsets, gathered in one numpy index."""
    starts = torch.randint(0, len(train) - seq_len, (batch_size,), generator=gen).numpy()
    return torch.from_numpy(train[starts[:, None] + np.arange(seq_len + 1)].astype(np.int64))


def task_batch(data: TaskData, batch_size: int, seed: int, step: int,
               fixed_width: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) [batch_size, T] of step ``step`` of a task run: fresh instances of
    lengths up to n_max (data.tasks.training_batch), T the longest one's tokens minus one --
    or with ``fixed_width`` the longest possible one's, so that every step has one shape (a
    compiled step is not compiled again for each width).  Targets that are not answer tokens
    (prompt, padding) are IGNORE, so the loss counts the answer and its EOS only; padding on
    the right changes nothing before it, in a causal model.  The generator is seeded by
    (seed, step), so a resumed run draws the batches of an uninterrupted one."""
    rng = np.random.default_rng([seed, step, TASK_STREAM])
    inputs, targets, loss_mask = training_batch(data.task, rng, batch_size, data.n_max)
    targets[~loss_mask] = IGNORE
    if fixed_width:
        pad = data.task.tokens_for(data.n_max) - 1 - inputs.shape[1]
        inputs = np.pad(inputs, ((0, 0), (0, pad)), constant_values=PAD)
        targets = np.pad(targets, ((0, 0), (0, pad)), constant_values=IGNORE)
    return torch.from_numpy(inputs), torch.from_numpy(targets)


def eval_positions(spec: RunSpec) -> EvalPositions:
    """The positions a run is scored at (evaluate/positions.py): as it was trained, or the
    variant eval.positions asks for."""
    return EvalPositions.of(spec.train.random_positions, spec.eval.positions)


def held_positions(p: dict) -> str | None:
    """eval.positions that scores the point ``p`` again: consecutive for a randomized run's
    variant at 0..n-1, else as trained (null)."""
    return scaling.CONSECUTIVE if p.get("positions") == scaling.CONSECUTIVE else None


def curve_again(p: dict, random_positions: int | None) -> tuple[dict, Want] | None:
    """The eval.* overrides and the want that score the curve point ``p`` again -- its
    mode, stride, scored tokens and positions; None when none of this code's does (a region
    eval.json no longer lays out)."""
    mode, n, record = p["mode"], p["length"], p.get("rope_scaling")
    stride = None if p["stride"] == window_stride(n, mode, None) else p["stride"]
    at = held_positions(p)
    again = curve_wants(mode, stride, [n], p.get("spans") or "", p["tokens"], [record],
                        EvalPositions.of(random_positions, at))
    if p.get("spans") is None or point_key(p) not in again:
        return None
    return {"eval": {"mode": mode, "stride": stride, "tokens": p.get("eval_tokens", p["tokens"]),
                     "positions": at}}, (record, n)


def task_again(p: dict) -> tuple[dict, Want]:
    """The task.* and eval.* overrides and the want that score the task point ``p`` again:
    its instance count, eval seed and positions."""
    depth = None if p.get("depth") is None else float(p["depth"])
    return ({"task": {"eval_count": p["count"], "eval_seed": p["eval_seed"]},
             "eval": {"positions": held_positions(p)}},
            (p.get("rope_scaling"), (p["length"], depth)))


def gather(points: list[dict],
           again: Callable[[dict], tuple[dict, Want] | None]) -> tuple[Held, list[dict]]:
    """``points`` by the overrides that score them again (``again``), with their wants;
    and those ``again`` has none for."""
    held: dict[str, tuple[dict, list[Want]]] = {}
    lost = []
    for p in points:
        if (got := again(p)) is None:
            lost.append(p)
            continue
        overrides, want = got
        held.setdefault(json.dumps(overrides, sort_keys=True), (overrides, []))[1].append(want)
    return [(overrides, group(wants)) for overrides, wants in held.values()], lost


def curve_wants(mode: str | EvalMode, stride: int | None, lengths: Iterable[int],
                spans_id: str, tokens: int, scalings: Iterable[dict | None],
                at: EvalPositions = PLAIN) -> dict[tuple, Want]:
    """eval.json key -> want of each curve point at ``lengths`` with each scaling, in
    ``mode`` (and ``stride``) on the spans ``spans_id`` of ``tokens`` targets, at positions
    ``at``: what a trained run and a pretrained model look up in their eval.json alike."""
    mode = EvalMode(mode).value
    return {point_key({"mode": mode, "length": L, "spans": spans_id, "tokens": tokens,
                       "rope_scaling": record, "stride": window_stride(L, mode, stride),
                       **at.record()}):
            (record, L) for record in scalings for L in lengths}


def recorded_layout(scored: dict, mode: str, n_tokens: int) -> tuple[str, int] | None:
    """(id, targets) of the layout eval.json (``scored``) holds for eval.tokens=``n_tokens``
    in ``mode`` -- whole documents drawn for it in lm_eval mode, else spans of that many
    targets; a layout is a function of the split and eval.tokens alone, so one recorded is
    the one asked for -- or None when it holds none."""
    found = [(name, sum(record["length"])) for name, record in scored.get("spans", {}).items()
             if ((record.get("whole_documents") or {}).get("asked") == n_tokens
                 if mode == LM_EVAL else
                 "whole_documents" not in record and sum(record["length"]) == n_tokens)]
    return found[0] if len(found) == 1 else None


class CorpusWorkload:
    """Windows of a corpus; scored by perplexity on the same validation tokens at every
    length (a Workload, run/protocols.py)."""

    what = "point"
    item_text = staticmethod(str)  # an item is a length

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec

    def load(self) -> Corpus:
        return load_corpus(self.spec.cfg.data)

    def check(self, corpus: Corpus) -> None:
        seq_len = self.spec.train.seq_len
        if len(corpus.train) <= seq_len + 1:
            raise UsageError(f"the training split has {len(corpus.train)} tokens, fewer than "
                             f"one window of train.seq_len={seq_len}")
        e = self.spec.eval
        check_val_size(len(corpus.val), corpus.val_documents, e.tokens, Scoring.of(e).mode)

    def describe(self, corpus: Corpus) -> str:
        t = self.spec.train
        return f"{t.tokens:,} tokens at length {t.seq_len} ({t.batch_size} sequences a step)"

    def batch(self, corpus: Corpus, step: int, gen: torch.Generator, rows: slice,
              device: torch.device, fixed_width: bool) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.spec.train
        batch = to_device(sample_batch(corpus.train, t.batch_size, t.seq_len, gen)[rows], device)
        return batch[:, :-1], batch[:, 1:]

    def spans(self, corpus: Corpus, n_tokens: int | None = None) -> Spans:
        """The spans of eval.tokens (or ``n_tokens``) targets over the validation split."""
        n = self.spec.eval.tokens if n_tokens is None else n_tokens
        return scored_spans(len(corpus.val), corpus.val_documents, n)

    @staticmethod
    def layout(corpus: Corpus, spans: Spans) -> dict:
        """The spans as eval.json records them, with what zlib and xz make of their text
        where the tokens are bytes (other tokenizers' bytes are not at hand here)."""
        record = spans.record()
        if corpus.tokenizer == "byte":
            record["compression"] = compression(
                corpus.val[spans.targets()].astype(np.uint8).tobytes())
        return record

    def val_loss(self, model: GPT, corpus: Corpus, device: torch.device) -> float:
        """Validation loss at the training length, nonoverlapping, on spans of
        train.val_tokens targets spread over the split as eval's are, in eval mode (it draws
        no random numbers, so it leaves the training run unchanged)."""
        t = self.spec.train
        L = t.seq_len
        held = held_targets(len(corpus.val), corpus.val_documents)  # empty documents hold none
        spans = self.spans(corpus, min(t.val_tokens, held))
        with evaluating(model):
            losses, _, _ = score_windows(model, corpus.val, L, span_windows(spans, L),
                                         spans.tokens, self.spec.eval.batch_tokens, device,
                                         at=eval_positions(self.spec))
        return float(losses.sum()) / spans.tokens

    def requested(self, scalings: Iterable[dict | None],
                  scored: dict) -> dict[tuple, Want] | None:
        """eval.json key -> want of each point the config asks for with each scaling, given
        eval.json (``scored``); None when it holds no layout of eval.tokens targets -- the
        layout is a function of the split and eval.tokens alone, so one recorded is the
        one the config asks for -- and then every point is asked for."""
        e = self.spec.eval
        if (found := recorded_layout(scored, EvalMode(e.mode).value, e.tokens)) is None:
            return None
        return curve_wants(e.mode, e.stride, self.spec.eval_lengths, *found, scalings,
                           self.scoring().positions)

    def every(self, scalings: Iterable[dict | None]) -> Wanted:
        return [(record, list(self.spec.eval_lengths)) for record in scalings]

    def scoring(self) -> Scoring:
        """How the curve is scored: eval.*, at the positions the run was trained at."""
        return replace(Scoring.of(self.spec.eval), positions=eval_positions(self.spec))

    @staticmethod
    def points(data: dict) -> list[dict]:
        return data["curve"]

    @staticmethod
    def key(p: dict) -> tuple:
        return point_key(p)

    def score(self, model: GPT, corpus: Corpus, run: Run, sink: Sink, device: torch.device,
              wanted: Wanted, progress: bool = True) -> list[dict]:
        """The curve of every scaling and lengths of ``wanted``, each scaling's points written
        to eval.json as soon as they are scored; the model is put back as trained."""
        spec = self.spec
        scoring = replace(self.scoring(), prefix=prefix_token(corpus))
        spans = scored_text(corpus, scoring.mode, spec.eval.tokens)
        layout = (spans.id, self.layout(corpus, spans))

        def write(record: dict | None, points: list[dict], per_position: dict | None) -> None:
            run.write_eval(points, per_position, spans=layout,
                           train_seq_len=spec.train.seq_len, encoding=spec.encoding.name,
                           corpus=corpus.fingerprint)
            if record is None and not scoring.positions.consecutive:  # the model as trained
                sink.log_eval(points, per_position)

        with _bar(curve_windows(wanted, scoring, spans, model.max_positions), "win",
                  f"scoring {scoring.mode}", progress) as bar, _scaled(model, spec, wanted):
            return score_curves(
                model, corpus.val, wanted, scoring, spans, device, corpus.token_bytes,
                _rescaler(model, spec, wanted), write, progress=bar.update)

    def table(self, points: list[dict], corpus_tokenizer: str | None) -> str:
        return format_curve(points, self.spec.train.seq_len, str(self.spec.path),
                            per_byte=corpus_tokenizer not in (None, "byte"))

    def held(self, points: list[dict]) -> tuple[Held, list[dict]]:
        """The curve points ``points`` as this code scores them again (curve_again)."""
        return gather(points, lambda p: curve_again(p, self.spec.train.random_positions))


class TaskWorkload:
    """Generated instances of a task; scored by accuracy on held-out instances at each task
    length (and passkey depth)."""

    what = "task point"

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec

    def load(self) -> TaskData:
        return TaskData(self.spec.task, self.spec.n_max)

    def check(self, data: TaskData) -> None:
        """Instances are generated: nothing to check."""

    def describe(self, data: TaskData) -> str:
        t = self.spec.train
        return (f"task {data.task.name} at lengths {data.task.min_length}-{data.n_max} "
                f"(n_max: instances up to train.seq_len={t.seq_len} tokens), "
                f"{t.batch_size} instances a step for "
                f"{t.tokens // (t.batch_size * t.seq_len):,} steps")

    def batch(self, data: TaskData, step: int, gen: torch.Generator, rows: slice,
              device: torch.device, fixed_width: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return tuple(to_device(x[rows], device) for x in task_batch(
            data, self.spec.train.batch_size, self.spec.seed, step, fixed_width))

    def val_loss(self, model: GPT, data: TaskData, device: torch.device) -> float:
        """Nats per answer token on VAL_INSTANCES held-out instances of length n_max."""
        seed = self.spec.task_settings.eval_seed
        with evaluating(model):
            return answer_loss(model, heldout(data.task, data.n_max, VAL_INSTANCES, seed),
                               device, eval_positions(self.spec), seed)

    def requested(self, scalings: Iterable[dict | None],
                  scored: dict | None = None) -> dict[tuple, Want]:
        """task_point_key -> want of each task point the config asks for: every task length
        (and for passkey every depth) with each scaling, on task.eval_count instances of
        task.eval_seed."""
        t, task = self.spec.task_settings, self.spec.task
        depths = [float(d) for d in t.depths] if task.takes_depth else [None]
        return {task_point_key({"task": task.name, "length": n, "depth": d,
                                "count": t.eval_count, "eval_seed": t.eval_seed,
                                "rope_scaling": record, **eval_positions(self.spec).record()}):
                (record, (n, d))
                for record in scalings for n in self.spec.task_lengths for d in depths}

    def every(self, scalings: Iterable[dict | None]) -> Wanted:
        return group(self.requested(scalings).values())

    @staticmethod
    def points(data: dict) -> list[dict]:
        return data["tasks"]

    @staticmethod
    def key(p: dict) -> tuple:
        return task_point_key(p)

    @staticmethod
    def item_text(item: tuple[int, float | None]) -> str:
        n, d = item
        return str(n) if d is None else f"{n} at depth {d:g}"

    def score(self, model: GPT, data: TaskData, run: Run, sink: Sink, device: torch.device,
              wanted: Wanted, progress: bool = True) -> list[dict]:
        """The task points of ``wanted``, each scaling's written to eval.json as soon as they
        are scored; the model is put back as trained."""
        spec, t = self.spec, self.spec.task_settings
        points = []
        with _bar(sum(len(pairs) for _, pairs in wanted), "pt", f"scoring {t.name}",
                  progress) as bar, _scaled(model, spec, wanted):
            rescale = _rescaler(model, spec, wanted)
            for record, pairs in wanted:
                rescale(record)
                new = task_curve(model, data.task, pairs, t.eval_count, t.eval_seed, device,
                                 record, progress=bar.update, at=eval_positions(self.spec))
                run.write_eval([], None, tasks=new, train_seq_len=spec.train.seq_len,
                               encoding=spec.encoding.name, corpus=data.fingerprint)
                points += new
        return points

    def table(self, points: list[dict], corpus_tokenizer: str | None) -> str:
        return format_tasks(points, self.spec.n_max, str(self.spec.path))

    def held(self, points: list[dict]) -> tuple[Held, list[dict]]:
        """The task points ``points`` as this code scores them again (task_again); one of
        another task is scored by no config of this run."""
        return gather(points, lambda p: task_again(p) if p["task"] == self.spec.task.name
                      else None)


def workload_of(spec: RunSpec) -> Workload:
    return TaskWorkload(spec) if spec.is_task_run else CorpusWorkload(spec)


def _bar(total: int, unit: str, desc: str, progress: bool) -> Progress:
    # a bar on a terminal, plain lines elsewhere; it also hands on a sweep's stop request
    return Progress(total, unit, desc, progress, leave=False)


def _rescaler(model: GPT, spec: RunSpec, wanted: Wanted) -> Callable[[dict | None], None]:
    """What sets ``model`` to score each scaling of ``wanted``: None puts it back as trained
    (a plain point scored after a scaled one is the model's own); nothing to set when
    ``wanted`` holds no scaling (an encoding without RoPE has none to set)."""
    if all(record is None for record, _ in wanted):
        return lambda record: None
    return lambda record: set_scaling(model, spec, record)


@contextlib.contextmanager
def _scaled(model: GPT, spec: RunSpec, wanted: Wanted) -> Iterator[None]:
    """Puts the model back as trained after scoring ``wanted``, if it holds a scaling."""
    try:
        yield
    finally:
        if any(record is not None for record, _ in wanted):
            set_scaling(model, spec, None)
