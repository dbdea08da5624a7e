"""Hybrid layers (posexp/encodings/hybrid.py): a pattern of only RoPE layers is RoPE and of
only NoPE layers NoPE, bit for bit; the default is Llama 4's layer choice as transformers'
Llama4 config computes it; each layer gets its own encoding's rotation or bias, against a
forward pass written in the test; RoPE scaling reaches the RoPE layers; bad patterns get one
line."""

import pytest
import torch
from omegaconf import OmegaConf

from posexp.config.check_scaling import scalable
from posexp.encodings import ModelShape, build_encoding, encoding_config
from posexp.encodings.hybrid import LLAMA4
from posexp.model import GPT, GPTConfig
from posexp.scaling import RopeScaling

CPU = torch.device("cpu")


def model(encoding, n_layer=4, **hparams):
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=64, d_model=32, n_layer=n_layer, n_head=4, d_ff=64,
                         encoding=encoding, max_positions=64, encoding_hparams=hparams)).eval()


IDX = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(1))


def logits(m):
    with torch.no_grad():
        return m(IDX)


def test_a_pattern_of_one_encoding_is_that_encoding_bit_for_bit():
    assert torch.equal(logits(model("hybrid", pattern=["rope"])), logits(model("rope")))
    assert torch.equal(logits(model("hybrid", pattern=["nope", "nope"])), logits(model("nope")))
    mixed = logits(model("hybrid"))
    assert not torch.allclose(mixed, logits(model("rope")), atol=1e-5)
    assert not torch.allclose(mixed, logits(model("nope")), atol=1e-5)


def test_the_default_is_llama4s_no_rope_layer_interval():
    from transformers import Llama4TextConfig

    for n_layer in (4, 8, 12):
        rope_layers = Llama4TextConfig(num_hidden_layers=n_layer,
                                       no_rope_layer_interval=4).no_rope_layers  # 1: RoPE
        enc = build_encoding("hybrid", ModelShape(32, 4, n_layer))
        assert enc.pattern == LLAMA4
        ours = [int(type(enc.layer_encoding(layer)).__name__ == "RotaryPositions")
                for layer in range(n_layer)]
        assert ours == rope_layers


def test_each_layer_applies_its_own_encoding():
    """[rope, alibi, nope] over 3 layers against the forward pass written here: block 0 with
    RoPE's rotation and no bias, block 1 with ALiBi's bias and no rotation, block 2 with
    neither."""
    m = model("hybrid", n_layer=3, pattern=["rope", "alibi", "nope"])
    rope, alibi = build_encoding("rope", ModelShape(32, 4, 3)), \
        build_encoding("alibi", ModelShape(32, 4, 3))
    with torch.no_grad():
        x = m.tok_emb(IDX)
        cos_sin = rope.rotary(40, CPU)
        x = m.blocks[0](x, (cos_sin, cos_sin), None)
        x = m.blocks[1](x, None, alibi)
        x = m.blocks[2](x, None, None)
        assert torch.allclose(m.head(m.ln_f(x)), logits(m), atol=1e-6)


def test_rope_scaling_reaches_the_rope_layers_and_only_a_pattern_with_them_takes_it():
    m = model("hybrid")
    plain = logits(m)
    m.set_rope_scaling(RopeScaling(method="linear", factor=4.0), original_len=16)
    assert not torch.allclose(logits(m), plain, atol=1e-5)
    rope_part = m.encoding.layer_encoding(0)
    cos, _ = rope_part.rotary(8, CPU)
    reference = build_encoding("rope", ModelShape(32, 4, 4))
    reference.set_scaling(RopeScaling(method="linear", factor=4.0), 16)
    assert torch.equal(cos, reference.rotary(8, CPU)[0])

    def cfg(pattern):
        return OmegaConf.create({"encoding": {"name": "hybrid", "hparams": {"pattern": pattern}}})

    assert scalable(cfg(["alibi", "rope"])) and not scalable(cfg(["alibi", "nope"]))


def test_its_kernels_are_those_every_biased_layer_runs_on():
    assert encoding_config("hybrid").bias_kernels == ()
    assert encoding_config("hybrid", {"pattern": ["alibi", "fox"]}).bias_kernels == \
        ("sdpa", "flex")
    assert encoding_config("hybrid", {"pattern": ["alibi", "fire"]}).bias_kernels == ("sdpa",)


@pytest.mark.parametrize("pattern,message", [
    (["rope", "learned"], "learned adds to the token embeddings"),
    (["ropy"], "a list of encodings that act inside attention"),
    (["hybrid"], "a list of encodings that act inside attention"),
    ([], "a non-empty list of encoding names"),
    ("rope", "a non-empty list of encoding names"),
])
def test_a_bad_pattern_is_refused_in_one_line(pattern, message):
    with pytest.raises(ValueError, match=message) as error:
        encoding_config("hybrid", {"pattern": pattern})
    assert "\n" not in str(error.value)
