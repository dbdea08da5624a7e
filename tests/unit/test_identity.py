"""A run's identity: one directory per identity, nothing a user ran lost or mixed, one
writer per run, and the scored region that belongs to the run (not to the lengths)."""
import pytest
import torch
from omegaconf import OmegaConf

from posexp import config as C
from posexp.config import compose_overrides
from posexp.errors import UsageError
from posexp.model import GPT, GPTConfig
from tests.conftest import TINY
from tests.conftest import compose_args as compose


def composed(*overrides: str):
    C.register()
    return compose_overrides(list(overrides))


# --- identity -----------------------------------------------------------------------------
def test_head_tying_defaults_to_the_encodings_and_is_identity():
    # null model.tie_weights resolves to the encoding's choice, so a learned run keeps the
    # identity it had when the head was tied by default, and sinusoidal's untied head is its
    # identity; stating either value is the same run as leaving it to the encoding
    for encoding, tied in [("learned", True), ("rope", True), ("sinusoidal", False)]:
        cfg = composed(f"encoding={encoding}")
        assert cfg.model.tie_weights is None
        assert C.resolve(cfg).model.tie_weights is tied
        stated = C.identity(composed(f"encoding={encoding}", f"model.tie_weights={tied}"))
        assert C.identity(cfg) == stated
        other = C.identity(composed(f"encoding={encoding}", f"model.tie_weights={not tied}"))
        assert other != stated and other["model.tie_weights"] is (not tied)


def test_identity_ignores_what_does_not_change_the_weights():
    base = C.identity(composed())
    for override in ["device=cpu", "eval.lengths=[64,128]", "eval.batch_tokens=1024",
                     "data.cache_dir=/tmp/elsewhere", "train.log_every=7", "attention=sdpa",
                     "train.val_every_tokens=1000", "train.checkpoint_every=99",
                     "train.resume=false", "logger=wandb", "experiment=x", "run_name=y",
                     "results_dir=z", "eval.tokens=1024", "train.compile=true"]:
        assert C.identity(composed(override)) == base, override
    for override in ["model.d_model=64", "train.lr=0.001", "seed=1", "data.tokenizer=bpe",
                     "encoding=alibi", "train.tokens=1000000", "train.warmup_tokens=0",
                     "model.dropout=0.1", "data.val_fraction=0.05"]:
        assert C.identity(composed(override)) != base, override


def test_identity_is_that_of_the_resolved_values():
    """d_ff=null and d_ff=4*d_model train the same model; so do a batch in tokens and the
    same batch in sequences."""
    base = C.identity(composed())
    assert C.identity(composed("model.d_ff=512")) == base
    assert C.identity(composed("train.batch_tokens=null", "train.batch_size=32")) == base
    assert C.identity(composed("train.batch_tokens=null", "train.batch_size=16")) != base
    assert C.identity_diff(base, C.identity(composed("train.lr=0.001"))) == [
        "train.lr: 0.002 -> 0.001"]


def test_batch_in_tokens_gives_equal_steps_at_every_length():
    steps = set()
    for seq_len in (32, 64, 128):
        cfg = C.resolve(composed(f"train.seq_len={seq_len}"))
        assert cfg.train.batch_size * seq_len == 2048
        steps.add(cfg.train.tokens // (cfg.train.batch_size * seq_len))
    assert steps == {2000000 // 2048}
    resolved = C.resolve(composed())
    assert C.resolve(resolved) == resolved  # resolving is idempotent
    assert (resolved.model.d_ff, resolved.encoding.max_positions) == (512, 64)
    assert list(resolved.eval.lengths) == [64, 128, 256, 512, 1024]


@pytest.mark.parametrize("args,message", [
    (["train.batch_size=8"], "not both"),
    (["train.batch_tokens=100"], "train.batch_tokens (100) must be a multiple of train.seq_len"),
    (["train.batch_tokens=null"], "set the batch size"),
    (["train.lr=nan"], "train.lr must be a finite number in (0, 1e+06], got nan"),
    (["train.lr=inf"], "train.lr must be a finite number"),
    (["train.grad_clip=nan"], "train.grad_clip must be a finite number"),
    (["encoding.base=nan"], "encoding.base must be a finite number"),
    (["encoding.base=1.0"], "encoding.base must be a finite number in (1, "),
    (["train.beta1=1.5"], "train.beta1 must be a finite number in [0, 1), got 1.5"),
    (["train.beta2=-0.1"], "train.beta2 must be a finite number in [0, 1)"),
    (["train.weight_decay=-1"], "train.weight_decay must be a finite number in [0, 10]"),
    (["train.min_lr_ratio=-5"], "train.min_lr_ratio must be a finite number in [0, 1]"),
    (["train.min_lr_ratio=inf"], "train.min_lr_ratio must be a finite number"),
    (["model.dropout=nan"], "model.dropout must be a finite number"),
    (["experiment=../../x"], "experiment must be a plain directory name"),
    (["experiment=/abs"], "experiment must be a plain directory name"),
    (["experiment=.hidden"], "experiment must be a plain directory name"),
    (["run_name=a/b"], "run_name must be a plain directory name"),
    (["experiment=" + "x" * 300], "at most 200 bytes"),
])
def test_bad_values_are_refused_by_the_config_check(args, message):
    C.register()
    with pytest.raises(UsageError) as e:
        compose([*TINY, *args, "results_dir=out"])
    assert message in str(e.value)


# --- small pieces -------------------------------------------------------------------------
def test_validation_loss_is_computed_without_dropout():
    from types import SimpleNamespace

    from posexp.run.workloads import CorpusWorkload

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, d_model=32, n_layer=1, n_head=2, d_ff=64,
                          encoding="rope", max_positions=16, dropout=0.5))
    model.train()

    class Tiny:
        val = torch.randint(0, 256, (2000,)).numpy()

    cfg = OmegaConf.create({"train": {"val_tokens": 512, "seq_len": 16},
                            "eval": {"batch_tokens": 256}})
    work = CorpusWorkload(SimpleNamespace(cfg=cfg))
    a, b = (work.val_loss(model, Tiny, torch.device("cpu")) for _ in range(2))
    assert a == b and model.training  # deterministic, and training mode is restored
