import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from posexp.data.cache import lock_path
from tests.corpora import cache_entries, word_files

BUILD_SLOWLY = """
import os, sys, time
from pathlib import Path
from posexp.data.cache import build_once

directory, log = Path(sys.argv[1]), sys.argv[2]

def build(tmp):
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\\n")
    (tmp / "part").write_text("half")
    time.sleep(1.0)  # a reader now must not see the directory
    (tmp / "part").write_text("whole")

build_once(directory, build)
print((directory / "part").read_text())
"""


@pytest.fixture(scope="module")
def words(tmp_path_factory) -> Path:
    return word_files(tmp_path_factory.mktemp("words"), 40, 8000)


def test_concurrent_builders_build_once(tmp_path):
    """Two processes start while a third holds the lock: one builds, the other waits and
    reads the finished directory."""
    directory, log = tmp_path / "cache" / "entry", tmp_path / "builds.log"
    lock_path(directory).parent.mkdir(parents=True)
    with FileLock(lock_path(directory)):
        procs = [subprocess.Popen([sys.executable, "-c", BUILD_SLOWLY, str(directory), str(log)],
                                  stdout=subprocess.PIPE, text=True) for _ in range(2)]
        time.sleep(2)
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outputs == ["whole\n", "whole\n"]
    assert len(log.read_text().splitlines()) == 1  # one build
    assert cache_entries(directory.parent) == ["entry"]  # no temporaries left


def test_concurrent_loads_share_one_bpe_cache(words, tmp_path):
    """Two processes ask for the same BPE corpus while a third holds the lock: both wait, one
    trains and tokenizes, and both read identical arrays."""
    cache = tmp_path / "cache"
    code = ("import sys, hashlib; from omegaconf import OmegaConf; "
            "from posexp.config.schema import DataConfig; from posexp.data import load_corpus; "
            "c = load_corpus(OmegaConf.merge(OmegaConf.structured(DataConfig), dict(name='words',"
            f" source='text', path={str(words)!r}, tokenizer='bpe', vocab_size=300, "
            f"val_fraction=0.2, cache_dir={str(cache)!r}))); "
            "print(c.tokenizer_fingerprint, hashlib.sha256(c.train.tobytes()).hexdigest())")
    scanned = subprocess.run([sys.executable, "-c", code.replace("bpe", "byte")], check=True,
                             capture_output=True, text=True)
    fingerprint = next(p.name for p in cache.iterdir() if p.name.startswith("words-"))[6:22]
    tokenizer_dir = cache / "tokenizers" / f"words-{fingerprint}-bpe300"
    lock_path(tokenizer_dir).parent.mkdir(parents=True)
    with FileLock(lock_path(tokenizer_dir)):
        procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        time.sleep(3)
        assert not tokenizer_dir.exists()
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and scanned.returncode == 0
    assert outputs[0] == outputs[1] and len(outputs[0].split()) == 2
    assert sorted(p.name.split("-")[2] for p in cache.iterdir()
                  if p.name.startswith("words-")) == ["bpe", "byte"]
