"""The training loop: AdamW with warm-up and cosine decay to the token budget, checkpoints
every train.checkpoint_every tokens and on SIGINT/SIGTERM, exact resume (optimizer, data
sampler and every generator's state), validation at the training length.  What a batch is
and how validation scores comes from the run's workload (workloads.py)."""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from posexp.config import RunSpec
from posexp.config.spec import TrainSpec
from posexp.distributed import World, reduced
from posexp.errors import PosexpError, Stopped, on_signals
from posexp.evaluate.windows import autocast
from posexp.model import GPT
from posexp.run.protocols import Workload
from posexp.runs import Run, weights_sha256
from posexp.sinks import Sink


class Diverged(PosexpError):
    def __init__(self, step: int, last_finite: float, value: float) -> None:
        last = f"{last_finite:.4f}" if math.isfinite(last_finite) else "none logged yet"
        super().__init__(f"training diverged: loss became {value} at step {step} "
                         f"(last finite loss: {last})")
        self.fields = {"diverged_at_step": step,
                       "last_finite_loss": last_finite if math.isfinite(last_finite) else None}


class Interrupted(Stopped):
    def __init__(self, signum: int, step: int,
                 detail: str = "checkpoint saved, run the same command again to resume") -> None:
        name = signal.Signals(signum).name
        super().__init__(f"stopped by {name} at step {step}; {detail}")
        self.exit_code = 128 + signum


def lr_at(step: int, total: int, warmup: int, lr: float, min_ratio: float) -> float:
    """Linear warmup to lr, then cosine decay to lr * min_ratio at the last step."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: GPT, t: TrainSpec, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on norms)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": t.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=t.lr, betas=(t.beta1, t.beta2), fused=device.type == "cuda",
    )


def random_positions(batch_size: int, seq_len: int, limit: int, seed: int,
                     step: int) -> torch.Tensor:
    """[batch_size, seq_len] positions for step ``step`` of a run trained with randomized
    positions (Ruoss et al., ACL 2023): each row a sorted random subset of 0..limit-1.  They
    come from a generator of their own, seeded by (seed, step): the batches are those of the
    same run without them, a resumed run draws the same, and at limit = seq_len every row is
    0..seq_len-1, so the run is the one without them, weight for weight."""
    rng = np.random.default_rng([seed, step])
    # choice without replacement stays small for any limit (no array of ``limit`` entries)
    rows = [np.sort(rng.choice(limit, seq_len, replace=False)) for _ in range(batch_size)]
    return torch.from_numpy(np.stack(rows).astype(np.int64))


CHECKPOINT_KEYS = ("model", "optimizer", "step", "tokens", "data_rng", "rng", "last", "seconds")


def check_checkpoint(state: dict) -> None:
    """A checkpoint to resume from holds every part of the training state."""
    missing = [k for k in CHECKPOINT_KEYS if k not in state]
    if missing:
        raise PosexpError(f"the checkpoint has no {', '.join(missing)}")


def rng_state() -> dict:
    """Python, NumPy and torch generator states, as tensors and plain data
    (so a checkpoint holding them still loads with weights_only=True)."""
    version, py_state, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": [version, list(py_state), gauss],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    version, py_state, gauss = state["python"]
    random.setstate((version, tuple(py_state), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# The file a sweep's parent writes its signal's number into when it is stopped (SIGINT,
# SIGTERM): every job of the sweep, in whichever process the launcher runs it, reads it
# between steps and batches and stops as if the signal were its own (posexp/sweep/stop.py).
STOP_FILE = "POSEXP_STOP_FILE"


def stop_requested() -> int | None:
    """The signal a sweep's parent was stopped by, once it was (STOP_FILE); else None.  A
    stat a call when a sweep set it, nothing otherwise: cheap enough for every step."""
    path = os.environ.get(STOP_FILE)
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return int(signal.SIGTERM)  # being written: a stop all the same


class StopSignals:
    """Turns SIGINT/SIGTERM into a request to stop after the current step, so the loop can
    save a checkpoint first; a second signal stops at once."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.handling = contextlib.ExitStack()

    def __enter__(self) -> StopSignals:
        self.handling.enter_context(on_signals(self._handle))
        return self

    def _handle(self, signum: int, frame: object) -> None:
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signum

    def __exit__(self, *exc: object) -> None:
        self.handling.close()


def use_compile(t: TrainSpec, device: torch.device) -> bool:
    """train.compile, or when unset: on CUDA yes; on CPU no -- compiling takes longer than
    the few minutes of a CPU run it would speed up (scripts/bench.py --compile measures it)."""
    return device.type == "cuda" if t.compile is None else bool(t.compile)


def progress_every() -> float:
    """Seconds between two progress lines where stderr is not a terminal (nohup, a pipe, a
    job of a parallel sweep): 30, or POSEXP_PROGRESS_SECONDS."""
    try:
        return max(0.0, float(os.environ.get("POSEXP_PROGRESS_SECONDS", 30)))
    except ValueError:
        return 30.0


def duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


# tqdm's monitor thread adjusts the refresh of bars updated rarely, which these are not; and
# its start, with every first bar, swallows any exception raised meanwhile, as a signal's is
tqdm.monitor_interval = 0


class Progress:
    """Progress of a long loop: a bar on a terminal (tqdm); elsewhere -- nohup, a pipe, a
    parallel sweep's job, whose lines are whole -- one plain line every progress_every()
    seconds, so a log never goes quiet for minutes; nothing when not ``enabled``.  Each
    update also looks for a stop asked for by a sweep's parent (stop_requested) and hands
    it to this process's own signal handler, which stops evaluation where it stands."""

    def __init__(self, total: int, unit: str, desc: str, enabled: bool = True,
                 initial: int = 0, watch_stop: bool = True, **bar: object) -> None:
        self.total, self.unit, self.desc, self.done = total, unit, desc, initial
        self.initial = initial  # a resumed run's work before this process: not timed here
        self.postfix: dict[str, object] = {}
        self.stop_sent = not watch_stop  # the training loop reads stop requests itself
        tty = enabled and sys.stderr.isatty()
        self.bar = tqdm(total=total, initial=initial, unit=unit, desc=desc, file=sys.stderr,
                        disable=not tty, dynamic_ncols=True, **bar)
        self.lines = enabled and not tty
        self.start = self.last = time.perf_counter()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.bar.update(n)
        self.done += n
        if self.lines and time.perf_counter() - self.last >= progress_every():
            self.line()
        if not self.stop_sent and (signum := stop_requested()) is not None:
            self.stop_sent = True
            os.kill(os.getpid(), signum)  # this process's handler stops what runs

    def set_postfix(self, **values: object) -> None:
        self.bar.set_postfix(**values)
        self.postfix = values

    def line(self) -> None:
        now = time.perf_counter()
        self.last, elapsed = now, now - self.start
        share = self.done / self.total if self.total else 1.0
        scale = self.unit == "tok"
        done, total = (f"{self.done:,}", f"{self.total:,}") if not scale else \
            (f"{self.done / 1e6:.2f}M", f"{self.total / 1e6:.2f}M")
        left, since = "", self.done - self.initial
        if 0 < share < 1 and elapsed > 0 and since > 0:
            left = f", about {duration(elapsed * (self.total - self.done) / since)} left"
        extra = "".join(f", {k} {v}" for k, v in self.postfix.items())
        print(f"posexp: {self.desc}: {done} of {total} {self.unit} ({share:.0%}), "
              f"{duration(elapsed)}{left}{extra}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.bar.close()


@dataclass(frozen=True)
class Plan:
    """A run's steps, in tokens a step: how many, the warm-up, and how often it validates
    and checkpoints."""

    tokens_per_step: int
    total_steps: int
    warmup: int
    val_every: int
    checkpoint_every: int

    @classmethod
    def of(cls, t: TrainSpec) -> Plan:
        per_step = t.batch_size * t.seq_len
        total = t.tokens // per_step
        return cls(per_step, total, min(total, t.warmup_tokens // per_step),
                   max(1, t.val_every_tokens // per_step),
                   max(1, t.checkpoint_every // per_step))


class Loop:
    """One attempt at training a run: the model (wrapped for several processes and compiled
    where asked), its optimizer, data generator and progress, and the run it writes to
    (None in a process that is not rank 0)."""

    def __init__(self, model: GPT, workload: Workload, data, spec: RunSpec,
                 run: Run | None, sink: Sink, device: torch.device, world: World) -> None:
        t = spec.train
        self.model, self.workload, self.data, self.spec = model, workload, data, spec
        self.run, self.sink, self.device, self.world = run, sink, device, world
        self.plan = Plan.of(t)
        self.rows = slice(world.rank * t.batch_size // world.size,
                          (world.rank + 1) * t.batch_size // world.size)
        self.step_model = model
        if world.size > 1:
            self.step_model = DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None)
        self.compiled = use_compile(spec.train, device)
        if self.compiled:
            self.step_model = torch.compile(self.step_model)
        self.opt = make_optimizer(model, t, device)
        self.gen = torch.Generator().manual_seed(spec.seed)
        self.first_step, self.last, self.seconds_before = 0, {"loss": float("nan")}, 0.0
        self.initial_loss: float | None = None  # the first step's, to tell a run that learned
        self.first_loss: torch.Tensor | None = None  # it, until the first log reads it
        self.start = time.perf_counter()

    def resume(self, state: dict) -> None:
        """Continue from a checkpoint exactly where it stopped."""
        check_checkpoint(state)
        self.opt.load_state_dict(state["optimizer"])
        self.gen.set_state(state["data_rng"])
        set_rng_state(state["rng"])
        self.first_step, self.last = state["step"], state["last"]
        self.seconds_before = state["seconds"]
        self.initial_loss = state.get("initial_loss")  # checkpoints before it have none

    def checkpoint(self, step: int) -> None:
        first = self.read_first_loss()  # on every process: a mean over them
        if self.run is None:
            return
        self.run.save_checkpoint({
            "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
            "step": step, "tokens": step * self.plan.tokens_per_step,
            "data_rng": self.gen.get_state(), "rng": rng_state(), "last": self.last,
            "seconds": self.seconds_before + time.perf_counter() - self.start,
            "initial_loss": first,
        })

    def step(self, step: int) -> tuple[torch.Tensor, torch.Tensor, float]:
        """One optimizer step: (loss, gradient norm, learning rate)."""
        t, plan = self.spec.train, self.plan
        lr = lr_at(step, plan.total_steps, plan.warmup, t.lr, t.min_lr_ratio)
        for group in self.opt.param_groups:
            group["lr"] = lr
        inputs, targets = self.workload.batch(self.data, step, self.gen, self.rows,
                                              self.device, self.compiled)
        positions = None
        if t.random_positions is not None:
            positions = random_positions(t.batch_size, inputs.shape[1], t.random_positions,
                                         self.spec.seed, step)[self.rows].to(self.device)
        with autocast(self.device):
            loss = self.step_model(inputs, targets, positions)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss, grad_norm, lr

    def read_first_loss(self) -> float | None:
        """The first step's loss as a number (a wait for the device, where it is pending)."""
        if self.first_loss is not None:
            self.initial_loss, self.first_loss = reduced(self.first_loss, self.world).item(), None
        return self.initial_loss

    def log(self, done: int, loss: torch.Tensor, grad_norm: torch.Tensor, lr: float) -> None:
        # reading a value waits for the device: one read of every value, at log intervals
        values = [reduced(loss, self.world).detach(), grad_norm.detach()]
        if self.first_loss is not None:
            values.append(reduced(self.first_loss, self.world))
        loss_value, norm_value, *first = torch.stack(values).tolist()
        if first:
            self.initial_loss, self.first_loss = first[0], None
        elapsed = self.seconds_before + time.perf_counter() - self.start
        if not math.isfinite(loss_value):
            raise Diverged(done, self.last["loss"], loss_value)
        per_step = self.plan.tokens_per_step
        self.last = {"step": done, "tokens": done * per_step, "loss": loss_value, "lr": lr,
                     "grad_norm": norm_value, "elapsed": round(elapsed, 3),
                     "tok_per_s": round((done - self.first_step) * per_step
                                        / (time.perf_counter() - self.start))}
        self.record(self.last)

    def validate(self, done: int) -> float:
        v = self.workload.val_loss(self.model, self.data, self.device)
        self.last["val_loss"] = v
        self.record({"step": done, "tokens": done * self.plan.tokens_per_step, "val_loss": v})
        return v

    def record(self, record: dict) -> None:
        if self.run is not None:
            self.run.log(record)
        self.sink.log(record)

    def warn_if_unlearned(self) -> None:
        """One line at the end when the training loss ended where it started (within 1%):
        a run that learned nothing -- a learning rate far too small, say -- is scored all
        the same, and its curve would be read as the encoding's.  Not for a fine-tune: it
        starts from trained weights, where a loss that stays is no sign of a fault."""
        first, final = self.initial_loss, self.last.get("loss")
        if first is None or final is None or not math.isfinite(first) or first <= 0 \
                or self.spec.fine_tune:
            return
        if final >= 0.99 * first:
            t = self.spec.train
            print(f"posexp: warning: the training loss ended at {final:.4f}, where it started "
                  f"({first:.4f}): this run learned nothing; check train.lr ({t.lr:g}), "
                  f"train.tokens ({t.tokens:,}) and train.warmup_tokens "
                  f"({t.warmup_tokens:,})", file=sys.stderr)

    def stats(self) -> dict:
        """What run.json records of the training."""
        plan, now = self.plan, time.perf_counter()
        seconds = self.seconds_before + now - self.start
        # this attempt's speed; an attempt resumed at the last step trained nothing, and
        # then the run's own over all its attempts (a campaign's estimates read it)
        steps, took = plan.total_steps - self.first_step, now - self.start
        if not steps:
            steps, took = plan.total_steps, seconds
        return {"train_seconds": round(seconds, 2),
                "steps": plan.total_steps,
                "tokens_trained": plan.total_steps * plan.tokens_per_step,
                "tok_per_s": round(steps * plan.tokens_per_step / max(1e-9, took)),
                "final_train_loss": self.last["loss"],
                "final_val_loss": self.last.get("val_loss")}


def fit(model: GPT, workload: Workload, data, spec: RunSpec, run: Run | None,
        sink: Sink, device: torch.device, progress: bool = True, resume: dict | None = None,
        world: World = World()) -> dict:
    """Train to the token budget, checkpointing every train.checkpoint_every tokens and on
    SIGINT/SIGTERM; ``resume`` is a checkpoint to continue from exactly where it stopped.
    In a world of several processes each trains on its slice of every batch, and only rank
    0 (the one given a ``run``) writes.  train.tokens counts train.seq_len tokens a row for
    every workload, so a step is the same for corpus and task runs."""
    loop = Loop(model, workload, data, spec, run, sink, device, world)
    if resume is not None:
        loop.resume(resume)
    t, plan = spec.train, loop.plan
    if world.main and loop.first_step == 0:
        note_rounding(t, plan)
    model.train()
    loop.start = time.perf_counter()
    with StopSignals() as signals:  # a signal from here on waits for the end of a step
        bar = Progress(plan.total_steps * plan.tokens_per_step, "tok",
                       f"{spec.encoding.name} L={t.seq_len}", progress and world.main,
                       initial=loop.first_step * plan.tokens_per_step, watch_stop=False,
                       unit_scale=True)
        for step in range(loop.first_step, plan.total_steps):
            loss, grad_norm, lr = loop.step(step)
            if step == 0:
                loop.first_loss = loss.detach()
            bar.update(plan.tokens_per_step)
            done = step + 1
            if signals.received is None:
                signals.received = stop_requested()
            if done % t.log_every == 0 or done == plan.total_steps:
                loop.log(done, loss, grad_norm, lr)
                bar.set_postfix(loss=f"{loop.last['loss']:.3f}")
            if world.main and (done % plan.val_every == 0 or done == plan.total_steps):
                v = loop.validate(done)
                bar.set_postfix(loss=f"{loop.last['loss']:.3f}", val=f"{v:.3f}")
            if done % plan.checkpoint_every == 0 or done == plan.total_steps:
                loop.checkpoint(done)
            if signals.received is not None:
                if done % plan.checkpoint_every:
                    loop.checkpoint(done)
                bar.close()
                raise Interrupted(signals.received, done)
    bar.close()
    if world.main:
        loop.warn_if_unlearned()
    return loop.stats()


def note_rounding(t: TrainSpec, plan: Plan) -> None:
    """One line when train.tokens is not a whole number of steps and the whole steps within
    it leave out 1% of it or more (20,000 -> 18,432): the run says so rather than train
    fewer tokens silently.  Less is not said: the default, 2,000,000 in steps of 2,048,
    trains 1,998,848 (run.json records tokens_trained either way)."""
    trained = plan.total_steps * plan.tokens_per_step
    if t.tokens - trained >= 0.01 * t.tokens:
        print(f"posexp: train.tokens={t.tokens:,} is not a whole number of steps of "
              f"{plan.tokens_per_step:,} tokens ({t.batch_size} x {t.seq_len}): training "
              f"{plan.total_steps:,} steps, {trained:,} tokens", file=sys.stderr)


def to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    if device.type == "cuda":  # a copy from pageable memory would wait for the GPU
        x = x.pin_memory()
    return x.to(device, non_blocking=True)


def weights_hash(model: GPT) -> str:
    """SHA-256 over every tensor of the state dict, in order: equal hashes, equal weights
    (runs.store.weights_sha256, the hash run.json records)."""
    return weights_sha256(model.state_dict())
