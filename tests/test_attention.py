import pytest
import torch

from posexp import attention
from posexp.attention import causal_attention
from posexp.encodings.alibi import alibi_slopes


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


@pytest.mark.parametrize("block_elements", [1 << 24, 4 * 37 * 5, 4 * 37])
def test_alibi_paths_agree(qkv, block_elements, monkeypatch):
    """Dense bias and query blocks of 5 and 1 rows give the reference result."""
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
