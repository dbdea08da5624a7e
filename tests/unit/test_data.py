import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from posexp.data import SEPARATOR, in_validation, load_corpus
from posexp.data.cache import build_once, token_dtype
from posexp.data.source import cut_blocks
from posexp.data.stdlib import stdlib_files
from posexp.data.text import ENWIK8_SIZE
from posexp.errors import UsageError
from posexp.evaluate.windows import scored_spans
from posexp.model import GPT, GPTConfig
from tests.conftest import score_curve
from tests.corpora import cache_entries, data_cfg, word_files, write_words


def test_split_is_by_document_and_deterministic(tmp_path):
    root = tmp_path / "docs"
    for i in range(400):
        (root / f"doc{i}.txt").parent.mkdir(parents=True, exist_ok=True)
        (root / f"doc{i}.txt").write_text(f"text {i}\n")
    corpus = load_corpus(data_cfg(name="text", path=str(root), val_fraction=0.1,
                                  cache_dir=str(tmp_path / "c")))
    held_out = [f"doc{i}.txt" for i in range(400) if in_validation(f"doc{i}.txt", 0.1)]
    assert corpus.documents == {"train": 400 - len(held_out), "val": len(held_out)}
    assert 20 < len(held_out) < 70
    val, train = bytes(corpus.val), bytes(corpus.train)
    assert (b"text 7\n" in val) == ("doc7.txt" in held_out) != (b"text 7\n" in train)
    assert val.count(SEPARATOR) == len(held_out) - 1
    # where each validation document starts: 0, then after each separator
    starts = corpus.val_documents.tolist()
    assert len(starts) == len(held_out) and starts[0] == 0
    assert all(val[s - len(SEPARATOR) : s] == SEPARATOR for s in starts[1:])
    texts = [val[a : b - len(SEPARATOR)] for a, b in zip(starts, [*starts[1:], len(val)
                                                                   + len(SEPARATOR)],
                                                          strict=True)]
    assert sorted(texts) == sorted(f"text {doc[3:-4]}\n".encode() for doc in held_out)


def test_single_file_is_split_at_a_line_start(tmp_path):
    text = b"".join(b"line %d\n" % i for i in range(100))
    (tmp_path / "one.txt").write_bytes(text)
    corpus = load_corpus(data_cfg(name="text", path=str(tmp_path / "one.txt"), val_fraction=0.1,
                                  cache_dir=str(tmp_path / "c")))
    train, val = bytes(corpus.train), bytes(corpus.val)
    assert train + val == text and val.startswith(b"line ") and 0 < len(val) < 0.12 * len(text)
    assert corpus.documents == {"train": 1, "val": 1}


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
    # the fingerprint is that of the documents joined in memory: streaming changed nothing
    files = stdlib_files()
    root = files[0].parent
    parts = {False: [], True: []}
    for f in files:
        parts[in_validation(f.relative_to(root).as_posix(), 0.02)].append(f.read_bytes())
    digest = hashlib.sha256()
    for held_out in (False, True):
        digest.update(hashlib.sha256(SEPARATOR.join(parts[held_out])).digest())
    assert corpus.fingerprint == digest.hexdigest()
    assert bytes(corpus.val) == SEPARATOR.join(parts[True])
    again = load_corpus(cfg)
    assert again.fingerprint == corpus.fingerprint
    assert isinstance(again.train, np.memmap)
    assert len(cache_entries(tmp_path)) == 1  # one cache directory, no temporaries


def test_text_directory(tmp_path):
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


def test_separate_train_and_validation_paths(tmp_path):
    train = write_words(tmp_path / "train" / "a.txt", 5000, seed=1)
    write_words(tmp_path / "train" / "b.txt", 3000, seed=2)
    val = write_words(tmp_path / "val.txt", 2000, seed=3)
    corpus = load_corpus(data_cfg(name="text", train_path=str(tmp_path / "train"),
                                  val_path=str(tmp_path / "val.txt"),
                                  cache_dir=str(tmp_path / "c")))
    assert bytes(corpus.val) == val
    assert bytes(corpus.train).startswith(train + SEPARATOR)
    assert corpus.documents == {"train": 2, "val": 1}


@pytest.mark.parametrize("setup,message", [
    (lambda p: None, "does not exist"),
    (lambda p: p.mkdir(), "holds no files"),
    (lambda p: (p.mkdir(), (p / "e.txt").write_text("")), "only empty files"),
    (lambda p: p.write_bytes(b"\x7fELF\0\0\1"), "is binary"),
    (lambda p: p.write_bytes(b"caf\xe9 latin-1\n" * 10), "is not UTF-8"),
])
def test_bad_text_paths(tmp_path: Path, setup, message):
    path = tmp_path / "data"
    setup(path)
    with pytest.raises(UsageError, match=message):
        load_corpus(data_cfg(name="text", path=str(path), cache_dir=str(tmp_path / "c")))


def test_blocks_end_at_lines_and_never_split_a_character():
    text = ("ünïcødé line of text ✓\n" * 300).encode() + "€" .encode() * 2000
    blocks = list(cut_blocks([text[i : i + 1000] for i in range(0, len(text), 1000)], 512))
    assert b"".join(blocks) == text
    assert all(len(b) <= 512 for b in blocks)
    for b in blocks:
        b.decode()  # every block is whole characters
    assert all(b.endswith(b"\n") for b in blocks if b"\n" in b)


def test_enwik8_is_cut_at_the_standard_offsets(tmp_path):
    path = tmp_path / "enwik8"
    with path.open("wb") as f:  # sparse: 10^8 bytes, markers around the cuts
        f.truncate(ENWIK8_SIZE)
        for offset, byte in [(89_999_999, b"A"), (90_000_000, b"B"), (94_999_999, b"C"),
                             (95_000_000, b"D")]:
            f.seek(offset)
            f.write(byte)
    corpus = load_corpus(data_cfg(name="enwik8", source="enwik8", path=str(path),
                                  cache_dir=str(tmp_path / "c")))
    assert corpus.train.size == 90_000_000 and corpus.val.size == 5_000_000
    assert bytes(corpus.train[-1:]) == b"A" and bytes(corpus.val[[0, -1]]) == b"BC"
    path.write_bytes(b"short")
    with pytest.raises(UsageError, match="enwik8 is 100,000,000 bytes"):
        load_corpus(data_cfg(name="enwik8", source="enwik8", path=str(path)))


def test_cache_dtype_follows_the_vocabulary():
    assert token_dtype(256) == np.uint8
    assert token_dtype(257) == np.uint16 and token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32


@pytest.fixture(scope="module")
def words(tmp_path_factory) -> Path:
    return word_files(tmp_path_factory.mktemp("words"), 40, 8000)


def test_bpe_is_trained_once_and_cached(words, tmp_path):
    cfg = data_cfg(name="words", source="text", path=str(words), tokenizer="bpe",
                   vocab_size=400, val_fraction=0.2, cache_dir=str(tmp_path))
    corpus = load_corpus(cfg)
    assert corpus.tokenizer == "bpe" and corpus.vocab_size == 400
    assert corpus.train.dtype == np.uint16 and corpus.val.dtype == np.uint16
    assert corpus.train.size < corpus.text_bytes["train"] / 2  # merges shorten the text
    # lossless: the val tokens decode to the val text, and token_bytes count its bytes exactly
    files = sorted(words.iterdir())
    val = SEPARATOR.join(f.read_bytes() for f in files if in_validation(f.name, 0.2))
    [token_dir] = [p for p in tmp_path.iterdir() if p.name.startswith("words-")]
    meta = json.loads((token_dir / "meta.json").read_text())
    assert meta["tokenizer_fingerprint"] == corpus.tokenizer_fingerprint
    assert meta["dtype"] == "uint16" and meta["tokens"]["val"] == corpus.val.size
    definition = (token_dir / "tokenizer.json").read_text()
    assert hashlib.sha256(definition.encode()).hexdigest() == corpus.tokenizer_fingerprint
    from tokenizers import Tokenizer

    assert Tokenizer.from_str(definition).decode(corpus.val.tolist()).encode() == val
    assert int(corpus.token_bytes[corpus.val].sum()) == len(val) == corpus.text_bytes["val"]

    cached = sorted(tmp_path.rglob("*.json")) + sorted(tmp_path.rglob("*.bin"))
    mtimes = [p.stat().st_mtime_ns for p in cached]
    again = load_corpus(cfg)  # no retraining, no re-tokenizing
    assert [p.stat().st_mtime_ns for p in cached] == mtimes
    assert again.tokenizer_fingerprint == corpus.tokenizer_fingerprint
    assert np.array_equal(again.val, corpus.val)

    # the same tokenizer from its file gives the same tokens
    (tmp_path / "mine.json").write_text(definition)
    from_file = load_corpus(data_cfg(name="words", source="text", path=str(words),
                                     tokenizer="file", tokenizer_path=str(tmp_path / "mine.json"),
                                     val_fraction=0.2, cache_dir=str(tmp_path)))
    assert from_file.tokenizer == "file"
    assert from_file.tokenizer_fingerprint == corpus.tokenizer_fingerprint
    assert np.array_equal(from_file.val, corpus.val)


def test_bits_per_byte_compare_tokenizers(words, tmp_path):
    """A model that predicts the uniform distribution has loss ln V per token, so log2 V bits
    per token and log2 V * tokens / bytes bits per byte: 8 for bytes, less than log2 V for a
    BPE whose tokens average more than one byte."""
    results = {}
    for tokenizer in ("byte", "bpe"):
        corpus = load_corpus(data_cfg(name="words", source="text", path=str(words),
                                      tokenizer=tokenizer, vocab_size=400, val_fraction=0.2,
                                      cache_dir=str(tmp_path)))
        model = GPT(GPTConfig(vocab_size=corpus.vocab_size, d_model=16, n_layer=1, n_head=2,
                              d_ff=32, encoding="nope", max_positions=64))
        for p in model.parameters():
            torch.nn.init.zeros_(p)
        n = 2000
        # the documents start after each separator, in tokens of either tokenizer
        docs = corpus.val_documents
        assert len(docs) == corpus.documents["val"] > 1 and (np.diff(docs) > 0).all()
        before = corpus.val[docs[1:] - 1]  # the separator's token, one byte, every time
        assert len(set(before.tolist())) == 1 and corpus.token_bytes[before[0]] == 1
        curve, _ = score_curve(model, corpus.val, [32], "nonoverlapping", None, n,
                               4096, 4, torch.device("cpu"), corpus.token_bytes,
                               documents=docs)
        assert curve[0]["documents"] == len(docs)  # every document holds scored targets
        spans = scored_spans(len(corpus.val), docs, n)
        scored = corpus.token_bytes[corpus.val[spans.targets()]].sum()
        log2v = math.log2(corpus.vocab_size)
        assert curve[0]["bits_per_token"] == pytest.approx(log2v)
        assert curve[0]["bits_per_byte"] == pytest.approx(log2v * n / scored)
        results[tokenizer] = curve[0]["bits_per_byte"]
    assert results["byte"] == pytest.approx(8.0)
    assert results["bpe"] < math.log2(400)


def test_stale_temporaries_are_removed_and_never_read(tmp_path):
    directory = tmp_path / "entry"
    stale = tmp_path / ".entry.crashed"
    stale.mkdir()
    (stale / "part").write_text("half")
    assert build_once(directory, lambda tmp: (tmp / "part").write_text("whole"))
    assert not stale.exists() and (directory / "part").read_text() == "whole"
    assert not build_once(directory, lambda tmp: pytest.fail("built twice"))
