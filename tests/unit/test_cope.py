"""CoPE (posexp/encodings/cope.py): against x-transformers' ``CoPE`` and against the paper's
equations written here, in float64; the paper's property (every gate at 1 counts i - j + 1);
blocked evaluation exact; its gradient reaches the gates; bad settings refused."""
import math

import pytest
import torch

import posexp.attention as attention
from posexp import config as C
from posexp.attention import causal_attention
from posexp.encodings import ModelShape, build_encoding
from posexp.encodings.cope import cope_positions

B, H, T, D = 2, 3, 24, 8
NPOS = 10


def _cope(npos_max: int = NPOS, n_layer: int = 2):
    torch.manual_seed(0)
    cope = build_encoding("cope", ModelShape(H * D, H, n_layer), {"npos_max": npos_max})
    with torch.no_grad():
        cope.table.normal_(0, 1.0)  # it starts at 0, where every table gives the same logits
    return cope.double()


def _qkv(seed: int = 1, scale: float = 1.5):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, dtype=torch.float64, generator=g) * scale for _ in range(3)]


def _reference(q, k, v, table):
    """The paper's eqs. 3-5 term by term: g_ij = sigmoid(q_i . k_j / sqrt d) for j <= i,
    p_ij = sum of g_ik over k = j..i, clamped to npos_max, e[p] interpolated between its
    integer neighbours, and softmax of (q_i . (k_j + e[p_ij])) / sqrt d over j <= i."""
    out = torch.zeros_like(q)
    npos_max = table.shape[0] - 1
    for b in range(B):
        for h in range(H):
            for i in range(T):
                gates = [torch.sigmoid(q[b, h, i] @ k[b, h, j] / math.sqrt(D))
                         for j in range(i + 1)]
                logits = []
                for j in range(i + 1):
                    p = min(sum(gates[j:]), npos_max)
                    lo, hi = math.floor(p), math.ceil(p)
                    e = table[lo] + (p - lo) * (table[hi] - table[lo])
                    logits.append(q[b, h, i] @ (k[b, h, j] + e) / math.sqrt(D))
                weights = torch.stack(logits).softmax(0)
                out[b, h, i] = weights @ v[b, h, : i + 1]
    return out


def test_cope_matches_the_papers_equations_in_float64():
    cope = _cope()
    q, k, v = _qkv()
    with torch.no_grad():
        got = causal_attention(q, k, v, cope, layer=1)
        torch.testing.assert_close(got, _reference(q, k, v, cope.table[1]), rtol=0, atol=1e-12)
        other = causal_attention(q, k, v, cope, layer=0)
    assert (got - other).abs().max() > 1e-2  # each layer reads its own table


def test_cope_matches_x_transformers_cope_in_float64():
    """x-transformers' CoPE adds q . e undivided, and its table has max_pos rows: posexp's
    table / sqrt(d) in its pos_emb is the same function."""
    from x_transformers.x_transformers import CoPE

    cope = _cope()
    q, k, v = _qkv(2)
    theirs = CoPE(dim=D, heads=H, max_pos=NPOS + 1).double()
    with torch.no_grad():
        theirs.pos_emb.copy_(cope.table[0] / math.sqrt(D))
        sim = q @ k.transpose(-1, -2) / math.sqrt(D)  # as x-transformers' Attend, causal
        sim = sim.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1),
                              -torch.finfo(sim.dtype).max)
        expected = (sim + theirs(q, sim)).softmax(-1) @ v
        got = causal_attention(q, k, v, cope, layer=0)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_every_gate_at_one_counts_i_minus_j_plus_one_up_to_npos_max():
    i, j = torch.arange(T)[:, None], torch.arange(T)
    scores = torch.full((T, T), 1e4, dtype=torch.float64).masked_fill(j > i, -math.inf)
    positions = cope_positions(scores, NPOS)
    assert torch.equal(positions, ((i - j + 1).clamp(max=NPOS) * (j <= i)).double())
    # then CoPE is a relative encoding: the learned logit q_i . e[i - j + 1] on each score
    cope = _cope()
    q = _qkv(3)[0]
    with torch.no_grad():
        bias = cope.contextual_bias(0, q, scores.expand(B, H, T, T))
    table = q @ cope.table[0].T / math.sqrt(D)
    distance = (i - j + 1).clamp(min=0, max=NPOS).expand(B, H, T, T)
    torch.testing.assert_close(bias, table.gather(-1, distance), rtol=0, atol=1e-12)


def test_a_table_at_zero_is_nope():
    cope = _cope()
    with torch.no_grad():
        cope.table.zero_()
    q, k, v = _qkv(4)
    nope = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(causal_attention(q, k, v, cope), nope, rtol=0, atol=1e-12)


def test_blocked_queries_are_exact_and_the_gates_get_a_gradient(monkeypatch):
    cope = _cope()
    q, k, v = (t.requires_grad_() for t in _qkv(5))
    whole = causal_attention(q, k, v, cope)
    monkeypatch.setattr(attention, "BIAS_BLOCK_ELEMENTS", 4 * B * H * T * 5)  # blocks of 5
    with torch.no_grad():
        torch.testing.assert_close(causal_attention(q, k, v, cope), whole, rtol=0, atol=1e-14)
    whole.sum().backward()
    assert k.grad.abs().max() > 0 and cope.table.grad[0].abs().max() > 0
    # through the gates alone: with the values equal everywhere the output is v whatever
    # the weights, so only the position logits' gradient is left to reach k -- and it does
    q2, k2 = (t.detach().requires_grad_() for t in _qkv(6)[:2])
    out = causal_attention(q2, k2, v.detach(), cope)
    (out * torch.randn_like(out)).sum().backward()
    assert k2.grad.abs().max() > 0


@pytest.mark.parametrize(("value", "message"), [
    (0, r"encoding.hparams.npos_max must be an integer in \[1, 1048576\], got 0"),
    (-3, r"must be an integer in"), (2.5, r"encoding.hparams.npos_max must be an integer")])
def test_bad_npos_max_is_refused_in_one_line(value, message):
    from posexp.errors import UsageError
    from tests.conftest import compose_args

    C.register()
    with pytest.raises(UsageError, match=message) as e:
        compose_args(["encoding=cope", f"encoding.hparams.npos_max={value}"])
    assert "\n" not in str(e.value)


def test_cope_refuses_what_it_cannot_take():
    from posexp.errors import UsageError
    from tests.conftest import compose_args

    C.register()
    for args, message in ((["attention=flex"], r"cannot apply cope's score bias"),
                          (["train.random_positions=256"], r"nothing to randomize")):
        with pytest.raises(UsageError, match=message):
            compose_args(["encoding=cope", *args])
