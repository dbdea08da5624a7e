"""``posexp train`` end to end at the bench's shape, beside the bench's step rate: what a
user's run trains at, counting validation, logging, checkpoints and start-up, where
scripts/bench.py times the training step alone (issue #47).

    python scripts/bench_train.py --bench results/bench/bench-cuda-DATE.json
    python scripts/bench_train.py --quick       # a tiny shape on the CPU, under a minute

Each encoding trains in two processes one after the other (seeds 0 and 1: two identities
of one shape), as the runs of a campaign do: the first compiles, the second finds
torch.compile's cache (TORCHINDUCTOR_CACHE_DIR, kept between them) warm.  Its speed is
run.json's tok_per_s -- the training loop's tokens over its wall time, validation and
logging included -- and the process's wall time beside it.  With --bench, each row also
gives the bench's posexp step rate for the encoding (compiled where the bench compiled,
its auto kernel) and the ratio.  Writes JSON and markdown beside the bench's files.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPE = {"reference": ["model.d_model=512", "model.n_layer=8", "model.n_head=8",
                       "train.seq_len=512", "train.batch_tokens=32768",
                       "train.val_every_tokens=4000000", "train.log_every=50",
                       "eval.tokens=65536", "eval.lengths=[512]"],
         "quick": ["model.d_model=32", "model.n_layer=1", "model.n_head=2",
                   "train.seq_len=64", "train.batch_tokens=1024", "train.val_every_tokens=16384",
                   "train.log_every=8", "eval.tokens=1024", "eval.lengths=[64]"]}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny shape on the CPU, < 1 minute")
    p.add_argument("--encodings", default="rope,alibi")
    p.add_argument("--tokens", type=int, default=None,
                   help="tokens a run trains (default 16M; --quick 32,768)")
    p.add_argument("--bench", type=Path, default=None,
                   help="scripts/bench.py's JSON at the same shape, for the ratio column")
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    return p.parse_args()


def train_once(encoding: str, seed: int, args: argparse.Namespace, root: Path,
               env: dict) -> dict:
    """One ``posexp train`` process; its run.json's speed and the process's wall time."""
    shape = SHAPE["quick" if args.quick else "reference"]
    tokens = args.tokens or (32_768 if args.quick else 16_000_000)
    device = ["device=cpu"] if args.quick else []
    command = [sys.executable, "-m", "posexp", "train", f"encoding={encoding}", *shape,
               f"train.tokens={tokens}", f"seed={seed}", f"results_dir={root}",
               "experiment=bench-train", *device]
    start = time.perf_counter()
    r = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        return {"encoding": encoding, "seed": seed, "failed": tail[:300]}
    [run_json] = (root / "bench-train").glob(f"{encoding}-*-s{seed}/run.json")
    info = json.loads(run_json.read_text())
    return {"encoding": encoding, "seed": seed, "tokens": tokens,
            "tok_per_s": info["tok_per_s"], "train_seconds": info["train_seconds"],
            "process_seconds": round(wall, 1), "device": info.get("device")}


def bench_rates(path: Path | None) -> dict[str, tuple[str, float]]:
    """encoding -> (mode, tok/s) of the bench's posexp row with the auto kernel: compiled
    where it was timed, else eager."""
    if path is None:
        return {}
    rates = {}
    for row in json.loads(path.read_text())["rows"]:
        if row["model"] != "posexp" or row["encoding"] in rates:
            continue  # the first row of an encoding is its auto kernel's
        mode = "compiled" if "compiled" in row["train"] else "eager"
        rates[row["encoding"]] = (mode, float(row["train"][mode]["tok_per_s"]))
    return rates


def markdown(result: dict) -> str:
    lines = [f"# posexp train end to end, {result['date']} ({result['device']})", "",
             f"Shape: {' '.join(result['shape'])}; {result['tokens']:,} tokens a run.", "",
             "| encoding | process | tok/s (run.json) | train s | process s | bench step "
             "rate | end to end / bench |", "|---|---|---:|---:|---:|---|---:|"]
    for row in result["rows"]:
        if "failed" in row:
            lines.append(f"| {row['encoding']} | {row['seed'] + 1} | failed: {row['failed']} "
                         "| | | | |")
            continue
        bench = row.get("bench")
        lines.append(
            f"| {row['encoding']} | {row['seed'] + 1} | {row['tok_per_s']:,} | "
            f"{row['train_seconds']:.1f} | {row['process_seconds']:.1f} | "
            + (f"{bench[1]:,.0f} ({bench[0]}) | {row['tok_per_s'] / bench[1]:.2f} |"
               if bench else "— | — |"))
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse_args()
    rates = bench_rates(args.bench)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # the compile cache of a campaign: one for all its processes
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / "inductor")}
        for encoding in args.encodings.split(","):
            for seed in (0, 1):
                row = train_once(encoding, seed, args, Path(tmp) / "runs", env)
                if encoding in rates:
                    row["bench"] = rates[encoding]
                rows.append(row)
                print(row, file=sys.stderr)
    done = [r for r in rows if "device" in r]
    result = {"date": dt.date.today().isoformat(),
              "device": done[0]["device"] if done else "unknown",
              "shape": SHAPE["quick" if args.quick else "reference"],
              "tokens": args.tokens or (32_768 if args.quick else 16_000_000),
              "bench": str(args.bench) if args.bench else None, "rows": rows}
    kind = "cpu-quick" if args.quick else ("cuda" if "cuda" in str(result["device"]) else "cpu")
    stem = args.out / f"train-{kind}-{dt.date.today():%Y%m%d}"
    args.out.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    if len(done) < len(rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
