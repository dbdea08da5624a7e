"""The training loop, and one whole run: data -> model -> train -> checkpoint -> evaluate."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig
from tqdm.auto import tqdm

from posexp import config as C
from posexp.data import Corpus, load_corpus
from posexp.errors import PosexpError, UsageError
from posexp.evaluate import autocast, check_val_size, extrapolation_curve, score_windows
from posexp.model import GPT, GPTConfig
from posexp.runs import Run, code_version, now, versions


class Diverged(PosexpError):
    pass


def pick_device(requested: str) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        raise UsageError("device=cuda but torch sees no CUDA GPU; use device=auto or device=cpu")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


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
        )
    )


def lr_at(step: int, total: int, warmup: int, lr: float, min_ratio: float) -> float:
    """Linear warmup to lr, then cosine decay to lr * min_ratio at the last step."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


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


def fit(model: GPT, corpus: Corpus, cfg: DictConfig, run: Run, device: torch.device) -> dict:
    t = cfg.train
    tokens_per_step = t.batch_size * t.seq_len
    total_steps = t.tokens // tokens_per_step
    warmup = min(total_steps, t.warmup_tokens // tokens_per_step)
    val_every = max(1, t.val_every_tokens // tokens_per_step)
    opt = make_optimizer(model, cfg, device)
    gen = torch.Generator().manual_seed(cfg.seed)
    model.train()
    bar = tqdm(total=total_steps * tokens_per_step, unit="tok", unit_scale=True,
               desc=f"{cfg.encoding.name} L={t.seq_len}", disable=None, dynamic_ncols=True,
               file=sys.stderr)
    start = time.perf_counter()
    last = {"loss": float("nan")}
    for step in range(total_steps):
        lr = lr_at(step, total_steps, warmup, t.lr, t.min_lr_ratio)
        for group in opt.param_groups:
            group["lr"] = lr
        batch = sample_batch(corpus.train, t.batch_size, t.seq_len, gen).to(device)
        with autocast(device):
            loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        bar.update(tokens_per_step)
        done = step + 1
        if done % t.log_every == 0 or done == total_steps:
            # .item() waits for the device, so only at log intervals
            loss_value, norm_value = loss.item(), grad_norm.item()
            elapsed = time.perf_counter() - start
            if not math.isfinite(loss_value):
                raise Diverged(f"loss became {loss_value} at step {done}; last finite loss "
                               f"{last['loss']:.4f}")
            last = {"step": done, "tokens": done * tokens_per_step, "loss": loss_value,
                    "lr": lr, "grad_norm": norm_value, "elapsed": round(elapsed, 3),
                    "tok_per_s": round(done * tokens_per_step / elapsed)}
            run.log(last)
            bar.set_postfix(loss=f"{loss_value:.3f}")
        if done % val_every == 0 or done == total_steps:
            v = val_loss(model, corpus, cfg, device)
            last["val_loss"] = v
            run.log({"step": done, "tokens": done * tokens_per_step, "val_loss": v})
            bar.set_postfix(loss=f"{last['loss']:.3f}", val=f"{v:.3f}")
    bar.close()
    seconds = time.perf_counter() - start
    run.save_checkpoint({
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "step": total_steps,
        "tokens": total_steps * tokens_per_step,
        "data_rng": gen.get_state(),
    })
    return {"train_seconds": round(seconds, 2), "steps": total_steps,
            "tokens_trained": total_steps * tokens_per_step,
            "tok_per_s": round(total_steps * tokens_per_step / seconds),
            "final_train_loss": last["loss"], "final_val_loss": last.get("val_loss")}


def evaluate_run(model: GPT, corpus: Corpus, cfg: DictConfig, run: Run,
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
    return curve, seconds


def run_training(cfg: DictConfig) -> Path:
    """One posexp run; returns its directory.  The run's status in run.json always ends as
    completed, failed or diverged (interrupted when stopped by a signal)."""
    C.check(cfg)
    device = pick_device(C.Device(cfg.device).value)
    corpus = load_corpus(cfg.data)
    if len(corpus.train) <= cfg.train.seq_len + 1:
        raise UsageError(f"the training split has {len(corpus.train)} tokens, fewer than one "
                         f"window of train.seq_len={cfg.train.seq_len}")
    check_val_size(len(corpus.val), C.eval_lengths(cfg), cfg.eval.tokens)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, corpus.vocab_size).to(device)
    path = Path(cfg.results_dir) / cfg.experiment / cfg.run_name
    run = Run.create(path, cfg)
    run.update(name=cfg.run_name, experiment=cfg.experiment, encoding=cfg.encoding.name,
               seq_len=cfg.train.seq_len, seed=cfg.seed, device=str(device),
               n_params=model.n_params(), corpus=corpus.describe(), versions=versions(),
               code_version=code_version())
    print(f"posexp: {cfg.encoding.name}, {model.n_params() / 1e6:.2f}M parameters, "
          f"{cfg.train.tokens:,} tokens at length {cfg.train.seq_len} on {device} -> {path}",
          file=sys.stderr)
    try:
        stats = fit(model, corpus, cfg, run, device)
        run.update(**stats)
        curve, seconds = evaluate_run(model, corpus, cfg, run, device)
    except Diverged as e:
        run.finish("diverged", str(e))
        raise
    except KeyboardInterrupt:
        run.finish("interrupted", "stopped by the user")
        raise
    except BaseException as e:
        run.finish("failed", f"{type(e).__name__}: {e}")
        raise
    run.finish("completed", eval_seconds=round(seconds, 2), completed_at=now())
    print(format_curve(curve, cfg.train.seq_len, f"{path}", per_byte=corpus.tokenizer != "byte"))
    return path


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
    info = run.info()
    if info.get("status") != "completed":
        raise UsageError(f"{run.path} has status {info.get('status')!r}; only completed runs "
                         "can be evaluated")
    device = pick_device(C.Device(cfg.device).value)
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
    curve, seconds = evaluate_run(model.to(device), corpus, cfg, run, device)
    run.update(last_eval_at=now(), last_eval_seconds=round(seconds, 2))
    print(format_curve(curve, cfg.train.seq_len, str(run.path),
                       per_byte=corpus.tokenizer != "byte"))
    return run.path
