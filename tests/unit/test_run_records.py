"""What keeps a run record a record: results/.gitignore leaves checkpoints and the run store's
temporaries and locks out of git, and nothing else of a run; the command that rebuilds a
record's weights writes its values as Hydra reads them back."""

import shutil
import subprocess
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from posexp.runs.rebuild import hydra_value

RESULTS = Path(__file__).parents[2] / "results"
RUN = "exp/rope-L64-s0"


@pytest.fixture
def repo(tmp_path):
    """A git repository holding only results/.gitignore."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "results").mkdir()
    shutil.copy(RESULTS / ".gitignore", tmp_path / "results" / ".gitignore")
    return tmp_path


def ignored(repo: Path, path: str) -> bool:
    r = subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", "--no-index",
                        f"results/{path}"])
    assert r.returncode in (0, 1), r
    return r.returncode == 0


@pytest.mark.parametrize("name", ["checkpoint.pt", ".checkpoint.pt.x8k2j1.tmp",
                                  ".run.json.a9d3.tmp", "../.locks/rope-L64-s0.lock",
                                  "../.locks/rope-L64-s0.holder",
                                  "../.replaced/rope-L64-s0-20261203T000000Z/checkpoint.pt"])
def test_checkpoints_temporaries_and_locks_stay_out_of_git(repo, name):
    assert ignored(repo, f"{RUN}/{name}")


@pytest.mark.parametrize("name", ["config.yaml", "run.json", "metrics.jsonl", "eval.json"])
def test_a_records_files_go_into_git(repo, name):
    assert not ignored(repo, f"{RUN}/{name}")


def test_results_gitignore_is_itself_tracked():
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    r = subprocess.run(["git", "-C", str(RESULTS.parent), "check-ignore", "-q", "--no-index",
                        "results/.gitignore"])
    assert r.returncode == 1


@pytest.mark.parametrize("value", [None, True, 0.002, 10000.0, 16, "rope", "**/*", "a b",
                                   "it's", "null", "1e3", [16, 32], ["a b", None]])
def test_rebuild_values_read_back_as_themselves(value):
    parsed = OverridesParser.create().parse_override(f"key={hydra_value(value)}").value()
    assert parsed == value and type(parsed) is type(value)


def test_an_eval_json_edited_by_hand_is_refused_one_written_before_the_hash_is_read(tmp_path):
    import json

    import pytest

    from posexp.errors import PosexpError
    from posexp.runs.records import contents_sha256, read_eval
    from tests.runs_on_disk import curve_point, eval_file, losses

    data = json.loads(eval_file([curve_point("nonoverlapping", 16, losses(1.5))]))
    file = tmp_path / "eval.json"
    file.write_text(json.dumps(data))  # as posexp wrote it before it recorded the hash
    assert read_eval(file)["curve"][0]["length"] == 16
    file.write_text(json.dumps({**data, "sha256": contents_sha256(data)}, indent=1))
    assert read_eval(file)["curve"][0]["loss"] == data["curve"][0]["loss"]
    edited = json.loads(file.read_text())
    edited["curve"][0]["loss"] = 0.5  # a better number, by hand
    file.write_text(json.dumps(edited))
    with pytest.raises(PosexpError, match=r"eval.json was edited after posexp wrote it \(its "
                                          r"contents no longer match the sha256 it records\)"):
        read_eval(file)
