"""Token cache build throughput and peak memory on a generated corpus.

    python scripts/bench_cache.py --size-mb 300 --tokenizer byte
    python scripts/bench_cache.py --size-mb 300 --tokenizer bpe --vocab-size 8192
    python scripts/bench_cache.py --size-mb 2500 --tokenizer byte --limit-mb 1024

Generates English-like text (Zipf-distributed pseudo-words in lines; a few large files, so
that one document is far larger than a block), then builds its token cache in a child
process and reports each phase's throughput in MB of text per second of wall time and per
CPU-second (all threads; the fairer figure on a shared machine), and the child's peak
resident memory.  --limit-mb caps the child's address space (RLIMIT_AS) below the corpus
size, so a build that held the corpus in memory would fail.  Everything generated is
deleted at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHILD = """
import json, os, resource, sys, time
from pathlib import Path

args = json.loads(sys.argv[1])
if args["limit_mb"]:
    limit = args["limit_mb"] << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

from omegaconf import OmegaConf
from posexp.config.schema import DataConfig
from posexp.data import make_tokenizer, open_source, scan, write_tokens
from posexp.data.cache import build_once

cfg = OmegaConf.merge(OmegaConf.structured(DataConfig), dict(
    name="bench", source="text", path=args["corpus"], tokenizer=args["tokenizer"],
    vocab_size=args["vocab_size"], cache_dir=args["cache"]))
seconds, cpu_seconds = {}, {}


def timed(phase, fn):
    t, c = time.perf_counter(), os.times()
    result = fn()
    seconds[phase] = time.perf_counter() - t
    cpu_seconds[phase] = sum(os.times()[:2]) - sum(c[:2])
    return result


source = open_source(cfg)
scanned = timed("fingerprint", lambda: scan(source))
tokenizer = timed("train_tokenizer",
                  lambda: make_tokenizer(cfg, source, scanned.fingerprint, Path(args["cache"])))
directory = Path(args["cache"]) / "tokens"
timed("tokenize",
      lambda: build_once(directory, lambda tmp: write_tokens(tmp, source, tokenizer, scanned)))
meta = json.loads((directory / "meta.json").read_text())
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "bytes": scanned.bytes,
                  "tokens": meta["tokens"],
                  "dtype": meta["dtype"], "vocab_size": meta["vocab_size"],
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def generate(directory: Path, size_mb: int, files: int, seed: int = 0) -> int:
    """Zipf-distributed pseudo-words, 8-16 to a line, in ``files`` files of equal size."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    lengths = rng.integers(1, 10, 20_000)
    vocab = np.array(["".join(rng.choice(letters, n)) for n in lengths])
    per_file = size_mb * 1_000_000 // files
    total = 0
    for i in range(files):
        with (directory / f"part{i:03d}.txt").open("w") as f:
            written = 0
            while written < per_file:
                words = vocab[np.minimum(rng.zipf(1.3, 50_000), len(vocab)) - 1]
                breaks = np.cumsum(rng.integers(8, 17, len(words) // 8))
                lines = [" ".join(line) for line in np.split(words, breaks[breaks < len(words)])]
                text = ".\n".join(lines) + ".\n"
                f.write(text)
                written += len(text)
        total += (directory / f"part{i:03d}.txt").stat().st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=300)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--tokenizer", choices=["byte", "bpe"], default="byte")
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--limit-mb", type=int, default=0, help="address-space cap (RLIMIT_AS)")
    parser.add_argument("--dir", default=None, help="where to generate (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="posexp-bench-", dir=args.dir))
    try:
        corpus, cache = work / "corpus", work / "cache"
        corpus.mkdir()
        t = time.perf_counter()
        size = generate(corpus, args.size_mb, args.files)
        print(f"generated {size / 1e6:,.0f} MB in {args.files} files "
              f"({time.perf_counter() - t:.0f} s)", file=sys.stderr)
        child = {"corpus": str(corpus), "cache": str(cache), "tokenizer": args.tokenizer,
                 "vocab_size": args.vocab_size, "limit_mb": args.limit_mb}
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(child)], check=True,
                             capture_output=True, text=True)
        result = json.loads(out.stdout)
        text_mb = sum(result["bytes"].values()) / 1e6
        train_mb = result["bytes"]["train"] / 1e6
        rates = {"fingerprint": text_mb, "train_tokenizer": train_mb, "tokenize": text_mb}
        report = {
            "corpus_mb": round(text_mb, 1),
            "tokenizer": args.tokenizer,
            "vocab_size": result["vocab_size"],
            "dtype": result["dtype"],
            "tokens": sum(result["tokens"].values()),
            "seconds": {k: round(v, 1) for k, v in result["seconds"].items()},
            "mb_per_s": {k: round(rates[k] / v, 1) for k, v in result["seconds"].items()
                         if v > 0.05},
            "mb_per_cpu_s": {k: round(rates[k] / v, 1)
                             for k, v in result["cpu_seconds"].items() if v > 0.05},
            "peak_rss_mb": round(result["peak_rss_mb"]),
            "address_space_limit_mb": args.limit_mb or None,
            "cpus": os.cpu_count(),
        }
        print(json.dumps(report, indent=2))
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
