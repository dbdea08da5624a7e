"""SSMax, scalable softmax (Nakanishi 2025, model.ssmax): against a reference written from the
paper's equation in float64, the paper's properties (softmax where s log n = 1; the largest
weight does not fade as n grows), and the config: learned per head and layer, identity only
when on, bad values refused."""
import math

import pytest
import torch

from posexp import config as C
from posexp.config import compose_overrides
from posexp.errors import UsageError
from posexp.model import GPT, GPTConfig, ssmax_scale

D, H, T = 32, 2, 40


def _model(encoding: str = "rope", ssmax_init: float | None = 0.3, n_layer: int = 2) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=40, d_model=D, n_layer=n_layer, n_head=H, d_ff=64, encoding=encoding,
                    max_positions=64, ssmax_init=ssmax_init)
    model = GPT(cfg).double().eval()
    with torch.no_grad():  # logits of order 1, where the scale on them shows
        for block in model.blocks:
            block.attn.qkv.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(4))
    return model


def _reference(attn, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The paper's eq. 2 for one NoPE attention layer: query i over its n = i + 1 keys weighs
    key j by n^(s_h z_ij) / sum_j' n^(s_h z_ij'), z_ij = q_i . k_j / sqrt(d_head)."""
    b, t, d = x.shape
    q, k, v = (w.view(b, t, H, d // H).transpose(1, 2)
               for w in (x @ attn.qkv.weight.T).split(d, dim=-1))
    z = q @ k.transpose(-1, -2) / math.sqrt(d // H)
    n = torch.arange(1, t + 1, dtype=x.dtype)[:, None]
    power = torch.pow(n, s[:, None, None] * z)  # n^(s z), not exp of anything
    power = power * torch.ones(t, t, dtype=x.dtype).tril()  # keys after the query: none
    y = (power / power.sum(-1, keepdim=True)) @ v
    return y.transpose(1, 2).reshape(b, t, d) @ attn.proj.weight.T


def test_ssmax_matches_the_papers_equation_in_float64():
    model = _model("nope")
    attn = model.blocks[0].attn
    with torch.no_grad():
        attn.ssmax.copy_(torch.tensor([0.43, 1.7], dtype=torch.float64))
        x = torch.randn(2, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        got = attn(x, None, None)
        torch.testing.assert_close(got, _reference(attn, x, attn.ssmax), rtol=0, atol=1e-12)
        plain = _reference(attn, x, torch.full((H,), 1 / math.log(T), dtype=torch.float64))
        assert (got - plain).abs().max() > 1e-3  # another s is another attention


def test_ssmax_is_softmax_where_s_log_n_is_one():
    """s_h = 1 / ln n: the query that sees n keys is weighed exactly as softmax weighs it
    (one layer: in a second, the earlier positions' inputs differ)."""
    ssmax, softmax = _model("rope", n_layer=1), _model("rope", ssmax_init=None, n_layer=1)
    softmax.load_state_dict({k: v for k, v in ssmax.state_dict().items()
                             if not k.endswith("ssmax")})
    x = torch.randint(0, 40, (2, T), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        for block in ssmax.blocks:
            block.attn.ssmax.fill_(1 / math.log(T))
        torch.testing.assert_close(ssmax(x)[:, -1], softmax(x)[:, -1], rtol=0, atol=1e-12)
        assert (ssmax(x)[:, : T // 2] - softmax(x)[:, : T // 2]).abs().max() > 1e-4


def test_the_largest_weight_does_not_fade_as_n_grows():
    """The paper's Fig. 1: -2 everywhere but +3 on the last key.  Softmax's largest weight
    falls towards 0 with n; SSMax's (s = 0.43) stays near 1."""
    s = torch.tensor([0.43], dtype=torch.float64)
    for n in (10, 1_000, 100_000):
        z = torch.full((n,), -2.0, dtype=torch.float64)
        z[-1] = 3.0
        softmax = z.softmax(-1)[-1]
        ssmax = (ssmax_scale(s, n)[0, -1] * z).softmax(-1)[-1]
        assert ssmax > 0.99 if n > 10 else ssmax > 0.9
        assert softmax < (0.95 if n == 10 else 0.15 if n == 1_000 else 0.002)


def test_s_is_learned_per_head_and_layer_and_not_decayed():
    model = _model("alibi")
    names = [n for n, _ in model.named_parameters() if n.endswith("ssmax")]
    assert names == [f"blocks.{i}.attn.ssmax" for i in range(2)]
    x = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(3))
    model.train()
    model(x, x).backward()
    for block in model.blocks:
        assert block.attn.ssmax.shape == (H,) and block.attn.ssmax.grad.abs().min() > 0
    assert not any(n.endswith("ssmax") for n, _ in _model(ssmax_init=None).named_parameters())


def composed(*overrides: str):
    C.register()
    return compose_overrides(list(overrides))


def test_ssmax_is_identity_only_when_on_and_starts_at_one_over_ln_L():
    from posexp.config import RunSpec
    from posexp.run.setup import ssmax_init

    plain = C.identity(composed("encoding=rope"))
    assert not any(k.startswith("model.ssmax") for k in plain)  # every earlier run's identity
    assert C.identity(composed("encoding=rope", "model.ssmax=false")) == plain
    on = C.identity(composed("encoding=rope", "model.ssmax=true"))
    assert C.identity_diff(plain, on) == ["model.ssmax: None -> True"]
    assert on["model.ssmax_init"] is None  # 1 / ln L, of train.seq_len: identity already
    spec = RunSpec.of(composed("encoding=rope", "model.ssmax=true", "train.seq_len=128"))
    assert ssmax_init(spec) == pytest.approx(1 / math.log(128))
    given = RunSpec.of(composed("encoding=rope", "model.ssmax=true", "model.ssmax_init=0.43"))
    assert ssmax_init(given) == 0.43
    assert ssmax_init(RunSpec.of(composed("encoding=rope"))) is None


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.ssmax_init=0.43"], r"^model.ssmax_init is set, but model.ssmax is false"),
    (["model.ssmax=true", "model.ssmax_init=0"], r"^model.ssmax_init must be a finite number"),
    (["model.ssmax=true", "model.ssmax_init=-1"], r"^model.ssmax_init must be a finite number"),
    (["model.ssmax=true", "model.ssmax_init=nan"], r"^model.ssmax_init must be a finite number"),
    (["model.ssmax=2"], r"^model.ssmax must be true or false"),
])
def test_bad_ssmax_settings_are_refused_in_one_line(overrides, message):
    from tests.conftest import compose_args

    C.register()
    with pytest.raises(UsageError, match=message) as e:
        compose_args(["encoding=rope", *overrides])
    assert "\n" not in str(e.value)
