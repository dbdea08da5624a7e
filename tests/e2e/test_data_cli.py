"""Corpora and tokenizers through the real CLI: a local corpus with BPE end to end, a hub-style
dataset from a local directory offline, and the one-line errors."""
import pytest

from tests.conftest import TINY, assert_usage_error, read_json
from tests.corpora import write_words

# read when huggingface_hub and datasets are imported: these tests take a process of their own
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def test_train_on_local_text_with_bpe(posexp, tmp_path):
    corpus = tmp_path / "corpus.txt"
    write_words(corpus, 400_000)
    r = posexp("train", "data=text", f"data.path={corpus}", "data.tokenizer=bpe",
               "data.vocab_size=320", *TINY, "results_dir=out")
    assert r.returncode == 0, r.stderr
    run = tmp_path / "out" / "default" / "rope-L16-s0"
    info = read_json(run / "run.json")
    assert info["status"] == "completed"
    c = info["corpus"]
    assert c["name"] == "text" and c["tokenizer"] == "bpe" and c["vocab_size"] == 320
    assert len(c["tokenizer_fingerprint"]) == 64
    assert c["bytes"]["train"] + c["bytes"]["val"] == corpus.stat().st_size
    assert c["train_tokens"] < c["bytes"]["train"] / 2
    curve = read_json(run / "eval.json")["curve"]
    assert all(p["bits_per_byte"] < p["bits_per_token"] for p in curve)
    header = next(line for line in r.stdout.splitlines() if line.lstrip().startswith("length"))
    assert header.split()[-1] == "bits/byte"

    r = posexp("eval", str(run), "eval.lengths=[16]")
    assert r.returncode == 0, r.stderr
    assert "bits/byte" in r.stdout


def test_hub_dataset_from_a_local_copy_works_offline(posexp_process, tmp_path):
    """`data=hf` with a dataset directory (what a hub download holds), no network at all."""
    import datasets

    lines = write_words(tmp_path / "lines.txt", 300_000).decode().splitlines(keepends=True)
    for split, part in [("train", lines[:-600]), ("validation", lines[-600:])]:
        datasets.Dataset.from_dict({"text": part, "n": list(range(len(part)))}).to_parquet(
            str(tmp_path / "ds" / "data" / f"{split}-00000-of-00001.parquet"))
    env = {**OFFLINE, "HF_HOME": str(tmp_path / "hf")}
    r = posexp_process("train", "data=hf", f"data.hf_name={tmp_path / 'ds'}",
                       "data.join_rows=true", *TINY, "results_dir=out", env=env)
    assert r.returncode == 0, r.stderr
    c = read_json(tmp_path / "out/default/rope-L16-s0/run.json")["corpus"]
    assert c["name"] == "hf" and c["documents"] == {"train": 1, "val": 1}
    assert c["val_tokens"] == len("".join(lines[-600:]).encode())

    r = posexp_process("train", "data=hf", f"data.hf_name={tmp_path / 'ds'}",
                       "data.text_column=body", *TINY, "results_dir=out", "experiment=other",
                       env=env)
    assert r.returncode == 2 and "data.text_column='body' is not a column" in r.stderr
    assert "its columns: text, n" in r.stderr


@pytest.mark.parametrize("corpus,dataset", [("wikitext103", "Salesforce/wikitext"),
                                            ("pg19", "emozilla/pg19")])
def test_hub_corpus_offline_without_a_copy_is_one_line(posexp_process, tmp_path, corpus,
                                                      dataset):
    env = {**OFFLINE, "HF_HOME": str(tmp_path / "empty-hf-home")}
    r = posexp_process("train", f"data={corpus}", *TINY, "results_dir=out", env=env)
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith(f"posexp: error: data={corpus} needs a download of the Hugging "
                               f"Face Hub dataset '{dataset}'")
    assert "offline options: data=stdlib, or data=text data.path=FILE_OR_DIR" in lines[0]
    assert not list(tmp_path.rglob("run.json"))


DATA_ERRORS = [
    (["data.tokenizer=bpe", "data.vocab_size=200"], "data.vocab_size must be above 256"),
    (["data.tokenizer=wordpiece"], "tokenizer"),
    (["data.tokenizer=file"], "data.tokenizer=file needs data.tokenizer_path"),
    (["data.tokenizer=file", "data.tokenizer_path=/nonexistent.json"], "does not exist"),
    (["data=enwik8"], "data=enwik8 needs data.path"),
    (["data=hf"], "data=hf needs data.hf_name"),
    (["data=text", "data.train_path=a"], "both data.train_path and data.val_path"),
    (["data=text", "data.path=a", "data.train_path=a", "data.val_path=b"], "exclude each other"),
    (["data.name=../up"], "data.name must be a plain name"),
    (["data.source=ftp"], "data.source"),
]


@pytest.mark.parametrize("args,message", DATA_ERRORS, ids=lambda v: str(v)[:40])
def test_data_usage_errors_are_one_line_and_exit_2(request, args, message):
    # one through the installed script (nothing else writes to its stderr), the rest here
    real = args == ["data=hf"]
    r = request.getfixturevalue("posexp_process" if real else "posexp")(
        "train", *args, "results_dir=out")
    assert_usage_error(r, message)
