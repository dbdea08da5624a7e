"""xPos against what its paper claims: RoPE whose scores also decay by zeta^((n - m)/B)."""
import math

import pytest
import torch

from posexp.encodings import ModelShape, build_encoding
from posexp.encodings.rope import RotaryPositions, apply_rotary
from posexp.model import GPT, GPTConfig

CPU = torch.device("cpu")


def xpos(d_head: int = 16, **hparams):
    return build_encoding("xpos", ModelShape(d_model=4 * d_head, n_head=4, n_layer=1), hparams)


def scores(enc, q: torch.Tensor, k: torch.Tensor, seq_len: int):
    """score(n, m) = q_n . k_m, one query and one key vector placed at positions n and m of a
    window of seq_len tokens."""
    (cos_q, sin_q), (cos_k, sin_k) = enc.rotary_qk(seq_len, CPU)

    def score(n: int, m: int) -> float:
        qn = apply_rotary(q[None], cos_q[n : n + 1], sin_q[n : n + 1])[0].double()
        km = apply_rotary(k[None], cos_k[m : m + 1], sin_k[m : m + 1])[0].double()
        return float(qn @ km)

    return score


def test_xpos_score_is_cos_of_the_angle_times_zeta_to_the_distance():
    """Pair 0 (dimensions 0 and d/2) turns by one radian a step and has the smallest scale,
    zeta_0 = gamma / (1 + gamma): e_0 at n against e_0 at m scores
    cos(n - m) * zeta_0^((n - m)/B), whatever the window and the centring."""
    enc = xpos()
    e0 = torch.zeros(16)
    e0[0] = 1.0
    zeta0 = 0.4 / 1.4
    for seq_len in (7, 600, 3001):
        s = scores(enc, e0, e0, seq_len)
        for n, m in [(0, 0), (5, 2), (seq_len - 1, 0), (seq_len - 1, seq_len // 2)]:
            expected = math.cos(n - m) * zeta0 ** ((n - m) / 512)
            assert s(n, m) == pytest.approx(expected, rel=1e-5, abs=1e-7)


def test_xpos_scores_depend_only_on_relative_position():
    torch.manual_seed(0)
    enc = xpos()
    q, k = torch.randn(16), torch.randn(16)
    long = scores(enc, q, k, 4000)
    short = scores(enc, q, k, 100)  # another window: another centre, the same scores
    for n, m in [(10, 3), (50, 50), (99, 0)]:
        for shift in (0, 1, 900, 3900 - n):
            assert long(n + shift, m + shift) == pytest.approx(short(n, m),
                                                                      rel=1e-4, abs=1e-5)
    assert long(10, 3) != pytest.approx(long(10, 4), abs=1e-3)


def test_xpos_scores_decay_with_distance():
    """|q_n . k_m| <= |q| |k| zeta_max^((n - m)/B), zeta_max = zeta_(d/2-1) < 1: a bound that
    falls with distance (to 0.22 |q| |k| at 8191), where RoPE's stays |q| |k|."""
    torch.manual_seed(1)
    enc = xpos()
    q, k = torch.randn(16), torch.randn(16)
    s = scores(enc, q, k, 8192)
    zeta_max = (14 / 16 + 0.4) / 1.4
    for distance in (0, 512, 4096, 8191):
        bound = q.norm() * k.norm() * zeta_max ** (distance / 512)
        assert abs(s(8191, 8191 - distance)) <= bound * (1 + 1e-5)


def test_xpos_with_gamma_to_infinity_is_rope():
    torch.manual_seed(2)
    enc, rope = xpos(gamma=1e12), RotaryPositions(16)
    (cos_q, sin_q), (cos_k, sin_k) = enc.rotary_qk(3000, CPU)
    cos, sin = rope.rotary(3000, CPU)
    for table in (cos_q, cos_k):
        assert torch.allclose(table, cos, atol=1e-6)
    for table in (sin_q, sin_k):
        assert torch.allclose(table, sin, atol=1e-6)
    cfg = dict(vocab_size=50, d_model=64, n_layer=2, n_head=4, d_ff=64, max_positions=64)
    model_x = GPT(GPTConfig(**cfg, encoding="xpos", encoding_hparams={"gamma": 1e12}))
    model_r = GPT(GPTConfig(**cfg, encoding="rope"))
    model_r.load_state_dict(model_x.state_dict())
    tokens = torch.randint(0, 50, (2, 201))
    with torch.no_grad():
        a = model_x.token_losses(tokens[:, :-1], tokens[:, 1:])
        b = model_r.token_losses(tokens[:, :-1], tokens[:, 1:])
    assert torch.allclose(a, b, atol=1e-5)


def test_xpos_stops_where_its_scale_leaves_float32():
    """Centred on the window, the largest exponent is ceil(T/2)/B * log(1/zeta_0); scales
    stay within 2^120: T = 2 floor(120 ln 2 * 512 / ln 3.5) = 67,988 with the paper's gamma and
    B, so 64k fits."""
    enc = xpos()
    assert enc.max_positions == 67_988
    (cos_q, sin_q), (cos_k, sin_k) = enc.rotary_qk(65_536, CPU)
    assert all(torch.isfinite(t).all() for t in (cos_q, sin_q, cos_k, sin_k))
    e0 = torch.zeros(16)
    e0[0] = 1.0
    s = scores(enc, e0, e0, 65_536)  # the extreme scales, at the window's ends
    for n in (0, 65_535):
        assert s(n, n) == pytest.approx(1.0, rel=1e-5)
    with pytest.raises(ValueError, match="float32 past 67988"):
        enc.rotary_qk(67_989, CPU)
    model = GPT(GPTConfig(vocab_size=50, d_model=64, n_layer=1, n_head=4, d_ff=64,
                          encoding="xpos", max_positions=64))
    assert model.max_positions == 67_988  # the evaluator marks longer windows not applicable


def test_xpos_rejects_odd_head_dimension():
    with pytest.raises(ValueError, match="even head dimension"):
        xpos(d_head=7)
