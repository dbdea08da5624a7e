"""The ratio to ppl(L) of a curve scored with a RoPE scaling, or of a fine-tune, is taken
over the ppl(L) of the model as trained (a fine-tune's parent): one denominator per model,
so that a scaling that costs perplexity at L does not look flat against its own ppl(L)."""

from omegaconf import OmegaConf

from posexp import scaling
from posexp.report.curves import mode_curves
from posexp.report.series import build_series
from posexp.runs import load_runs
from tests.unit.test_reproduce import PARAMS, SMALL, config_text, curve, make_run, write_run


def runs(root, with_parent: bool = True):
    points = curve({16: 5.0, 64: 9.0})
    points += [{**p, "rope_scaling": scaling.record("linear", 4, PARAMS)}
               for p in curve({16: 10.0, 64: 11.0})]
    make_run(root, "rope", 16, 0, points)
    cfg = OmegaConf.create(config_text(("encoding=rope", "train.seq_len=64", *SMALL)))
    cfg.encoding.scaling.method, cfg.encoding.scaling.factor = "yarn", 4.0
    cfg.parent = {"run": str(root / "rope-L16-s0"), "identity": "i", "config": "c",
                  "weights_sha256": "w", "original_len": 16}
    info = {"parent": str(root / "rope-L16-s0")} if with_parent else {}
    write_run(root / "tuned", OmegaConf.to_yaml(cfg), curve({16: 6.0, 64: 5.5}), **info)
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


def test_a_fine_tune_whose_parent_is_not_in_the_report_has_no_ratio(tmp_path):
    got = ratios(runs(tmp_path, with_parent=False))
    assert got["rope L=16 \u2192 ft L=64 YaRN \u00d74"] == {}
