"""The claim set ``tasks`` (Kazemnejad et al.; Ruoss et al.) on synthetic task runs whose
accuracies are chosen, and the preset end to end at a tiny scale."""

import yaml

from posexp import config as C
from posexp.claims.base import UNMEASURED
from posexp.claims.preset import load_preset, report_dir
from tests.conftest import assert_usage_error, read_json
from tests.presets import shipped_preset

C.register()


def test_a_bad_tasks_preset_is_one_line_before_any_run(posexp, tmp_path):
    preset = shipped_preset("tasks")
    (tmp_path / "f1.yaml").write_text(yaml.safe_dump(
        {**preset, "thresholds": {**preset["thresholds"], "metric": "f1"}}))
    (tmp_path / "nogain.yaml").write_text(yaml.safe_dump(
        {**preset, "thresholds": {k: v for k, v in preset["thresholds"].items()
                                  if k != "min_gain"}}))
    out = tmp_path / "out"
    assert_usage_error(posexp("reproduce", "--preset", str(tmp_path / "f1.yaml"),
                                   "--results-dir", str(out)),
                       "thresholds.metric must be exact or token_acc, got 'f1'")
    assert_usage_error(posexp("reproduce", "--preset", str(tmp_path / "nogain.yaml"),
                                   "--results-dir", str(out)),
                       "has no thresholds.min_gain")
    assert not out.exists()


def test_the_tasks_preset_end_to_end(posexp, tmp_path):
    preset = load_preset("tasks")[0]
    # the preset's own file, shrunk: its run names stay interpolations for each run
    tiny = shipped_preset("tasks")
    tiny["seeds"], tiny["train_seq_len"] = [0], 16
    tiny["thresholds"].update(tasks=["copy"], randomized=["rope"])
    tiny["overrides"] = [o for o in tiny["overrides"] if not o.startswith(("model.", "train."))] + [
        "model.d_model=32", "model.n_layer=1", "model.n_head=2", "train.seq_len=16",
        "train.tokens=4096", "train.batch_tokens=128", "train.warmup_tokens=512",
        "task.eval_count=20"]
    tiny["runs"] = [run for run in tiny["runs"] if "task=copy" in run]
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny))
    r = posexp("reproduce", "--preset", str(tmp_path / "tiny.yaml"),
                    "--results-dir", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out" / preset.experiment / report_dir(preset, "tasks")
    rows = read_json(out / "verdicts.json")["verdicts"]
    assert [row["claim"].split(".")[0] for row in rows] == ["1", "2"]
    # a model this small does not learn copy even at n_max: the learnability gate (the
    # preset's thresholds.learned) says so for both claims, and neither is judged
    for row in rows:
        assert row["verdict"] == UNMEASURED, row["measured"]
        assert " did not learn copy (exact match " in row["measured"]
    assert (out / "tasks-copy.png").is_file()
    assert "NoPE against the explicit encodings on tasks" in (out / "verdicts.md").read_text()
