from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from posexp.config import DataConfig
from posexp.data import SEPARATOR, in_validation, load_corpus, split_documents
from posexp.data.stdlib import stdlib_files
from posexp.errors import UsageError


def data_cfg(**kw):
    return OmegaConf.merge(OmegaConf.structured(DataConfig), kw)


def test_split_is_by_document_and_deterministic():
    docs = [(f"doc{i}.py", f"text {i}".encode()) for i in range(400)]
    train, val, counts = split_documents(docs, 0.1)
    assert counts["train"] + counts["val"] == 400 and 20 < counts["val"] < 70
    assert split_documents(reversed(docs), 0.1)[2] == counts  # order does not matter
    held_out = [name for name, _ in docs if in_validation(name, 0.1)]
    assert len(held_out) == counts["val"]
    assert b"text 7" in (val if "doc7.py" in held_out else train)
    assert val.count(SEPARATOR) == counts["val"] - 1


def test_single_document_is_split_at_a_line_start():
    text = b"".join(b"line %d\n" % i for i in range(100))
    train, val, _ = split_documents([("one.txt", text)], 0.1)
    assert train + val == text and val.startswith(b"line ") and 0 < len(val) < 0.12 * len(text)


def test_stdlib_excludes_generated_and_installed_files(tmp_path):
    for rel in ["os.py", "json/__init__.py", "_sysconfigdata__linux.py",
                "site-packages/pkg/mod.py", "__pycache__/x.py", "notes.txt"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    names = [p.relative_to(tmp_path).as_posix() for p in stdlib_files(tmp_path)]
    assert names == ["json/__init__.py", "os.py"]


def test_stdlib_corpus_is_real_and_cached(tmp_path):
    cfg = data_cfg(name="stdlib", cache_dir=str(tmp_path))
    corpus = load_corpus(cfg)
    assert corpus.vocab_size == 256 and corpus.train.dtype == np.uint8
    assert corpus.train.size > 1_000_000 and corpus.val.size > 10_000
    assert b"def " in bytes(corpus.train[:200_000])
    again = load_corpus(cfg)
    assert again.fingerprint == corpus.fingerprint
    assert isinstance(again.train, np.memmap)
    assert len(list(tmp_path.iterdir())) == 1  # one cache directory, no temporaries


def test_text_directory_through_datasets(tmp_path):
    root = tmp_path / "corpus"
    for i in range(30):
        (root / f"sub{i % 3}").mkdir(parents=True, exist_ok=True)
        (root / f"sub{i % 3}" / f"f{i}.txt").write_text(f"document number {i}\n" * 20)
    (root / "skip.md").write_text("not matched by the glob")
    cfg = data_cfg(name="text", path=str(root), glob="**/*.txt", val_fraction=0.2,
                   cache_dir=str(tmp_path / "cache"))
    corpus = load_corpus(cfg)
    text = bytes(corpus.train) + bytes(corpus.val)
    assert corpus.documents["train"] + corpus.documents["val"] == 30
    assert b"document number 29\n" in text and b"not matched" not in text


@pytest.mark.parametrize("setup,message", [
    (lambda p: None, "does not exist"),
    (lambda p: p.mkdir(), "holds no files"),
    (lambda p: (p.mkdir(), (p / "e.txt").write_text("")), "only empty files"),
    (lambda p: p.write_bytes(b"\x7fELF\0\0\1"), "is binary"),
])
def test_bad_text_paths(tmp_path: Path, setup, message):
    path = tmp_path / "data"
    setup(path)
    with pytest.raises(UsageError, match=message):
        load_corpus(data_cfg(name="text", path=str(path), cache_dir=str(tmp_path / "c")))
