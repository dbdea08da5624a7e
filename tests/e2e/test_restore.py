"""A campaign asks a run record for points it was not scored at (the lr sweep scores at L
only): its config is trained again for its weights, taken only when they are the record's
own, and the missing points are scored (posexp/run/restore.py)."""
import json

from tests.conftest import read_json
from tests.e2e.test_campaign import tiny_preset


def lengths(preset, values: str) -> None:
    tree = json.loads(preset.read_text())
    tree["overrides"] = [o for o in tree["overrides"] if not o.startswith("eval.lengths")]
    tree["overrides"].append(f"eval.lengths={values}")
    preset.write_text(json.dumps(tree))


def test_a_record_asked_for_more_points_gets_its_own_weights_back(posexp, tmp_path):
    preset = tiny_preset(tmp_path / "tiny.yaml", rope_tokens=2048)
    lengths(preset, "[16]")
    r = posexp("reproduce", "--preset", str(preset), "--results-dir", "out")
    assert r.returncode == 0, r.stderr
    root = tmp_path / "out" / "claims"
    weights = {}
    for name in ("rope-L16-s0", "alibi-L16-s0"):
        (root / name / "checkpoint.pt").unlink()  # a record, as git holds it
        weights[name] = read_json(root / name / "run.json")["weights_sha256"]
    # rope's record was made by other numerics: its weights cannot come back
    info = read_json(root / "rope-L16-s0" / "run.json")
    (root / "rope-L16-s0" / "run.json").write_text(json.dumps({**info,
                                                               "weights_sha256": "0" * 64}))
    before = (root / "rope-L16-s0" / "eval.json").read_text()
    lengths(preset, "[16,64]")
    r = posexp("reproduce", "--preset", str(preset), "--results-dir", "out")
    assert r.returncode == 1, r.stderr
    assert "alibi-L16-s0: a record without its checkpoint lacks points asked for; training " \
           "its config again for its weights" in r.stderr
    assert "training its config again gave other weights (sha256 " in r.stderr
    assert "the record has 000000000000): this machine does not reproduce" in r.stderr
    # alibi: its own weights back, scored at 64; rope: untouched
    assert read_json(root / "alibi-L16-s0" / "run.json")["weights_sha256"] == \
        weights["alibi-L16-s0"]
    assert (root / "alibi-L16-s0" / "checkpoint.pt").is_file()
    assert {p["length"] for p in read_json(root / "alibi-L16-s0" / "eval.json")["curve"]} == {
        16, 64}
    assert (root / "rope-L16-s0" / "eval.json").read_text() == before
    assert not (root / "rope-L16-s0" / "checkpoint.pt").exists()
    # the scratch runs do not stay (their lock files may)
    assert not [p for p in (root / ".campaign" / "restore" / "claims").iterdir()
                if not p.name.startswith(".")]


def test_a_record_too_long_to_train_again_in_the_time_left_is_pending(posexp, tmp_path):
    """At --time-limit 1s a record short of a point asked is pending, counted so, and the
    command exits 3 (runs pending) with nothing trained -- not "0 pending" and 0."""
    from posexp.timelimit import TIME_LIMIT_EXIT

    preset = tiny_preset(tmp_path / "tiny.yaml", rope_tokens=2048)
    lengths(preset, "[16]")
    assert posexp("reproduce", "--preset", str(preset), "--results-dir", "out").returncode == 0
    root = tmp_path / "out" / "claims"
    for name in ("rope-L16-s0", "alibi-L16-s0"):
        (root / name / "checkpoint.pt").unlink()  # records, as git holds them
        info = read_json(root / name / "run.json")  # measured on a slow machine: 20 s a run
        (root / name / "run.json").write_text(json.dumps({**info, "tok_per_s": 100}))
    lengths(preset, "[16,64]")
    r = posexp("reproduce", "--preset", str(preset), "--results-dir", "out", "--time-limit", "1s")
    assert r.returncode == TIME_LIMIT_EXIT, r.stderr
    assert "reproduce: pending: claims/alibi-L16-s0 (its weights again: needs about" in r.stderr
    assert "0 runs recorded, 2 pending; about " in r.stderr
    assert "training its config again" not in r.stderr
    assert not (root / "alibi-L16-s0" / "checkpoint.pt").exists()
