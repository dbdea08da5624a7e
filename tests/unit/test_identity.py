"""A run's identity: one directory per identity, nothing a user ran lost or mixed, one
writer per run, and the scored region that belongs to the run (not to the lengths)."""
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from posexp import config as C
from posexp.config import compose_overrides
from posexp.errors import UsageError
from posexp.model import GPT, GPTConfig
from tests.conftest import TINY, score_curve
from tests.conftest import compose_args as compose


def composed(*overrides: str):
    C.register()
    return compose_overrides(list(overrides))


# --- identity -----------------------------------------------------------------------------
def test_head_tying_and_init_are_one_policy_for_every_encoding_and_are_identity():
    # model.tie_weights (false) and model.init (torch) are the same for every encoding, so no
    # encoding trains another setup; stating the default is the same run as leaving it, and
    # the other value is another run
    for encoding in ("learned", "rope", "sinusoidal", "alibi", "nope"):
        cfg = composed(f"encoding={encoding}")
        assert cfg.model.tie_weights is False and C.resolve(cfg).model.tie_weights is False
        ident = C.identity(cfg)
        assert (ident["model.tie_weights"], ident["model.init"]) == (False, "torch")
        stated = C.identity(composed(f"encoding={encoding}", "model.tie_weights=false",
                                     "model.init=torch"))
        assert stated == ident
        tied = C.identity(composed(f"encoding={encoding}", "model.tie_weights=true"))
        assert C.identity_diff(ident, tied) == ["model.tie_weights: False -> True"]
        gpt2 = C.identity(composed(f"encoding={encoding}", "model.init=gpt2"))
        assert C.identity_diff(ident, gpt2) == ["model.init: 'torch' -> 'gpt2'"]


def test_a_config_from_before_model_init_keeps_its_identity():
    """config.yaml of a run trained before posexp had model.init has none: it trained with
    GPT-2's initialisation, so it is the same run as one that says model.init=gpt2, and not
    the same as today's default (model.init=torch)."""
    for encoding, tied in (("rope", True), ("sinusoidal", False)):
        old = OmegaConf.to_container(C.resolve(composed(f"encoding={encoding}",
                                                        f"model.tie_weights={tied}")),
                                     resolve=True, enum_to_str=True)
        del old["model"]["init"]
        ident = C.identity(OmegaConf.create(old))
        assert ident["model.init"] == "gpt2"
        then = C.identity(composed(f"encoding={encoding}", "model.init=gpt2",
                                   f"model.tie_weights={tied}"))
        assert C.identity_diff(then, ident) == []
        now = C.identity(composed(f"encoding={encoding}"))
        assert "model.init: 'gpt2' -> 'torch'" in C.identity_diff(ident, now)


def test_the_model_is_built_as_the_policy_says():
    from tests.conftest import build_model

    small = ("model.d_model=64", "model.n_layer=2", "model.n_head=2")
    for encoding in ("learned", "rope", "sinusoidal"):
        model = build_model(composed(f"encoding={encoding}", *small), 256)
        assert model.head.weight is not model.tok_emb.weight  # untied for every encoding
        tied = build_model(composed(f"encoding={encoding}", "model.tie_weights=true",
                                    *small), 256)
        assert tied.head.weight is tied.tok_emb.weight
    # gpt2: N(0, 0.02), the residual projections / sqrt(2 layers); torch: PyTorch's defaults
    torch.manual_seed(0)
    gpt2 = build_model(composed("encoding=learned", "model.init=gpt2", *small), 256)
    torch.manual_seed(0)
    plain = build_model(composed("encoding=learned", "model.init=torch", *small), 256)
    std = {name: p.std().item() for name, p in gpt2.named_parameters()}
    assert std["tok_emb.weight"] == pytest.approx(0.02, rel=0.1)
    assert std["encoding.table.weight"] == pytest.approx(0.02, rel=0.1)
    assert std["blocks.0.attn.proj.weight"] == pytest.approx(0.02 / 2, rel=0.1)
    std = {name: p.std().item() for name, p in plain.named_parameters()}
    assert std["tok_emb.weight"] == pytest.approx(1.0, rel=0.1)  # nn.Embedding: N(0, 1)
    assert std["encoding.table.weight"] == pytest.approx(1.0, rel=0.1)
    # nn.Linear: uniform within 1/sqrt(fan_in), sd 1/sqrt(3 fan_in)
    assert std["blocks.0.attn.proj.weight"] == pytest.approx((3 * 64) ** -0.5, rel=0.1)


def test_identity_ignores_what_does_not_change_the_weights():
    base = C.identity(composed())
    for override in ["device=cpu", "eval.lengths=[64,128]", "eval.batch_tokens=1024",
                     "data.cache_dir=/tmp/elsewhere", "train.log_every=7", "attention=sdpa",
                     "train.val_every_tokens=1000", "train.checkpoint_every=99",
                     "train.resume=false", "logger=wandb", "experiment=x", "run_name=y",
                     "results_dir=z", "eval.tokens=1024"]:
        assert C.identity(composed(override)) == base, override
    for override in ["model.d_model=64", "train.lr=0.001", "seed=1", "data.tokenizer=bpe",
                     "encoding=alibi", "train.tokens=1000000", "train.warmup_tokens=0",
                     "model.dropout=0.1", "data.val_fraction=0.05",
                     "train.compile=true"]:  # compiled kernels round otherwise
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
    (["train.batch_size=8"], "both size the batch"),
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
        val_documents = np.array([0, 300, 1100, 1150])

    cfg = OmegaConf.create({"train": {"val_tokens": 512, "seq_len": 16,
                                      "random_positions": None},
                            "eval": {"batch_tokens": 256, "positions": None}})
    work = CorpusWorkload(SimpleNamespace(cfg=cfg, train=cfg.train, eval=cfg.eval))
    a, b = (work.val_loss(model, Tiny, torch.device("cpu")) for _ in range(2))
    assert a == b and model.training  # deterministic, and training mode is restored
    # it is the nonoverlapping loss at the training length on spans of train.val_tokens
    # targets spread over every validation document, as eval scores eval.tokens
    curve, _ = score_curve(model, Tiny.val, [16], "nonoverlapping", None, 512, 256,
                           documents=Tiny.val_documents)
    assert curve[0]["documents"] == 4 and a == pytest.approx(curve[0]["loss"], rel=1e-12)
    model.train()


def test_a_fine_tunes_scaling_is_identity_only_in_the_parameters_its_method_reads(tmp_path):
    """A PI fine-tune trains the same weights whatever YaRN's betas or ReRoPE's window are:
    its identity holds its method, factor and own parameters only, so a method added to the
    table later leaves the identity of every run that does not use it as it was -- and a
    run.json recorded while the identity still held every method's parameters is no edit."""
    from posexp.runs import Run, identity_sha256

    def scaled(method, *more):
        return composed("encoding=rope", f"encoding.scaling.method={method}",
                        "encoding.scaling.factor=4", *more)

    linear, yarn = C.identity(scaled("linear")), C.identity(scaled("yarn"))
    assert sorted(k for k in linear if k.startswith("encoding.scaling.")) == [
        "encoding.scaling.factor", "encoding.scaling.method"]
    assert {"encoding.scaling.beta_fast", "encoding.scaling.beta_slow"} < set(yarn)
    other = OmegaConf.to_container(C.resolve(scaled("linear")), resolve=True)
    other["encoding"]["scaling"] |= {"beta_fast": 8.0, "window": 0.5}  # unread (refused if set)
    assert C.identity(OmegaConf.create(other)) == linear
    assert C.identity_diff(yarn, C.identity(scaled("yarn", "encoding.scaling.beta_fast=8"))) \
        == ["encoding.scaling.beta_fast: 32.0 -> 8.0"]

    cfg = C.resolve(scaled("linear"))
    Run.create(tmp_path / "ft", cfg)
    info = Run(tmp_path / "ft").info()
    info["identity"] |= {"encoding.scaling.beta_fast": 32.0, "encoding.scaling.beta_slow": 1.0}
    info["identity_sha256"] = identity_sha256(info["identity"])  # as such a run recorded it
    assert Run(tmp_path / "ft").check_identity(info) == linear
