"""The token cache is verified before use: a damaged one is named, rebuilt and never read."""
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from posexp.data import load_corpus
from posexp.data.cache import lock_path
from tests.corpora import word_files
from tests.unit.test_cache import cfg_for, token_dir

LOAD = """
import sys
from omegaconf import OmegaConf
from posexp.config.schema import DataConfig
from posexp.data import load_corpus
cfg = OmegaConf.merge(OmegaConf.structured(DataConfig), dict(
    name="words", source="text", path=sys.argv[1], val_fraction=0.3, cache_dir=sys.argv[2]))
print(load_corpus(cfg).train.size)
"""


@pytest.fixture
def words(tmp_path_factory) -> Path:  # apart from tmp_path, which is the cache
    return word_files(tmp_path_factory.mktemp("words"), 12, 3000)


def test_a_cache_repaired_while_waiting_for_the_lock_is_not_rebuilt(words, tmp_path):
    """A reader that finds damage waits for the lock, then checks again: another process may
    have rebuilt the directory meanwhile (here the test repairs it), and it is used as is."""
    corpus = load_corpus(cfg_for(words, tmp_path))
    size, directory = corpus.train.size, token_dir(tmp_path)
    del corpus
    good = (directory / "train.bin").read_bytes()
    (directory / "train.bin").write_bytes(good[:100])
    inode = directory.stat().st_ino
    with FileLock(lock_path(directory)):
        reader = subprocess.Popen([sys.executable, "-c", LOAD, str(words), str(tmp_path)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        assert reader.poll() is None  # waiting for the lock
        (directory / "train.bin").write_bytes(good)
    out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0 and out.split() == [str(size)]
    assert err.count("warning") == 1 and "train.bin has 100 bytes" in err
    assert directory.stat().st_ino == inode  # the same directory: not rebuilt
