"""Pretrained models on posexp's protocol (posexp/pretrained), on tiny models built and saved
here (tests/pretrained_models.py; nothing downloaded): posexp's perplexity is an
independent loop's over the same model and tokens, each RoPE scaling is the model loaded
with transformers' own rope settings (and posexp's own formulas), and a model without
rotary positions is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from posexp.encodings.rope_scaling import formula
from posexp.errors import UsageError
from posexp.evaluate.windows import Scoring, extrapolation_curve
from posexp.pretrained.model import PretrainedLM, describe, hf_config, load
from posexp.pretrained.rope import Rescaler, rotary_modules
from posexp.pretrained.source import resolve
from posexp.scaling import RopeScaling, record
from posexp.spans import layout
from tests import pretrained_models as tiny

pytest.importorskip("transformers")
CPU = torch.device("cpu")
TOL = 2e-5  # fp32 on the CPU: two computations of one loss agree to about 1e-6


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    return tiny.build(tmp_path_factory.mktemp("pretrained"))


def lm_of(path) -> PretrainedLM:
    source = resolve(str(path))
    return PretrainedLM(load(source, CPU), describe(hf_config(source.path)), source.name)


def reference_model(path, rope: dict | None = None, max_positions: int | None = None):
    """The model as transformers loads it, with ``rope`` as its rope settings."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    if rope is not None:
        keep = {k: v for k, v in config.rope_parameters.items()
                if k in ("rope_theta", "partial_rotary_factor")}
        config.rope_parameters = {**keep, **rope}
    if max_positions is not None:
        config.max_position_embeddings = max_positions
    return AutoModelForCausalLM.from_pretrained(path, config=config, dtype=torch.float32).eval()


@torch.no_grad()
def hf_losses(model, tokens: torch.Tensor) -> torch.Tensor:
    """Per-token loss from transformers' own forward pass: logits of every position."""
    logits = model(input_ids=tokens[:, :-1]).logits.double()
    return F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")


@torch.no_grad()
def independent_loop(model, val: np.ndarray, first, lengths, L: int, S: int,
                     token_bytes: np.ndarray) -> tuple[float, int]:
    """Summed loss and bytes of the targets of spans (first, length), each scored by
    windows of L tokens that advance by S (the span's length when shorter) and score their
    last S targets -- the protocol of docs/evaluation.md written out once more."""
    total, n_bytes = 0.0, 0
    for f, n in zip(first, lengths, strict=True):
        s = min(S, n)
        ends = list(range(f + s, f + n + 1, s)) + ([f + n] if n % s else [])
        done = f
        for e in ends:
            window = torch.from_numpy(val[max(0, e - L):e + 1].astype(np.int64))[None]
            losses = hf_losses(model, window)[0]
            count = e - done
            total += float(losses[-count:].sum())
            n_bytes += int(token_bytes[val[e - count + 1:e + 1]].sum())
            done = e
    return total, n_bytes


@pytest.mark.parametrize("name", ["llama", "neox"])
def test_perplexity_equals_an_independent_loop_over_the_same_tokens(models, name):
    lm = lm_of(models[name])
    val = np.random.default_rng(0).integers(2, 400, 2400)
    spans = layout(len(val), np.array([0, 900, 1500]), 300)
    token_bytes = np.arange(400) % 4 + 1
    for mode, lengths in (("nonoverlapping", [16, 64, 160]), ("sliding", [64, 160])):
        curve, _ = extrapolation_curve(lm, val, lengths, Scoring(mode, None, 300, 1024), spans,
                                       CPU, token_bytes)
        for p in curve:
            total, n_bytes = independent_loop(lm.model, val, spans.first, spans.length,
                                              p["length"], p["stride"], token_bytes)
            assert p["loss"] == pytest.approx(total / 300, rel=TOL), (mode, p["length"])
            assert p["bits_per_byte"] == pytest.approx(total / n_bytes / math.log(2), rel=TOL)
            assert p["bits_per_token"] == pytest.approx(total / 300 / math.log(2), rel=TOL)


def hand_settings(method: str, base: float, d: int, s: float) -> tuple[dict, int | None]:
    """transformers' rope settings for each method at factor s over L = tiny.CONTEXT,
    written out here (NTK-aware: the base, as its post defines it), and the
    max_position_embeddings each reads."""
    L = tiny.CONTEXT
    return {
        "linear": ({"rope_type": "linear", "factor": s}, None),
        "ntk": ({"rope_type": "default", "rope_theta": base * s ** (d / (d - 2))}, None),
        "dynamic": ({"rope_type": "dynamic", "factor": s}, None),
        "yarn": ({"rope_type": "yarn", "factor": s, "original_max_position_embeddings": L,
                  "beta_fast": 32.0, "beta_slow": 1.0}, int(L * s)),
        "llama3": ({"rope_type": "llama3", "factor": s, "original_max_position_embeddings": L,
                    "low_freq_factor": 1.0, "high_freq_factor": 4.0}, int(L * s)),
    }[method]


METHODS = ["linear", "ntk", "dynamic", "yarn", "llama3"]


@pytest.mark.parametrize("name", ["llama", "neox"])
def test_each_scaling_is_the_model_loaded_with_transformers_rope_settings(models, name):
    lm = lm_of(models[name])
    d = lm.described.rotary_dim
    tokens = torch.from_numpy(np.random.default_rng(1).integers(2, 400, (2, 161)))
    plain = lm.token_losses(tokens[:, :-1], tokens[:, 1:])
    rescaler = Rescaler(lm)
    for method in METHODS:
        rec = record(method, 4.0, {"beta_fast": 32.0, "beta_slow": 1.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0})
        rescaler.set(rec)
        ours = lm.token_losses(tokens[:, :-1], tokens[:, 1:]).double()
        theirs = hf_losses(reference_model(models[name], *hand_settings(
            method, lm.described.base, d, 4.0)), tokens)
        assert (ours - theirs).abs().max() < TOL, method
        assert (ours - plain.double()).abs().max() > 1e-3, f"{method} changed nothing"
        # and the frequencies are posexp's own formulas for the method
        module = rotary_modules(lm.model)[0][1]
        inv_freq, factor = formula(method)(RopeScaling(**rec), d, lm.described.base,
                                             tiny.CONTEXT, 160)
        assert torch.allclose(module.inv_freq.double(), inv_freq, rtol=1e-6), method
        assert module.attention_scaling == pytest.approx(factor, rel=1e-6)
    rescaler.set(None)
    assert torch.equal(lm.token_losses(tokens[:, :-1], tokens[:, 1:]), plain)


def test_dynamic_ntk_follows_each_window_whatever_was_scored_before(models):
    """transformers' dynamic NTK keeps the frequencies of the longest input it has seen;
    posexp builds them afresh for each window length, as a model loaded for that length."""
    lm = lm_of(models["llama"])
    Rescaler(lm).set(record("dynamic", 2.0, {}))
    reference = {}
    for T in (160, 100, 160):
        tokens = torch.from_numpy(np.random.default_rng(T).integers(2, 400, (1, T + 1)))
        ours = lm.token_losses(tokens[:, :-1], tokens[:, 1:]).double()
        reference.setdefault(T, hf_losses(reference_model(
            models["llama"], {"rope_type": "dynamic", "factor": 2.0}), tokens))
        assert (ours - reference[T]).abs().max() < TOL, T


def test_longrope_uses_the_factors_the_model_supplies(models):
    lm = lm_of(models["longrope"])
    tokens = torch.from_numpy(np.random.default_rng(2).integers(2, 400, (1, 201)))
    Rescaler(lm).set({"method": "longrope", "factor": 3.0})
    ours = lm.token_losses(tokens[:, :-1], tokens[:, 1:]).double()
    rope = dict(lm.model.config.rope_parameters)
    theirs = hf_losses(reference_model(models["longrope"], {**rope, "factor": 3.0},
                                       3 * tiny.CONTEXT), tokens)
    assert (ours - theirs).abs().max() < TOL
    with pytest.raises(UsageError, match="long_factor and short_factor the model supplies"):
        Rescaler(lm_of(models["llama"])).set({"method": "longrope", "factor": 3.0})


def test_a_model_without_rotary_positions_is_refused_and_its_table_ends(models):
    lm = lm_of(models["gpt2"])
    assert lm.described.positions == "learned" and lm.max_positions == tiny.CONTEXT
    with pytest.raises(UsageError, match="learned table of absolute positions; score it as "
                                         "published"):
        Rescaler(lm).set(record("yarn", 2.0, {"beta_fast": 32.0, "beta_slow": 1.0}))
    val = np.random.default_rng(3).integers(2, 400, 1000)
    spans = layout(len(val), np.array([0]), 200)
    curve, _ = extrapolation_curve(lm, val, [32, 64, 128],
                                   Scoring("nonoverlapping", None, 200, 1024), spans, CPU)
    assert [p["applicable"] for p in curve] == [True, True, False]
    assert "positions stop at 64" in curve[2]["reason"]


def test_describe_reads_the_length_shape_and_partial_rotary_dimension(models):
    d = describe(hf_config(models["neox"]))
    assert (d.positions, d.context, d.rotary_dim, d.d_model, d.n_layer, d.n_head) == \
        ("rope", 64, 4, 32, 2, 4)
    assert describe(hf_config(models["llama"])).rotary_dim == 8
    assert describe(hf_config(models["longrope"])).context == tiny.CONTEXT
