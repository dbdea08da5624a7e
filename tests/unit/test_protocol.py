"""One protocol across commits: run.json records the protocol a run was trained under
(version.PROTOCOL, 0 before it did); reports and claims never compare runs of two, and a
run or a suite of one is never continued by code of another."""
import json

import pytest

from posexp.claims.suite import versions_table
from posexp.errors import PosexpError, UsageError
from posexp.run.lifecycle import existing
from posexp.runs import Run, continues_protocol, load_run, load_runs
from posexp.version import PROTOCOL
from tests.runs_on_disk import curve_point, losses, write_run
from tests.unit.test_precision import spec


def completed(path, protocol=None, code=None):
    write_run(path, [f"seed={path.name[-1]}"], [curve_point("nonoverlapping", 16, losses(2.0))])
    info = json.loads((path / "run.json").read_text())
    info.update({k: v for k, v in (("protocol", protocol), ("code", code)) if v is not None})
    (path / "run.json").write_text(json.dumps(info))
    return path


def test_a_new_run_records_this_codes_protocol(tmp_path):
    s = spec(tmp_path)
    Run.create(s.path, s.cfg)
    assert json.loads((s.path / "run.json").read_text())["protocol"] == PROTOCOL


def test_reports_and_claims_refuse_runs_of_two_protocols(tmp_path):
    completed(tmp_path / "x" / "old-s0")  # no protocol recorded: protocol 0
    completed(tmp_path / "x" / "new-s1", protocol=1)
    with pytest.raises(PosexpError) as e:
        load_runs(tmp_path)
    message = str(e.value)
    assert "\n" not in message and "protocol 0" in message and "protocol 1" in message
    assert "old-s0" in message and "new-s1" in message
    done, _ = load_runs(tmp_path / "x" / "new-s1")  # one protocol alone is read
    assert [r.protocol for r in done] == [1]


def test_a_suite_continued_by_code_of_another_protocol_is_refused(tmp_path):
    old = load_run(completed(tmp_path / "x" / "run-s0"))
    continues_protocol([old, load_run(tmp_path / "x" / "absent")], 0)
    with pytest.raises(PosexpError, match=r"trained under protocol 0, and this posexp "
                                          r"computes protocol 1"):
        continues_protocol([old], 1)


def test_an_unfinished_run_of_another_protocol_is_not_resumed(tmp_path):
    s = spec(tmp_path)
    Run.create(s.path, s.cfg)
    assert existing(Run(s.path), s)["status"] == "running"
    info = json.loads((s.path / "run.json").read_text())
    info["protocol"] = 0
    (s.path / "run.json").write_text(json.dumps(info))
    with pytest.raises(UsageError, match=rf"protocol 0, and this posexp computes protocol "
                                         rf"{PROTOCOL}; resuming it would mix the two"):
        existing(Run(s.path), s)


def test_the_verdicts_list_the_code_and_protocol_of_their_runs(tmp_path):
    code = {"posexp": "0.1.0", "source_sha256": "ab" * 32}
    runs = [load_run(completed(tmp_path / "x" / f"run-s{i}", protocol=1, code=code))
            for i in (0, 1)]
    table = versions_table(runs)
    assert "| protocol | 1 |" in table
    assert "| posexp code | posexp 0.1.0" in table and "abababab" in table
