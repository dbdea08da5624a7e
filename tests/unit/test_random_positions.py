"""Randomized positional encodings (Ruoss et al., ACL 2023): train.random_positions=M trains
each sequence on a sorted random subset of the positions 0..M-1; evaluation reads ordinary
positions."""
import numpy as np
import pytest
import torch

from posexp import config as C
from posexp.config import compose_overrides
from posexp.encodings import ENCODINGS, in_order
from posexp.errors import UsageError
from posexp.model import GPT, GPTConfig
from posexp.run.training import random_positions
from tests.conftest import TINY

C.register()


def test_positions_are_sorted_distinct_below_the_limit_and_drawn_again_alike():
    p = random_positions(64, 16, 40, seed=3, step=7)
    assert p.shape == (64, 16) and p.dtype == torch.int64
    assert (p[:, 1:] > p[:, :-1]).all()  # sorted and distinct
    assert p.min() >= 0 and p.max() < 40
    assert torch.equal(p, random_positions(64, 16, 40, seed=3, step=7))  # a resume draws these
    assert not torch.equal(p, random_positions(64, 16, 40, seed=3, step=8))
    assert not torch.equal(p, random_positions(64, 16, 40, seed=4, step=7))
    assert len({tuple(row) for row in p.tolist()}) > 60  # each sequence its own subset
    # every position below the limit is drawn about equally often
    counts = np.bincount(random_positions(4096, 16, 40, 0, 0).flatten().numpy(), minlength=40)
    assert counts.min() > 0.85 * counts.mean() and counts.max() < 1.15 * counts.mean()
    # a limit far past anything in memory is drawn as quickly
    huge = random_positions(4, 512, 2**30, seed=0, step=0)
    assert (huge[:, 1:] > huge[:, :-1]).all() and huge.max() < 2**30 and huge.max() > 2**29
    # at limit = seq_len every row is 0..seq_len-1
    assert torch.equal(random_positions(8, 16, 16, 0, 0), torch.arange(16).expand(8, 16))


def _model(name: str, max_positions: int = 64) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=50, d_model=32, n_layer=2, n_head=4, d_ff=64,
                         encoding=name, max_positions=max_positions)).eval()


@pytest.mark.parametrize("name", in_order())
def test_ordinary_positions_given_explicitly_change_nothing(name):
    model = _model(name)
    idx = torch.randint(0, 50, (3, 24))
    with torch.no_grad():
        plain = model.hidden(idx)
        given = model.hidden(idx, torch.arange(24).expand(3, 24))
    torch.testing.assert_close(given, plain, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", [n for n, s in ENCODINGS.items()
                                  if s.module.bias_kernels and s.reads_positions])
def test_a_bias_between_random_positions_is_the_full_bias_at_those_rows_and_keys(name):
    encoding = _model(name).encoding
    with torch.no_grad():  # learned biases away from their initial values (signs kept)
        for p in encoding.parameters():
            p.mul_(1 + 0.5 * torch.rand_like(p))
    positions = random_positions(3, 12, 48, seed=1, step=0)
    with torch.no_grad():
        full = encoding.score_bias(1, 0, 48, 48, torch.device("cpu"))  # [heads, 48, 48]
        at = encoding.position_bias(1, positions)  # [3, heads, 12, 12]
    assert at.shape == (3, 4, 12, 12)
    for b in range(3):
        rows = positions[b]
        torch.testing.assert_close(at[b], full[:, rows][:, :, rows])
    assert torch.isinf(at).sum() == 3 * 4 * 12 * 11 // 2  # the causal mask, nothing else


@pytest.mark.parametrize("name", ["rope", "xpos"])
def test_rotary_scores_depend_on_the_distance_between_random_positions(name):
    # RoPE's (and xPos's) q.k at positions (m, n) depends on m - n only: shifting every
    # position of a row by the same amount leaves the attention scores as they were
    encoding = _model(name).encoding
    q, k = torch.randn(2, 1, 10, 8, dtype=torch.float64), torch.randn(2, 1, 10, 8,
                                                                       dtype=torch.float64)
    positions = random_positions(2, 10, 30, seed=0, step=0)

    def scores(pos):
        (cq, sq), (ck, sk) = encoding.rotary_qk_at(pos)
        rot = lambda x, c, s: x * c + torch.cat((-x[..., 4:], x[..., :4]), -1) * s  # noqa: E731
        return rot(q, cq.double(), sq.double()) @ rot(k, ck.double(), sk.double()).transpose(-1, -2)

    torch.testing.assert_close(scores(positions + 17), scores(positions), rtol=1e-5, atol=1e-5)


def test_config_checks_and_identity():
    cfg = compose_overrides([*TINY, "encoding=learned", "train.random_positions=64"])
    assert C.resolve(cfg).encoding.max_positions == 64  # a row for each position trained
    assert C.identity(cfg)["train.random_positions"] == 64
    plain = compose_overrides([*TINY, "encoding=rope"])
    assert "train.random_positions" not in C.identity(plain)  # old runs keep their identity
    for overrides, message in [
        (["train.random_positions=8"], "train.random_positions (8) must be at least "
                                       "train.seq_len (16)"),
        (["train.random_positions=0"], "train.random_positions"),
        (["train.random_positions=65537"], "train.random_positions"),
        (["encoding=nope", "train.random_positions=64"], "nothing to randomize"),
        (["encoding=learned", "encoding.max_positions=32", "train.random_positions=64"],
         "encoding.max_positions (32) is less than train.random_positions (64)"),
    ]:
        with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
            C.check(compose_overrides([*TINY, *overrides]))
