"""The registry of encodings is the one place that names them: each module registers itself,
each has its YAML, and the config check reads what each can do from it."""
import yaml

from tests.conftest import TINY, assert_usage_error


def test_hparams_are_set_from_the_command_line(posexp):
    r = posexp("train", "encoding=sinusoidal", "encoding.hparams.scale_tokens=false",
                    "encoding.hparams.table_scale=0.5", "--cfg", "job")
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(r.stdout)["encoding"]["hparams"] == {
        "scale_tokens": False, "table_scale": 0.5, "learn_scale": False, "unit_tokens": False}
    assert_usage_error(posexp("train", "encoding=rope", "encoding.hparams.table_scale=2"),
                       "the encoding has no hyperparameter encoding.hparams.table_scale")
    assert_usage_error(posexp("train", "encoding=sinusoidal",
                                   "encoding.hparams.table_scale=-1"),
                       "encoding.hparams.table_scale must be a positive number, got -1.0")
    assert_usage_error(posexp("train", "encoding=sinusoidal",
                                   "encoding.hparams.table_scale.x=1"),
                       "encoding.hparams.table_scale")


def test_hparams_reach_the_trained_model(posexp, tmp_path):
    """The trained model is built with the run's hparams, not the module's defaults: a trained
    table scale that starts at 0.5 is in the checkpoint, near 0.5, and the same config with a
    fixed scale has no such weight."""
    import torch

    common = ["encoding=sinusoidal", "encoding.hparams.scale_tokens=false",
              "encoding.hparams.table_scale=0.5", *TINY]
    assert posexp("train", *common, "encoding.hparams.learn_scale=true",
                       "run_name=trained").returncode == 0
    assert posexp("train", *common, "run_name=fixed").returncode == 0
    weights = {name: torch.load(tmp_path / "results/default" / name / "checkpoint.pt",
                                weights_only=True)["model"] for name in ("trained", "fixed")}
    scale = weights["trained"]["encoding.scale"]
    assert scale.shape == () and 0.3 < scale.item() < 0.7 and scale.item() != 0.5
    assert "encoding.scale" not in weights["fixed"]
