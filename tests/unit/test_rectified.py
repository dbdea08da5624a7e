"""Self-Extend and ReRoPE at evaluation (posexp/scaling.py's ``attention`` methods): one
attention layer against each method's reference code, re-derived here from its positions
and masks (datamllab/LongLM self_extend_patch/Llama.py; bojone/rerope rerope_patch.py and
leaky_rerope_patch.py) in float64 with transformers' rotation, and the properties their
sources claim."""
import math

import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from posexp.attention import causal_attention
from posexp.encodings.rope import RotaryPositions, apply_rotary
from posexp.encodings.rope_scaling import far_positions, plain_inv_freq
from posexp.model import GPT, GPTConfig
from posexp.scaling import RopeScaling, text, window_tokens

CPU = torch.device("cpu")
D, H, BASE = 16, 2, 10000.0


def _cos_sin(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' layout of RoPE's table at these (float) positions: float64 angles of
    RoPE's float32 inverse frequencies, cos and sin kept in float32 as posexp keeps its
    tables (and transformers its cos and sin), [1, T, D]."""
    freqs = positions.double()[:, None] * plain_inv_freq(D, BASE).float().double()
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().float().double()[None], emb.sin().float().double()[None]


def _attend(scores: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    T = scores.shape[-1]
    causal = torch.full((T, T), float("-inf"), dtype=scores.dtype).triu(1)
    return torch.softmax(scores + causal, dim=-1) @ v


def _rotate(x, positions):
    """x [1, H, T, D] rotated at positions [T], as the reference code rotates it."""
    cos, sin = _cos_sin(positions)
    return apply_rotary_pos_emb(x, x, cos, sin)[0]


def self_extend_reference(q, k, v, G: float, W: int) -> torch.Tensor:
    """LongLM's prefill: neighbour scores at the positions, group scores with queries at
    pos // G + W - W / G (no shift while every position is below W) and keys at pos // G,
    the neighbour mask tril(T) less a tril(T - W) placed W rows down."""
    T = q.shape[2]
    pos = torch.arange(T, dtype=torch.float64)  # the reference's are float32 where divided
    shift = 0 if pos.max() < W else W
    neighbour = _rotate(q, pos) @ _rotate(k, pos).transpose(2, 3) / math.sqrt(D)
    group = (_rotate(q, pos // G + shift - shift / G) @ _rotate(k, pos // G).transpose(2, 3)
             / math.sqrt(D))
    mask = torch.tril(torch.ones(T, T))
    if T - W > 0:
        mask[W:, :-W] -= torch.tril(torch.ones(T - W, T - W))
    return _attend(torch.where(mask.bool(), neighbour, group), v)


def rerope_reference(q, k, v, W: int, L: int, leak: float | None) -> torch.Tensor:
    """Su's patches: queries times max(1, log(pos + 1) / log L); scores at the positions
    where |i - j| < W; beyond, ReRoPE's queries at W against unrotated keys, or Leaky
    ReRoPE's queries at (pos + W (k - 1)) / k against keys at pos / k."""
    T = q.shape[2]
    pos = torch.arange(T, dtype=torch.float64)
    q = q * (torch.log(pos + 1.0) / math.log(L)).clip(1)[None, None, :, None]
    near = _rotate(q, pos) @ _rotate(k, pos).transpose(2, 3) / math.sqrt(D)
    if leak is None:
        far = _rotate(q, pos * 0 + W) @ k.transpose(2, 3) / math.sqrt(D)
    else:
        far = (_rotate(q, (pos + W * (leak - 1)) / leak) @ _rotate(k, pos / leak).transpose(2, 3)
               / math.sqrt(D))
    rectified = (pos[:, None] - pos[None]).abs() < W
    return _attend(torch.where(rectified, near, far), v)


def ours(q, k, v, scaling: RopeScaling, L: int) -> torch.Tensor:
    """One attention layer of posexp's: RoPE with the scaling, as the model applies it."""
    rope = RotaryPositions(D, BASE, scaling, L)
    T = q.shape[2]
    ext = rope.extension(T, CPU)
    if ext.q_scale is not None:
        q = q * ext.q_scale.double()
    cos, sin = rope.rotary(T, CPU)
    far = (apply_rotary(q, *ext.far_q), apply_rotary(k, *ext.far_k), ext.window)
    return causal_attention(apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v, far=far)


def _qkv(T: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, H, T, D, generator=g, dtype=torch.float64) * 2 for _ in range(3)]


# (L, T, G, neighbour window as a fraction of L): W dividing G and not, T below, at and
# far past L
@pytest.mark.parametrize("L,T,G,frac", [(32, 96, 4.0, 0.25), (32, 100, 3.0, 0.25),
                                        (64, 64, 8.0, 0.125), (16, 20, 2.0, 0.5),
                                        (16, 200, 2.5, 0.3)])
def test_self_extend_matches_its_reference_code(L, T, G, frac):
    q, k, v = _qkv(T)
    W = window_tokens(frac, L)
    got = ours(q, k, v, RopeScaling("self_extend", G, neighbor_window=frac), L)
    torch.testing.assert_close(got, self_extend_reference(q, k, v, G, W), rtol=0, atol=1e-12)


@pytest.mark.parametrize("leak", [None, 2.0, 16.0])
@pytest.mark.parametrize("L,T,frac", [(32, 96, 0.125), (64, 64, 0.25), (16, 150, 0.5)])
def test_rerope_matches_its_reference_code(leak, L, T, frac):
    q, k, v = _qkv(T, seed=1)
    W = window_tokens(frac, L)
    method = "rerope" if leak is None else "leaky_rerope"
    got = ours(q, k, v, RopeScaling(method, leak or 1.0, window=frac), L)
    torch.testing.assert_close(got, rerope_reference(q, k, v, W, L, leak), rtol=0, atol=1e-12)


def test_each_distance_beyond_the_window_is_the_papers():
    """Self-Extend: the distance is floor-divided by G beyond W and continues from W at its
    edge, so up to (L - W) G + W positions no distance exceeds L - 1 (Jin et al., sec. 3).
    ReRoPE: every distance beyond W is W (Su); Leaky ReRoPE: W + (i - j - W) / k."""
    L, G = 64, 4.0
    W = window_tokens(0.25, L)
    T = int((L - W) * G + W)
    far = far_positions(RopeScaling("self_extend", G), L, T)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None]
    beyond = i - j >= W
    distance = (far.q[:, None] - far.k[None])[beyond]
    assert far.window == W and distance.max() <= L - 1 and distance.min() >= W - W / G
    assert torch.equal(distance, (torch.floor(i / G) - torch.floor(j / G) + W - W / G)[beyond])
    rerope = far_positions(RopeScaling("rerope", 1.0), L, T)
    assert torch.equal((rerope.q[:, None] - rerope.k[None])[beyond],
                       torch.full_like(distance, window_tokens(0.125, L)))
    leaky = far_positions(RopeScaling("leaky_rerope", 8.0, window=0.25), L, T)
    torch.testing.assert_close((leaky.q[:, None] - leaky.k[None])[beyond],
                               (W + (i - j - W) / 8.0).double()[beyond], rtol=0, atol=1e-12)


def _model():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=40, d_model=32, n_layer=2, n_head=2, d_ff=64, encoding="rope",
                    max_positions=32)
    return GPT(cfg).double().eval()


def test_they_are_plain_rope_where_they_change_nothing():
    """Group size 1, leak 1 without log n, and a window as long as the input: RoPE as
    trained, to float64 rounding (the merged path computes the same scores)."""
    model, x = _model(), torch.randint(0, 40, (2, 48))
    with torch.no_grad():
        plain = model(x)
        for scaling in (RopeScaling("self_extend", 1.0),
                        RopeScaling("leaky_rerope", 1.0, logn=0.0)):
            model.set_rope_scaling(scaling, 32)
            torch.testing.assert_close(model(x), plain, rtol=0, atol=1e-13)
        model.set_rope_scaling(RopeScaling("rerope", 1.0, window=0.75), 32)  # W = 24
        torch.testing.assert_close(model(x[:, :24]), plain[:, :24], rtol=0, atol=1e-13)
        assert (model(x)[:, 25:] - plain[:, 25:]).abs().max() > 1e-4  # and past it, it acts


def test_the_merged_path_is_blocked_exactly():
    """Query blocks of the merged path (bounded memory) give the one-block answer."""
    import posexp.attention as attention

    q, k, v = _qkv(70, seed=2)
    scaling = RopeScaling("self_extend", 3.0)
    whole = ours(q, k, v, scaling, 32)
    old = attention.BIAS_BLOCK_ELEMENTS
    attention.BIAS_BLOCK_ELEMENTS = H * 70 * 9  # blocks of 9 queries, a short last one
    try:
        torch.testing.assert_close(ours(q, k, v, scaling, 32), whole, rtol=0, atol=1e-14)
    finally:
        attention.BIAS_BLOCK_ELEMENTS = old


def test_they_need_rope_at_evaluation_and_say_their_factor():
    q, k, v = _qkv(40)
    far = (q, k, 8)
    with pytest.raises(ValueError, match="at evaluation"):
        causal_attention(q, k, v, far=far, dropout_p=0.1)
    assert text((("factor", 1.0), ("logn", 1.0), ("method", "rerope"),
                 ("window", 0.125))) == "ReRoPE"
    assert text((("factor", 4.0), ("method", "self_extend"),
                 ("neighbor_window", 0.5))) == "Self-Extend \u00d74 (neighbor_window 0.5)"
    assert RopeScaling("rerope", 8.0).factor == 1.0  # ReRoPE has no factor
    for bad, said in [(dict(neighbor_window=1.0), "below 1"),
                      (dict(neighbor_window=0.0), "above 0")]:
        with pytest.raises(ValueError, match=said):
            RopeScaling("self_extend", 2.0, **bad)
    with pytest.raises(ValueError, match="logn is 1"):
        RopeScaling("rerope", 1.0, logn=0.5)


def test_a_pretrained_model_is_refused_them_in_one_line():
    """transformers' attention is not posexp's: a pretrained model is not scored with them."""
    from omegaconf import OmegaConf

    from posexp.errors import UsageError
    from posexp.pretrained.config import scalings

    for method in ("self_extend", "rerope"):
        cfg = OmegaConf.create({"eval": {"rope_scaling": {"method": method, "factor": 2.0}}})
        with pytest.raises(UsageError, match="runs in posexp's own attention") as e:
            scalings(cfg)
        assert "\n" not in str(e.value)
