"""Each encoding's math against the property its paper claims for it."""
import math

import pytest
import torch

from posexp.encodings import ENCODINGS, ModelShape, build_encoding, in_order
from posexp.encodings.alibi import ALiBi, alibi_slopes
from posexp.encodings.rope import RotaryPositions, apply_rotary
from posexp.encodings.sinusoidal import sinusoidal_table
from posexp.model import GPT, GPTConfig

torch.set_default_dtype(torch.float32)


# --- sinusoidal -------------------------------------------------------------------------
def test_sinusoidal_known_values():
    pe = sinusoidal_table(4, 6)
    assert torch.allclose(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0]))
    # pos 1, pair i=1 of d=6: angle 1 / 10000^(2/6)
    w = 10000 ** (-2 / 6)
    assert pe[1, 2].item() == pytest.approx(math.sin(w), abs=1e-7)
    assert pe[1, 3].item() == pytest.approx(math.cos(w), abs=1e-7)


def test_sinusoidal_shift_is_a_fixed_linear_map():
    d, k = 16, 7
    pe = sinusoidal_table(200, d).double()
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    m = torch.zeros(d, d, dtype=torch.float64)  # (sin, cos) pairs each turn by k * w_i
    for i, wi in enumerate(w * k):
        c, s = math.cos(wi), math.sin(wi)
        m[2 * i, 2 * i], m[2 * i, 2 * i + 1] = c, s
        m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = -s, c
    assert torch.allclose(pe[k:], pe[:-k] @ m.T, atol=1e-5)
    # and the map is a rotation: orthogonal
    assert torch.allclose(m @ m.T, torch.eye(d, dtype=torch.float64), atol=1e-12)


def test_sinusoidal_dot_product_depends_only_on_offset():
    pe = sinusoidal_table(300, 32).double()
    gram = pe @ pe.T
    for offset in (0, 1, 5, 40):
        diag = torch.diagonal(gram, offset)
        assert torch.allclose(diag, diag[0].expand_as(diag), atol=1e-4)
    assert not torch.allclose(torch.diagonal(gram, 1)[0], torch.diagonal(gram, 2)[0])


def test_sinusoidal_grows_for_any_length():
    enc = build_encoding("sinusoidal", ModelShape(d_model=8, n_head=2, n_layer=1))
    short = enc.embedding(10, torch.device("cpu")).clone()
    long = enc.embedding(5000, torch.device("cpu"))
    assert long.shape == (5000, 8)
    assert torch.equal(long[:10], short)


def test_sinusoidal_tokens_start_at_unit_scale_as_the_sines_do():
    # under posexp's policy (model.init=torch) every encoding's tokens start N(0, 1), the
    # sines' size; with GPT-2's 0.02, tensor2tensor's recipe (std d^-1/2, then x sqrt(d))
    # brings sinusoidal's to unit scale and leaves every other encoding's at 0.02
    from posexp.model import GPT, GPTConfig

    def tokens(encoding, init="torch", **hparams):
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=256, d_model=64, n_layer=1, n_head=2, d_ff=128,
                              encoding=encoding, max_positions=16, encoding_hparams=hparams,
                              init=init))
        return model.tok_emb.weight.std().item() * model.encoding.token_scale

    assert tokens("sinusoidal") == pytest.approx(1.0, rel=0.05)
    assert tokens("learned") == pytest.approx(1.0, rel=0.05)
    recipe = {"unit_tokens": True, "scale_tokens": True}
    assert tokens("sinusoidal", "gpt2", **recipe) == pytest.approx(1.0, rel=0.05)
    assert tokens("sinusoidal", "gpt2") == pytest.approx(0.02, rel=0.05)
    assert tokens("learned", "gpt2") == pytest.approx(0.02, rel=0.05)


def test_sinusoidal_base_is_encoding_base():
    # pair i turns by base^(-2i/d) radians per position; encoding.base sets base, as for rope
    enc = build_encoding("sinusoidal", ModelShape(d_model=16, n_head=2, n_layer=1), base=100.0)
    step = enc.embedding(2, torch.device("cpu"))[1].double()
    turn = 100.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    assert torch.allclose(step[0::2], turn.sin(), atol=1e-6)
    assert torch.allclose(step[1::2], turn.cos(), atol=1e-6)
    assert not torch.allclose(step, sinusoidal_table(2, 16)[1].double(), atol=1e-2)
    with pytest.raises(ValueError, match="base"):
        build_encoding("sinusoidal", ModelShape(d_model=16, n_head=2, n_layer=1), base=1.0)


def test_sinusoidal_recipes_scale_tokens_or_table():
    shape = ModelShape(d_model=16, n_head=2, n_layer=1)
    cpu = torch.device("cpu")
    paper = build_encoding("sinusoidal", shape, {"scale_tokens": True, "table_scale": 1.0})
    assert paper.token_scale == 4.0 and not list(paper.parameters())
    assert torch.equal(paper.embedding(5, cpu), sinusoidal_table(5, 16))
    shrunk = build_encoding("sinusoidal", shape, {"scale_tokens": False, "table_scale": 0.25})
    assert shrunk.token_scale == 1.0
    assert torch.equal(shrunk.embedding(5, cpu), 0.25 * sinusoidal_table(5, 16))
    learn = build_encoding("sinusoidal", shape, {"scale_tokens": False, "table_scale": 0.25,
                                                 "learn_scale": True})
    (scale,) = learn.parameters()
    learn.embedding(5, cpu).sum().backward()
    # d/ds of sum(s * table) is the table's sum: the scale trains
    assert scale.grad.item() == pytest.approx(sinusoidal_table(5, 16).sum().item(), rel=1e-6)
    # the table itself is a fixed buffer, never saved
    assert "table" not in learn.state_dict() and "scale" in learn.state_dict()
    assert "scale" not in shrunk.state_dict()


# --- rope -------------------------------------------------------------------------------
def _rotated(rope, x, positions):
    cos, sin = rope.rotary(int(positions.max()) + 1, torch.device("cpu"))
    return apply_rotary(x, cos[positions], sin[positions])


def test_rope_scores_depend_only_on_relative_position():
    torch.manual_seed(0)
    rope = RotaryPositions(d_head=16)
    q, k = torch.randn(16, dtype=torch.float64).float(), torch.randn(16).float()
    def score(m, n):
        qm = _rotated(rope, q[None], torch.tensor([m]))[0]
        kn = _rotated(rope, k[None], torch.tensor([n]))[0]
        return float(qm @ kn)
    base = score(10, 3)
    for shift in (1, 17, 500, 3000):
        assert score(10 + shift, 3 + shift) == pytest.approx(base, rel=1e-4, abs=1e-4)
    assert score(10, 3) != pytest.approx(score(10, 4), abs=1e-3)


def test_rope_preserves_norms_and_known_angle():
    rope = RotaryPositions(d_head=8, base=10000.0)
    x = torch.randn(50, 8)
    y = _rotated(rope, x, torch.arange(50))
    assert torch.allclose(x.norm(dim=-1), y.norm(dim=-1), atol=1e-5)
    # rotate-half layout: dims (0, 4) form pair 0, which turns by pos * base^0 = pos radians
    e0 = torch.zeros(8)
    e0[0] = 1.0
    y3 = _rotated(rope, e0[None], torch.tensor([3]))[0]
    assert y3[0].item() == pytest.approx(math.cos(3), abs=1e-6)
    assert y3[4].item() == pytest.approx(math.sin(3), abs=1e-6)


def test_rope_cache_is_float32_and_regrows():
    rope = RotaryPositions(d_head=8)
    cos, _ = rope.rotary(16, torch.device("cpu"))
    assert cos.dtype == torch.float32 and rope.cos.shape[0] == 16
    cos_long, _ = rope.rotary(4096, torch.device("cpu"))
    assert rope.cos.shape[0] == 4096
    assert torch.equal(cos_long[:16], cos)
    assert cos_long[4095, 0].item() == pytest.approx(math.cos(4095), abs=1e-5)


def test_rope_rejects_odd_head_dimension():
    with pytest.raises(ValueError, match="even head dimension"):
        RotaryPositions(d_head=7)


# --- alibi ------------------------------------------------------------------------------
def test_alibi_slopes_power_of_two():
    assert alibi_slopes(8) == pytest.approx([2.0 ** -k for k in range(1, 9)])
    assert alibi_slopes(16) == pytest.approx([2.0 ** (-k / 2) for k in range(1, 17)])


def test_alibi_slopes_interleaving_rule():
    # 12 heads: the 8-head slopes, then every other slope of the 16-head sequence
    expected_12 = [2.0 ** -k for k in range(1, 9)] + [2.0 ** -(k + 0.5) for k in range(0, 4)]
    assert alibi_slopes(12) == pytest.approx(expected_12)
    # 6 heads: the 4-head slopes 2^-2, 2^-4, 2^-6, 2^-8, then 2^-1, 2^-3 from the 8-head ones
    assert alibi_slopes(6) == pytest.approx([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])
    assert len(set(alibi_slopes(12))) == 12


def test_alibi_bias_is_linear_in_distance_and_causal():
    alibi = ALiBi(4)
    slopes = torch.tensor(alibi_slopes(4))
    bias = alibi.score_bias(0, 0, 5, 5, torch.device("cpu"))
    assert bias.shape == (4, 5, 5)
    assert bias[1, 4, 1].item() == pytest.approx(-slopes[1].item() * 3)
    assert torch.all(torch.diagonal(bias, 0, 1, 2) == 0)
    assert torch.isinf(bias[:, 0, 1:]).all() and (bias[:, 0, 1:] < 0).all()
    # a block of queries starting later gives the same rows as the full matrix
    assert torch.equal(alibi.score_bias(0, 3, 2, 5, torch.device("cpu")), bias[:, 3:5, :])


# --- learned ----------------------------------------------------------------------------
def test_learned_has_no_row_past_its_table():
    enc = build_encoding("learned", ModelShape(d_model=8, n_head=2, n_layer=1), max_positions=32)
    assert enc.max_positions == 32
    assert enc.embedding(32, torch.device("cpu")).shape == (32, 8)
    with pytest.raises(ValueError, match="32 rows"):
        enc.embedding(33, torch.device("cpu"))


# --- no encoding: order-blind attention -------------------------------------------------
def _one_layer(encoding: str) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50, d_model=32, n_layer=1, n_head=4, d_ff=64,
                    encoding=encoding, max_positions=64)
    return GPT(cfg).eval()


@pytest.mark.parametrize("encoding", in_order())
def test_last_position_sees_a_set_without_an_encoding(encoding):
    """Permuting the earlier tokens leaves the last position's output unchanged in a
    one-layer model without an order signal -- an encoding that reads no positions and adds
    no score bias (FoX reads none, but its gates' decay runs along the sequence) -- and
    changes it with every other encoding."""
    spec = ENCODINGS[encoding]
    blind = not spec.reads_positions and not spec.module.bias_kernels
    model = _one_layer(encoding)
    with torch.no_grad():  # a signal that starts at 0 (CoPE's table of positions) moves
        for p in model.encoding.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(2)) * 0.5)
    torch.manual_seed(1)
    tokens = torch.randint(0, 50, (1, 20))
    perm = torch.cat([torch.randperm(19), torch.tensor([19])])
    with torch.no_grad():
        out = model.hidden(tokens)[0, -1]
        out_perm = model.hidden(tokens[:, perm])[0, -1]
    assert torch.allclose(out, out_perm, atol=1e-5) is blind
