"""The ratio to ppl(L) of a curve scored with a RoPE scaling, or of a fine-tune, is taken
over the ppl(L) of the model as trained (a fine-tune's parent): one denominator per model,
so that a scaling that costs perplexity at L does not look flat against its own ppl(L)."""

import json

from omegaconf import OmegaConf

from posexp import scaling
from posexp.report.curves import mode_curves
from posexp.report.series import build_series
from posexp.runs import Run, load_runs
from posexp.runs.store import identity_sha256
from tests.unit.test_reproduce import PARAMS, SMALL, config_text, curve, make_run, write_run


def runs(root, with_parent: bool = True, set_up_from: str | None = None):
    """A RoPE run scored plain and with PI, and a fine-tune of it, which records the
    parent's identity and weights (and the directory it was set up from, ``set_up_from``);
    without the parent, the report holds another model where the parent would be."""
    points = curve({16: 5.0, 64: 9.0})
    points += [{**p, "rope_scaling": scaling.record("linear", 4, PARAMS)}
               for p in curve({16: 10.0, 64: 11.0})]
    parent = make_run(root, "rope", 16, 0, points)
    record = Run(parent).identity()
    identity = identity_sha256(record)
    info = json.loads((parent / "run.json").read_text())
    info.update(identity=record, identity_sha256=identity,
                weights_sha256="w" if with_parent else "other")
    (parent / "run.json").write_text(json.dumps(info))
    cfg = OmegaConf.create(config_text(("encoding=rope", "train.seq_len=64", *SMALL)))
    cfg.encoding.scaling.method, cfg.encoding.scaling.factor = "yarn", 4.0
    where = set_up_from or str(parent)
    cfg.parent = {"run": where, "identity": identity, "config": "c", "weights_sha256": "w",
                  "original_len": 16}
    write_run(root / "tuned", OmegaConf.to_yaml(cfg), curve({16: 6.0, 64: 5.5}),
              parent=where)
    return load_runs(root)[0]


def ratios(report_runs) -> dict[str, dict[int, float]]:
    curves = mode_curves(build_series(report_runs)[0], "nonoverlapping")
    return {c.label: {n: round(cell.ratio.value, 6) for n, cell in c.cells.items()
                      if cell.ratio} for c in curves}


def test_scaled_and_fine_tuned_curves_share_the_plain_runs_denominator(tmp_path):
    got = ratios(runs(tmp_path))
    assert got["rope L=16"] == {16: 1.0, 64: 1.8}
    # PI costs twice the perplexity at L: 2.0 there, not 1.0 against its own ppl(L)
    assert got["rope L=16 + PI \u00d74"] == {16: 2.0, 64: 2.2}
    # the fine-tune at 64 over its parent's ppl at 16
    assert got["rope L=16 \u2192 ft L=64 YaRN \u00d74"] == {16: 1.2, 64: 1.1}


def test_a_fine_tune_finds_its_parent_by_identity_and_weights_wherever_the_records_lie(
        tmp_path):
    """A fresh clone, or records copied elsewhere: the directory the fine-tune was set up
    from is not the parent's now, and the ratios are the same."""
    got = ratios(runs(tmp_path, set_up_from="/elsewhere/results/default/rope-L16-s0"))
    assert got["rope L=16 \u2192 ft L=64 YaRN \u00d74"] == {16: 1.2, 64: 1.1}


def test_a_fine_tune_whose_parent_is_not_in_the_report_has_no_ratio(tmp_path):
    # the run at the directory it names holds other weights: another model, not its parent
    got = ratios(runs(tmp_path, with_parent=False))
    assert got["rope L=16 \u2192 ft L=64 YaRN \u00d74"] == {}


def test_a_fine_tune_that_recorded_no_parent_is_divided_by_no_run(tmp_path):
    """Neither an old fine-tune without a parent record nor a run without identity and
    weights records is matched to the other: no ratio rather than another model's."""
    from posexp.report.curves import models_of, parent_of
    from posexp.runs import RunResult

    report_runs = runs(tmp_path)
    for r in report_runs:
        r.info.pop("identity_sha256", None)
    assert models_of(build_series(report_runs)[0]) == {}
    orphan = RunResult(tmp_path / "ft", {"status": "completed"}, identity={})
    assert parent_of(orphan, {(None, None): report_runs[0]}) is None
