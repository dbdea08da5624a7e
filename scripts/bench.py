"""Throughput and memory of every encoding: training tokens/s, MFU, peak memory, the time and
memory of evaluating one long window and of a whole extrapolation curve, and how closely
the attention kernels of every score-bias encoding agree.

    python scripts/bench.py                  # the reference shape (d 512, 8 layers, 8 heads,
                                             # L 512, batch 64) on the GPU; eval at 4k/16k/64k
    python scripts/bench.py --quick          # a tiny shape on the CPU, under a minute
    python scripts/bench.py --compile        # also time the torch.compile'd model
    python scripts/bench.py --bias-kernels flex,sdpa    # one row per kernel for each
                                             # score-bias encoding (alibi, t5, kerple_*, fox,
                                             # fire), where it has that kernel
    python scripts/bench.py --ssmax          # also each encoding with SSMax (model.ssmax)
    python scripts/bench.py --xtransformers  # side by side with x-transformers on the same
                                             # shapes, its defaults otherwise (eager; rotary
                                             # on half of each head, as it ships)
                                             # (pip install -e ".[bench]")

MFU is model FLOPs (6 x non-embedding parameters + 12 x layers x d_model x L per token,
forward + backward) over the peak measured here by a square matmul in the training dtype
(bf16 on CUDA, fp32 on CPU; the higher of a measurement at the start and at the end), not
a datasheet number.  Training speed is the best of --repeats timed runs.  The curve is
posexp's own evaluation (nonoverlapping, the same tokens at every length) at 16 lengths
spaced geometrically from L to the longest eval length.  Writes JSON and a markdown table
to results/bench/ with the device, versions and date (named to the minute).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from posexp.attention import bias_kernel, causal_attention, flash_attn_installed
from posexp.encodings import ModelShape, build_encoding, in_order, spec_of
from posexp.evaluate.windows import Scoring, autocast, extrapolation_curve
from posexp.model import GPT, GPTConfig
from posexp.run.setup import allow_tf32
from posexp.spans import layout

ENCODINGS = in_order()
# x-transformers has no plain (unscaled) sinusoidal table, so it has no sinusoidal row
XT_ENCODINGS = ["nope", "learned", "rope", "alibi"]


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


def matmul_peak(device: torch.device, n: int) -> float:
    """FLOP/s of an n x n matmul in the training dtype, best of several."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(30):
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


class XTransformersLM(nn.Module):
    """x-transformers' decoder at posexp's shape, behind posexp's loss interface."""

    def __init__(self, encoding: str, args, max_len: int) -> None:
        super().__init__()
        try:
            from x_transformers import Decoder, TransformerWrapper
        except ImportError:
            sys.exit("bench.py: --xtransformers needs x-transformers (pip install -e '.[bench]')")
        layers = {"dim": args.d_model, "depth": args.n_layer, "heads": args.n_head,
                  "attn_dim_head": args.d_model // args.n_head, "attn_flash": True,
                  "ff_no_bias": True}
        if encoding == "rope":
            layers["rotary_pos_emb"] = True
        if encoding == "alibi":
            layers.update(alibi_pos_bias=True, alibi_num_heads=args.n_head)
        learned = encoding == "learned"
        self.max_positions = args.seq_len if learned else None
        self.net = TransformerWrapper(
            num_tokens=256, max_seq_len=args.seq_len if learned else max_len,
            attn_layers=Decoder(**layers), use_abs_pos_emb=learned, tie_embedding=True)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.net(idx).transpose(1, 2).float(), targets)

    def token_losses(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.net(idx).transpose(1, 2).float(), targets, reduction="none")


def bench_train(model: nn.Module, flops: float, args, device: torch.device,
                compiled: bool) -> dict:
    step_model = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    tokens = torch.randint(0, 256, (args.batch_size, args.seq_len + 1), device=device)

    def step() -> None:
        with autocast(device):
            loss = step_model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    reset_peak(device)
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step()
    sync(device)
    warmup_s = time.perf_counter() - t0
    # the fastest of several timed runs: a shared machine only ever makes a run slower
    runs = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        sync(device)
        runs.append(time.perf_counter() - t0)
    seconds = min(runs)
    tok_s = args.steps * args.batch_size * args.seq_len / seconds
    return {"tok_per_s": tok_s, "step_ms": 1000 * seconds / args.steps,
            "step_ms_runs": [round(1000 * r / args.steps, 2) for r in runs],
            "warmup_s": warmup_s, "peak_gib": peak_memory(device),
            "model_tflops": tok_s * flops / 1e12}


@torch.no_grad()
def bench_eval(model: nn.Module, length: int, device: torch.device) -> dict:
    if model.max_positions is not None and length > model.max_positions:
        return {"length": length, "applicable": False}
    model.eval()
    tokens = torch.randint(0, 256, (1, length + 1), device=device)
    reset_peak(device)
    sync(device)
    t0 = time.perf_counter()
    try:
        with autocast(device):
            model.token_losses(tokens[:, :-1], tokens[:, 1:]).mean().item()
    except torch.OutOfMemoryError:
        return {"length": length, "applicable": True, "oom": True}
    finally:
        model.train()
    sync(device)
    return {"length": length, "applicable": True, "oom": False,
            "seconds": time.perf_counter() - t0, "peak_gib": peak_memory(device)}


def curve_lengths(shortest: int, longest: int, n: int) -> list[int]:
    return sorted({round(shortest * (longest / shortest) ** (i / (n - 1))) for i in range(n)})


def bench_curve(model: GPT, lengths: list[int], n_tokens: int, device: torch.device) -> dict:
    """posexp's evaluation of one whole curve on random bytes: wall time and peak memory."""
    val = np.random.default_rng(0).integers(0, 256, max(lengths) + n_tokens + 1, dtype=np.uint8)
    reset_peak(device)
    t0 = time.perf_counter()
    spans = layout(len(val), np.zeros(1, dtype=np.int64), n_tokens)  # one document
    curve, _ = extrapolation_curve(model, val, lengths,
                                   Scoring("nonoverlapping", None, n_tokens, 32_768, 64), spans,
                                   device)
    sync(device)
    model.train()
    return {"lengths": lengths, "tokens": n_tokens, "seconds": time.perf_counter() - t0,
            "applicable": sum(p["applicable"] for p in curve), "peak_gib": peak_memory(device)}


@torch.no_grad()
def kernel_agreement(device: torch.device, encodings: list[str], kernels: list[str],
                     lengths: list[int], shape: ModelShape) -> list[dict]:
    """Largest difference of each kernel of each score-bias encoding (at its initial
    parameters), in the training dtype, from the fp32 SDPA path on the same random queries,
    keys and values."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    rows = []
    for encoding in encodings:
        module = build_encoding(encoding, shape).to(device).layer_encoding(0)
        for length in lengths:
            torch.manual_seed(length)
            q, k, v = (torch.randn(1, shape.n_head, length, shape.d_head, device=device)
                       for _ in range(3))
            # layer 0's bias, bound to a random input where it reads one (FoX's gates)
            bias = module.at_layer(0, torch.randn(1, length, shape.d_model, device=device))
            reference = causal_attention(q, k, v, bias, kernel="sdpa")
            for kernel in (k for k in kernels if k in bias.bias_kernels):
                row = {"encoding": encoding, "kernel": kernel, "length": length,
                       "dtype": str(dtype)}
                try:
                    out = causal_attention(q.to(dtype), k.to(dtype), v.to(dtype), bias,
                                           kernel=kernel)
                    row["max_abs_diff"] = (out.float() - reference).abs().max().item()
                except Exception as e:  # a kernel this GPU cannot build
                    row["error"] = failure(e)  # (an H200: flex for a bias, out of resource)
                rows.append(row)
    return rows


def failure(e: BaseException) -> str:
    """An exception as the bench's table shows it: its type and the last line of its
    message (Inductor's errors end with what Triton said)."""
    lines = [line for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:300]


def speed_ratios(rows: list[dict], reference: str = "alibi") -> list[str]:
    """Each encoding's training speed over ALiBi's (posexp's eager rows, timed one after
    another in this process): Press et al.'s Table 1 compares them so.  A claim suite's runs,
    trained beside other work on shared cores, cannot."""
    eager: dict[str, float] = {}
    for r in rows:
        if r["model"] == "posexp" and "eager" in r["train"]:
            eager.setdefault(r["encoding"], r["train"]["eager"]["tok_per_s"])
    if reference not in eager or len(eager) < 2:
        return []
    return ["", f"Training speed relative to {reference} (eager, the first kernel row of "
                "each, timed back to back in this process):", "",
            "| encoding | tok/s | / " + reference + " |", "|---|---:|---:|",
            *(f"| {e} | {v:,.0f} | {v / eager[reference]:.3f} |" for e, v in eager.items())]


def markdown(result: dict) -> str:
    s = result["setup"]
    evals = result["rows"][0]["eval"] if result["rows"] else []
    curves = bool(s["curve_points"])  # a column only when the bench scored a curve
    lines = [f"# posexp benchmark — {s['device_name']}, {s['date']}", "",
             f"torch {s['torch']}, python {s['python']}; d_model {s['d_model']}, "
             f"{s['n_layer']} layers, {s['n_head']} heads, L {s['seq_len']}, batch "
             f"{s['batch_size']}, {s['dtype']}; measured matmul peak "
             f"{s['peak_tflops']:.1f} TFLOP/s"
             + (f"; x-transformers {s['x_transformers']}" if s["x_transformers"] else "")
             + ("" if s["complete"] else
                f"\n\n**Incomplete**: stopped after {len(result['rows'])} rows."), "",
             "| model | encoding | attention | mode | train tok/s | MFU | step ms | peak GiB | "
             + " | ".join(f"eval {e['length']} s / GiB" for e in evals)
             + (f" | curve ({s['curve_points']} lengths) s |" if curves else " |"),
             "|---|---|---|---|---:|---:|---:|---:|" + "---:|" * (len(evals) + curves)]

    def cell(e: dict) -> str:
        if not e["applicable"]:
            return "n/a"
        return "out of memory" if e["oom"] else f"{e['seconds']:.3f} / {e['peak_gib']:.2f}"

    for row in result["rows"]:
        for mode, t in row["train"].items():
            curve = f" | {row['curve']['seconds']:.2f}" if row.get("curve") else " | —"
            lines.append(f"| {row['model']} | {row['encoding']} | {row['attention']} | {mode} | "
                         f"{t['tok_per_s']:,.0f} | {t['mfu']:.1%} | {t['step_ms']:.1f} | "
                         f"{t['peak_gib']:.2f} | " + " | ".join(map(cell, row["eval"]))
                         + (curve if curves else "") + " |")
    lines += speed_ratios(result["rows"])
    lines += ["", "Score-bias kernels against the fp32 SDPA path (largest absolute difference):",
              "", "| encoding | kernel | length | dtype | max abs diff |",
              "|---|---|---:|---|---:|"]
    lines += [f"| {a['encoding']} | {a['kernel']} | {a['length']} | {a['dtype']} | "
              + (f"{a['max_abs_diff']:.2e} |" if "error" not in a else f"failed: {a['error']} |")
              for a in result["kernel_agreement"]]
    lines += [f"\nFailed: {f['encoding']} on {f['attention']}: {f['error']}"
              for f in result.get("failed", [])]
    if s["device"] == "cpu":
        lines += ["", "On CPU, peak GiB is the process's peak resident set so far (it only "
                  "grows), not a per-measurement figure."]
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
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
    p.add_argument("--repeats", type=int, default=3, help="timed runs of --steps; the best counts")
    p.add_argument("--eval-lengths", default="4096,16384,65536")
    p.add_argument("--curve-points", type=int, default=16, help="lengths in the curve; 0: none")
    p.add_argument("--curve-tokens", type=int, default=32_768)
    p.add_argument("--encodings", default=",".join(ENCODINGS))
    p.add_argument("--bias-kernels", default="auto",
                   help="comma-separated kernels to time for each score-bias encoding, one row "
                   "each where the encoding has the kernel: auto, sdpa, flex, flash")
    p.add_argument("--compile", action="store_true", help="also time torch.compile")
    p.add_argument("--ssmax", action="store_true",
                   help="also time each encoding with SSMax (model.ssmax), as ENCODING+ssmax")
    p.add_argument("--xtransformers", action="store_true",
                   help="also time x-transformers (attn_flash=True) on the same shapes")
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    args = p.parse_args()
    if args.quick:
        args.device = "cpu" if args.device == "auto" else args.device
        args.d_model, args.n_layer, args.n_head = 64, 2, 4
        args.seq_len, args.batch_size, args.steps, args.warmup, args.repeats = 64, 8, 3, 1, 1
        args.eval_lengths, args.curve_points, args.curve_tokens = "256,1024", 4, 2048
    return args


class Bench:
    """One benchmark: the rows measured so far, written after every row, so that a run cut
    short by a time limit still leaves what it measured (marked incomplete)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device = torch.device(
            "cuda" if args.device == "auto" and torch.cuda.is_available()
            else "cpu" if args.device == "auto" else args.device)
        allow_tf32(self.device)
        self.peak_n = 8192 if self.device.type == "cuda" else 1024
        self.peak = matmul_peak(self.device, self.peak_n)
        self.lengths = [int(x) for x in args.eval_lengths.split(",")]
        self.curve = (curve_lengths(args.seq_len, max(self.lengths), args.curve_points)
                      if args.curve_points > 1 else [])
        self.modes = {"eager": False, **({"compiled": True} if args.compile else {})}
        self.available = ["sdpa", "flex"] + (
            ["flash"] if self.device.type == "cuda" and flash_attn_installed() else [])
        self.now = dt.datetime.now(dt.timezone.utc)
        # to the minute: a second benchmark on the same day writes beside the first, never
        # over it (a document may quote the first)
        self.stem = args.out / (f"bench-{self.device.type}{'-quick' if args.quick else ''}-"
                                f"{self.now:%Y%m%d-%H%M}")
        self.rows: list[dict] = []
        self.agreement: list[dict] = []
        self.failed: list[dict] = []  # kernels that did not run here, with why

    def setup(self, complete: bool) -> dict:
        args, device = self.args, self.device
        return {
            "date": self.now.isoformat(timespec="seconds"), "device": device.type,
            "device_name": (torch.cuda.get_device_name() if device.type == "cuda"
                            else f"CPU ({platform.processor() or platform.machine()}, "
                            f"{torch.get_num_threads()} threads)"),
            "torch": torch.__version__, "python": platform.python_version(),
            "x_transformers": (importlib.metadata.version("x-transformers")
                               if args.xtransformers else None),
            "flash_attn": flash_attn_installed(),
            "dtype": "bf16 autocast" if device.type == "cuda" else "fp32",
            "peak_tflops": self.peak / 1e12, "d_model": args.d_model, "n_layer": args.n_layer,
            "n_head": args.n_head, "seq_len": args.seq_len, "batch_size": args.batch_size,
            "steps": args.steps, "repeats": args.repeats, "quick": args.quick,
            "curve_points": len(self.curve), "curve_tokens": args.curve_tokens,
            "complete": complete,
        }

    def write(self, complete: bool) -> dict:
        for row in self.rows:
            for t in row["train"].values():
                t["mfu"] = t["model_tflops"] * 1e12 / self.peak
        result = {"setup": self.setup(complete), "rows": self.rows,
                  "kernel_agreement": self.agreement, "failed": self.failed}
        self.args.out.mkdir(parents=True, exist_ok=True)
        self.stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        self.stem.with_suffix(".md").write_text(markdown(result))
        return result

    def measure(self, model: nn.Module, flops: float, row: dict) -> None:
        row["params"] = sum(p.numel() for p in model.parameters())
        row["train"] = {}
        # x-transformers runs eager only, as researchers run it (and as #4's figures did)
        for mode, compiled in (self.modes if isinstance(model, GPT)
                               else {"eager": False}).items():
            row["train"][mode] = bench_train(model, flops, self.args, self.device, compiled)
        row["eval"] = [bench_eval(model, n, self.device) for n in self.lengths]
        if self.curve and isinstance(model, GPT):
            row["curve"] = bench_curve(model, self.curve, self.args.curve_tokens, self.device)
        self.rows.append(row)
        self.write(complete=False)
        print(f"{row['model']:>14} {row['encoding']:>10} {row['attention']:>5}: "
              + ", ".join(f"{m} {t['tok_per_s']:,.0f} tok/s" for m, t in row["train"].items()),
              file=sys.stderr)

    def encoding(self, encoding: str, has: tuple[str, ...], ssmax: bool = False) -> None:
        """posexp's rows of ``encoding``, one per kernel asked for that it has (``has``)
        and this machine runs, with SSMax where ``ssmax`` (its s_h at 1 / ln L, as
        model.ssmax starts); x-transformers' row, where it has the encoding."""
        args, device = self.args, self.device
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        kernels = ([k for k in args.bias_kernels.split(",")
                    if k == "auto" or (k in has and k in self.available)] if has else ["auto"])
        for kernel in kernels:
            torch.manual_seed(0)
            model = GPT(GPTConfig(vocab_size=256, d_model=args.d_model, n_layer=args.n_layer,
                                  n_head=args.n_head, d_ff=4 * args.d_model, encoding=encoding,
                                  max_positions=args.seq_len, attention=kernel,
                                  ssmax_init=1 / np.log(args.seq_len) if ssmax else None)
                        ).to(device)
            flops = flops_per_token(model, args.seq_len)
            # the kernel the model runs, for the label: auto's choice for a score bias, and
            # SDPA's own causal kernel without one
            kernel = (bias_kernel(kernel, torch.empty(0, device=device, dtype=dtype), 0.0,
                                  model.encoding) if has else "sdpa")
            name = f"{encoding}+ssmax" if ssmax else encoding
            try:
                self.measure(model, flops, {"model": "posexp", "encoding": name,
                                            "attention": kernel})
            except Exception as e:  # one kernel's failure: the others go on
                self.failed.append({"encoding": name, "attention": kernel,
                                    "error": failure(e)})
                print(f"posexp {name} {kernel}: failed: {failure(e)}", file=sys.stderr)
                self.write(complete=False)
        if args.xtransformers and encoding in XT_ENCODINGS and not ssmax:
            torch.manual_seed(0)
            xt = XTransformersLM(encoding, args, max(self.lengths)).to(device)
            self.measure(xt, flops, {"model": "x-transformers", "encoding": encoding,
                                     "attention": "attn_flash"})


def main() -> None:
    args = parse_args()
    bench = Bench(args)
    encodings = args.encodings.split(",")
    try:  # the kernels each encoding's class can run its score bias on; none without one
        has_kernels = {e: spec_of(e).module.bias_kernels for e in encodings}
    except ValueError as e:
        sys.exit(f"bench.py: {e}")
    shape = ModelShape(d_model=args.d_model, n_head=args.n_head, n_layer=args.n_layer)
    # --quick: the training length alone (each length compiles flex again: most of its time)
    checked = [args.seq_len] if args.quick else [args.seq_len, min(bench.lengths)]
    bench.agreement = kernel_agreement(bench.device, [e for e in encodings if has_kernels[e]],
                                       bench.available, checked, shape)
    for encoding in encodings:
        bench.encoding(encoding, has_kernels[encoding])
        if args.ssmax:
            bench.encoding(encoding, has_kernels[encoding], ssmax=True)
    # the peak again at the end, and the higher of the two: one measurement on a shared
    # machine can catch a busy moment and put MFU above 100%
    bench.peak = max(bench.peak, matmul_peak(bench.device, bench.peak_n))
    print(markdown(bench.write(complete=True)))
    print(f"wrote {bench.stem}.json and {bench.stem}.md", file=sys.stderr)


if __name__ == "__main__":
    main()
