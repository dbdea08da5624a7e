"""The public Python API, as a notebook uses it: compose a run, run it, read its curve back
as records and as a DataFrame, load its model and call it for logits."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from omegaconf.errors import ReadonlyConfigError

import posexp
from posexp.errors import UsageError
from posexp.run.training import weights_hash
from tests.conftest import TINY


def test_compose_run_read_and_load_a_model(tmp_path, cache_dir, monkeypatch):
    monkeypatch.setenv("POSEXP_CACHE", str(cache_dir))
    monkeypatch.chdir(tmp_path)
    assert sorted(dir(posexp)) == sorted(posexp.__all__)
    spec = posexp.compose(["encoding=alibi", *TINY, "results_dir=out"])
    assert spec.path == Path("out/default/alibi-L16-s0")
    assert spec.eval_lengths == (16, 32, 64) and spec.identity["encoding.name"] == "alibi"
    with pytest.raises(ReadonlyConfigError):
        spec.cfg.train.lr = 1.0  # frozen: a spec is what config.yaml holds
    assert posexp.train(spec, progress=False) == "completed"
    assert posexp.train(spec, progress=False) == "skipped"  # the same identity, completed

    rows = posexp.curves(spec.path)
    assert [r["length"] for r in rows] == [16, 32, 64]
    assert {r["series"] for r in rows} == {"alibi L=16"} and all(r["ppl"] > 1 for r in rows)
    frame = posexp.curves_frame("out/default")
    assert list(frame["ppl"]) == [r["ppl"] for r in rows]
    assert posexp.load_run(spec.path).status == "completed"
    assert [r.name for r in posexp.load_runs("out")] == ["alibi-L16-s0"]

    model = posexp.load_model(spec.path)
    assert weights_hash(model) == posexp.load_run(spec.path).info["weights_sha256"]
    tokens = torch.randint(0, 256, (2, 17))
    with torch.no_grad():
        logits = model(tokens[:, :-1])
        loss = model(tokens[:, :-1], tokens[:, 1:])
    assert logits.shape == (2, 16, 256) and not model.training
    assert loss.item() == pytest.approx(
        F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).item(), rel=1e-6)


def test_a_bad_override_is_the_command_lines_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="train has no key 'seqlen'; did you mean 'seq_len'"):
        posexp.compose(["train.seqlen=64"])
