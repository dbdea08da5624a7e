"""The rope-scaling claim suite end to end at a tiny scale: its runs trained, scored with
each scaling, fine-tuned, the control continued, and the report and verdicts written."""
import json

from posexp import config as C
from posexp.claims.base import FAILS, HOLDS, INCONCLUSIVE
from tests.conftest import read_json
from tests.unit.test_reproduce import SMALL

C.register()


def test_rope_scaling_suite_trains_scores_and_fine_tunes(posexp, tmp_path):
    preset = tmp_path / "tiny-rope.yaml"
    preset.write_text(json.dumps({
        "claims": "rope-scaling", "experiment": "claims", "train_seq_len": 16, "seeds": [0],
        "sliding": False,
        "overrides": ["train.seq_len=16", *SMALL, "train.tokens=4096", "train.batch_tokens=128",
                      "eval.tokens=256", "eval.lengths=[16,64]", "device=cpu"],
        "runs": [["encoding=rope", "eval.rope_scaling=linear,ntk,yarn",
                  "eval.rope_scaling.factor=4"]],
        "finetunes": [*({"parent": ["encoding=rope"], "overrides": [
            "train.seq_len=64", "train.tokens=2048", f"encoding.scaling={method}",
            "encoding.scaling.factor=4"]} for method in ("linear", "yarn")),
            {"parent": ["encoding=rope"], "overrides": ["train.seq_len=16",
                                                        "train.tokens=2048"]}],
        "thresholds": {"factor": 4, "finetunes": {"short": 2048}, **{
            name: {"margin": m, "reason": "tiny"} for name, m in (
                ("better", 0.0), ("pi_cost", 0.05), ("finetune_gap", 0.05), ("tie", 0.02))}}}))
    r = posexp("reproduce", "--preset", str(preset), "--results-dir", "out")
    assert r.returncode == 0, r.stderr
    root = tmp_path / "out" / "claims"
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("rope")) == [
        "rope-L16-s0", "rope-L16-s0-ft-2048tok", "rope-L16-s0-ft-L64-linear4-2048tok",
        "rope-L16-s0-ft-L64-yarn4-2048tok"]
    assert read_json(root / "rope-L16-s0-ft-L64-yarn4-2048tok" / "run.json")["parent"] == \
        str((root / "rope-L16-s0").resolve())
    v = read_json(root / "report" / "verdicts.json")
    assert len(v["verdicts"]) == 8 and v["thresholds"]["factor"] == 4  # a claim a method
    assert all(x["verdict"] in (HOLDS, FAILS, INCONCLUSIVE) for x in v["verdicts"])
    md = (root / "report" / "verdicts.md").read_text()
    assert "## Claims about RoPE context extension" in md and "A property" not in md
    summary = (root / "report" / "summary.md").read_text()
    # the fine-tunes beside their parent, each scaling its own row
    rows = [line.split(" | ")[:4] for line in summary.split("## ")[1].splitlines()
            if line.startswith("| rope")]
    assert rows == [["| rope", "16", "-", "-"],
                    *(["| rope", "16", "-", f"{name} \u00d74"]
                      for name in ("PI", "NTK-aware", "YaRN")),
                    ["| rope", "16", "from L=16", "-"],  # the control, continued at L
                    *(["| rope", "64", f"from L=16, {name} \u00d74", "-"]
                      for name in ("PI", "YaRN"))]
    # only nonoverlapping windows: the preset's claims read no others
    assert not (root / "report" / "extrapolation_sliding.png").exists()
