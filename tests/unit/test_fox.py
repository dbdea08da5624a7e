"""FoX, forgetting attention (posexp/encodings/fox.py): the paper's properties (every gate
at 1 is NoPE; a constant gate f is ALiBi's bias of slope -log f), parity with x-transformers'
DataDependentAlibi and its attention layer in float64, and the bias's blocks, gradients and
FlexAttention form against the dense computation."""

import math

import pytest
import torch
import torch.nn.functional as F

from posexp import attention
from posexp.attention import causal_attention
from posexp.encodings import ModelShape, build_encoding
from posexp.model import GPT, GPTConfig

CPU = torch.device("cpu")
SHAPE = ModelShape(d_model=32, n_head=4, n_layer=2)


def fox(**hparams):
    torch.manual_seed(0)
    return build_encoding("fox", SHAPE, hparams)


def dense(q, k, v, bias):
    """Softmax attention with an explicit causal mask and a bias [batch, heads, L, L]."""
    L = q.shape[2]
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + bias
    scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), -math.inf)
    return scores.softmax(-1) @ v


def forget_reference(x, weight, bias):
    """D_ij = sum_{k=j+1..i} log sigmoid(w_h . x_k + b_h), written as the paper's sum (a
    loop over k), not as the difference of cumulative sums: [batch, heads, L, L], 0 above
    the diagonal."""
    log_f = F.logsigmoid(x @ weight.T + bias).transpose(1, 2)  # [batch, heads, L]
    L = x.shape[1]
    out = torch.zeros(*log_f.shape[:2], L, L, dtype=x.dtype)
    for i in range(L):
        for j in range(i + 1):
            out[:, :, i, j] = log_f[:, :, j + 1:i + 1].sum(-1)
    return out


def test_the_bias_is_the_papers_sum_of_log_forget_gates():
    enc = fox().double()
    x = torch.randn(2, 19, 32, dtype=torch.float64)
    ours = enc.at_layer(1, x).score_bias(1, 0, 19, 19, CPU)
    ref = forget_reference(x, enc.gates[1].weight, enc.gates[1].bias)
    below = torch.ones(19, 19, dtype=torch.bool).tril()
    assert torch.allclose(ours[..., below], ref[..., below], atol=1e-10)
    assert torch.isinf(ours[..., ~below]).all() and (ours[..., ~below] < 0).all()
    assert torch.equal(ours.diagonal(dim1=-2, dim2=-1), torch.zeros(2, 4, 19, dtype=torch.float64))


def model(encoding, **hparams):
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=64, d_model=32, n_layer=2, n_head=4, d_ff=64,
                         encoding=encoding, max_positions=64, encoding_hparams=hparams))


def test_every_gate_at_one_is_nope():
    nope, forgetting = model("nope").double().eval(), model("fox").double().eval()
    forgetting.load_state_dict(nope.state_dict(), strict=False)
    with torch.no_grad():
        for gates in forgetting.encoding.gates:
            gates.weight.zero_()
            gates.bias.fill_(1e4)  # log sigmoid(1e4) = 0 in float64
    idx = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(forgetting(idx), nope(idx), atol=1e-10)
        forgetting.encoding.gates[0].bias.fill_(3.0)  # and a gate below 1 is not NoPE
        assert not torch.allclose(forgetting(idx), nope(idx), atol=1e-4)


def test_a_constant_gate_is_alibis_bias_of_slope_minus_log_f():
    enc = fox().double()
    b = torch.tensor([-1.0, 0.0, 2.0, 5.0], dtype=torch.float64)
    with torch.no_grad():
        enc.gates[0].weight.zero_()
        enc.gates[0].bias.copy_(b)
    x = torch.randn(3, 23, 32, dtype=torch.float64)
    ours = enc.at_layer(0, x).score_bias(0, 0, 23, 23, CPU)
    slope = -F.logsigmoid(b)  # -log f_h
    distance = (torch.arange(23)[:, None] - torch.arange(23)).double()
    alibi = (-slope[:, None, None] * distance).masked_fill(distance < 0, -math.inf)
    assert torch.allclose(ours, alibi.expand(3, -1, -1, -1), atol=1e-10)


def test_the_bias_matches_x_transformers_data_dependent_alibi_in_float64():
    from x_transformers.x_transformers import DataDependentAlibi

    enc = fox().double()
    theirs = DataDependentAlibi(32, 4).double()
    linear = theirs.to_forget_gates[0]
    with torch.no_grad():
        enc.gates[1].bias.normal_()
        linear.weight.copy_(enc.gates[1].weight)
        linear.bias.copy_(enc.gates[1].bias)
    x = torch.randn(2, 29, 32, dtype=torch.float64)
    ours = enc.at_layer(1, x).score_bias(1, 0, 29, 29, CPU)
    below = torch.ones(29, 29, dtype=torch.bool).tril()  # theirs is masked by the attention
    assert torch.allclose(ours[..., below], theirs(x)[..., below], atol=1e-6)


def test_a_fox_layer_matches_x_transformers_attention_in_float64():
    """posexp's attention layer with FoX and x-transformers' Attention(data_dependent_alibi)
    with the same weights copied across give the same output."""
    from x_transformers.x_transformers import Attention

    m = model("fox").double().eval()
    ours = m.blocks[1].attn
    theirs = Attention(dim=32, heads=4, dim_head=8, causal=True,
                       data_dependent_alibi=True).double().eval()
    q, k, v = ours.qkv.weight.chunk(3)
    gate = theirs.data_dependent_alibi.to_forget_gates[0]
    with torch.no_grad():
        m.encoding.gates[1].bias.normal_()
        for mine, their in ((q, theirs.to_q), (k, theirs.to_k), (v, theirs.to_v),
                            (ours.proj.weight, theirs.to_out)):
            their.weight.copy_(mine)
        gate.weight.copy_(m.encoding.gates[1].weight)
        gate.bias.copy_(m.encoding.gates[1].bias)
        x = torch.randn(2, 33, 32, dtype=torch.float64)
        mine = ours(x, None, m.encoding)
        assert torch.allclose(mine, theirs(x), atol=1e-6)


@pytest.mark.parametrize("block_elements", [1 << 24, 2 * 4 * 37 * 5, 2 * 4 * 37])
def test_blocked_bias_and_its_gradients_equal_the_dense_computation(block_elements,
                                                                    monkeypatch):
    """Query blocks of 5 and 1 rows, a bias per sequence of a batch of 2: the output and the
    gradients of q, k, v, the layer's input and the gates equal the dense computation."""
    monkeypatch.setattr(attention, "BIAS_BLOCK_ELEMENTS", block_elements)
    enc = fox().double()
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 4, 37, 8, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    x = torch.randn(2, 37, 32, dtype=torch.float64, requires_grad=True)
    target = torch.randn(2, 4, 37, 8, dtype=torch.float64)
    params = [q, k, v, x, *enc.gates[0].parameters()]

    def grads(out):
        return torch.autograd.grad(((out - target) ** 2).sum(), params)

    blocked = causal_attention(q, k, v, bias=enc.at_layer(0, x), layer=0)
    reference = dense(q, k, v, enc.at_layer(0, x).score_bias(0, 0, 37, 37, CPU))
    assert torch.allclose(blocked, reference, atol=1e-10)
    for b, d in zip(grads(blocked), grads(reference), strict=True):
        assert torch.allclose(b, d, atol=1e-9)


def test_long_inference_attends_by_blocks_to_the_same_result(monkeypatch):
    """Past CAUSAL_WORK a CPU evaluation attends one block of queries at a time (so that
    a signal is handled between blocks): the same result as one call and as the dense
    computation, the key bias carried in its extra dimension through every block."""
    enc = fox().double()
    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 4, 37, 8, dtype=torch.float64) for _ in range(3))
    x = torch.randn(2, 37, 32, dtype=torch.float64)
    with torch.no_grad():
        enc.gates[0].bias.normal_()
        bias = enc.at_layer(0, x)
        whole = causal_attention(q, k, v, bias=bias)
        monkeypatch.setattr(attention, "CAUSAL_WORK", 1)
        monkeypatch.setattr(attention, "CAUSAL_BLOCK_WORK", 2 * 4 * 37 * 9 * 5)
        blocked = causal_attention(q, k, v, bias=bias)
    assert torch.allclose(blocked, whole, atol=1e-12)
    assert torch.allclose(blocked, dense(q, k, v, bias.score_bias(0, 0, 37, 37, CPU)),
                          atol=1e-10)


def test_the_key_bias_is_the_bias_up_to_a_constant_per_query():
    enc = fox().double()
    bias = enc.at_layer(1, torch.randn(2, 21, 32, dtype=torch.float64))
    full = bias.score_bias(1, 0, 21, 21, CPU)
    below = torch.ones(21, 21, dtype=torch.bool).tril()
    rest = (full - bias.key_bias()[:, :, None, :]).masked_fill(~below, 0.0)
    per_query = rest[..., :1].expand_as(rest).masked_fill(~below, 0.0)
    assert torch.allclose(rest, per_query, atol=1e-10)


def test_flex_attention_applies_the_same_bias():
    """The FlexAttention form (CUDA's default for FoX), compiled on the CPU, forward only."""
    enc = fox()
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 4, 37, 8) for _ in range(3))
    with torch.no_grad():
        enc.gates[0].bias.normal_()
        bias = enc.at_layer(0, torch.randn(2, 37, 32))
        flex = causal_attention(q, k, v, bias=bias, kernel="flex")
        sdpa = causal_attention(q, k, v, bias=bias, kernel="sdpa")
    assert torch.allclose(flex, sdpa, atol=1e-5)


def test_init_is_the_reference_codes():
    """Weights N(0, 0.02) as the model's linears (gpt2), biases 0: every gate near 1/2;
    under init=torch, nn.Linear's default weight draw."""
    enc = build_encoding("fox", ModelShape(d_model=256, n_head=8, n_layer=3))
    for gates in enc.gates:
        assert torch.equal(gates.bias, torch.zeros(8))
        assert gates.weight.std().item() == pytest.approx(0.02, rel=0.1)
    torch_init = build_encoding("fox", ModelShape(256, 8, 3, init="torch"))
    assert torch_init.gates[0].weight.abs().max() <= 1 / 16
    assert build_encoding("fox", SHAPE, {"bias_init": 5.0}).gates[1].bias.eq(5.0).all()
    # the biases are vectors (no weight decay, as posexp decays matrices only)
    assert {p.dim() for n, p in enc.named_parameters() if n.endswith("bias")} == {1}


@pytest.mark.parametrize("value", [float("nan"), 31.0, "x"])
def test_a_bias_init_out_of_range_is_refused(value):
    with pytest.raises(ValueError, match=r"encoding\.hparams\.bias_init must be"):
        build_encoding("fox", SHAPE, {"bias_init": value})
