import pytest
import torch

from posexp import attention
from posexp.attention import causal_attention
from posexp.encodings import ModelShape, PositionalEncoding, build_encoding, in_order
from posexp.model import GPT, GPTConfig

CPU = torch.device("cpu")


def _of_positions(name: str) -> tuple[str, ...]:
    """The kernels of an encoding's score bias when it is of the positions alone -- not
    bound to a layer's input (FoX's gates) nor read from the logits (CoPE's): their own
    tests -- else none; from the registry's encoding as built."""
    built = build_encoding(name, ModelShape(d_model=32, n_head=4, n_layer=2), max_positions=64)
    own = type(built).at_layer is not PositionalEncoding.at_layer or built.reads_scores
    return () if own else tuple(built.bias_kernels)


BIASED = [n for n in in_order() if "sdpa" in _of_positions(n)]


FUSABLE = [n for n in BIASED if "flex" in _of_positions(n)]  # a closed form: FlexAttention


def reference(q, k, v, bias=None):
    """Plain softmax attention with an explicit L x L causal mask and score bias [H, L, L]."""
    L = q.shape[2]
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    scores = scores.masked_fill(j > i, float("-inf"))
    return scores.softmax(-1) @ v


def encoding(name: str, n_layer: int = 2):
    torch.manual_seed(0)
    return build_encoding(name, ModelShape(d_model=32, n_head=4, n_layer=n_layer))


@pytest.fixture
def qkv():
    torch.manual_seed(0)
    return [torch.randn(2, 4, 37, 8, dtype=torch.float64) for _ in range(3)]


def test_causal_attention_matches_reference(qkv):
    assert torch.allclose(causal_attention(*qkv), reference(*qkv), atol=1e-10)


@pytest.mark.parametrize("name", BIASED)
@pytest.mark.parametrize("block_elements", [1 << 24, 4 * 37 * 8, 4 * 37 * 5, 4 * 37])
def test_blocked_bias_paths_agree(qkv, name, block_elements, monkeypatch):
    """One block, and query blocks of 8, 5 and 1 rows (37 is a multiple of none), give the
    dense reference's result, in every layer."""
    monkeypatch.setattr(attention, "BIAS_BLOCK_ELEMENTS", block_elements)
    bias = encoding(name)
    for layer in (0, 1):
        full = bias.score_bias(layer, 0, 37, 37, CPU)
        out = causal_attention(*qkv, bias=bias, layer=layer)
        assert torch.allclose(out, reference(*qkv, full), atol=1e-10)


@pytest.mark.parametrize("name", BIASED)
def test_blocked_bias_gradients_equal_the_dense_reference(name, monkeypatch):
    """The gradients of a loss through blocks of 8 queries (one bias template sliced, or a
    block built at a time) equal those of the dense L x L computation, for q, k, v and for
    the encoding's own parameters."""
    monkeypatch.setattr(attention, "BIAS_BLOCK_ELEMENTS", 4 * 37 * 8)
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 4, 37, 8, requires_grad=True) for _ in range(3))
    bias = encoding(name)
    target = torch.randn(1, 4, 37, 8)

    def grads(out):
        params = [q, k, v, *bias.parameters()]  # fire: layer 0's get no gradient (None)
        return torch.autograd.grad(((out - target) ** 2).sum(), params, allow_unused=True)

    blocked = grads(causal_attention(q, k, v, bias=bias, layer=1))
    dense = grads(reference(q, k, v, bias.score_bias(1, 0, 37, 37, CPU)))
    used = [b for b in blocked[3:] if b is not None]
    assert used or not list(bias.parameters())  # its own parameters learn through blocks
    for b, d in zip(blocked, dense, strict=True):
        assert (b is None) == (d is None)
        assert b is None or torch.allclose(b, d, atol=1e-5, rtol=1e-4)


def test_permuting_keys_leaves_last_query_unchanged(qkv):
    """Attention itself is order-blind: the last query sees the keys as a set.  An ALiBi
    bias makes the same permutation visible."""
    q, k, v = qkv
    perm = torch.cat([torch.randperm(36), torch.tensor([36])])
    last = causal_attention(q, k, v)[:, :, -1]
    assert torch.allclose(causal_attention(q, k[:, :, perm], v[:, :, perm])[:, :, -1], last,
                          atol=1e-10)
    alibi = encoding("alibi")
    biased = causal_attention(q, k, v, alibi)[:, :, -1]
    biased_perm = causal_attention(q, k[:, :, perm], v[:, :, perm], alibi)[:, :, -1]
    assert not torch.allclose(biased, biased_perm, atol=1e-6)


@pytest.mark.parametrize("name", FUSABLE)
def test_flex_attention_matches_reference(qkv, name):
    """The compiled FlexAttention kernel (CUDA's default for these biases) agrees on the CPU
    too, where it has no backward: each encoding's score_mod is its score_bias."""
    q, k, v = (t.float() for t in qkv)
    bias = encoding(name)
    with torch.no_grad():
        out = causal_attention(q, k, v, bias=bias, kernel="flex")
    assert torch.allclose(out, reference(q, k, v, bias.score_bias(0, 0, 37, 37, CPU)),
                          atol=1e-5)
    assert attention.causal_block_mask(37, q.device) is attention.causal_block_mask(37, q.device)


@pytest.mark.parametrize("name", ["alibi", "t5"])
def test_biased_model_scores_the_same_with_every_kernel(name):
    """A whole model gives the same per-token losses through sdpa and flex."""
    torch.manual_seed(0)
    cfg = dict(vocab_size=64, d_model=32, n_layer=2, n_head=4, d_ff=64, encoding=name,
               max_positions=16)
    sdpa = GPT(GPTConfig(**cfg, attention="sdpa")).eval()
    flex = GPT(GPTConfig(**cfg, attention="flex")).eval()
    flex.load_state_dict(sdpa.state_dict())
    tokens = torch.randint(0, 64, (2, 101))
    with torch.no_grad():
        a = sdpa.token_losses(tokens[:, :-1], tokens[:, 1:])
        b = flex.token_losses(tokens[:, :-1], tokens[:, 1:])
    assert torch.allclose(a, b, atol=1e-5)


def test_kernel_choice(qkv):
    q = qkv[0]
    alibi, fire = encoding("alibi"), encoding("fire")
    assert attention.bias_kernel("auto", q, 0.0, alibi) == "sdpa"  # CPU
    assert attention.bias_kernel("flex", q, 0.0, alibi) == "flex"
    assert attention.bias_kernel("auto", q, 0.0, fire) == "sdpa"
    with pytest.raises(ValueError, match="attention=flex cannot apply the score bias of Fire"):
        attention.bias_kernel("flex", q, 0.0, fire)
    with pytest.raises(ValueError, match="attention=flash cannot apply the score bias of T5"):
        attention.bias_kernel("flash", q, 0.0, encoding("t5"))
