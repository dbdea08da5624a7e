"""Partial RoPE (posexp/encodings/partial_rope.py): p-RoPE keeps RoPE's highest frequencies
(Barbero et al.), GPT-J's partial rotary the first dimensions with RoPE's whole spectrum over
them; at p = 1 p-RoPE is RoPE and at p = 0 either is NoPE, bit for bit; parity with
x-transformers' rotary_emb_dim and with p-RoPE written from the paper's equations."""

import math

import pytest
import torch

from posexp.encodings import ModelShape, build_encoding
from posexp.encodings.partial_rope import rotated_pairs
from posexp.encodings.rope import rotate_half
from posexp.model import GPT, GPTConfig

CPU = torch.device("cpu")
D_HEAD = 32
SHAPE = ModelShape(d_model=4 * D_HEAD, n_head=4, n_layer=2)


def model(encoding: str, **hparams) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=64, d_model=64, n_layer=2, n_head=2, d_ff=128,
                         encoding=encoding, max_positions=64, encoding_hparams=hparams))


def logits(m: GPT) -> torch.Tensor:
    idx = torch.randint(0, 64, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return m.head(m.hidden(idx))


@pytest.mark.parametrize("keep", ["highest", "first"])
def test_all_pairs_rotated_is_rope_and_none_is_nope_bit_for_bit(keep):
    assert torch.equal(logits(model("partial_rope", fraction=1.0, keep=keep)),
                       logits(model("rope")))
    assert torch.equal(logits(model("partial_rope", fraction=0.0, keep=keep)),
                       logits(model("nope")))
    # and anything between is neither
    half = logits(model("partial_rope", fraction=0.5, keep=keep))
    assert not torch.equal(half, logits(model("rope")))
    assert not torch.equal(half, logits(model("nope")))


def angles(keep: str, fraction: float, seq_len: int = 40) -> torch.Tensor:
    """[seq_len, D_HEAD/2]: the angle each pair of the rotate-half layout turns by."""
    enc = build_encoding("partial_rope", SHAPE, {"fraction": fraction, "keep": keep})
    cos, sin = enc.rotary(seq_len, CPU)
    half = D_HEAD // 2
    assert torch.equal(cos[:, :half], cos[:, half:]) and torch.equal(sin[:, :half], sin[:, half:])
    return torch.atan2(sin[:, :half].double(), cos[:, :half].double())


def test_p_rope_keeps_ropes_highest_frequencies_and_drops_the_lowest():
    rope = build_encoding("rope", SHAPE)
    rope_cos, rope_sin = rope.rotary(40, CPU)
    enc = build_encoding("partial_rope", SHAPE, {"fraction": 0.25, "keep": "highest"})
    cos, sin = enc.rotary(40, CPU)
    kept = rotated_pairs(0.25, D_HEAD)
    assert kept == 4
    for pair in range(D_HEAD // 2):
        dims = [pair, pair + D_HEAD // 2]
        if pair < kept:  # RoPE's own, bit for bit
            assert torch.equal(cos[:, dims], rope_cos[:, dims])
            assert torch.equal(sin[:, dims], rope_sin[:, dims])
        else:  # unrotated: cos 1, sin 0 at every position
            assert torch.equal(cos[:, dims], torch.ones(40, 2))
            assert torch.equal(sin[:, dims], torch.zeros(40, 2))


def test_the_first_dimensions_variant_spans_ropes_whole_spectrum_over_fewer_dimensions():
    a = angles("first", 0.25)
    pairs = rotated_pairs(0.25, D_HEAD)  # r = 8 dimensions
    theta = 10000.0 ** (-torch.arange(pairs, dtype=torch.float64) * 2 / (2 * pairs))
    expected = (torch.arange(40, dtype=torch.float64)[:, None] * theta.float().double())
    wrapped = torch.remainder(expected + math.pi, 2 * math.pi) - math.pi
    assert torch.allclose(a[:, :pairs], wrapped, atol=1e-6)
    assert torch.equal(a[:, pairs:], torch.zeros(40, D_HEAD // 2 - pairs, dtype=torch.float64))
    # its slowest pair turns about base^(-(r-2)/r): near RoPE's slowest, far below p-RoPE's
    assert theta[-1] < 10000.0 ** (-0.7) < 10000.0 ** (-2 * 3 / D_HEAD)


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75])
def test_p_rope_scores_depend_on_distance_only(fraction):
    """The paper's property of RoPE, kept by p-RoPE: q_m . k_n is a function of m - n."""
    enc = build_encoding("partial_rope", SHAPE, {"fraction": fraction})
    cos, sin = (t.double() for t in enc.rotary(64, CPU))
    q, k = torch.randn(D_HEAD, dtype=torch.float64), torch.randn(D_HEAD, dtype=torch.float64)

    def score(m: int, n: int) -> float:
        qm = q * cos[m] + rotate_half(q) * sin[m]
        kn = k * cos[n] + rotate_half(k) * sin[n]
        return float(qm @ kn)

    assert score(10, 3) == pytest.approx(score(40, 33), abs=1e-6)
    assert score(10, 3) != pytest.approx(score(10, 4), abs=1e-3)


def p_rope_reference(x: torch.Tensor, position: int, fraction: float, base: float) -> torch.Tensor:
    """p-RoPE from the paper's equations, written here: the head as d/2 planes (x_i,
    x_{i + d/2}); plane i turns by position * base^(-2i/d) if i < p * d/2, else not."""
    d = x.shape[-1]
    out = x.clone()
    for i in range(d // 2):
        if i >= int(fraction * (d // 2) + 0.5):
            continue
        angle = position * float(torch.tensor(base ** (-2 * i / d)).float())
        a, b = x[i].item(), x[i + d // 2].item()
        out[i] = a * math.cos(angle) - b * math.sin(angle)
        out[i + d // 2] = b * math.cos(angle) + a * math.sin(angle)
    return out


@pytest.mark.parametrize("fraction", [0.25, 0.75])
def test_p_rope_matches_the_papers_equations_in_float64(fraction):
    enc = build_encoding("partial_rope", SHAPE, {"fraction": fraction})
    cos, sin = (t.double() for t in enc.rotary(50, CPU))
    x = torch.randn(D_HEAD, dtype=torch.float64)
    for position in (0, 1, 17, 49):
        ours = x * cos[position] + rotate_half(x) * sin[position]
        assert torch.allclose(ours, p_rope_reference(x, position, fraction, 10000.0),
                              atol=1e-6)


def test_gpt_j_partial_rotary_matches_x_transformers_rotary_emb_dim():
    """x-transformers rotates the first rotary_emb_dim dimensions in pairs (2i, 2i + 1);
    posexp rotates pairs (i, i + d/2): the same rotation up to a fixed permutation of the
    head's dimensions, so the angles agree pair for pair and the attention scores of
    permuted queries and keys agree."""
    from x_transformers.x_transformers import RotaryEmbedding, apply_rotary_pos_emb

    fraction, n = 0.5, 24
    pairs = rotated_pairs(fraction, D_HEAD)
    xt = RotaryEmbedding(2 * pairs)
    xt.inv_freq = xt.inv_freq.double()  # its float32 frequencies, the angles in float64
    freqs, _ = xt.forward(torch.arange(n, dtype=torch.float64))
    assert torch.allclose(angles("first", fraction, n)[:, :pairs],
                          torch.remainder(freqs[0, :, 0::2] + math.pi, 2 * math.pi) - math.pi,
                          atol=1e-6)
    # posexp dimension -> x-transformers dimension: the rotated planes, then the rest
    half = D_HEAD // 2
    order = ([2 * i for i in range(pairs)] + list(range(2 * pairs, 2 * pairs + half - pairs))
             + [2 * i + 1 for i in range(pairs)] + list(range(2 * pairs + half - pairs, D_HEAD)))
    q, k = torch.randn(n, D_HEAD, dtype=torch.float64), torch.randn(n, D_HEAD, dtype=torch.float64)
    theirs_q = apply_rotary_pos_emb(q[None, None], freqs)[0, 0]
    theirs_k = apply_rotary_pos_emb(k[None, None], freqs)[0, 0]
    enc = build_encoding("partial_rope", SHAPE, {"fraction": fraction, "keep": "first"})
    cos, sin = (t.double() for t in enc.rotary(n, CPU))
    ours_q, ours_k = (x[:, order] * cos + rotate_half(x[:, order]) * sin for x in (q, k))
    assert torch.allclose(ours_q @ ours_k.T, theirs_q @ theirs_k.T, rtol=1e-6, atol=1e-6)
