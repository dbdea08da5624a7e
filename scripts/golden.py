"""The golden numbers of posexp's protocol: a fixed tiny run per encoding -- a corpus this
script writes, one layer, 768 training tokens on the CPU in fp32 with one thread, a small
evaluation -- whose training losses, validation losses and scored losses are recorded
exactly (float.hex) in tests/golden/protocol.json with the protocol they were made under
(posexp.version.PROTOCOL).  tests/unit/test_golden.py runs the same and compares bit for bit,
so any change to what training or scoring computes fails it until PROTOCOL is bumped and this
script is run again.  Bit for bit on the kind of machine that recorded them (torch version, its
CPU kernels' instruction set, the processor): another CPU's kernels round the last bits
otherwise (an AVX-512 EPYC and the machine of 356a5b2 differ by up to 9e-8 relative on the same
code), so there they must agree to RELATIVE, far below what a change to the computation moves:


    .venv/bin/python scripts/golden.py          # writes tests/golden/protocol.json
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "golden" / "protocol.json"
ENCODINGS = ("rope", "alibi")  # a rotary encoding and a score bias: both attention paths
RELATIVE = 1e-6  # how far another machine kind's numbers may round from the record's
WORDS = ["the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with",
         "be", "by", "on", "not", "this", "are", "or", "from", "at", "which", "but", "have",
         "an", "they", "were", "one", "all", "position", "rotary", "attention", "window",
         "length"]
RUN = ["model.d_model=32", "model.n_layer=1", "model.n_head=2", "train.seq_len=16",
       "train.tokens=768", "train.batch_tokens=64", "train.warmup_tokens=128",
       "train.log_every=1", "train.val_every_tokens=384", "train.val_tokens=256",
       "eval.tokens=256", "eval.lengths=[16,32,64]", "device=cpu", "logger=local"]


def write_corpus(root: Path) -> None:
    """Train and validation text made by a fixed linear congruential generator: the same
    bytes under any Python, numpy or platform."""
    state = 12345
    for split, n_docs in (("train", 4), ("val", 2)):
        for d in range(n_docs):
            lines = []
            for _ in range(40):
                words = []
                for _ in range(8):
                    state = (1103515245 * state + 12345) % 2**31
                    words.append(WORDS[state % len(WORDS)])
                lines.append(" ".join(words).capitalize() + ".\n")
            (root / split).mkdir(parents=True, exist_ok=True)
            (root / split / f"doc{d}.txt").write_text("".join(lines))


def hexes(values: list[float]) -> list[str]:
    return [float(v).hex() for v in values]


def measure_one(root: Path, encoding: str) -> dict:
    """Train and score the fixed run of ``encoding`` under ``root``; its numbers as hex."""
    from posexp import config as C
    from posexp import train

    C.register()
    cfg = C.compose([*RUN, f"encoding={encoding}", "data=text",
                     f"data.train_path={root / 'train'}", f"data.val_path={root / 'val'}",
                     f"data.cache_dir={root / 'cache'}", f"results_dir={root / 'out'}"])
    C.check(cfg)
    spec = C.RunSpec.of(cfg)
    if train(spec, progress=False) != "completed":
        raise RuntimeError(f"{spec.path}: the golden run did not train afresh")
    metrics = [json.loads(line) for line in (spec.path / "metrics.jsonl").read_text()
               .splitlines() if line.strip()]
    curve = json.loads((spec.path / "eval.json").read_text())["curve"]
    return {"train_loss": hexes([m["loss"] for m in metrics if "loss" in m]),
            "val_loss": hexes([m["val_loss"] for m in metrics if "val_loss" in m]),
            "eval_loss": {f"{p['mode']}@{p['length']}": float(p["loss"]).hex()
                          for p in curve if p.get("applicable", True)}}


def measure() -> dict:
    """Every encoding's golden numbers, measured in a fresh temporary directory, on one CPU
    thread (a reduction split over threads sums in another order)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory(prefix="posexp-golden-") as tmp:
            root = Path(tmp)
            write_corpus(root)
            return {e: measure_one(root, e) for e in ENCODINGS}
    finally:
        torch.set_num_threads(threads)


def machine() -> dict:
    """The kind of machine whose CPU kernels computed the numbers: the same numbers, bit for
    bit, on the same kind."""
    import torch

    model = next((line.split(":", 1)[1].strip() for line in _cpuinfo().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown")
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "processor": f"{platform.machine()} {model}"}


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux
        return ""


def same(golden: str, measured: str, relative: float) -> bool:
    """Two recorded numbers (float.hex) equal, or within ``relative`` of each other."""
    if golden == measured or not relative:
        return golden == measured
    g, m = float.fromhex(golden), float.fromhex(measured)
    return abs(g - m) <= relative * max(abs(g), abs(m))


def first_difference(golden: object, measured: object, relative: float = 0.0,
                     path: str = "") -> str | None:
    """Where two records first differ, as 'rope.train_loss[3]: OLD != NEW' (numbers further
    apart than ``relative``); None if they agree."""
    if isinstance(golden, dict) and isinstance(measured, dict):
        for key in sorted(set(golden) | set(measured)):
            found = first_difference(golden.get(key), measured.get(key), relative,
                                     f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(golden, list) and isinstance(measured, list) and len(golden) == len(measured):
        return next((d for i, (g, m) in enumerate(zip(golden, measured, strict=True))
                     if (d := first_difference(g, m, relative, f"{path}[{i}]"))), None)
    if isinstance(golden, str) and isinstance(measured, str) and same(golden, measured, relative):
        return None
    return None if golden == measured else f"{path.lstrip('.')}: {golden} != {measured}"


def verdict(golden: dict, measured: dict, protocol: int, here: dict | None = None) -> str | None:
    """What is wrong with this code's numbers (``measured``, under ``protocol``, on the
    machine kind ``here``) against the golden record, in words for the developer; None when
    they are the protocol's own: bit for bit on the record's machine kind, within RELATIVE on
    another."""
    rerun = "run .venv/bin/python scripts/golden.py to record them, and commit the file"
    if golden.get("protocol") != protocol:
        return (f"{GOLDEN} holds the numbers of protocol {golden.get('protocol')}, and "
                f"posexp.version.PROTOCOL is {protocol}: {rerun}")
    exact = here is not None and here == golden.get("machine")
    found = first_difference(golden.get("runs"), measured, 0.0 if exact else RELATIVE)
    if found is None:
        return None
    how = "bit for bit on the machine kind that recorded them" if exact else (
        f"within {RELATIVE:g} relative, on another machine kind than the record's "
        f"({golden.get('machine')})")
    return (f"training or scoring now computes other numbers than protocol {protocol}'s "
            f"({found}; compared {how}): if the change is meant, bump PROTOCOL in "
            f"posexp/version.py (runs of two protocols are never compared) and {rerun}; if "
            "not, it is a bug")


def main() -> None:
    from posexp.version import PROTOCOL

    record = {"protocol": PROTOCOL, "machine": machine(), "runs": measure()}
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} (protocol {PROTOCOL})", file=sys.stderr)


if __name__ == "__main__":
    main()
