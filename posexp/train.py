"""The training loop, and one whole run: data -> model -> train -> checkpoint -> evaluate."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from posexp import config as C
from posexp.data import Corpus, load_corpus
from posexp.distributed import World, barrier, join, leave, mean
from posexp.errors import PosexpError, UsageError
from posexp.evaluate import autocast, check_val_size, extrapolation_curve, score_windows
from posexp.model import GPT, GPTConfig
from posexp.runs import CHECKPOINT, EVAL, Run, code_version, now, versions
from posexp.sinks import Sink, open_sink


class Diverged(PosexpError):
    def __init__(self, step: int, last_finite: float, value: float) -> None:
        last = f"{last_finite:.4f}" if math.isfinite(last_finite) else "none logged yet"
        super().__init__(f"training diverged: loss became {value} at step {step} "
                         f"(last finite loss: {last})")
        self.fields = {"diverged_at_step": step,
                       "last_finite_loss": last_finite if math.isfinite(last_finite) else None}


class Interrupted(PosexpError):
    def __init__(self, signum: int, step: int) -> None:
        name = signal.Signals(signum).name
        super().__init__(f"stopped by {name} at step {step}; checkpoint saved, run the same "
                         "command again to resume")
        self.exit_code = 128 + signum


def pick_device(cfg: DictConfig, training: bool = True) -> torch.device:
    """The device to run on; on CUDA this also allows TF32 (allow_tf32)."""
    requested = C.Device(cfg.device).value
    if requested == "cuda" and not torch.cuda.is_available():
        raise UsageError("device=cuda but torch sees no CUDA GPU; use device=auto or device=cpu")
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu" and C.Attention(cfg.attention) == C.Attention.flash:
        raise UsageError("attention=flash runs on CUDA only, and this run is on the CPU; "
                         "use attention=auto")
    if requested == "cpu" and training and C.Attention(cfg.attention) == C.Attention.flex:
        raise UsageError("attention=flex cannot train on the CPU (FlexAttention has no CPU "
                         "backward); use attention=auto, or flex in posexp eval")
    device = torch.device(requested)
    allow_tf32(device)
    return device


def allow_tf32(device: torch.device) -> None:
    """TF32 for the fp32 matmuls left outside bf16 autocast on CUDA."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def build_model(cfg: DictConfig, vocab_size: int) -> GPT:
    m = cfg.model
    return GPT(
        GPTConfig(
            vocab_size=vocab_size,
            d_model=m.d_model,
            n_layer=m.n_layer,
            n_head=m.n_head,
            d_ff=m.d_ff or 4 * m.d_model,
            encoding=cfg.encoding.name,
            max_positions=cfg.encoding.max_positions or cfg.train.seq_len,
            rope_base=cfg.encoding.base,
            dropout=m.dropout,
            tie_weights=m.tie_weights,
            attention=C.Attention(cfg.attention).value,
        )
    )


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


def val_loss(model: GPT, corpus: Corpus, cfg: DictConfig, device: torch.device) -> float:
    """Validation loss at the training length on the first train.val_tokens tokens."""
    n = min(cfg.train.val_tokens, len(corpus.val) - cfg.train.seq_len - 1)
    total, _ = score_windows(model, corpus.val, cfg.train.seq_len, cfg.train.seq_len,
                             cfg.train.seq_len, n, cfg.eval.batch_tokens, device)
    model.train()
    return total / n


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


def fit(model: GPT, corpus: Corpus, cfg: DictConfig, run: Run | None, sink: Sink,
        device: torch.device, progress: bool = True, resume: dict | None = None,
        world: World = World()) -> dict:
    """Train to the token budget, checkpointing every train.checkpoint_every tokens and on
    SIGINT/SIGTERM; ``resume`` is a checkpoint to continue from exactly where it stopped.
    In a world of several processes each trains on its slice of every batch, and only rank
    0 (the one given a ``run``) writes."""
    t = cfg.train
    rows = slice(world.rank * t.batch_size // world.size,
                 (world.rank + 1) * t.batch_size // world.size)
    step_model = model
    if world.size > 1:
        step_model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    if use_compile(cfg, device):
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
            batch = sample_batch(corpus.train, t.batch_size, t.seq_len, gen)[rows]
            if device.type == "cuda":  # a copy from pageable memory would wait for the GPU
                batch = batch.pin_memory()
            batch = batch.to(device, non_blocking=True)
            with autocast(device):
                loss = step_model(batch[:, :-1], batch[:, 1:])
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


def evaluate_run(model: GPT, corpus: Corpus, cfg: DictConfig, run: Run, sink: Sink,
                 device: torch.device) -> tuple[list[dict], float]:
    e = cfg.eval
    t0 = time.perf_counter()
    curve, per_position = extrapolation_curve(
        model, corpus.val, C.eval_lengths(cfg), C.EvalMode(e.mode).value, e.stride, e.tokens,
        e.batch_tokens, e.per_position_buckets, device, corpus.token_bytes,
    )
    seconds = time.perf_counter() - t0
    run.write_eval(curve, per_position, train_seq_len=cfg.train.seq_len,
                   encoding=cfg.encoding.name, corpus=corpus.fingerprint)
    sink.log_eval(curve, per_position)
    return curve, seconds


def comparable(config: DictConfig) -> str:
    """The parts of a config that decide what a run computes: not where it is written, how
    it is logged, which kernel computes attention, or whether it may resume."""
    c = OmegaConf.to_container(config, resolve=True, enum_to_str=True)
    for key in ("logger", "results_dir", "experiment", "run_name", "attention"):
        c.pop(key, None)
    c["train"].pop("resume", None)
    return json.dumps(c, sort_keys=True)


def run_training(cfg: DictConfig, progress: bool = True, group: str | None = None) -> str:
    """One posexp run, in results_dir/experiment/run_name; returns "completed", or "skipped"
    when that directory already holds a completed run of this config.

    A run of this config that did not finish (interrupted, killed, failed) continues from its
    last checkpoint, unless train.resume=false, which starts afresh; a run of another config
    in the same directory is replaced.  run.json's status always ends as completed, failed,
    diverged or interrupted.  ``progress`` shows a progress bar on a terminal; ``group``
    names the W&B group (a sweep).
    """
    C.check(cfg)
    path = Path(cfg.results_dir) / cfg.experiment / cfg.run_name
    previous = Run.previous(path)
    same = previous is not None and comparable(previous[1]) == comparable(cfg)
    status = previous[0].get("status") if previous else None
    if same and status == "completed" and cfg.train.resume:
        try:
            if not Run(path).read_eval()["curve"]:
                raise PosexpError(f"{path / EVAL} is missing")
            print(f"posexp: {path}: already completed with this config, skipped "
                  "(train.resume=false trains it again)", file=sys.stderr)
            return "skipped"
        except PosexpError as e:  # resuming from the final checkpoint evaluates again
            print(f"posexp: warning: {e}; evaluating it again", file=sys.stderr)
    device = pick_device(cfg)
    world = join(device.type)
    try:
        return train_and_evaluate(cfg, path, previous, same, device, world, progress, group)
    finally:
        # every process stays until rank 0 has evaluated: a process that tears its gloo
        # connections down while another still holds them aborts (SIGABRT) at exit
        barrier(world)
        leave(world)


def train_and_evaluate(cfg: DictConfig, path: Path, previous: tuple | None, same: bool,
                       device: torch.device, world: World, progress: bool,
                       group: str | None) -> str:
    if cfg.train.batch_size % world.size:
        raise UsageError(f"train.batch_size ({cfg.train.batch_size}) must be divisible by the "
                         f"number of processes ({world.size})")
    if world.size > 1 and device.type == "cuda":
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
    corpus = load_corpus(cfg.data)
    if len(corpus.train) <= cfg.train.seq_len + 1:
        raise UsageError(f"the training split has {len(corpus.train)} tokens, fewer than one "
                         f"window of train.seq_len={cfg.train.seq_len}")
    check_val_size(len(corpus.val), C.eval_lengths(cfg), cfg.eval.tokens)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, corpus.vocab_size).to(device)
    state = None
    if same and cfg.train.resume and (path / CHECKPOINT).exists():
        try:
            state = Run(path).load_checkpoint()
            model.load_state_dict(state["model"])
        except (PosexpError, KeyError, RuntimeError) as e:
            print(f"posexp: warning: {path}: cannot resume ({str(e).splitlines()[0]}); "
                  "starting afresh", file=sys.stderr)
            state = None
            torch.manual_seed(cfg.seed)
            model = build_model(cfg, corpus.vocab_size).to(device)
    barrier(world)  # every process has read the directory before rank 0 changes it
    if not world.main:
        fit(model, corpus, cfg, None, Sink(), device, False, state, world)
        return "completed"
    if state is not None:
        run = Run(path)
        run.resume(state["step"])
        print(f"posexp: {path}: resuming from step {state['step']} "
              f"({state['tokens']:,} tokens)", file=sys.stderr)
    else:
        if previous is not None and not same:
            print(f"posexp: {path}: replacing a run of another config", file=sys.stderr)
        run = Run.create(path, cfg)
    run.update(name=cfg.run_name, experiment=cfg.experiment, encoding=cfg.encoding.name,
               seq_len=cfg.train.seq_len, seed=cfg.seed, device=str(device),
               n_params=model.n_params(), corpus=corpus.describe(), versions=versions(),
               model={k: cfg.model[k] for k in ("d_model", "n_layer", "n_head")},
               code_version=code_version())
    print(f"posexp: {cfg.encoding.name}, {model.n_params() / 1e6:.2f}M parameters, "
          f"{cfg.train.tokens:,} tokens at length {cfg.train.seq_len} on {device}"
          + (f" x {world.size} processes" if world.size > 1 else "") + f" -> {path}",
          file=sys.stderr)
    sink = open_sink(cfg, path, group)
    try:
        stats = fit(model, corpus, cfg, run, sink, device, progress, state, world)
        run.update(**stats, weights_sha256=weights_hash(model))
        curve, seconds = evaluate_run(model, corpus, cfg, run, sink, device)
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
    print(format_curve(curve, cfg.train.seq_len, f"{path}", per_byte=corpus.tokenizer != "byte"))
    return "completed"


def weights_hash(model: GPT) -> str:
    """SHA-256 over every tensor of the state dict, in order: equal hashes, equal weights."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


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
    bits per byte when tokens are not bytes."""
    lines = []
    extra = f"  {'bits/byte':>9}" if per_byte else ""
    for mode in dict.fromkeys(p["mode"] for p in curve):
        points = [p for p in curve if p["mode"] == mode]
        lines.append(f"\n{title}: {mode}, {points[0]['tokens']:,} tokens scored at every length")
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


def reevaluate(run: Run, cfg: DictConfig) -> Path:
    """Score a saved checkpoint again (other lengths, mode or stride) without training."""
    C.check_eval(cfg)
    C.check_attention(cfg)
    info = run.info()
    if info.get("status") != "completed":
        raise UsageError(f"{run.path} has status {info.get('status')!r}; only completed runs "
                         "can be evaluated")
    device = pick_device(cfg, training=False)
    corpus = load_corpus(cfg.data)
    trained_on = info.get("corpus", {})
    for key, what in (("fingerprint", "corpus"), ("tokenizer_fingerprint", "tokenizer")):
        was, current = trained_on.get(key), getattr(corpus, key)
        if was and was != current:
            raise PosexpError(f"the {what} has changed since {run.path} was trained "
                              f"(fingerprint {current[:12]}, run has {was[:12]})")
    state = run.load_checkpoint()
    model = build_model(cfg, corpus.vocab_size)
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as e:
        raise PosexpError(f"{run.path}: checkpoint does not match config.yaml: "
                          f"{str(e).splitlines()[0]}") from None
    curve, seconds = evaluate_run(model.to(device), corpus, cfg, run, Sink(), device)
    run.update(last_eval_at=now(), last_eval_seconds=round(seconds, 2))
    print(format_curve(curve, cfg.train.seq_len, str(run.path),
                       per_byte=corpus.tokenizer != "byte"))
    return run.path
