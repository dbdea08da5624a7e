"""Throughput and memory of every encoding: training tokens/s, MFU, peak memory, and the time
and memory of evaluating one long window.

    python scripts/bench.py                 # the reference shape (d 512, 8 layers, 8 heads,
                                            # L 512, batch 64) on the GPU; eval at 4k/16k/64k
    python scripts/bench.py --quick         # a tiny shape on the CPU, under a minute
    python scripts/bench.py --compile       # also time the torch.compile'd model

MFU is model FLOPs (6 x non-embedding parameters + 12 x layers x d_model x L per token,
forward + backward) over the peak measured here by a square matmul in the training dtype
(bf16 on CUDA, fp32 on CPU), not a datasheet number.  Writes JSON and a markdown table to
results/bench/ with the device, versions and date.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import resource
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from posexp.model import GPT, GPTConfig

ENCODINGS = ["nope", "learned", "sinusoidal", "rope", "alibi"]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def peak_memory(device: torch.device) -> float:
    """GiB: the CUDA allocator's peak, or on CPU the process's peak resident set so far."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def autocast(device: torch.device):
    return torch.autocast("cuda", torch.bfloat16) if device.type == "cuda" else nullcontext()


def matmul_peak(device: torch.device, n: int) -> float:
    """FLOP/s of an n x n matmul in the training dtype, best of several."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(10):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def flops_per_token(model: GPT, seq_len: int) -> float:
    c = model.cfg
    non_embedding = model.n_params() - model.tok_emb.weight.numel()
    return 6 * non_embedding + 12 * c.n_layer * c.d_model * seq_len


def bench_train(model: GPT, args, device: torch.device, compiled: bool) -> dict:
    step_model = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    tokens = torch.randint(0, 256, (args.batch_size, args.seq_len + 1), device=device)

    def step() -> torch.Tensor:
        with autocast(device):
            loss = step_model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    reset_peak(device)
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step()
    sync(device)
    warmup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync(device)
    seconds = time.perf_counter() - t0
    tok_s = args.steps * args.batch_size * args.seq_len / seconds
    return {"tok_per_s": tok_s, "step_ms": 1000 * seconds / args.steps,
            "warmup_s": warmup_s, "peak_gib": peak_memory(device),
            "model_tflops": tok_s * flops_per_token(model, args.seq_len) / 1e12}


@torch.no_grad()
def bench_eval(model: GPT, length: int, device: torch.device) -> dict:
    if model.max_positions is not None and length > model.max_positions:
        return {"length": length, "applicable": False}
    model.eval()
    tokens = torch.randint(0, 256, (1, length + 1), device=device)
    reset_peak(device)
    sync(device)
    t0 = time.perf_counter()
    with autocast(device):
        model.token_losses(tokens[:, :-1], tokens[:, 1:]).mean().item()
    sync(device)
    model.train()
    return {"length": length, "applicable": True, "seconds": time.perf_counter() - t0,
            "peak_gib": peak_memory(device)}


def markdown(result: dict) -> str:
    s = result["setup"]
    lines = [f"# posexp benchmark — {s['device_name']}, {s['date']}", "",
             f"torch {s['torch']}, python {s['python']}; d_model {s['d_model']}, "
             f"{s['n_layer']} layers, {s['n_head']} heads, L {s['seq_len']}, batch "
             f"{s['batch_size']}, {s['dtype']}; measured matmul peak "
             f"{s['peak_tflops']:.1f} TFLOP/s", "",
             "| encoding | mode | train tok/s | MFU | step ms | peak GiB | "
             + " | ".join(f"eval {e['length']} s / GiB" for e in result["rows"][0]["eval"])
             + " |",
             "|---|---|---:|---:|---:|---:|" + "---:|" * len(result["rows"][0]["eval"])]
    for row in result["rows"]:
        for mode, t in row["train"].items():
            evals = " | ".join(f"{e['seconds']:.3f} / {e['peak_gib']:.2f}" if e["applicable"]
                               else "n/a" for e in row["eval"])
            lines.append(f"| {row['encoding']} | {mode} | {t['tok_per_s']:,.0f} | "
                         f"{t['mfu']:.1%} | {t['step_ms']:.1f} | {t['peak_gib']:.2f} | {evals} |")
    if s["device"] == "cpu":
        lines += ["", "On CPU, peak GiB is the process's peak resident set so far (it only "
                  "grows), not a per-measurement figure."]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny shape on the CPU, < 1 minute")
    p.add_argument("--device", default="auto")
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--n-layer", type=int, default=8)
    p.add_argument("--n-head", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--eval-lengths", default="4096,16384,65536")
    p.add_argument("--encodings", default=",".join(ENCODINGS))
    p.add_argument("--compile", action="store_true", help="also time torch.compile")
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    args = p.parse_args()
    if args.quick:
        args.device = "cpu" if args.device == "auto" else args.device
        args.d_model, args.n_layer, args.n_head = 64, 2, 4
        args.seq_len, args.batch_size, args.steps, args.warmup = 64, 8, 3, 1
        args.eval_lengths = "256,1024"
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else "cpu" if args.device == "auto" else args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    peak = matmul_peak(device, 8192 if device.type == "cuda" else 1024)
    lengths = [int(x) for x in args.eval_lengths.split(",")]
    rows = []
    for encoding in args.encodings.split(","):
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=256, d_model=args.d_model, n_layer=args.n_layer,
                              n_head=args.n_head, d_ff=4 * args.d_model, encoding=encoding,
                              max_positions=args.seq_len)).to(device)
        modes = {"eager": False, **({"compiled": True} if args.compile else {})}
        train = {}
        for mode, compiled in modes.items():
            t = bench_train(model, args, device, compiled)
            t["mfu"] = t["model_tflops"] * 1e12 / peak
            train[mode] = t
        row = {"encoding": encoding, "train": train,
               "eval": [bench_eval(model, n, device) for n in lengths]}
        rows.append(row)
        print(f"{encoding:>10}: " + ", ".join(f"{m} {t['tok_per_s']:,.0f} tok/s"
                                               for m, t in train.items()), file=sys.stderr)
    now = dt.datetime.now(dt.timezone.utc)
    setup = {
        "date": now.isoformat(timespec="seconds"), "device": device.type,
        "device_name": (torch.cuda.get_device_name() if device.type == "cuda"
                        else f"CPU ({platform.processor() or platform.machine()}, "
                        f"{torch.get_num_threads()} threads)"),
        "torch": torch.__version__, "python": platform.python_version(),
        "dtype": "bf16 autocast" if device.type == "cuda" else "fp32",
        "peak_tflops": peak / 1e12, "d_model": args.d_model, "n_layer": args.n_layer,
        "n_head": args.n_head, "seq_len": args.seq_len, "batch_size": args.batch_size,
        "steps": args.steps, "quick": args.quick,
    }
    result = {"setup": setup, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"bench-{device.type}{'-quick' if args.quick else ''}-{now:%Y%m%d}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    print(f"wrote {stem}.json and {stem}.md", file=sys.stderr)


if __name__ == "__main__":
    main()
