"""How long posexp takes to start: ``posexp train -h`` and a tiny ``posexp train`` (one
layer, 2,048 tokens, scored at 2 lengths), each run N times in a process of its own.

Prints the median wall time and the median CPU time (user + system, of the process and
what it starts) of each, with the machine.  CPU time moves less than wall time on busy
cores; quote wall time only from idle ones.

    python scripts/startup.py [--repeat 5] [--out results/bench/startup.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

TINY = ["model.d_model=32", "model.n_layer=1", "model.n_head=2", "train.seq_len=16",
        "train.tokens=2048", "train.batch_tokens=128", "train.val_every_tokens=1024",
        "train.val_tokens=256", "eval.tokens=512", "eval.lengths=[16,32]", "device=cpu",
        "results_dir=out"]
COMMANDS = {"posexp train -h": ["train", "-h"],
            "posexp train (tiny)": ["train", "encoding=rope", *TINY]}


def timed(args: list[str], cwd: str) -> tuple[float, float]:
    """Wall and CPU seconds of one ``posexp ARGS`` in a process of its own."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "posexp", *args], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", help="also write the table to this markdown file")
    args = parser.parse_args()
    rows = []
    for name, command in COMMANDS.items():
        walls, cpus = [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as cwd:
                wall, cpu = timed(command, cwd)
            walls.append(wall)
            cpus.append(cpu)
        rows.append(f"| {name} | {statistics.median(walls):.2f} s | "
                    f"{statistics.median(cpus):.2f} s |")
    load = os.getloadavg()[0]
    text = "\n".join([
        f"posexp start-up, median of {args.repeat}: {platform.processor() or platform.machine()},"
        f" {os.cpu_count()} cores, load {load:.1f} at the end, Python "
        f"{platform.python_version()}", "", "| command | wall | CPU (user + sys) |",
        "|---|---|---|", *rows])
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
