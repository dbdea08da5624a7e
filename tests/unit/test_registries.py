"""Every extension point is one registry, and the registries agree with the config files and
with each other: invariants, not lists, so that adding an entry needs no test edit."""
import dataclasses
import typing
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from posexp import scaling
from posexp.claims import CLAIM_SETS
from posexp.claims.base import Margin
from posexp.claims.preset import load_preset
from posexp.claims.registry import kind_of
from posexp.config import CONFIG_DIR
from posexp.config.schema import ScalingParams
from posexp.data.tasks import TASKS
from posexp.encodings import ENCODINGS
from posexp.encodings.rope_scaling import formula
from posexp.report import FIGURES

CONFIGS = Path(CONFIG_DIR)


def stems(group: str) -> set[str]:
    return {p.stem for p in (CONFIGS / group).glob("*.yaml")}


def test_every_task_has_its_config_and_back():
    assert stems("task") == set(TASKS)
    for name, task in TASKS.items():
        config = yaml.safe_load((CONFIGS / "task" / f"{name}.yaml").read_text())
        assert config["name"] == name and config["defaults"] == ["task_schema"]
        assert task.length_unit and task.description
    assert len({t.task_id for t in TASKS.values()}) == len(TASKS)


def test_every_encoding_has_its_config_and_back():
    assert stems("encoding") == set(ENCODINGS)
    for attribute in ("order", "colour", "label"):
        values = [str(getattr(s, attribute)).lower() for s in ENCODINGS.values()]
        assert len(set(values)) == len(values), attribute


def test_an_encoding_says_it_has_a_position_table_exactly_when_it_trains_one():
    """position_table, which the checks and reports read instead of an encoding's name: a
    parameter of encoding.max_positions rows of d_model."""
    from posexp.encodings import encoding_config
    from posexp.encodings.registry import ModelShape

    shape, rows = ModelShape(d_model=32, n_head=2, n_layer=1), 48
    for name, spec in ENCODINGS.items():
        fields = {f.name for f in dataclasses.fields(spec.config)}
        config = encoding_config(name, max_positions=rows if "max_positions" in fields else None)
        module = config.build(shape)
        tables = [p for p in module.parameters() if tuple(p.shape) == (rows, shape.d_model)]
        assert spec.position_table == bool(tables), name


def test_every_scaling_method_has_its_formula_and_its_parameters_their_keys():
    for name in scaling.computed():  # each entry's formula is a function of posexp's
        assert formula(name).__module__ == scaling.OURS, name
    with pytest.raises(ValueError, match="no formula of posexp's"):  # LongRoPE: the model's
        formula("longrope")
    for wrong, said in [("posexp.no_such:f", "cannot be imported"),
                        (f"{scaling.OURS}:no_such", "is not a function")]:
        scaling.METHODS["wrong"] = scaling.Method("wrong", "wrong", "a test's", formula=wrong)
        try:
            with pytest.raises(ValueError, match=said):
                formula("wrong")
        finally:
            del scaling.METHODS["wrong"]
    assert [f.name for f in dataclasses.fields(ScalingParams)] == [
        p.name for p in scaling.all_params()]
    for method in scaling.METHODS.values():  # a pretrained model gets each from transformers,
        # or NTK-aware as a larger rope_theta; Self-Extend and ReRoPE run in posexp's attention
        assert method.hf_rope_type is not None or method.name == "ntk" or method.eval_only, \
            method.name
        assert method.eval_only == (method.kind != scaling.FREQUENCIES), method.name
        if method.model_factors:  # never for a model trained here: nothing to compute it from
            with pytest.raises(ValueError, match="factors only a pretrained model supplies"):
                scaling.RopeScaling(method.name, 2.0)
    for method in scaling.computed().values():
        defaults = {p.name: p.default for p in method.params}
        assert method.rule is None or method.rule(defaults) is None, method.name
        assert scaling.RopeScaling(method.name, 2.0).params == defaults


def test_every_preset_is_of_a_registered_claim_set_and_loads():
    presets = stems("reproduce")
    assert presets
    used = set()
    for name in presets:
        preset, claim_set = load_preset(name)
        assert claim_set.name == (preset.get("claims") or "press")
        assert claim_set.sections(preset)  # every preset judges something
        used.add(claim_set.name)
    assert used == set(CLAIM_SETS)  # and every claim set has a shipped preset


def test_every_claim_set_is_handed_its_thresholds_typed():
    """Each shipped preset's thresholds reach the claim code as its set's dataclass: each
    field of the type it declares (a margin a Margin, a float a float though YAML wrote 2),
    an absent optional one its default -- so the claim code casts nothing."""
    for name in stems("reproduce"):
        preset, claim_set = load_preset(name)
        th = claim_set.typed(preset)
        hints = typing.get_type_hints(claim_set.thresholds)
        assert type(th) is claim_set.thresholds
        for field in dataclasses.fields(th):
            value, kind = getattr(th, field.name), kind_of(hints[field.name])
            assert (value is None and field.default is None) or isinstance(value, kind), \
                (name, field.name, value)
    bar_less = OmegaConf.create({"thresholds": {"factor": 2, "finetunes": {"short": 10},
                                                **{k: {"margin": 0, "reason": "r"} for k in (
                                                    "better", "pi_cost", "finetune_gap",
                                                    "tie")}}})
    th = CLAIM_SETS["rope-scaling"].typed(bar_less)
    assert (th.factor, type(th.factor), th.learned_bar) == (2.0, float, None)
    assert th.better == Margin(0, "r") and th.finetunes == {"short": 10}


def test_figures_have_names_and_places_of_their_own():
    assert len({f.name for f in FIGURES}) == len({f.order for f in FIGURES}) == len(FIGURES)
    assert [f.order for f in FIGURES] == sorted(f.order for f in FIGURES)
