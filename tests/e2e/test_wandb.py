"""Weights & Biases as its users expect: its environment variables decide what the config
leaves null, the config wins over them, its files go beside the run or report (or under
WANDB_DIR) and never into the current directory, and posexp says where the run went.
Offline throughout: no network, no key."""
import json

import pytest

from tests.conftest import TINY
from tests.runs_on_disk import curve_point, losses, write_run

pytest.importorskip("wandb")
from tests.unit.test_wandb import clean_env, offline_run, records  # noqa: F401


def test_report_wandb_writes_beside_the_report_quietly(posexp_process, tmp_path):
    for encoding in ("alibi", "rope"):
        curve = [curve_point("nonoverlapping", L, losses(1.5, seed=L)) for L in (16, 32)]
        write_run(tmp_path / "out" / "exp" / f"{encoding}-L16-s0", [f"encoding={encoding}"],
                  curve)
    here = tmp_path / "here"
    here.mkdir()
    r = posexp_process("report", "../out", "--wandb", cwd=here,
                       env=clean_env(tmp_path, WANDB_MODE="offline"))
    assert r.returncode == 0, r.stderr
    assert list(here.iterdir()) == []  # no ./wandb
    offline, record, _ = offline_run(tmp_path / "out" / "report")
    assert record.display_name == "report"
    saved = offline / "files" / "summary.md"
    assert not saved.is_symlink() and saved.read_text() == (
        tmp_path / "out" / "report" / "summary.md").read_text()
    assert list(offline.glob("files/media/images/extrapolation_nonoverlapping_*.png"))
    # W&B said nothing; posexp said where the run went
    assert "wandb:" not in r.stdout + r.stderr
    assert r.stderr.splitlines() == [
        f"posexp: W&B run saved offline in ../out/report/wandb/{offline.name}; upload it "
        f"with: wandb sync ../out/report/wandb/{offline.name}"]
    # WANDB_DIR moves them
    r = posexp_process("report", "../out", "--wandb", cwd=here,
                       env=clean_env(tmp_path, WANDB_MODE="offline",
                                     WANDB_DIR=str(tmp_path / "wd")))
    assert r.returncode == 0, r.stderr
    assert offline_run(tmp_path / "wd")[1].display_name == "report"
    assert list(here.iterdir()) == []


def test_train_with_only_wandb_mode_offline_set(posexp_process, tmp_path):
    r = posexp_process("train", "encoding=alibi", *TINY, "results_dir=out", "logger=wandb",
                       env=clean_env(tmp_path, WANDB_MODE="offline"))
    assert r.returncode == 0, r.stderr
    run = tmp_path / "out" / "default" / "alibi-L16-s0"
    offline, record, history = offline_run(run)
    assert record.display_name == "default/alibi-L16-s0"
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [h["loss"] for h in history if "loss" in h] == pytest.approx(
        [m["loss"] for m in logged if "loss" in m])
    assert list(offline.glob("files/media/table/extrapolation_*.table.json"))
    assert f"posexp: W&B run saved offline in {offline.relative_to(tmp_path)}; upload it with: " \
           f"wandb sync {offline.relative_to(tmp_path)}" in r.stderr.splitlines()
    assert "wandb:" not in r.stderr and not (tmp_path / "wandb").exists()
