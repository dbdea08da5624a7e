"""Temperatures at evaluation (posexp/scaling.py's ``temperature`` methods): Llama 4's
against transformers' own Llama 4 attention in float64, each formula against its source,
and that they apply to a run of any encoding and change nothing where their factor is 1."""
import math

import pytest
import torch

from posexp.encodings.rope_scaling import query_scale
from posexp.model import GPT, GPTConfig
from posexp.scaling import RopeScaling


def _model(encoding: str, d_model: int = 32, n_layer: int = 2) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=40, d_model=d_model, n_layer=n_layer, n_head=2, d_ff=64,
                    encoding=encoding, max_positions=16)
    return GPT(cfg).double().eval()


def test_llama4_temperature_matches_transformers_llama4_attention():
    """A NoPE layer of transformers' Llama 4 with attn_temperature_tuning (its temperature
    scales the queries of its NoPE layers) against one of posexp's, on the same weights."""
    from transformers import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

    L, T, floor = 16, 90, 8  # floor_scale 8 tokens: half of L
    config = Llama4TextConfig(hidden_size=32, num_attention_heads=2, num_key_value_heads=2,
                              head_dim=16, num_hidden_layers=1, no_rope_layers=[0],
                              attn_temperature_tuning=True, floor_scale=floor, attn_scale=0.3,
                              use_qk_norm=False, attention_bias=False)
    config._attn_implementation = "eager"
    theirs = Llama4TextAttention(config, 0).double().eval()
    assert not theirs.use_rope
    model = _model("nope")
    ours = model.blocks[0].attn
    with torch.no_grad():
        ours.qkv.weight.copy_(torch.cat([theirs.q_proj.weight, theirs.k_proj.weight,
                                         theirs.v_proj.weight]))
        ours.proj.weight.copy_(theirs.o_proj.weight)
        x = torch.randn(2, T, 32, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(1))
        causal = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)[None, None]
        expected = theirs(x, position_embeddings=None, attention_mask=causal)[0]
        model.set_rope_scaling(RopeScaling("llama4_temperature", 1.0, attn_scale=0.3,
                                           floor_scale=floor / L), L)
        got = ours(x, None, None, None, model._temperature(T, x.device))
        # transformers computes the factor in float32 (positions.float()), posexp in float64
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-7)
        model.set_rope_scaling(None)
        plain = ours(x, None, None, None, model._temperature(T, x.device))
        assert (plain - expected).abs().max() > 1e-4  # without it, not


def test_each_formula_is_its_sources():
    L, T = 64, 512
    i = torch.arange(T, dtype=torch.float64)
    llama4 = query_scale(RopeScaling("llama4_temperature", 1.0), L, T)
    assert torch.equal(llama4, 1 + 0.1 * torch.log1p(torch.floor((i + 1) / L)))
    assert llama4[: L - 1].eq(1).all() and llama4[L - 1] == pytest.approx(1 + 0.1 * math.log(2))
    yarn = query_scale(RopeScaling("yarn_temperature", 1.0), L, T)  # s = T / L = 8
    assert yarn.eq((0.1 * math.log(8) + 1) ** 2).all()  # YaRN's 1.2079, squared
    assert query_scale(RopeScaling("yarn_temperature", 1.0), L, L).eq(1).all()
    logn = query_scale(RopeScaling("logn_temperature", 1.0), L, T)
    assert logn[:L].eq(1).all() and logn[-1] == pytest.approx(math.log(T) / math.log(L))


@pytest.mark.parametrize("encoding", ["rope", "alibi", "nope", "fox", "hybrid"])
def test_a_temperature_applies_to_any_encoding_and_is_plain_within_L(encoding):
    model, x = _model(encoding), torch.randint(0, 40, (2, 48))
    with torch.no_grad():
        plain = model(x)
        for method in ("llama4_temperature", "yarn_temperature", "logn_temperature"):
            model.set_rope_scaling(RopeScaling(method, 1.0), 48)  # L = the whole input
            torch.testing.assert_close(model(x)[:, :47], plain[:, :47], rtol=0, atol=1e-13)
            model.set_rope_scaling(RopeScaling(method, 1.0), 8)
            assert (model(x) - plain).abs().max() > 1e-5, method
        model.set_rope_scaling(None)
        torch.testing.assert_close(model(x), plain, rtol=0, atol=0)
