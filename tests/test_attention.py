import pytest
import torch

from posexp import attention
from posexp.attention import causal_attention
from posexp.encodings.alibi import alibi_slopes
from posexp.model import GPT, GPTConfig


def reference(q, k, v, slopes=None):
    """Plain softmax attention with an explicit L x L causal mask and ALiBi bias."""
    L = q.shape[2]
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    if slopes is not None:
        scores = scores - slopes[:, None, None] * (i - j)
    scores = scores.masked_fill(j > i, float("-inf"))
    return scores.softmax(-1) @ v


@pytest.fixture
def qkv():
    torch.manual_seed(0)
    return [torch.randn(2, 4, 37, 8, dtype=torch.float64) for _ in range(3)]


def test_causal_attention_matches_reference(qkv):
    assert torch.allclose(causal_attention(*qkv), reference(*qkv), atol=1e-10)


@pytest.mark.parametrize("block_elements", [1 << 24, 4 * 37 * 8, 4 * 37 * 5, 4 * 37])
def test_alibi_paths_agree(qkv, block_elements, monkeypatch):
    """One block, and query blocks of 8, 5 and 1 rows (37 is a multiple of none), give the
    reference result."""
    monkeypatch.setattr(attention, "BIAS_BLOCK_ELEMENTS", block_elements)
    slopes = torch.tensor(alibi_slopes(4), dtype=torch.float64)
    out = causal_attention(*qkv, slopes=slopes)
    assert torch.allclose(out, reference(*qkv, slopes), atol=1e-10)


def test_permuting_keys_leaves_last_query_unchanged(qkv):
    """Attention itself is order-blind: the last query sees the keys as a set.  An ALiBi
    bias makes the same permutation visible."""
    q, k, v = qkv
    perm = torch.cat([torch.randperm(36), torch.tensor([36])])
    last = causal_attention(q, k, v)[:, :, -1]
    assert torch.allclose(causal_attention(q, k[:, :, perm], v[:, :, perm])[:, :, -1], last,
                          atol=1e-10)
    slopes = torch.tensor(alibi_slopes(4), dtype=torch.float64)
    biased = causal_attention(q, k, v, slopes)[:, :, -1]
    biased_perm = causal_attention(q, k[:, :, perm], v[:, :, perm], slopes)[:, :, -1]
    assert not torch.allclose(biased, biased_perm, atol=1e-6)


def test_flex_attention_matches_reference(qkv):
    """The compiled FlexAttention kernel (CUDA's default for ALiBi) agrees on the CPU too."""
    q, k, v = (t.float() for t in qkv)
    slopes = torch.tensor(alibi_slopes(4))
    out = causal_attention(q, k, v, slopes=slopes, kernel="flex")
    assert torch.allclose(out, reference(q, k, v, slopes), atol=1e-5)
    assert attention.causal_block_mask(37, q.device) is attention.causal_block_mask(37, q.device)


def test_alibi_model_scores_the_same_with_every_kernel():
    """A whole ALiBi model gives the same per-token losses through sdpa and flex."""
    torch.manual_seed(0)
    cfg = dict(vocab_size=64, d_model=32, n_layer=2, n_head=4, d_ff=64, encoding="alibi",
               max_positions=16)
    sdpa = GPT(GPTConfig(**cfg, attention="sdpa")).eval()
    flex = GPT(GPTConfig(**cfg, attention="flex")).eval()
    flex.load_state_dict(sdpa.state_dict())
    tokens = torch.randint(0, 64, (2, 101))
    with torch.no_grad():
        a = sdpa.token_losses(tokens[:, :-1], tokens[:, 1:])
        b = flex.token_losses(tokens[:, :-1], tokens[:, 1:])
    assert torch.allclose(a, b, atol=1e-5)


def test_auto_kernel_on_cpu_is_chunked_sdpa(qkv):
    q = qkv[0]
    assert attention.alibi_kernel("auto", q, 0.0) == attention.Attention.sdpa
    assert attention.alibi_kernel("flex", q, 0.0) == attention.Attention.flex
