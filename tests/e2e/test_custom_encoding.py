"""An encoding added from outside posexp's source: one module and one config file under
--config-dir (tests/custom_encoding/, docs/encodings.md's worked example), through train, sweep,
eval and report."""
import shutil
from pathlib import Path

import pytest

from tests.conftest import TINY, assert_usage_error, read_json

EXAMPLE = Path(__file__).parents[1] / "custom_encoding"


@pytest.fixture
def project(tmp_path):
    """A directory of the user's own: the module beside a configs/ directory."""
    shutil.copy(EXAMPLE / "log_alibi.py", tmp_path)
    shutil.copytree(EXAMPLE / "configs", tmp_path / "configs")
    return tmp_path


def test_an_encoding_of_your_own_trains_sweeps_and_reports(posexp, project):
    r = posexp("train", "--config-dir", "configs", "encoding=log_alibi", *TINY)
    assert r.returncode == 0, r.stderr
    run = project / "results" / "default" / "log_alibi-L16-s0"
    saved = read_json(run / "run.json")
    assert saved["status"] == "completed" and saved["encoding"] == "log_alibi"
    curve = read_json(run / "eval.json")["curve"]
    assert all(p["applicable"] and p["ppl"] > 1 for p in curve)
    # a sweep of it beside a built-in encoding, then the report of both
    r = posexp("sweep", "--config-dir", "configs", "encoding=log_alibi,alibi", "seed=0,1",
               *TINY, "experiment=mine")
    assert r.returncode == 0, r.stderr
    runs = project / "results" / "mine"
    names = sorted(p.parent.name for p in runs.glob("*/run.json"))
    assert names == ["alibi-L16-s0", "alibi-L16-s1", "log_alibi-L16-s0", "log_alibi-L16-s1"]
    assert all(read_json(runs / n / "run.json")["status"] == "completed" for n in names)
    r = posexp("report", "results/mine")
    assert r.returncode == 0, r.stderr
    summary = (project / "results" / "mine" / "report" / "summary.md").read_text()
    assert "| log_alibi | 16 | 2 |" in summary and "| alibi | 16 | 2 |" in summary
    # the run names its module, so posexp eval finds the encoding again without --config-dir
    r = posexp("eval", str(run), "eval.lengths=[128]")
    assert r.returncode == 0, r.stderr
    assert 128 in [p["length"] for p in read_json(run / "eval.json")["curve"]]


@pytest.mark.parametrize("files,args,message", [
    ({}, ["encoding.module=os"], "encoding.module names Python code to import: set it in a "
                                 "config file"),
    ({"configs/encoding/x.yaml": "defaults: [encoding_schema]\nname: x\nmodule: no_such\n"},
     ["--config-dir", "configs", "encoding=x"],
     "encoding.module no_such: ModuleNotFoundError: No module named 'no_such'"),
    ({"configs/encoding/x.yaml": "defaults: [encoding_schema]\nname: x\nmodule: empty\n",
      "empty.py": "VALUE = 1\n"},
     ["--config-dir", "configs", "encoding=x"], "encoding.module empty registers no encoding"),
    ({"configs/encoding/x.yaml": "defaults: [encoding_schema]\nname: x\nmodule: broken\n",
      "broken.py": "raise RuntimeError('half-written')\n"},
     ["--config-dir", "configs", "encoding=x"], "encoding.module broken: RuntimeError: "
                                                "half-written"),
    ({"configs/encoding/x.yaml": "defaults: [encoding_schema]\nname: rope\nmodule: empty\n",
      "empty.py": "VALUE = 1\n"},
     ["--config-dir", "configs", "encoding=x"], "rope is posexp's own encoding"),
    ({"configs/encoding/x.yaml": "defaults: [encoding_schema]\nname: x\nmodule: ../evil\n"},
     ["--config-dir", "configs", "encoding=x"], "encoding.module must be a dotted Python "
                                                "module path"),
])
def test_what_cannot_add_an_encoding_is_one_line(posexp, tmp_path, files, args, message):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    r = posexp("train", *args, *TINY)
    assert_usage_error(r, message)
    assert not (tmp_path / "results").exists()
