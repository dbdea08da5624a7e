"""RoPE context extension: each method against transformers' own implementation and the
property its source claims for it (posexp/encodings/rope_scaling.py)."""
import math

import pytest
import torch

from posexp.encodings.rope import RotaryPositions, apply_rotary
from posexp.encodings.rope_scaling import RopeScaling, plain_inv_freq, rope_frequencies
from posexp.model import GPT, GPTConfig
from posexp.scaling import yarn_bands

CPU = torch.device("cpu")


METHODS = ["linear", "ntk", "dynamic", "yarn", "llama3"]


STATIC = ["linear", "ntk", "yarn", "llama3"]  # frequencies independent of the window length


# --- against transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS ------------------------
def _transformers(method: str, d: int, base: float, factor: float, L: int, T: int | None):
    """transformers' (inv_freq, attention_factor) for a LLaMA config with these numbers
    (transformers is in the dev extra: without it these tests fail, never skip)."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_type": method, "rope_theta": base, "factor": factor}
    max_positions = L  # dynamic reads its original length here
    if method in ("yarn", "llama3"):
        params["original_max_position_embeddings"] = L
        max_positions = math.ceil(factor * L) + 1  # the extended context (must exceed L)
    if method == "llama3":
        params.update(low_freq_factor=1.0, high_freq_factor=4.0)
    cfg = LlamaConfig(hidden_size=4 * d, num_attention_heads=4, head_dim=d,
                      max_position_embeddings=max_positions, rope_parameters=params)
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[method](cfg, CPU, seq_len=T)
    return inv_freq.double(), float(attention_factor)


# (head_dim, base, original length): LLaMA-sized heads, posexp's own, a large base, a tiny
# head, and one whose pair turning once over L lies past the last pair (YaRN's ramp is then
# clamped at d - 1, not d/2 - 1)
SHAPES = [(128, 10000.0, 4096), (32, 10000.0, 128), (64, 500000.0, 2048), (16, 1000.0, 64),
          (16, 500.0, 8192)]


FACTORS = [1.0, 2.0, 2.5, 8.0, 32.0]


@pytest.mark.parametrize("method", ["linear", "yarn", "llama3"])
@pytest.mark.parametrize("d,base,L", SHAPES)
@pytest.mark.parametrize("factor", FACTORS)
def test_static_methods_match_transformers(method, d, base, L, factor):
    ours, ours_scale = rope_frequencies(d, base, RopeScaling(method, factor), L, L)
    theirs, their_scale = _transformers(method, d, base, factor, L, None)
    assert ours.shape == theirs.shape == (d // 2,)
    torch.testing.assert_close(ours, theirs, rtol=2e-6, atol=0)
    assert ours_scale == pytest.approx(their_scale, rel=1e-12)


@pytest.mark.parametrize("d,base,L", SHAPES)
@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("window", [0.5, 1.0, 1.5, 4.0, 16.0])  # T / L
def test_dynamic_matches_transformers(d, base, L, factor, window):
    T = int(window * L)
    ours, scale = rope_frequencies(d, base, RopeScaling("dynamic", factor), L, T)
    theirs, _ = _transformers("dynamic", d, base, factor, L, T)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=0)
    assert scale == 1.0


@pytest.mark.parametrize("d,base,L", SHAPES)
@pytest.mark.parametrize("factor", [2.0, 4.0, 8.0])
def test_ntk_is_transformers_dynamic_at_its_full_scale(d, base, L, factor):
    """transformers has no static NTK-aware entry; its dynamic formula at factor 1 and a
    window of s * L is base * s^(d/(d-2)), bloc97's NTK-aware base."""
    ours, _ = rope_frequencies(d, base, RopeScaling("ntk", factor), L, L)
    theirs, _ = _transformers("dynamic", d, base, 1.0, L, int(factor * L))
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=0)


# --- each method's defining property ----------------------------------------------------
def test_ntk_keeps_the_highest_frequency_and_divides_the_lowest_by_s():
    d, s = 32, 8.0
    plain = plain_inv_freq(d, 10000.0)
    ntk, _ = rope_frequencies(d, 10000.0, RopeScaling("ntk", s), 128)
    assert ntk[0].item() == plain[0].item() == 1.0
    assert ntk[-1].item() == pytest.approx(plain[-1].item() / s, rel=1e-12)
    assert torch.all(ntk[1:-1] < plain[1:-1]) and torch.all(ntk[1:-1] > plain[1:-1] / s)


@pytest.mark.parametrize("method,fast,slow", [("yarn", 32.0, 1.0), ("llama3", 4.0, 1.0)])
def test_fast_pairs_are_kept_and_slow_pairs_interpolated(method, fast, slow):
    """YaRN: pairs turning more than beta_fast times over L keep theta, fewer than beta_slow
    get theta / s; Llama 3 the same with high_freq_factor and low_freq_factor."""
    d, base, L, s = 64, 10000.0, 2048, 8.0
    plain = plain_inv_freq(d, base)
    scaled, _ = rope_frequencies(d, base, RopeScaling(method, s), L)
    rotations = L * plain / (2 * math.pi)
    kept, interpolated = rotations > fast, rotations < slow
    assert kept.sum() >= 3 and interpolated.sum() >= 3 and (~kept & ~interpolated).sum() >= 2
    assert torch.equal(scaled[kept], plain[kept])
    torch.testing.assert_close(scaled[interpolated], plain[interpolated] / s, rtol=1e-15, atol=0)
    middle = ~kept & ~interpolated
    assert torch.all(scaled[middle] <= plain[middle])
    assert torch.all(scaled[middle] >= plain[middle] / s)


@pytest.mark.parametrize(("d", "L", "bands"), [
    (128, 4096, (21, 25, 18)),  # Llama 2: 33% kept, 39% blended, 28% interpolated (#34)
    (32, 256, (1, 6, 9)),  # the CPU suite before: 6% / 38% / 56%
    (64, 1024, (6, 12, 14)),  # 19% / 38% / 44%
    (64, 2048, (9, 12, 11)),  # 28% / 38% / 34%
])
def test_yarn_bands_match_the_shares_worked_out_by_hand(d, L, bands):
    assert yarn_bands(d, 10000.0, L) == bands


def test_yarn_bands_count_the_pairs_the_formula_keeps_and_divides():
    d, L, s = 64, 1024, 4.0
    plain = plain_inv_freq(d, 10000.0)
    scaled, _ = rope_frequencies(d, 10000.0, RopeScaling("yarn", s), L)
    kept, blended, interpolated = yarn_bands(d, 10000.0, L)
    assert int((scaled == plain).sum()) == kept
    assert int(torch.isclose(scaled, plain / s, rtol=1e-15, atol=0).sum()) == interpolated
    assert kept + blended + interpolated == d // 2


def test_yarn_attention_factor_at_8():
    _, mscale = rope_frequencies(32, 10000.0, RopeScaling("yarn", 8.0), 128)
    assert round(mscale, 4) == 1.2079


def test_yarn_scales_every_score_by_mscale_squared():
    d, L, s = 16, 32, 8.0
    yarn = RotaryPositions(d, scaling=RopeScaling("yarn", s), original_len=L)
    inv_freq, mscale = rope_frequencies(d, 10000.0, RopeScaling("yarn", s), L)
    cos, sin = yarn.rotary(100, CPU)
    angles = torch.arange(100, dtype=torch.float64)[:, None] * inv_freq.float().double()
    angles = torch.cat((angles, angles), dim=-1)
    torch.manual_seed(0)
    q, k = torch.randn(100, d), torch.randn(100, d)
    unscaled = apply_rotary(q, angles.cos().float(), angles.sin().float()) @ apply_rotary(
        k, angles.cos().float(), angles.sin().float()).T
    scores = apply_rotary(q, cos, sin) @ apply_rotary(k, cos, sin).T
    torch.testing.assert_close(scores, unscaled * mscale**2, rtol=1e-5, atol=1e-5)


def test_linear_divides_positions_by_s():
    """PI: f'(x, m) = f(x, m / s); rotating at fractional positions m / s directly."""
    d, L, s = 16, 32, 4.0
    linear = RotaryPositions(d, scaling=RopeScaling("linear", s), original_len=L)
    cos, sin = linear.rotary(4 * L, CPU)
    positions = torch.arange(4 * L, dtype=torch.float64) / s
    angles = positions[:, None] * plain_inv_freq(d, 10000.0)
    angles = torch.cat((angles, angles), dim=-1)
    x = torch.randn(4 * L, d)
    direct = apply_rotary(x, angles.cos().float(), angles.sin().float())
    torch.testing.assert_close(apply_rotary(x, cos, sin), direct, rtol=0, atol=1e-5)
    # position 4m under PI with s = 4 is plain RoPE's position m
    plain_cos, _ = RotaryPositions(d).rotary(L, CPU)
    torch.testing.assert_close(cos[::4], plain_cos, rtol=0, atol=1e-6)


@pytest.mark.parametrize("method", STATIC)
def test_scaled_scores_depend_only_on_relative_position(method):
    d = 16
    rope = RotaryPositions(d, scaling=RopeScaling(method, 4.0), original_len=64)
    cos, sin = rope.rotary(4000, CPU)
    torch.manual_seed(0)
    q, k = torch.randn(d), torch.randn(d)

    def score(m, n):
        return float(apply_rotary(q[None], cos[[m]], sin[[m]])[0]
                     @ apply_rotary(k[None], cos[[n]], sin[[n]])[0])

    for shift in (1, 17, 500, 3000):
        assert score(10 + shift, 3 + shift) == pytest.approx(score(10, 3), rel=1e-4, abs=1e-4)
    assert score(10, 3) != pytest.approx(score(10, 4), abs=1e-3)


# --- dynamic NTK follows the window -----------------------------------------------------
def test_dynamic_is_plain_up_to_the_training_length_then_ntk_of_the_window():
    d, L, s = 16, 32, 4.0
    plain, dynamic = RotaryPositions(d), RotaryPositions(d, scaling=RopeScaling("dynamic", s),
                                                         original_len=L)
    for T in (8, L):
        assert all(map(torch.equal, dynamic.rotary(T, CPU), plain.rotary(T, CPU)))
    T = 80  # NTK with scale s * T / L - (s - 1) = 7
    ntk = RotaryPositions(d, scaling=RopeScaling("ntk", s * T / L - (s - 1)), original_len=L)
    long = [t.clone() for t in dynamic.rotary(T, CPU)]
    assert all(map(torch.equal, long, ntk.rotary(T, CPU)))
    assert not torch.allclose(long[0], plain.rotary(T, CPU)[0])
    # the table is keyed by its window: a shorter window is not a prefix of a longer one
    fresh = RotaryPositions(d, scaling=RopeScaling("dynamic", s), original_len=L)
    assert all(map(torch.equal, dynamic.rotary(48, CPU), fresh.rotary(48, CPU)))
    assert not torch.allclose(dynamic.rotary(48, CPU)[0], long[0][:48])
    assert all(map(torch.equal, dynamic.rotary(L, CPU), plain.rotary(L, CPU)))
    assert all(map(torch.equal, dynamic.rotary(T, CPU), long))


def test_dynamic_factor_one_is_ntk_at_the_window_scale():
    """As in transformers, dynamic NTK at factor 1 still scales windows above L, by T / L."""
    d, L = 16, 32
    dynamic = RotaryPositions(d, scaling=RopeScaling("dynamic", 1.0), original_len=L)
    ntk = RotaryPositions(d, scaling=RopeScaling("ntk", 2.0), original_len=L)
    assert all(map(torch.equal, dynamic.rotary(2 * L, CPU), ntk.rotary(2 * L, CPU)))


# --- in the model -----------------------------------------------------------------------
def _model(encoding: str = "rope") -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=50, d_model=32, n_layer=2, n_head=2, d_ff=64,
                         encoding=encoding, max_positions=64)).eval()


@torch.no_grad()
def _logits(model: GPT, T: int) -> torch.Tensor:
    tokens = torch.randint(0, 50, (2, T), generator=torch.Generator().manual_seed(T))
    return model.head(model.hidden(tokens))


@pytest.mark.parametrize("method", METHODS)
def test_factor_one_reproduces_plain_rope_logits_exactly(method):
    L = 16
    model = _model()
    lengths = (8, L) if method == "dynamic" else (8, L, 40)
    plain = [_logits(model, T) for T in lengths]
    model.set_rope_scaling(RopeScaling(method, 1.0), original_len=L)
    assert all(torch.equal(_logits(model, T), p) for T, p in zip(lengths, plain, strict=True))


def test_dynamic_model_equals_plain_up_to_training_length_and_differs_above():
    L = 16
    model = _model()
    plain = {T: _logits(model, T) for T in (L, 3 * L)}
    model.set_rope_scaling(RopeScaling("dynamic", 4.0), original_len=L)
    assert torch.equal(_logits(model, L), plain[L])
    assert not torch.allclose(_logits(model, 3 * L), plain[3 * L], atol=1e-4)


@pytest.mark.parametrize("method", METHODS)
def test_scaling_switches_on_a_trained_model_and_back(method):
    L = 16
    model = _model()
    keys = set(model.state_dict())
    plain = _logits(model, 3 * L)
    model.set_rope_scaling(RopeScaling(method, 4.0), original_len=L)
    assert not torch.allclose(_logits(model, 3 * L), plain, atol=1e-4)
    assert set(model.state_dict()) == keys  # checkpoints load with or without a scaling
    model.set_rope_scaling(None)
    assert torch.equal(_logits(model, 3 * L), plain)


def test_scaling_refuses_what_it_cannot_compute():
    with pytest.raises(ValueError, match="encoding=rope"):
        _model("alibi").set_rope_scaling(RopeScaling("linear", 2.0), original_len=16)
    with pytest.raises(ValueError, match="training length"):
        _model().set_rope_scaling(RopeScaling("yarn", 2.0))
    with pytest.raises(ValueError, match="unknown RoPE scaling 'pi'"):
        RopeScaling("pi", 2.0)
    with pytest.raises(ValueError, match="at least 1"):
        RopeScaling("linear", 0.5)
    with pytest.raises(ValueError, match="beta_fast > beta_slow"):
        RopeScaling("yarn", 4.0, beta_fast=1.0, beta_slow=32.0)
    with pytest.raises(ValueError, match="above 2"):
        RotaryPositions(2, scaling=RopeScaling("ntk", 2.0), original_len=16)
