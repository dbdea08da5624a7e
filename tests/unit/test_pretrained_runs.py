"""A pretrained run as a run (posexp/pretrained): where its model's files come from (a local
directory, the Hugging Face cache with no network, or one line naming the fix), the
identity -- which changes with the weights -- the settings a command may change, bits per
byte for every kind of tokenizer, and transformers staying out of posexp's other paths."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from posexp.errors import PosexpError, UsageError
from posexp.pretrained import config as pcfg
from posexp.pretrained.lifecycle import build, pretrained
from posexp.pretrained.scoring import token_bytes
from posexp.pretrained.source import fingerprints, resolve
from posexp.runs import Run
from tests import pretrained_models as tiny

pytest.importorskip("transformers")
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    return tiny.llama(tmp_path_factory.mktemp("runs") / "tiny-llama")


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory):
    return tiny.corpus(tmp_path_factory.mktemp("text"))


def hub_cache(root: Path, model: Path, repo: str, commit: str) -> Path:
    """``model``'s files laid out as huggingface_hub caches a download of ``repo``: blobs
    named by their SHA-256, a snapshot of links to them, refs/main naming the commit."""
    base = root / f"models--{repo.replace('/', '--')}"
    (base / "blobs").mkdir(parents=True)
    (base / "snapshots" / commit).mkdir(parents=True)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(commit)
    for file in model.iterdir():
        sha = hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copy(file, base / "blobs" / sha)
        (base / "snapshots" / commit / file.name).symlink_to(f"../../blobs/{sha}")
    return base / "snapshots" / commit


def test_a_hub_id_is_read_from_the_cache_with_no_network(llama_dir, tmp_path, monkeypatch):
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = hub_cache(tmp_path / "hub", llama_dir, "tiny-org/tiny-llama", commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = resolve("tiny-org/tiny-llama")
    assert (source.id, source.revision, source.path, source.name) == \
        ("tiny-org/tiny-llama", commit, snapshot, "tiny-llama")
    # the weights' hash is read from the blob's name: the same as hashing the file
    assert fingerprints(source) == fingerprints(resolve(str(llama_dir)))


def test_a_hub_id_without_network_or_cache_is_one_line_naming_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PosexpError) as e:
        resolve("tiny-org/absent-model")
    message = str(e.value)
    assert "\n" not in message and not isinstance(e.value, UsageError)
    assert "not in the Hugging Face cache" in message and "HF_HUB_OFFLINE" in message
    assert "hf download tiny-org/absent-model" in message
    assert "posexp pretrained /path/to/absent-model" in message


@pytest.mark.parametrize(("model", "revision", "words"), [
    ("./no/such/dir", None, "neither a model directory"),
    ("a/b/c", None, "neither a model directory"),
])
def test_what_is_not_a_model_is_refused(model, revision, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=words):
        resolve(model, revision)


def test_a_directory_without_safetensors_or_tokenizer_is_refused(llama_dir, tmp_path):
    for missing in ("model.safetensors", "tokenizer.json"):
        copy = tmp_path / missing
        shutil.copytree(llama_dir, copy)
        (copy / missing).unlink()
        with pytest.raises(UsageError, match=r"safetensors|tokenizer\.json"):
            resolve(str(copy))
    with pytest.raises(UsageError, match="--revision names a commit of a hub model"):
        resolve(str(llama_dir), "main")


def base_args(corpus_dir, results) -> list[str]:
    return ["data=text", f"data.path={corpus_dir}", "data.val_fraction=0.3",
            "eval.tokens=512", "eval.lengths=[16,64]", f"results_dir={results}", "device=cpu"]


def test_the_identity_is_the_model_its_files_and_the_corpus(llama_dir, corpus_dir, tmp_path):
    cfg, source, _ = build(str(llama_dir), None, base_args(corpus_dir, tmp_path))
    from posexp.config import identity

    ident = identity(cfg)
    assert ident["pretrained.id"] == "tiny-llama" and ident["pretrained.revision"] is None
    assert ident["pretrained.weights_sha256"] == fingerprints(source)["weights_sha256"]
    assert ident["pretrained.tokenizer_sha256"] == hashlib.sha256(
        (llama_dir / "tokenizer.json").read_text().encode()).hexdigest()
    assert (ident["encoding.name"], ident["train.seq_len"], ident["model.init"]) == \
        ("tiny-llama", 64, "pretrained")
    assert ident["data.path"] == str(corpus_dir)
    assert not any(k.startswith(("eval.", "train.lr", "seed")) for k in ident)
    assert cfg.run_name == "tiny-llama" and cfg.eval.lengths == [16, 64]
    # a RoPE model has no table of positions: its identity, its config (config.yaml, --cfg
    # job) and its scoring all say null, not the 64 it was trained at (#48 item 5)
    from posexp.config import resolve

    assert ident["encoding.max_positions"] is None
    assert cfg.encoding.max_positions is None and resolve(cfg).encoding.max_positions is None


def test_the_identity_changes_with_the_weights(llama_dir, corpus_dir, tmp_path, monkeypatch,
                                               cache_dir):
    monkeypatch.setenv("POSEXP_CACHE", str(cache_dir))
    model = tmp_path / "tiny-llama"
    shutil.copytree(llama_dir, model)
    args = base_args(corpus_dir, tmp_path / "out")
    assert pretrained(str(model), None, args, progress=False) == "completed"
    run = tmp_path / "out" / "default" / "tiny-llama"
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["kind"], info["encoding"], info["seq_len"]) == \
        ("completed", "pretrained", "tiny-llama", 64)
    assert pretrained(str(model), None, args, progress=False) == "skipped"
    before = fingerprints(resolve(str(model)))
    tiny.llama(model, seed=7)  # the same model, other weights
    after = fingerprints(resolve(str(model)))
    assert after["weights_sha256"] != before["weights_sha256"]
    assert after["config_sha256"] == before["config_sha256"]
    with pytest.raises(UsageError, match=r"holds a run of another identity \(pretrained."
                                         r"weights_sha256: '[0-9a-f]{64}' -> '[0-9a-f]{64}'\)"):
        pretrained(str(model), None, args, progress=False)
    # scoring it again through posexp eval refuses the changed files
    from posexp.pretrained.lifecycle import evaluate_dir

    with pytest.raises(PosexpError, match=r"changed since .* \(weights_sha256 differs\)"):
        evaluate_dir(run, [], progress=False)


@pytest.mark.parametrize(("args", "words"), [
    (["model.d_model=64"], "can set only data, eval.*, task"),
    (["train.seq_len=128"], "it never trains"),
    (["seed=3"], "can set only"),
    (["data.tokenizer=bpe"], "the model's own"),
    (["task.lengths=[128]"], "no task is chosen: add task=NAME, one of passkey"),
    (["task=copy"], "scored on passkey"),
    (["eval.rope_scaling=bogus"], "must be plain or one of linear"),
    (["eval.rope_scaling=yarn", "eval.rope_scaling.factor=0.5"], "factor must be"),
    (["eval.rope_scaling=linear,linear"], "lists linear more than once"),
    (["eval.lengths=[64,64]"], "lists 64 more than once"),
    (["task=passkey", "task.depths=[1.5]"], "task.depths"),
    # the trained runs' checks of windows and task settings (check_windows, check_task_settings)
    (["eval.lengths=[]"], "eval.lengths is empty"),
    (["eval.mode=sliding", "eval.stride=64", "eval.lengths=[64,128]"], "smaller than every"),
    (["task=passkey", "task.depths=[]"], "task.depths is empty"),
    (["task=passkey", "task.eval_seed=-1"], "task.eval_seed must be an integer"),
    (["task=passkey", "task.eval_count=0"], "task.eval_count"),
    (["task=passkey", "task.lengths=[]"], "task.lengths is empty"),
    (["eval.lenghts=[64]"], "lenghts"),
    (["encoding.module=os"], "names Python code"),
])
def test_bad_settings_are_one_line(args, words, llama_dir, corpus_dir, tmp_path):
    with pytest.raises(UsageError, match=words) as e:
        build(str(llama_dir), None, [*base_args(corpus_dir, tmp_path), *args])
    assert "\n" not in str(e.value)


def test_scalings_and_passkey_settings():
    cfg = pcfg.structured(OmegaConf.create({"data": {"name": "stdlib"}, "run_name": "x",
                                            "train": {"seq_len": 64}}))
    pcfg.apply(cfg, ["eval.rope_scaling.method=[plain,yarn,longrope]",
                     "eval.rope_scaling.factor=[2,4]", "task=passkey", "task.eval_count=3"])
    pcfg.defaults(cfg)
    assert pcfg.scalings(cfg) == [
        None, {"method": "yarn", "factor": 2.0, "beta_fast": 32.0, "beta_slow": 1.0},
        {"method": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0},
        {"method": "longrope", "factor": 2.0}, {"method": "longrope", "factor": 4.0}]
    assert cfg.eval.lengths == [16, 32, 64, 128, 256]
    assert (cfg.eval.task.lengths, cfg.eval.task.eval_count) == ([32, 64, 128, 256], 3)
    pcfg.apply(cfg, ["task=null"])
    assert cfg.eval.task is None


def test_token_bytes_count_the_text_each_token_stands_for():
    metaspace = {"decoder": {"type": "Sequence"}, "model": {"vocab": {
        "\u2581the": 0, "the": 1, "<0x0A>": 2, "\u00e9": 3, "<s>": 4}},
        "added_tokens": [{"id": 4, "content": "<s>", "special": True}]}
    assert token_bytes(json.dumps(metaspace), 6).tolist() == [4, 3, 1, 2, 0, 0]
    byte_level = {"decoder": {"type": "ByteLevel"}, "model": {"vocab": {
        "\u0120the": 0, "\u00c3\u00a9": 1}}, "added_tokens": []}
    assert token_bytes(json.dumps(byte_level), 2).tolist() == [4, 2]


def test_the_corpus_bytes_are_the_text_bytes(llama_dir, corpus_dir, tmp_path, monkeypatch,
                                              cache_dir):
    """bits per byte divide by the bytes of the scored text: decoded, the targets are
    exactly as many bytes as token_bytes counts (an ASCII corpus: no character is split)."""
    from posexp.pretrained.model import transformers
    from posexp.pretrained.scoring import load_text

    monkeypatch.setenv("POSEXP_CACHE", str(cache_dir))
    cfg, source, _ = build(str(llama_dir), None, base_args(corpus_dir, tmp_path))
    corpus = load_text(pcfg.spec_of(cfg), source, 400)
    tok = transformers().AutoTokenizer.from_pretrained(llama_dir)
    stretch = np.asarray(corpus.val[100:900])
    text = tok.decode(stretch.tolist())
    assert int(corpus.token_bytes[stretch].sum()) == len(text.encode())
    assert corpus.tokenizer == "tiny-llama tokenizer"


def test_posexp_and_its_train_command_do_not_import_transformers(tmp_path):
    code = ("import sys, posexp\nfrom posexp import cli\n"
            "try:\n    cli.main(['train', '--cfg', 'job'])\nexcept SystemExit:\n    pass\n"
            "print('transformers' in sys.modules, 'huggingface_hub' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False False"


def test_a_run_reads_back_as_any_run(llama_dir, corpus_dir, tmp_path, monkeypatch, cache_dir):
    """ls, compare and report read a pretrained run through posexp.runs, as any run."""
    from posexp.runs import load_run

    monkeypatch.setenv("POSEXP_CACHE", str(cache_dir))
    pretrained(str(llama_dir), None, base_args(corpus_dir, tmp_path / "out"), progress=False)
    r = load_run(tmp_path / "out" / "default" / "tiny-llama")
    assert r.status == "completed", r.reason
    assert (r.encoding, r.train_len, r.seed, r.task) == ("tiny-llama", 64, None, None)
    assert sorted(p["length"] for p in r.curve) == [16, 64]
    assert all(p["bits_per_byte"] < p["bits_per_token"] for p in r.curve)
    assert Run(r.path).identity()["pretrained.id"] == "tiny-llama"


def test_a_run_records_its_kind_and_a_run_written_before_tells_it_by_its_config(
        llama_dir, corpus_dir, tmp_path, monkeypatch, cache_dir):
    """run.json's kind, which eval, resume and finetune dispatch on (runs/kind.py); a run of
    before posexp recorded it is told by its config.yaml."""
    import json

    from posexp import config as C
    from posexp.runs.kind import PRETRAINED, TRAINED, run_kind
    from tests.runs_on_disk import write_run

    monkeypatch.setenv("POSEXP_CACHE", str(cache_dir))
    pretrained(str(llama_dir), None, base_args(corpus_dir, tmp_path / "out"), progress=False)
    path = tmp_path / "out" / "default" / "tiny-llama"
    assert json.loads((path / "run.json").read_text())["kind"] == PRETRAINED
    info = json.loads((path / "run.json").read_text())
    del info["kind"]  # as a run of before
    (path / "run.json").write_text(json.dumps(info))
    assert run_kind(path) == PRETRAINED
    assert run_kind(write_run(tmp_path / "before", ["encoding=rope"], [])) == TRAINED
    created = Run.create(tmp_path / "trained", C.resolve(C.compose(["encoding=rope"])))
    assert created.info()["kind"] == TRAINED == run_kind(created.path)
    assert run_kind(tmp_path / "nothing here") == TRAINED  # the command says what is wrong


def test_the_gpu_preset_is_a_valid_pretrained_run(llama_dir, tmp_path):
    """configs/pretrained/tinyllama-gpu.yaml (scripts/gpu.sh pretrained): its settings
    compose and pass every check, here on the tiny Llama in its model's place."""
    model, revision, overrides = pcfg.preset("tinyllama-gpu")
    assert (model, revision) == ("TinyLlama/TinyLlama_v1.1", None)
    cfg, _, _ = build(str(llama_dir), None, [*overrides, f"results_dir={tmp_path}"])
    records = pcfg.scalings(cfg)
    assert records[0] is None and len(records) == 16
    assert sorted({r["factor"] for r in records[1:]}) == [2.0, 4.0, 8.0]
    assert max(cfg.eval.lengths) == 8192 and list(cfg.eval.task.lengths) == [2048, 4096, 8192]
    with pytest.raises(UsageError, match="presets: tinyllama-gpu"):
        pcfg.preset("no-such-preset")


def test_a_corpus_that_cannot_be_scored_leaves_no_run_behind(llama_dir, corpus_dir, tmp_path):
    """The model and the corpus load before the run directory is made: a corpus with no
    validation document is refused in one line, and no run says running forever."""
    args = [*base_args(corpus_dir, tmp_path), "data.val_fraction=0.0001"]
    with pytest.raises(PosexpError, match="0 validation documents"):
        pretrained(str(llama_dir), None, args, progress=False)
    assert not list(tmp_path.rglob("run.json"))


def test_the_groups_read_from_the_model_are_the_trained_runs_keys_and_pickle():
    """encoding, model and train of a pretrained run are the trained runs' keys (their
    types from one schema), named as the module holds them: a config pickles and comes back
    (process pools, joblib)."""
    import pickle
    import typing

    from posexp.config.schema import ModelConfig

    shape, trained = typing.get_type_hints(pcfg.ShapeConfig), typing.get_type_hints(ModelConfig)
    assert set(shape) == {"d_model", "n_layer", "n_head", "d_ff", "tie_weights", "init"}
    assert all(shape[k] == trained[k] for k in shape if k != "init")
    cfg = pcfg.structured(OmegaConf.create({"data": {"name": "stdlib"}, "run_name": "x"}))
    again = pickle.loads(pickle.dumps(cfg))
    assert OmegaConf.get_type(again.model) is pcfg.ShapeConfig and again == cfg


def test_a_run_scored_under_new_code_scores_its_held_points_again(
        llama_dir, corpus_dir, tmp_path, monkeypatch, cache_dir):
    """A pretrained run's eval.json of other code, a new point asked for: every point it
    held -- its curve at other lengths, its passkey cells though this command asks for no
    task -- is scored again with this code beside the new one, to the same values."""
    import json

    from posexp.pretrained.lifecycle import evaluate_dir
    from posexp.runs.records import contents_sha256

    monkeypatch.setenv("POSEXP_CACHE", str(cache_dir))
    args = [*base_args(corpus_dir, tmp_path / "out"), "task=passkey", "task.lengths=[32]",
            "task.depths=[0.5]", "task.eval_count=2"]
    pretrained(str(llama_dir), None, args, progress=False)
    path = tmp_path / "out" / "default" / "tiny-llama"
    data = json.loads((path / "eval.json").read_text())
    before = {(p.get("mode"), p["length"]): p.get("loss", p.get("exact"))
              for p in data["curve"] + data["tasks"]}
    data["code"]["source_sha256"] = "0" * 64
    data["sha256"] = contents_sha256(data)
    (path / "eval.json").write_text(json.dumps(data))
    assert evaluate_dir(path, ["eval.mode=sliding", "eval.lengths=[16]", "task=null"],
                        progress=False) == "completed"
    after = json.loads((path / "eval.json").read_text())
    values = {(p.get("mode"), p["length"]): p.get("loss", p.get("exact"))
              for p in after["curve"] + after["tasks"]}
    assert {k: values[k] for k in before} == before and ("sliding", 16) in values
    assert after["code"]["source_sha256"] != "0" * 64
