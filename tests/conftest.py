import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# A model and budget small enough that a run through the real CLI takes a few seconds.
TINY = [
    "model.d_model=32", "model.n_layer=1", "model.n_head=2",
    "train.seq_len=16", "train.tokens=8192", "train.batch_tokens=128", "train.log_every=8",
    "train.val_every_tokens=4096", "train.val_tokens=256",
    "eval.tokens=512", "eval.lengths=[16,32,64]", "device=cpu",
]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def posexp(cache_dir, tmp_path):
    """Run the installed CLI in a subprocess, from tmp_path, with a shared token cache."""

    def run(*args: str, cwd: Path | None = None, env: dict | None = None):
        full_env = {**os.environ, "POSEXP_CACHE": str(cache_dir), **(env or {})}
        full_env.pop("POSEXP_DEBUG", None)
        return subprocess.run(
            [sys.executable, "-m", "posexp", *args], cwd=cwd or tmp_path, env=full_env,
            capture_output=True, text=True, timeout=600,
        )

    return run


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def assert_usage_error(r, message: str) -> None:
    """Exit 2, one line on stderr that starts with posexp's prefix and holds ``message``."""
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posexp: error: "), r.stderr
    assert message in lines[0]
    assert "Traceback" not in r.stderr
