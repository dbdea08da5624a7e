"""How long one composition takes (posexp.config.compose: Hydra, posexp's checks), in one
process: with the config groups' part kept between compositions (config/composer.py, what
posexp does) and, for comparison, Hydra composing the whole way each time.  Each of N
compositions changes its encoding (4 of them in turn) and seed, as a preset's plan does.

Prints the median seconds of a composition each way, with the machine.  Quote wall time
only from idle cores.

    python scripts/bench_compose.py [--n 40]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from unittest import mock

from posexp import config as C
from posexp.config.schema import register

ENCODINGS = ("rope", "alibi", "nope", "t5")
ARGS = ["model.d_model=32", "model.n_layer=1", "train.seq_len=16", "train.tokens=8192",
        "device=cpu"]


def whole(hydra, config_name, overrides, config_dirs):
    """Hydra's compose the whole way, as posexp composed before composer.py."""
    from hydra import compose as hydra_compose

    return hydra_compose(config_name, overrides=overrides, return_hydra_config=True)


def timings(n: int) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        C.compose([f"encoding={ENCODINGS[i % len(ENCODINGS)]}", f"seed={i}", *ARGS])
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=40, help="compositions each way")
    n = parser.parse_args().n
    register()
    timings(len(ENCODINGS))  # imports, and each encoding's groups' part kept once
    kept = statistics.median(timings(n))
    with mock.patch("posexp.config.compose.compose_cached", whole):
        full = statistics.median(timings(n))
    print(f"{platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"one composition: {kept * 1e3:.0f} ms with the groups' part kept, "
          f"{full * 1e3:.0f} ms composed whole by Hydra ({full / kept:.1f}x)")


if __name__ == "__main__":
    main()
