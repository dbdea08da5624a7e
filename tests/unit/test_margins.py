"""Margins fixed before the data (claims/margins.py): every shipped preset names a margins
file, the verdicts say when git fixed it against when the suite's first run started, and a
margins file edited afterwards, uncommitted or outside git reads so."""

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from posexp.claims.margins import MARGINS_DIR, margins_record, margins_text
from posexp.claims.preset import load_preset, margins_file
from posexp.errors import UsageError
from tests.presets import PRESETS, shipped_preset

SHIPPED = sorted(p.stem for p in PRESETS.glob("*.yaml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_preset_reads_its_thresholds_from_a_margins_file(name):
    tree = yaml.safe_load((PRESETS / f"{name}.yaml").read_text())
    assert "thresholds" not in tree
    preset, _ = load_preset(name)
    path = margins_file(name, preset)
    assert path.parent == MARGINS_DIR
    assert preset.thresholds == yaml.safe_load(path.read_text())


def test_a_preset_with_margins_in_two_places_or_a_missing_file_is_refused(tmp_path):
    both = {**shipped_preset("cpu"), "margins": "cpu"}
    (tmp_path / "both.yaml").write_text(yaml.safe_dump(both))
    with pytest.raises(UsageError, match=r"in its margins file \(cpu\) or in the preset, not "):
        load_preset(str(tmp_path / "both.yaml"))
    gone = {**both, "margins": "nosuch"}
    del gone["thresholds"]
    (tmp_path / "gone.yaml").write_text(yaml.safe_dump(gone))
    with pytest.raises(UsageError, match=r"margins file .*nosuch.yaml does not exist; shipped: "
                                         r"cpu, encodings"):
        load_preset(str(tmp_path / "gone.yaml"))
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(shipped_preset("cpu")["thresholds"]))
    (tmp_path / "own.yaml").write_text(yaml.safe_dump({**gone, "margins": "mine.yaml"}))
    preset, _ = load_preset(str(tmp_path / "own.yaml"))  # a path beside the preset
    assert margins_file(str(tmp_path / "own.yaml"), preset) == tmp_path / "mine.yaml"


def git(repo: Path, *args: str, when: str = "2026-12-01T10:00:00+00:00") -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=env, capture_output=True)


def test_the_verdicts_say_whether_the_margins_were_fixed_before_the_first_run(tmp_path):
    margins = tmp_path / "m.yaml"
    margins.write_text("tie: {margin: 0.02, reason: r}\n")
    outside = margins_record(margins)  # tmp_path is no git checkout
    assert outside["history_known"] is False
    assert margins_text(outside, None).endswith("its history is not known (not in a git "
                                                "checkout).")
    git(tmp_path, "init", "-q")
    assert "**not fixed in any commit**" in margins_text(margins_record(margins), None)
    git(tmp_path, "add", "m.yaml")
    git(tmp_path, "commit", "-qm", "margins")
    fixed = margins_record(margins)
    first = fixed["commits"][0]["commit"]
    assert margins_text(fixed, "2026-12-02T09:00:00+00:00") == (
        f"Margins: {margins} (sha256 {fixed['sha256'][:16]}); fixed in commit {first[:10]} "
        "(2026-12-01), before the suite's first run started (2026-12-02).")
    assert "**after the suite's first run started** (2026-11-30)" in margins_text(
        fixed, "2026-11-30T09:00:00+00:00")
    # a suite that reuses another's runs times its margins against its own, and says so
    assert margins_text(fixed, "2026-12-02T09:00:00+00:00",
                        (["alibi", "rope"], "2026-11-29T09:00:00+00:00")).endswith(
        "before the suite's first run started (2026-12-02); the runs of alibi, rope are "
        "another suite's, reused (from 2026-11-29): their curves could be seen before the "
        "margins were fixed.")
    margins.write_text("tie: {margin: 0.05, reason: r}\n")
    assert margins_text(margins_record(margins), "2026-12-02T09:00:00+00:00").endswith(
        "; **the file has uncommitted changes**.")
    git(tmp_path, "commit", "-qam", "wider", when="2026-12-03T10:00:00+00:00")
    changed = margins_record(margins)
    assert [c["time"][:10] for c in changed["commits"]] == ["2026-12-01", "2026-12-03"]
    assert margins_text(changed, "2026-12-02T09:00:00+00:00").endswith(
        f"; **changed after the first run started** in {changed['commits'][1]['commit'][:10]}.")


def test_reproduce_says_on_the_terminal_when_the_margins_were_not_fixed_first(
        tmp_path, monkeypatch, capsys):
    import json

    import posexp.run
    from posexp.claims import reproduce
    from tests.unit.test_reproduce import THRESHOLDS, _fake_experiment, write_preset

    git(tmp_path, "init", "-q")
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(THRESHOLDS))  # never committed
    preset = write_preset(tmp_path / "tiny.yaml", margins="m.yaml")
    tree = json.loads(preset.read_text())
    del tree["thresholds"]
    preset.write_text(json.dumps(tree))
    monkeypatch.setattr(posexp.run, "run", _fake_experiment([], fail="none"))
    reproduce(str(preset), tmp_path / "results")
    err = capsys.readouterr().err
    assert f"posexp reproduce: warning: Margins: {tmp_path / 'm.yaml'} (sha256 " in err
    assert "; not fixed in any commit: these margins are not pre-registered." in err
    md = (tmp_path / "results" / "claims" / "report" / "verdicts.md").read_text()
    assert "**not fixed in any commit**" in md
