"""Committed results cannot drift from what made them, nor the documents from the results.

* Each claims report under results/ records its preset's sha256 and posexp's code in
  verdicts.json (claims/suite.py, ``provenance``); a preset edited since its report was
  written fails here until the report is regenerated (``posexp reproduce``).
* Its claims are numbered in the order verdicts.md tables them.
* The README and docs quote reports only through generated verdict tables or checked
  numbers paragraphs (claims/digest.py); a number edited by hand fails here.
* The encodings the README tables and ``posexp -h`` lists are the registered ones.
"""

import json
import re
import subprocess
from pathlib import Path

from omegaconf import OmegaConf
from typer.testing import CliRunner

import posexp.run
from posexp.claims import reproduce
from posexp.claims.digest import main as write_sections
from posexp.claims.digest import regenerate, unquoted
from posexp.claims.margins import margins_record
from posexp.claims.suite import preset_sha256, provenance
from posexp.cli.app import app
from posexp.config import CONFIG_DIR
from posexp.encodings import ENCODINGS
from posexp.version import __version__, source_sha256
from tests.unit.test_reproduce import _fake_experiment, write_preset

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Reports written before verdicts.json recorded its preset's hash and code (and, for the
# cpu suite, before claims were numbered in table order).  Regenerate one with
# `posexp reproduce --preset NAME` and take it off: the test then holds it to its preset.
PREDATE: set[str] = set()
NUMBERED = re.compile(r"^\| (\d+)\. ", re.M)


def drifted(results: Path, predate: set[str]) -> list[str]:
    """Every committed claims report under ``results`` whose preset has changed since it was
    written, that records no hash without being listed in ``predate`` (or is listed but
    records one), or whose verdicts.md numbers its claims out of table order."""
    problems = []
    for path in sorted(results.glob("*/*/verdicts.json")):
        where = path.parent.relative_to(results).as_posix()
        data = json.loads(path.read_text())
        if "preset_sha256" not in data:
            if where not in predate:
                problems.append(f"{where}: verdicts.json records no preset hash")
            continue
        if where in predate:
            problems.append(f"{where}: records its preset's hash now: take it off PREDATE")
        if preset_sha256(data["preset"]) != data["preset_sha256"]:
            problems.append(f"{where}: preset {data['preset']} changed since the report was "
                            f"written: posexp reproduce --preset {data['preset']}")
        margins = data.get("margins")
        # a preset that holds its thresholds is its own margins file: its drift says it all
        if margins and margins["file"] != data["preset"] and margins_drift(margins):
            problems.append(f"{where}: the margins of preset {data['preset']} changed since the "
                            f"report was written ({margins['file']})")
        numbers = [int(n) for n in NUMBERED.findall((path.parent / "verdicts.md").read_text())]
        if numbers != list(range(1, len(numbers) + 1)):
            problems.append(f"{where}: claims numbered {numbers} in verdicts.md's tables")
    return problems


def margins_drift(recorded: dict) -> bool:
    """Whether the margins file the report read differs now (or the preset names another)."""
    shown = recorded["file"]
    path = Path(CONFIG_DIR) / shown.removeprefix("configs/") if shown.startswith(
        "configs/") else Path(shown)
    return not path.is_file() or margins_record(path)["sha256"] != recorded["sha256"]


def test_every_committed_report_was_written_by_its_preset_as_it_stands():
    assert drifted(RESULTS, PREDATE) == []


def test_reproduce_records_its_preset_and_code_and_numbers_claims_in_order(tmp_path,
                                                                         monkeypatch):
    preset = write_preset(tmp_path / "tiny.yaml")
    monkeypatch.setattr(posexp.run, "run", _fake_experiment([], fail="none"))
    reproduce(str(preset), tmp_path / "results")
    report = tmp_path / "results" / "claims" / "report"
    made = json.loads((report / "verdicts.json").read_text())
    assert made["code"]["posexp"] == __version__
    assert made["code"]["source_sha256"] == source_sha256()
    md = (report / "verdicts.md").read_text()
    assert f"Preset file sha256 {made['preset_sha256'][:16]}; posexp {__version__}" in md
    assert [int(n) for n in NUMBERED.findall(md)] == list(range(1, 8))
    assert drifted(tmp_path / "results", set()) == []
    preset.write_text(preset.read_text().replace('"tiny"', '"tiny, edited"'))
    assert drifted(tmp_path / "results", set()) == [
        f"claims/report: preset {preset} changed since the report was written: "
        f"posexp reproduce --preset {preset}"]
    assert f"Margins: {preset} (sha256 {made['margins']['sha256'][:16]})" in md


def fake_report(results: Path, preset: Path, numbers=(1, 2)) -> Path:
    """A claims report of ``preset`` as posexp reproduce writes one (the fields read here)."""
    out = results / "exp" / "report"
    out.mkdir(parents=True)
    (out / "verdicts.json").write_text(json.dumps({"preset": str(preset),
                                                   **provenance(str(preset), OmegaConf.create())}))
    (out / "verdicts.md").write_text("".join(f"| {n}. a claim | holds |\n" for n in numbers))
    return out


def test_a_preset_edited_after_its_report_fails(tmp_path):
    preset = tmp_path / "mine.yaml"
    preset.write_text("experiment: exp\n")
    out = fake_report(tmp_path / "results", preset)
    made = json.loads((out / "verdicts.json").read_text())
    assert len(made["preset_sha256"]) == 64 and made["code"]["posexp"]
    assert len(made["code"]["source_sha256"]) == len(made["code"]["package_sha256"]) == 64
    assert drifted(tmp_path / "results", set()) == []
    preset.write_text("experiment: exp\nseeds: [0, 1]\n")
    assert drifted(tmp_path / "results", set()) == [
        f"exp/report: preset {preset} changed since the report was written: "
        f"posexp reproduce --preset {preset}"]


def test_a_report_without_a_hash_fails_unless_listed_and_a_listed_one_must_lack_it(tmp_path):
    preset = tmp_path / "mine.yaml"
    preset.write_text("experiment: exp\n")
    out = fake_report(tmp_path / "results", preset)
    assert drifted(tmp_path / "results", {"exp/report"}) == [
        "exp/report: records its preset's hash now: take it off PREDATE"]
    (out / "verdicts.json").write_text(json.dumps({"preset": str(preset)}))
    assert drifted(tmp_path / "results", set()) == [
        "exp/report: verdicts.json records no preset hash"]
    assert drifted(tmp_path / "results", {"exp/report"}) == []


def test_claims_numbered_out_of_table_order_fail(tmp_path):
    preset = tmp_path / "mine.yaml"
    preset.write_text("experiment: exp\n")
    fake_report(tmp_path / "results", preset, numbers=(1, 2, 4, 3))
    assert drifted(tmp_path / "results", set()) == [
        "exp/report: claims numbered [1, 2, 4, 3] in verdicts.md's tables"]


# --- the documents quote the reports -----------------------------------------------------
def test_documents_quote_their_reports_exactly():
    for doc in DOCUMENTS:
        text = doc.read_text()
        assert regenerate(text, REPO) == text, (
            f"{doc.name}: a verdicts section differs from its report: "
            f"python -m posexp.claims.digest {doc.relative_to(REPO)}")
        assert unquoted(text, REPO) == [], doc.name
    assert "<!-- verdicts: results/cpu-L128/report -->" in (
        REPO / "docs" / "claims.md").read_text()


def test_a_hand_edited_number_fails(tmp_path):
    text = (REPO / "docs" / "claims.md").read_text()
    # in a generated verdicts table: the tasks suite's claim 1, NoPE minus learned on copy
    table = text.replace("= +0.123 [+0.089, +0.157]", "= +0.124 [+0.089, +0.157]", 1)
    assert table != text and regenerate(table, REPO) == text
    # in a numbers paragraph: NoPE's 16M runs at the learning gate, 1.791 bits per byte
    prose = text.replace("-->1.791 bits per byte", "-->1.7911 bits per byte", 1)
    assert prose != text
    gate = "The learning gate > At 16M tokens > | nope L=128 |"
    assert unquoted(prose, REPO) == [
        f"results/cpu-L128/report: 1.7911 (not on the report's line {gate!r})"]


def test_a_quoted_number_is_the_statistic_it_names():
    """#43: a number is checked on the report's line its name names, not anywhere in the
    report -- 1.791 is also ALiBi's seed 2 at 16M, and learned's weakest is another."""
    def check(paragraph: str) -> list[str]:
        return unquoted(f"<!-- numbers: results/cpu-L128/report -->\n{paragraph}\n", REPO)

    nope = "<!-- The learning gate > At 16M tokens > | nope L=128 | -->"
    assert check(f"{nope}1.791, 1.79, 1.8 and zlib 2.073") == []  # rounded is its own
    assert check(f"{nope}1.7911") == [f"results/cpu-L128/report: 1.7911 (not on the "
                                      f"report's line {nope[5:-4]!r})"]
    learned = "<!-- The learning gate > At 16M tokens > | learned L=128 | -->"
    assert check(f"{learned}1.791") == [f"results/cpu-L128/report: 1.791 (not on the "
                                        f"report's line {learned[5:-4]!r})"]
    assert check("1.791") == ["results/cpu-L128/report: 1.791 (names no statistic: put "
                              "<!-- its line in the report --> before it)"]
    assert check("<!-- no such row -->1.791") == [
        "results/cpu-L128/report: 1.791 (no line 'no such row' in the report)"]
    # the name's parts in order: NoPE's row of the 4M table is another line
    assert check("<!-- The learning gate > At 4M tokens > | nope L=128 | -->1.791") != []


def test_digest_writes_the_sections_again(tmp_path, monkeypatch):
    text = (REPO / "docs" / "claims.md").read_text()
    edited = text.replace("= 8.056 [", "= 9.999 [", 1)
    assert edited != text  # a number the cpu suite's verdicts table holds
    doc = tmp_path / "claims.md"
    doc.write_text(edited)
    monkeypatch.chdir(REPO)
    assert write_sections([str(doc)]) == 0
    assert doc.read_text() == (REPO / "docs" / "claims.md").read_text()


# --- encodings are listed from the registry ----------------------------------------------
def test_the_readme_and_help_list_the_registered_encodings():
    """The README's table and encodings.md's sources are the registry's, as
    posexp/encodings/tables.py writes them, with a row for every encoding there is a config
    for; posexp -h names each."""
    from posexp.encodings import tables

    registered = {p.stem for p in (Path(CONFIG_DIR) / "encoding").glob("*.yaml")}
    assert registered == set(ENCODINGS)
    for doc, kinds in (("README.md", {"readme"}), ("docs/encodings.md", {"sources"})):
        text = (REPO / doc).read_text()
        assert {m[2] for m in tables.SECTION.finditer(text)} == kinds, doc
        assert tables.regenerate(text) == text, f"{doc}: python -m posexp.claims.digest {doc}"
        for m in tables.SECTION.finditer(text):
            assert set(re.findall(r"^\| `(\w+)` \|", m[0], re.M)) == registered, doc
    helped = CliRunner().invoke(app, ["-h"]).output
    listed = re.search(r"each positional encoding \(([a-z0-9_,\s]+)\)", helped)
    assert listed and {e.strip() for e in listed[1].split(",")} == registered


def test_no_document_types_a_list_of_every_encoding():
    names = sorted(ENCODINGS)
    for doc in DOCUMENTS:
        for line in doc.read_text().splitlines():
            # a few (the score-bias encodings, say) is a category; most of them is the list
            # that goes stale when an encoding is registered
            assert sum(f"`{n}`" in line for n in names) <= len(names) * 2 // 3, (doc.name, line)


def test_predating_reports_are_still_there():
    """A report taken off results/ is taken off PREDATE too (no stale exemptions)."""
    assert all((RESULTS / where / "verdicts.json").is_file() for where in PREDATE)


def committed_unfinished(repo: Path) -> list[str]:
    """The run records git holds under results/ that did not finish: an interrupted run's
    files travel without its checkpoint, so next session it trains afresh over them."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "results"],
                            capture_output=True, text=True, check=True).stdout.split("\0")
    return [name for name in listed if name.endswith("/run.json")
            and json.loads((repo / name).read_text())["status"] != "completed"]


def test_only_finished_runs_are_committed(tmp_path):
    assert committed_unfinished(REPO) == []
    # the check can fail: a record marked interrupted, committed in a scratch repository
    run = tmp_path / "results" / "x" / "rope-L64-s0"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"status": "interrupted"}))
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "results"], check=True)
    assert committed_unfinished(tmp_path) == ["results/x/rope-L64-s0/run.json"]
