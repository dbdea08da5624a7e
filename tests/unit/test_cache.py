"""The token cache is verified before use: a damaged one is named, rebuilt and never read."""
import errno
import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

import posexp.data
from posexp.data import load_corpus
from posexp.data.cache import cache_problem
from posexp.errors import PosexpError
from tests.corpora import cache_entries, data_cfg, word_files


@pytest.fixture
def words(tmp_path_factory) -> Path:  # apart from tmp_path, which is the cache
    return word_files(tmp_path_factory.mktemp("words"), 12, 3000)


def cfg_for(words: Path, cache: Path, **kw):
    return data_cfg(name="words", source="text", path=str(words), val_fraction=0.3,
                    cache_dir=str(cache), **kw)


def token_dir(cache: Path) -> Path:
    [directory] = [p for p in cache.iterdir() if p.name.startswith("words-")]
    return directory


def edit_meta(edit):
    def damage(directory: Path) -> None:
        meta = json.loads((directory / "meta.json").read_text())
        edit(meta)
        (directory / "meta.json").write_text(json.dumps(meta))
    return damage


def flip_byte(path: Path, offset: int = 1000) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_meta_records_the_size_and_sha256_of_each_file(words, tmp_path):
    load_corpus(cfg_for(words, tmp_path, tokenizer="bpe", vocab_size=300))
    directory = token_dir(tmp_path)
    files = json.loads((directory / "meta.json").read_text())["files"]
    assert sorted(files) == ["tokenizer.json", "train.bin", "train.docs.npy", "val.bin",
                            "val.docs.npy"]
    for name, record in files.items():
        data = (directory / name).read_bytes()
        assert record == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert cache_problem(directory, ("train", "val")) is None


DAMAGES = {
    "truncated train.bin": (lambda d: (d / "train.bin").write_bytes(
        (d / "train.bin").read_bytes()[:100]), r"train\.bin has 100 bytes, meta\.json records \d+"),
    "empty val.bin": (lambda d: (d / "val.bin").write_bytes(b""),
                      r"val\.bin has 0 bytes, meta\.json records \d+"),
    "missing train.bin": (lambda d: (d / "train.bin").unlink(),
                          "cannot read train.bin: No such file or directory"),
    "flipped byte": (lambda d: flip_byte(d / "train.bin"),
                     r"train\.bin does not match its SHA-256 in meta\.json"),
    "meta.json not JSON": (lambda d: (d / "meta.json").write_text('{"dtype": "ui'),
                           r"meta\.json is not valid JSON"),
    "meta.json missing": (lambda d: (d / "meta.json").unlink(),
                          r"cannot read meta\.json: No such file or directory"),
    "meta.json a list": (lambda d: (d / "meta.json").write_text("[]"),
                         r"meta\.json is not a JSON object"),
    "no tokens key": (edit_meta(lambda m: m.pop("tokens")), r'meta\.json has no valid "tokens"'),
    "tokens a string": (edit_meta(lambda m: m["tokens"].update(train="12")),
                        r'meta\.json has no valid "tokens"'),
    "unknown dtype": (edit_meta(lambda m: m.update(dtype="float64")),
                      r'meta\.json has no valid "dtype"'),
    "wrong dtype": (edit_meta(lambda m: m.update(dtype="uint16")),
                    r"meta\.json records \d+ uint16 tokens in train\.bin but \d+ bytes"),
    "bad file record": (edit_meta(lambda m: m["files"]["val.bin"].pop("sha256")),
                        r'meta\.json has no valid "files"'),
    "old format": (edit_meta(lambda m: m.pop("files")),
                   r"meta\.json records no sizes or checksums \(an older posexp wrote it\)"),
    "no document offsets": (
        edit_meta(lambda m: [m["files"].pop(f"{s}.docs.npy") for s in ("train", "val")]),
        r"meta\.json records no document offsets \(an older posexp wrote it\)"),
    "missing val.docs.npy": (lambda d: (d / "val.docs.npy").unlink(),
                             "cannot read val.docs.npy: No such file or directory"),
    "changed val.docs.npy": (lambda d: np.save(d / "val.docs.npy", np.load(d / "val.docs.npy")
                                               [:-1]),
                             r"val\.docs\.npy has \d+ bytes, meta\.json records \d+"),
}


@pytest.mark.parametrize("damage,problem", DAMAGES.values(), ids=DAMAGES.keys())
def test_a_damaged_cache_is_named_and_rebuilt(words, tmp_path, capsys, damage, problem):
    cfg = cfg_for(words, tmp_path)
    corpus = load_corpus(cfg)
    train, val = np.array(corpus.train), np.array(corpus.val)
    documents = np.array(corpus.val_documents)
    assert len(documents) == corpus.documents["val"] > 1
    directory = token_dir(tmp_path)
    del corpus  # release the memory maps
    capsys.readouterr()

    damage(directory)
    again = load_corpus(cfg)
    warnings = capsys.readouterr().err.splitlines()
    assert len([w for w in warnings if "warning" in w]) == 1
    [warning] = [w for w in warnings if "warning" in w]
    assert warning.startswith(f"posexp: warning: token cache {directory}: ")
    assert warning.endswith("; rebuilding it")
    assert re.search(problem, warning), warning
    assert np.array_equal(again.train, train) and np.array_equal(again.val, val)
    assert np.array_equal(again.val_documents, documents)
    assert again.describe()["train_tokens"] == train.size
    assert cache_problem(directory, ("train", "val")) is None
    assert cache_entries(tmp_path) == [directory.name]  # the damaged copy is gone

    load_corpus(cfg)  # now whole: no second warning
    assert "warning" not in capsys.readouterr().err


def test_a_rebuild_that_is_still_damaged_is_an_error(words, tmp_path, monkeypatch, capsys):
    """A build that writes a short train.bin every time: one warning, then one error line."""
    write_meta = posexp.data.write_meta

    def write_short(directory: Path, meta: dict) -> None:
        write_meta(directory, meta)
        (directory / "train.bin").write_bytes(b"x" * 10)

    monkeypatch.setattr(posexp.data, "write_meta", write_short)
    with pytest.raises(PosexpError) as error:
        load_corpus(cfg_for(words, tmp_path))
    directory = token_dir(tmp_path)
    recorded = json.loads((directory / "meta.json").read_text())["files"]["train.bin"]["bytes"]
    assert str(error.value) == (f"token cache {directory} is still damaged after a rebuild: "
                                f"train.bin has 10 bytes, meta.json records {recorded}")
    assert capsys.readouterr().err.count("rebuilding it") == 1


def redirect_bins_to_dev_full(monkeypatch) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    real_open = Path.open

    def open_(self: Path, mode: str = "r", *args, **kw):
        if self.suffix == ".bin" and "w" in mode:
            self = Path("/dev/full")
        return real_open(self, mode, *args, **kw)

    monkeypatch.setattr(Path, "open", open_)


def fail_meta_write(monkeypatch) -> None:
    def write_text(self: Path, *args, **kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", write_text)


@pytest.mark.parametrize("full_disk", [redirect_bins_to_dev_full, fail_meta_write],
                         ids=["writing train.bin", "writing meta.json"])
def test_a_full_disk_is_one_line_and_leaves_no_temporaries(words, tmp_path, monkeypatch,
                                                           full_disk):
    full_disk(monkeypatch)
    with pytest.raises(PosexpError) as error:
        load_corpus(cfg_for(words, tmp_path))
    message = str(error.value)
    assert message.startswith(f"cannot write the token cache {tmp_path}{os.sep}words-")
    assert message.endswith(": No space left on device") and "\n" not in message
    assert cache_entries(tmp_path) == []  # no temporary directory, no half-built cache


def test_a_vanished_source_file_is_not_blamed_on_the_cache(words, tmp_path, monkeypatch):
    scan = posexp.data.scan

    def scan_then_delete(source):
        scanned = scan(source)
        (words / "doc00.txt").unlink()  # gone between fingerprinting and tokenizing
        return scanned

    monkeypatch.setattr(posexp.data, "scan", scan_then_delete)
    with pytest.raises(FileNotFoundError) as error:
        load_corpus(cfg_for(words, tmp_path))
    assert error.value.filename == str(words / "doc00.txt")
    assert cache_entries(tmp_path) == []
