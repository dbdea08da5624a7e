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


def test_an_encoding_added_by_the_page_in_a_copy_trains_and_the_tests_take_it(tmp_path):
    """#46: "Add an encoding" followed in a copy of the repository, touching only the two
    files the page names (its module and its YAML, as it writes them): the encoding trains
    and scores, and the tests that read the registry take it with no other edit."""
    import subprocess
    import sys

    from tests.unit.test_architecture_doc import ROOT, code_blocks, named_file, section

    tracked = subprocess.run(["git", "ls-files", "posexp", "configs", "tests", "pyproject.toml"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
    copy = tmp_path / "repo"
    for name in tracked.split():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes((ROOT / name).read_bytes())
    steps = section("Add an encoding")
    blocks = [*code_blocks(steps, "python"), *code_blocks(steps, "yaml")]
    for block in blocks:
        (copy / named_file(block)).write_text(block)
    (copy / "posexp" / "configs").symlink_to(copy / "configs")  # as the wheel lays it out
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1",
           "POSEXP_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    name = named_file(blocks[0]).rsplit("/", 1)[1].removesuffix(".py")
    trained = subprocess.run([sys.executable, "-m", "posexp", "train", f"encoding={name}",
                              *TINY, "results_dir=out"], cwd=copy, env=env,
                             capture_output=True, text=True, timeout=600)
    assert trained.returncode == 0, trained.stderr
    assert '"status": "completed"' in (copy / f"out/default/{name}-L16-s0/run.json").read_text()
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "-p", "no:xdist", "tests/unit/test_encoding_registry.py",
                            "tests/unit/test_attention.py", "tests/unit/test_encodings.py",
                            "-k", f"{name} or every or registry"],
                           cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert tests.returncode == 0, tests.stdout[-3000:]
    assert name in tests.stdout or " passed" in tests.stdout
