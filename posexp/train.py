"""The training loop, and one whole run: data -> model -> train -> checkpoint -> evaluate."""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
import signal
import sys
import time

import numpy as np
import torch
from omegaconf import DictConfig
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from posexp import config as C
from posexp.data import Corpus
from posexp.data.tasks import PAD, TaskData, heldout, training_batch
from posexp.distributed import World, mean
from posexp.encodings.rope_scaling import RopeScaling
from posexp.errors import PosexpError, Stopped, UsageError
from posexp.evaluate import autocast, score_windows
from posexp.evaluate_tasks import answer_loss
from posexp.model import GPT, GPTConfig
from posexp.runs import Run
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


def pick_device(cfg: DictConfig, training: bool = True) -> torch.device:
    """The device to run on (device=auto|cpu|cuda|cuda:N|mps, checked against what torch
    sees); on CUDA this also allows TF32 (allow_tf32)."""
    requested = str(cfg.device)
    mps = getattr(torch.backends, "mps", None)
    C.check_device(requested, torch.cuda.device_count() if torch.cuda.is_available() else 0,
                   bool(mps and mps.is_available()))
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    where = "the CPU" if requested == "cpu" else requested
    if not requested.startswith("cuda") and C.Attention(cfg.attention) == C.Attention.flash:
        raise UsageError(f"attention=flash runs on CUDA only, and this run is on {where}; "
                         "use attention=auto")
    if not requested.startswith("cuda") and training \
            and C.Attention(cfg.attention) == C.Attention.flex:
        raise UsageError(f"attention=flex cannot train on {where} (FlexAttention has no "
                         f"{'CPU' if requested == 'cpu' else 'MPS'} backward); use "
                         "attention=auto, or flex in posexp eval")
    device = torch.device(requested)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)  # device=cuda:N: kernels that use the current GPU too
    allow_tf32(device)
    return device


def allow_tf32(device: torch.device) -> None:
    """TF32 for the fp32 matmuls left outside bf16 autocast on CUDA."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def build_model(cfg: DictConfig, vocab_size: int) -> GPT:
    """The model of a resolved config (config.resolve), RoPE scaled as a fine-tune with
    encoding.scaling trains and scores it."""
    m = cfg.model
    if cfg.encoding.get("module") is not None:  # an encoding from outside posexp's source
        C.import_encoding(cfg.encoding.module, cfg.encoding.name)
    model = GPT(
        GPTConfig(
            vocab_size=vocab_size,
            d_model=m.d_model,
            n_layer=m.n_layer,
            n_head=m.n_head,
            d_ff=m.d_ff,
            encoding=cfg.encoding.name,
            max_positions=cfg.encoding.max_positions,
            base=cfg.encoding.base,
            dropout=m.dropout,
            tie_weights=m.tie_weights,
            attention=C.Attention(cfg.attention).value,
            encoding_hparams=C.encoding_hparams(cfg),
        )
    )
    scaling = C.train_scaling(cfg)
    if scaling is not None:
        model.set_rope_scaling(RopeScaling(**scaling), C.original_len(cfg))
    return model


def lr_at(step: int, total: int, warmup: int, lr: float, min_ratio: float) -> float:
    """Linear warmup to lr, then cosine decay to lr * min_ratio at the last step."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def use_compile(cfg: DictConfig, device: torch.device) -> bool:
    """train.compile, or when unset: on CUDA yes; on CPU no -- compiling takes longer than
    the few minutes of a CPU run it would speed up (scripts/bench.py --compile measures it)."""
    return device.type == "cuda" if cfg.train.compile is None else bool(cfg.train.compile)


def make_optimizer(model: GPT, cfg: DictConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on norms)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    t = cfg.train
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": t.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=t.lr, betas=(t.beta1, t.beta2), fused=device.type == "cuda",
    )


def sample_batch(
    train: np.ndarray, batch_size: int, seq_len: int, gen: torch.Generator
) -> torch.Tensor:
    """[batch, seq_len + 1] tokens from random offsets, gathered in one numpy index."""
    starts = torch.randint(0, len(train) - seq_len, (batch_size,), generator=gen).numpy()
    return torch.from_numpy(train[starts[:, None] + np.arange(seq_len + 1)].astype(np.int64))


IGNORE = -100  # F.cross_entropy's ignore_index: a target that the loss leaves out
TASK_STREAM = 1  # tells the task batches' generator from random_positions' (both (seed, step))
VAL_INSTANCES = 64  # held-out instances of a task run's validation loss


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


def val_loss(model: GPT, corpus: Corpus | TaskData, cfg: DictConfig,
             device: torch.device) -> float:
    """Validation loss at the training length on the first train.val_tokens tokens, in eval
    mode (no dropout; it draws no random numbers, so it leaves the training run unchanged).
    A task run's: nats per answer token on VAL_INSTANCES held-out instances of length n_max."""
    model.eval()
    if isinstance(corpus, TaskData):
        loss = answer_loss(model, heldout(corpus.task, corpus.n_max, VAL_INSTANCES,
                                          cfg.task.eval_seed), device)
        model.train()
        return loss
    n = min(cfg.train.val_tokens, len(corpus.val) - cfg.train.seq_len - 1)
    losses, _ = score_windows(model, corpus.val, cfg.train.seq_len, cfg.train.seq_len,
                              cfg.train.seq_len, n, cfg.eval.batch_tokens, device)
    model.train()
    return float(losses.sum()) / n


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


class StopSignals:
    """Turns SIGINT/SIGTERM into a request to stop after the current step, so the loop can
    save a checkpoint first; a second signal stops at once."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signum

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def fit(model: GPT, corpus: Corpus | TaskData, cfg: DictConfig, run: Run | None, sink: Sink,
        device: torch.device, progress: bool = True, resume: dict | None = None,
        world: World = World()) -> dict:
    """Train to the token budget, checkpointing every train.checkpoint_every tokens and on
    SIGINT/SIGTERM; ``resume`` is a checkpoint to continue from exactly where it stopped.
    In a world of several processes each trains on its slice of every batch, and only rank
    0 (the one given a ``run``) writes.  A task run (``corpus`` a TaskData) trains on
    task_batch's instances, its loss on their answers only; train.tokens counts
    train.seq_len tokens a row all the same, so a step is the same for both kinds of run."""
    t = cfg.train
    rows = slice(world.rank * t.batch_size // world.size,
                 (world.rank + 1) * t.batch_size // world.size)
    step_model = model
    if world.size > 1:
        step_model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    compiled = use_compile(cfg, device)
    if compiled:
        step_model = torch.compile(step_model)
    tokens_per_step = t.batch_size * t.seq_len
    total_steps = t.tokens // tokens_per_step
    warmup = min(total_steps, t.warmup_tokens // tokens_per_step)
    val_every = max(1, t.val_every_tokens // tokens_per_step)
    checkpoint_every = max(1, t.checkpoint_every // tokens_per_step)
    opt = make_optimizer(model, cfg, device)
    gen = torch.Generator().manual_seed(cfg.seed)
    first_step, last, seconds_before = 0, {"loss": float("nan")}, 0.0
    if resume is not None:
        check_checkpoint(resume)
        opt.load_state_dict(resume["optimizer"])
        gen.set_state(resume["data_rng"])
        set_rng_state(resume["rng"])
        first_step, last, seconds_before = resume["step"], resume["last"], resume["seconds"]

    def checkpoint(step: int) -> None:
        if run is None:
            return
        run.save_checkpoint({
            "model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
            "tokens": step * tokens_per_step, "data_rng": gen.get_state(), "rng": rng_state(),
            "last": last, "seconds": seconds_before + time.perf_counter() - start,
        })

    model.train()
    bar = tqdm(total=total_steps * tokens_per_step, initial=first_step * tokens_per_step,
               unit="tok", unit_scale=True, desc=f"{cfg.encoding.name} L={t.seq_len}",
               disable=None if progress and world.main else True, dynamic_ncols=True,
               file=sys.stderr)
    start = time.perf_counter()
    with StopSignals() as signals:
        for step in range(first_step, total_steps):
            lr = lr_at(step, total_steps, warmup, t.lr, t.min_lr_ratio)
            for group in opt.param_groups:
                group["lr"] = lr
            if isinstance(corpus, TaskData):
                inputs, targets = (to_device(x[rows], device) for x in task_batch(
                    corpus, t.batch_size, cfg.seed, step, fixed_width=compiled))
            else:
                batch = to_device(sample_batch(corpus.train, t.batch_size, t.seq_len, gen)[rows],
                                  device)
                inputs, targets = batch[:, :-1], batch[:, 1:]
            positions = None
            if t.get("random_positions") is not None:
                positions = random_positions(t.batch_size, inputs.shape[1], t.random_positions,
                                             cfg.seed, step)[rows].to(device)
            with autocast(device):
                loss = step_model(inputs, targets, positions)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            bar.update(tokens_per_step)
            done = step + 1
            if done % t.log_every == 0 or done == total_steps:
                # .item() waits for the device, so only at log intervals
                loss_value, norm_value = mean(loss, world), grad_norm.item()
                elapsed = seconds_before + time.perf_counter() - start
                if not math.isfinite(loss_value):
                    raise Diverged(done, last["loss"], loss_value)
                last = {"step": done, "tokens": done * tokens_per_step, "loss": loss_value,
                        "lr": lr, "grad_norm": norm_value, "elapsed": round(elapsed, 3),
                        "tok_per_s": round((done - first_step) * tokens_per_step
                                           / (time.perf_counter() - start))}
                if run is not None:
                    run.log(last)
                sink.log(last)
                bar.set_postfix(loss=f"{loss_value:.3f}")
            if world.main and (done % val_every == 0 or done == total_steps):
                v = val_loss(model, corpus, cfg, device)
                last["val_loss"] = v
                record = {"step": done, "tokens": done * tokens_per_step, "val_loss": v}
                if run is not None:
                    run.log(record)
                sink.log(record)
                bar.set_postfix(loss=f"{last['loss']:.3f}", val=f"{v:.3f}")
            if done % checkpoint_every == 0 or done == total_steps:
                checkpoint(done)
            if signals.received is not None:
                if done % checkpoint_every:
                    checkpoint(done)
                bar.close()
                raise Interrupted(signals.received, done)
    bar.close()
    seconds = seconds_before + time.perf_counter() - start
    return {"train_seconds": round(seconds, 2), "steps": total_steps,
            "tokens_trained": total_steps * tokens_per_step,
            "tok_per_s": round((total_steps - first_step) * tokens_per_step
                               / max(1e-9, time.perf_counter() - start)),
            "final_train_loss": last["loss"], "final_val_loss": last.get("val_loss")}


def to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    if device.type == "cuda":  # a copy from pageable memory would wait for the GPU
        x = x.pin_memory()
    return x.to(device, non_blocking=True)


def weights_hash(model: GPT) -> str:
    """SHA-256 over every tensor of the state dict, in order: equal hashes, equal weights."""
    return state_hash(model.state_dict())


def state_hash(state: dict[str, torch.Tensor]) -> str:
    """weights_hash of a state dict (a checkpoint's "model")."""
    digest = hashlib.sha256()
    for name, tensor in state.items():
        digest.update(name.encode())
        flat = tensor.detach().cpu().contiguous().reshape(-1)  # a 0-dim tensor has no byte view
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
