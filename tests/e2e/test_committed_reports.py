"""A committed claims report is what its committed run records give: on a copy of the records
alone (what git holds: no checkpoint), ``posexp reproduce --preset NAME`` trains nothing and
writes the report again byte for byte -- tables, verdicts and every figure, each budget's in
its folder -- but for the hashes of the code that wrote it, which change with any commit."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from posexp.claims.preset import load_preset
from posexp.timelimit import TIME_LIMIT_EXIT
from tests.conftest import in_process
from tests.unit.test_committed_results import PREDATE, RESULTS

REPO = RESULTS.parent
REPORTS = sorted(p.parent for p in RESULTS.glob("*/report*/verdicts.json")  # a preset's
                 if p.parent.relative_to(RESULTS).as_posix() not in PREDATE)  # own report too
# the code that wrote the report: verdicts.md's software line, verdicts.json's code record
WRITER_MD = re.compile(r"posexp [^,]+, source [0-9a-f]+, package [0-9a-f]+")


def committed(folder: Path) -> list[Path]:
    """The files git holds under ``folder``."""
    out = subprocess.run(["git", "ls-files", "-z", str(folder)], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    return [REPO / p for p in out.split("\0") if p]


def without_writer(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name == "verdicts.md":
        return WRITER_MD.sub("posexp (writer)", data.decode()).encode()
    if path.name == "verdicts.json":
        record = json.loads(data)
        record["code"] = {k: v for k, v in record["code"].items()
                          if k not in ("source_sha256", "package_sha256")}
        return json.dumps(record, sort_keys=True).encode()
    return data


@pytest.mark.parametrize("report", REPORTS,
                         ids=[p.relative_to(RESULTS).as_posix() for p in REPORTS])
def test_a_committed_report_is_regenerated_byte_for_byte(report, tmp_path, cache_dir):
    preset = json.loads((report / "verdicts.json").read_text())["preset"]
    # the records and the report, as a fresh clone has them, and the records of the recipe
    # searches the report reads beside them (thresholds.searched)
    searched = load_preset(preset)[0].thresholds.get("searched") or {}
    for experiment in (report.parent, *(RESULTS / name for name in searched.values())):
        for f in committed(experiment):
            target = tmp_path / "results" / f.relative_to(RESULTS)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
    assert not list((tmp_path / "results").rglob("checkpoint.pt"))
    r = in_process(["reproduce", "--preset", preset, "--results-dir", "results",
                    "--time-limit", "1s"], tmp_path, {"POSEXP_CACHE": str(cache_dir)})
    assert r.returncode in (0, TIME_LIMIT_EXIT), r.stderr
    assert "reproduce: started:" not in r.stderr  # nothing trained: records or pending
    pending = r.returncode == TIME_LIMIT_EXIT
    assert ("pending (" in (report / "verdicts.md").read_text()) == pending
    again = tmp_path / "results" / report.relative_to(RESULTS)
    files = sorted(p.relative_to(report) for p in report.rglob("*") if p.is_file())
    assert sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file()) == files
    differ = [str(name) for name in files
              if without_writer(report / name) != without_writer(again / name)]
    assert differ == [], f"{report.relative_to(REPO)}: regenerated differently: {differ}"
