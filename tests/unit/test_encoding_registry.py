"""The registry of encodings is the one place that names them: each module registers itself,
each has its YAML, and the config check reads what each can do from it."""
import dataclasses
import resource
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import open_dict

from posexp import config as C
from posexp.config import CONFIG_DIR, compose_overrides
from posexp.encodings import (
    ENCODINGS,
    ModelShape,
    PositionalEncoding,
    build_encoding,
    encoding_config,
    in_order,
)
from posexp.encodings.registry import register
from posexp.errors import UsageError
from posexp.model import GPT, GPTConfig
from tests.conftest import TINY

SHAPE = ModelShape(d_model=32, n_head=4, n_layer=2)


YAMLS = {p.stem: yaml.safe_load(p.read_text())
         for p in (Path(CONFIG_DIR) / "encoding").glob("*.yaml")}


def has_score_bias(built: PositionalEncoding) -> bool:
    """Whether an encoding adds a bias to its scores: one bound to a layer's input (FoX) or
    read from the logits (CoPE), or a bias of positions its score_bias gives."""
    if type(built).at_layer is not PositionalEncoding.at_layer or built.reads_scores:
        return True
    try:
        built.score_bias(0, 0, 4, 4, torch.device("cpu"))
    except NotImplementedError:
        return False
    return True


def test_every_encoding_has_its_yaml_with_the_papers_defaults():
    assert set(YAMLS) == set(ENCODINGS)
    for name, spec in ENCODINGS.items():
        text = YAMLS[name]
        assert text["name"] == name and text["defaults"] == ["encoding_schema"]
        defaults = {f.name: f.default for f in dataclasses.fields(spec.config)
                    if f.default is not dataclasses.MISSING}
        written = {**text.get("hparams", {}), **({"base": text["base"]} if "base" in text
                                                  else {})}
        written = {k: tuple(v) if isinstance(v, list) else v for k, v in written.items()}
        # a default set relative to the run (FIRE's threshold starts at train.seq_len) is an
        # interpolation of the run's own config; every other is the dataclass's
        relative = {k for k, v in written.items() if v == "${train.seq_len}"}
        assert relative <= {"init_L", "npos_max"} and set(written) == set(defaults), name
        assert {k: v for k, v in written.items() if k not in relative} == {
            k: v for k, v in defaults.items() if k not in relative}, name


def test_registry_metadata():
    assert in_order()[0] == "nope"  # the control first, in figures, tables and sweeps
    specs = ENCODINGS.values()
    assert len({s.label for s in specs}) == len({s.order for s in specs}) == len(ENCODINGS)
    assert len({s.colour.lower() for s in specs}) == len(ENCODINGS)
    assert all(s.citation for s in specs)
    for spec in specs:  # reading no positions: no table, no rotation, no bias of them
        built = encoding_config(spec.name, max_positions=16).build(SHAPE)
        assert spec.reads_positions or (built.embedding(8, "cpu") is None
                                        and built.rotary(8, "cpu") is None), spec.name
    for name, spec in ENCODINGS.items():
        built = encoding_config(name, max_positions=16).build(SHAPE)
        assert type(built) is spec.module
    for name in ENCODINGS:  # a score bias says which kernels apply it, and only then
        built = encoding_config(name, max_positions=16).build(SHAPE)
        assert bool(built.bias_kernels) == has_score_bias(built), name
        assert not built.bias_kernels or built.bias_kernels[0] == "sdpa", name  # always
    assert ENCODINGS["fire"].module.bias_kernels == ("sdpa",)


def test_hparams_reach_the_module():
    model = GPT(GPTConfig(vocab_size=50, d_model=32, n_layer=3, n_head=4, d_ff=64, encoding="t5",
                          max_positions=16, encoding_hparams={"num_buckets": 8,
                                                              "max_distance": 64}))
    assert model.encoding.table.shape == (8, 4) and model.encoding.max_distance == 64
    fire = build_encoding("fire", SHAPE, {"hidden": 8, "init_c": 2})
    assert fire.layers[1].w1.shape == (8, 1) and fire.layers[1].c.item() == 2.0
    rope = build_encoding("rope", SHAPE, base=500.0)
    assert rope.base == 500.0
    assert build_encoding("learned", SHAPE, max_positions=48).max_positions == 48


@pytest.mark.parametrize("name,hparams,message", [
    ("t5", {"num_bucket": 8}, "t5 has no hyperparameter encoding.hparams.num_bucket; did you "
                              "mean 'num_buckets'?"),
    ("kerple_log", {"eps": 1}, "kerple_log has no hyperparameter encoding.hparams.eps; it has "
                               "none"),
    ("xpos", {"base": 500.0}, "xpos's base is encoding.base, not encoding.hparams.base"),
    ("t5", {"num_buckets": 1.5}, "encoding.hparams.num_buckets must be an integer, got 1.5"),
    ("t5", {"num_buckets": True}, "encoding.hparams.num_buckets must be an integer"),
    ("t5", {"max_distance": 16}, "encoding.hparams.max_distance must be above num_buckets // 2"),
    ("fire", {"init_c": 0}, "encoding.hparams.init_c must be positive, got 0.0"),
    ("fire", {"init_L": float("nan")}, "encoding.hparams.init_L must be positive, got nan"),
    ("xpos", {"gamma": "big"}, "encoding.hparams.gamma must be a number, got 'big'"),
    ("xpos", {"scale_base": -1}, "encoding.hparams.scale_base must be positive"),
    ("partial_rope", {"fraction": 1.5}, "encoding.hparams.fraction must be in [0, 1], got 1.5"),
    ("partial_rope", {"fraction": -0.1}, "encoding.hparams.fraction must be in [0, 1]"),
    ("partial_rope", {"fraction": float("nan")}, "encoding.hparams.fraction must be in [0, 1]"),
    ("partial_rope", {"keep": "lowest"},
     "encoding.hparams.keep must be highest or first, got 'lowest'"),
    ("partial_rope", {"base": 10.0}, "partial_rope's base is encoding.base, not"),
])
def test_bad_hparams_are_refused(name, hparams, message):
    with pytest.raises(ValueError) as e:
        encoding_config(name, hparams)
    assert message in str(e.value)


def checked(*overrides: str, hparams: dict | None = None):
    C.register()
    cfg = compose_overrides([*TINY, *overrides])
    if hparams is not None:
        with open_dict(cfg):
            cfg.encoding.hparams = hparams
    C.check(cfg)
    return cfg


def test_config_check_reads_the_registry():
    for name in ENCODINGS:
        assert checked(f"encoding={name}").encoding.name == name
    checked("encoding=rope", "attention=flex")  # no score bias: the kernel is not used


@pytest.mark.parametrize("overrides,hparams,message", [
    (["encoding=t5"], {"buckets": 8}, "t5 has no hyperparameter encoding.hparams.buckets"),
    (["encoding=fire"], {"hidden": 0}, "encoding.hparams.hidden must be in [1, 4096], got 0"),
    (["encoding=fire", "attention=flex"], None,
     "attention=flex cannot apply fire's score bias; it runs on sdpa"),
    (["encoding=kerple_log", "attention=flash"], None,
     "attention=flash cannot apply kerple_log's score bias; it runs on sdpa, flex"),
    (["encoding=xpos", "model.d_model=36", "model.n_head=4"], None,
     "xpos needs an even head dimension, got 9"),
    # the encoding's parameters count, from the module built on the meta device: 2^30 x 32
    (["encoding=learned", "encoding.max_positions=1073741824"], None,
     "this model would have about 3.4e+10 parameters"),
])
def test_config_check_refuses_what_an_encoding_cannot_do(overrides, hparams, message):
    with pytest.raises(UsageError) as e:
        checked(*overrides, hparams=hparams)
    assert message in str(e.value)


def test_identity_holds_the_hparams_and_nothing_new_for_the_seed_encodings():
    ident = C.identity(checked("encoding=t5"))
    assert ident["encoding.hparams.num_buckets"] == 32
    assert ident["encoding.hparams.max_distance"] == 128
    assert not any(k.startswith("encoding.hparams") for k in C.identity(checked()))


def test_config_check_builds_nothing_real():
    """The shape check builds the encoding on the meta device: a learned table of 2^24 rows
    of 32 floats (2 GiB) costs no memory."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    checked("encoding=learned", "encoding.max_positions=16777216")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024  # KiB


def test_an_encoding_cannot_take_a_name_colour_order_or_label_already_taken():
    rope = ENCODINGS["rope"]
    with pytest.raises(ValueError, match="two encodings are called 'rope'"):
        register(dataclasses.replace(rope, colour="#123456"))
    with pytest.raises(ValueError, match="rope2 and rope have the same colour #0072b2"):
        register(dataclasses.replace(rope, name="rope2", colour="#0072b2"))
    with pytest.raises(ValueError, match="rope2 and rope have the same order 3"):
        register(dataclasses.replace(rope, name="rope2", colour="#123456"))
    with pytest.raises(ValueError, match="rope2 and rope have the same label RoPE"):
        register(dataclasses.replace(rope, name="rope2", colour="#123456", order=99))
    assert "rope2" not in ENCODINGS
