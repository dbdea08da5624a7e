"""Reports, the claim suite's verdicts and the sweep summary, on synthetic run directories.

Each run directory is written as posexp writes one (config.yaml of a composed config,
run.json, eval.json) with chosen perplexities, so every number a test checks is known.
Only two tests go through the real CLI.
"""

import csv
import functools
import json
import math
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

import posexp.experiment
from posexp import config as C
from posexp.cli import CONFIG_DIR, compose, compose_overrides
from posexp.errors import PosexpError
from posexp.report import (
    CSV_COLUMNS,
    build_series,
    markdown,
    terminal_table,
    write_report,
    write_tables,
)
from posexp.reproduce import reproduce, verdicts
from posexp.runs import load_run, load_runs
from posexp.sweep import summarize

C.register()

SMALL = ("model.d_model=32", "model.n_layer=1", "model.n_head=2")
NO = "nonoverlapping"
REGION = (1000, 512)  # (first_token, tokens)
VERSIONS = {"posexp": "0.1.0", "python": "3.11.7", "torch": "2.13.0"}


@functools.lru_cache
def config_text(overrides: tuple[str, ...]) -> str:
    """config.yaml of a composed, checked and resolved config, as a run writes it
    (composing takes a third of a second, so once per set of overrides)."""
    cfg = compose_overrides(list(overrides), {})
    C.check(cfg)
    return OmegaConf.to_yaml(C.resolve(cfg), resolve=True)


def point(mode: str, length: int, ppl: float | None, region=REGION) -> dict:
    """A curve point as evaluate.py writes it; ppl None: not applicable at that length."""
    first, tokens = region
    loss = None if ppl is None else math.log(ppl)
    bits = None if loss is None else loss / math.log(2)
    return {"mode": mode, "length": length, "stride": length if mode == NO else length // 2,
            "first_token": first, "tokens": tokens, "applicable": ppl is not None,
            "reason": None if ppl is not None else f"positions stop before {length}",
            "loss": loss, "ppl": ppl, "bits_per_token": bits, "bits_per_byte": bits,
            "seconds": 0.5}


def curve(ppl: dict[int, float | None], mode: str = NO, region=REGION) -> list[dict]:
    return [point(mode, length, v, region) for length, v in ppl.items()]


def write_run(path: Path, text: str, points: list[dict], name: str | None = None) -> Path:
    """A completed run directory: config.yaml ``text``, run.json and eval.json."""
    cfg = OmegaConf.create(text)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text(text)
    (path / "run.json").write_text(json.dumps({
        "status": "completed", "reason": None, "name": name or path.name,
        "experiment": path.parent.name, "encoding": cfg.encoding.name,
        "seq_len": cfg.train.seq_len, "seed": cfg.seed, "n_params": 12345,
        "model": {k: cfg.model[k] for k in ("d_model", "n_layer", "n_head")},
        "corpus": {"name": "stdlib", "fingerprint": "c0ffee", "tokenizer": "byte",
                   "tokenizer_fingerprint": "b17e5", "vocab_size": 256,
                   "train_tokens": 1_000_000, "val_tokens": 20_000},
        "steps": 100, "tokens_trained": 204_800, "device": "cpu", "versions": VERSIONS}))
    longest = max(p["length"] for p in points)
    per_position = {"length": longest, "first_token": points[0]["first_token"],
                    "tokens": points[0]["tokens"], "position": [0, 1], "position_end": [1, 2],
                    "loss": [3.0, 2.0]}
    (path / "eval.json").write_text(json.dumps({"curve": points,
                                                "per_position": [per_position]}))
    return path


def make_run(root: Path, name: str, *overrides: str, encoding: str = "rope", seq_len: int = 16,
             seed: int = 0, ppl: dict | None = None, points: list[dict] | None = None) -> Path:
    text = config_text((f"encoding={encoding}", f"train.seq_len={seq_len}", f"seed={seed}",
                        *SMALL, *overrides))
    points = points or curve(ppl or {seq_len: 5.0, 2 * seq_len: 6.0, 4 * seq_len: 8.0})
    return write_run(root / name, text, points)


# --- series ------------------------------------------------------------------------------
def test_seeds_of_one_config_form_one_series(tmp_path):
    make_run(tmp_path, "rope-s0", seed=0, ppl={16: 4.0, 32: 5.0, 64: 6.0})
    make_run(tmp_path, "rope-s1", seed=1, ppl={16: 6.0, 32: 7.0, 64: 10.0})
    runs, not_done = load_runs(tmp_path)
    assert len(runs) == 2 and not_done == []
    assert runs[0].identity["seed"] == 0 and runs[0].identity["model.d_model"] == 32

    series, duplicates = build_series(runs)
    assert duplicates == []
    [s] = series
    assert s.label == "rope L=16" and len(s.members) == 2
    stats = s.stats()
    assert (stats[16]["mean"], stats[16]["min"], stats[16]["max"]) == (5.0, 4.0, 6.0)
    assert stats[64]["mean"] == 8.0
    md = markdown(runs, [], "t")
    assert "| encoding | L_train | seeds | 16 | 32 | 64 |" in md
    assert "| rope | 16 | 2 | **5.000** (1.00x) | 6.000 (1.20x) | 8.000 (1.60x) |" in md


def test_configs_that_differ_are_separate_series_named_by_what_differs(tmp_path):
    make_run(tmp_path, "a", ppl={16: 4.0, 32: 4.0, 64: 4.0})
    make_run(tmp_path, "b", "model.d_model=64", ppl={16: 5.0, 32: 5.0, 64: 5.0})
    make_run(tmp_path, "c", "train.lr=0.001", ppl={16: 6.0, 32: 6.0, 64: 6.0})
    # another training length also changes batch_size and max_positions (derived from it)
    make_run(tmp_path, "d", seq_len=32, ppl={32: 7.0, 64: 7.0, 128: 7.0})
    runs, _ = load_runs(tmp_path)
    series, _ = build_series(runs)
    assert [(s.label, s.stats()[s.train_len]["mean"]) for s in series] == [
        ("rope L=16 · d_model=32 · lr=0.001", 6.0),
        ("rope L=16 · d_model=32 · lr=0.002", 4.0),
        ("rope L=16 · d_model=64 · lr=0.002", 5.0),
        ("rope L=32 · d_model=32 · lr=0.002", 7.0),
    ]
    assert all(len(s.members) == 1 for s in series)
    table = terminal_table(runs)
    assert "rope L=16 · d_model=64 · lr=0.002" in table and "d_ff" not in table
    md = markdown(runs, [], "t")
    assert "| encoding | L_train | d_model | lr | seeds | 16 | 32 | 64 | 128 |" in md
    assert "| rope | 16 | 64 | 0.002 | 1 | **5.000** (1.00x) |" in md
    assert "batch_size" not in md and "max_positions" not in md


def test_a_derived_key_is_named_when_only_it_tells_series_apart(tmp_path):
    make_run(tmp_path, "short", encoding="learned", ppl={16: 4.0, 32: None, 64: None})
    make_run(tmp_path, "long", "encoding.max_positions=64", encoding="learned",
             ppl={16: 5.0, 32: 6.0, 64: 7.0})
    series, _ = build_series(load_runs(tmp_path)[0])
    assert [s.label for s in series] == ["learned L=16 · max_positions=16",
                                         "learned L=16 · max_positions=64"]
    assert series[0].stats()[32]["applicable"] is False
    assert series[1].stats()[32]["mean"] == 6.0


def test_runs_of_the_same_config_and_seed_count_once(tmp_path, capsys):
    make_run(tmp_path, "a-s0", ppl={16: 4.0, 32: 4.0, 64: 4.0})
    make_run(tmp_path, "b-s0", ppl={16: 100.0, 32: 100.0, 64: 100.0})  # same seed as a-s0
    make_run(tmp_path, "c-s1", seed=1, ppl={16: 6.0, 32: 6.0, 64: 6.0})
    runs, _ = load_runs(tmp_path)
    [s], duplicates = build_series(runs)
    assert [r.path.name for r in s.members] == ["a-s0", "c-s1"]
    assert s.stats()[16]["mean"] == 5.0  # (4 + 6) / 2: b-s0 is not counted
    assert [[r.path.name for r in group] for group in duplicates] == [["a-s0", "b-s0"]]

    write_tables(runs, [], tmp_path, "t")
    warnings = capsys.readouterr().err.strip().splitlines()
    assert len(warnings) == 1
    assert "a-s0" in warnings[0] and "b-s0" in warnings[0] and "counted once" in warnings[0]
    assert "| rope | 16 | 2 | **5.000**" in (tmp_path / "summary.md").read_text()
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert len(rows) == 3 * 3  # every run x point is still a row


def test_points_of_different_scored_regions_are_never_averaged(tmp_path):
    make_run(tmp_path, "s0", seed=0, ppl={16: 4.0, 32: 4.0, 64: 4.0})
    # seed 1 was scored on the same region and, after eval.tokens changed, on another one
    make_run(tmp_path, "s1", seed=1,
             points=curve({16: 6.0, 32: 6.0, 64: 6.0})
             + curve({16: 20.0, 32: 20.0, 64: 20.0}, region=(2000, 256)))
    runs, _ = load_runs(tmp_path)
    series, _ = build_series(runs)
    assert [(s.label, len(s.members), s.stats()[16]["mean"]) for s in series] == [
        ("rope L=16 · scored 512 tok @ 1000", 2, 5.0),
        ("rope L=16 · scored 256 tok @ 2000", 1, 20.0),
    ]
    md = markdown(runs, [], "t")
    assert "| encoding | L_train | scored | seeds |" in md
    assert "| rope | 16 | 256 tok @ 2000 | 1 | **20.000** (1.00x) |" in md
    write_tables(runs, [], tmp_path, "t")
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    other = [row for row in rows if row["first_token"] == "2000"]
    assert len(other) == 3 and {row["run"] for row in other} == {"s1"}
    assert {row["series"] for row in other} == {"rope L=16 · scored 256 tok @ 2000"}


def test_modes_are_separate_series(tmp_path):
    make_run(tmp_path, "r", points=curve({16: 4.0, 32: 5.0}) + curve({16: 3.0, 32: 3.5},
                                                                     mode="sliding"))
    series, _ = build_series(load_runs(tmp_path)[0])
    assert [(s.mode, s.stats()[32]["mean"]) for s in series] == [(NO, 5.0), ("sliding", 3.5)]
    assert series[0].colour == series[1].colour  # one config, one colour in every figure


# --- summary.csv -------------------------------------------------------------------------
def test_summary_csv_has_a_row_per_run_and_point_with_the_run_columns(tmp_path):
    make_run(tmp_path, "rope-L16-s3", seed=3, ppl={16: 5.0, 32: None})
    runs, _ = load_runs(tmp_path)
    write_tables(runs, [], tmp_path, "t")
    with (tmp_path / "summary.csv").open() as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == CSV_COLUMNS
        rows = list(reader)
    assert len(rows) == 2
    first = rows[0]
    assert {k: first[k] for k in ("experiment", "run", "series", "encoding", "train_seq_len",
                                  "seed", "n_params", "d_model", "n_layer", "n_head",
                                  "corpus", "corpus_fingerprint", "tokenizer",
                                  "tokenizer_fingerprint", "steps", "tokens_trained", "mode",
                                  "stride", "length", "first_token", "tokens",
                                  "applicable")} == {
        "experiment": tmp_path.name, "run": "rope-L16-s3", "series": "rope L=16",
        "encoding": "rope", "train_seq_len": "16", "seed": "3", "n_params": "12345",
        "d_model": "32", "n_layer": "1", "n_head": "2", "corpus": "stdlib",
        "corpus_fingerprint": "c0ffee", "tokenizer": "byte", "tokenizer_fingerprint": "b17e5",
        "steps": "100", "tokens_trained": "204800", "mode": NO, "stride": "16",
        "length": "16", "first_token": "1000", "tokens": "512", "applicable": "True"}
    assert float(first["ppl"]) == pytest.approx(5.0)
    assert float(first["loss"]) == pytest.approx(math.log(5.0))
    assert rows[1]["applicable"] == "False" and rows[1]["ppl"] == ""
    assert rows[1]["reason"] == "positions stop before 32"


# --- damaged runs ------------------------------------------------------------------------
def _edit_json(file: str, change):
    def edit(run: Path) -> None:
        data = json.loads((run / file).read_text())
        change(data)
        (run / file).write_text(json.dumps(data))
    return edit


def _write(file: str, text: str):
    return lambda run: (run / file).write_text(text)


# kind -> (how the run is damaged, the file the reason names, what the reason says)
DAMAGE = {
    "run.json not JSON": (_write("run.json", '{"status": "compl'), "run.json", "is unreadable"),
    "run.json a list": (_write("run.json", "[1, 2]"), "run.json",
                        "is damaged: not a JSON object"),
    "eval.json a list": (_write("eval.json", "[1, 2]"), "eval.json",
                         "is damaged: the file is not a JSON object"),
    "run.json without encoding": (_write("run.json", '{"status": "completed"}'), "run.json",
                                  "is damaged: no 'encoding'"),
    "seq_len not a number": (_edit_json("run.json", lambda d: d.update(seq_len="abc")),
                             "run.json", "is damaged: 'seq_len' is 'abc', not an integer"),
    "status not a string": (_edit_json("run.json", lambda d: d.update(status=1)), "run.json",
                            "is damaged: 'status' is 1, not a string"),
    "model not numbers": (_edit_json("run.json", lambda d: d["model"].update(d_model="big")),
                          "run.json", "is damaged: model: 'd_model' is 'big', not an integer"),
    "config.yaml missing": (lambda run: (run / "config.yaml").unlink(), "config.yaml",
                            "does not exist"),
    "config.yaml not YAML": (_write("config.yaml", "model: [unclosed\n"), "config.yaml",
                             "is unreadable"),
    "config.yaml without keys": (_write("config.yaml", "seed: 0\n"), "config.yaml",
                                 ": cannot tell the run's identity"),
    "config.yaml of another run": (
        lambda run: (run / "config.yaml").write_text(
            (run / "config.yaml").read_text().replace("name: rope", "name: alibi")),
        "config.yaml", "disagree: encoding.name is 'alibi', run.json says encoding 'rope'"),
    "eval.json missing": (lambda run: (run / "eval.json").unlink(), "eval.json",
                          "does not exist"),
    "eval.json not JSON": (_write("eval.json", '{"curve": ['), "eval.json", "is unreadable"),
    "curve not a list": (_write("eval.json", '{"curve": {"a": 1}}'), "eval.json",
                         "is damaged: 'curve' is {'a': 1}, not a list"),
    "curve empty": (_write("eval.json", '{"curve": []}'), "eval.json",
                    "is damaged: the curve holds no points"),
    "point without tokens": (_edit_json("eval.json", lambda d: d["curve"][1].pop("tokens")),
                             "eval.json", "is damaged: curve point 2: no 'tokens'"),
    "unknown mode": (_edit_json("eval.json", lambda d: d["curve"][0].update(mode="../x")),
                     "eval.json", "curve point 1: 'mode' is '../x', not nonoverlapping or sliding"),
    "ppl not a number": (_edit_json("eval.json", lambda d: d["curve"][0].update(ppl="x")),
                         "eval.json", "is damaged: curve point 1: 'ppl' is 'x', not a number"),
    "per_position ragged": (
        _edit_json("eval.json", lambda d: d["per_position"][0].update(loss=[1.0])),
        "eval.json", "is damaged: per_position record 1: position, position_end and loss are "
        "not lists of numbers of one length"),
}


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_run_is_listed_with_its_file_and_the_rest_reported(tmp_path, kind):
    damage, file, message = DAMAGE[kind]
    make_run(tmp_path / "runs", "good", ppl={16: 4.0, 32: 5.0, 64: 6.0})
    bad = make_run(tmp_path / "runs", "bad", ppl={16: 9.0, 32: 9.0, 64: 9.0})
    damage(bad)

    runs, not_done = load_runs(tmp_path / "runs")
    assert [r.path.name for r in runs] == ["good"]
    [damaged] = not_done
    assert damaged.status == "damaged"
    assert str(bad / file) in damaged.reason and message in damaged.reason

    write_tables(runs, not_done, tmp_path, "t")
    md = (tmp_path / "summary.md").read_text()
    assert "| rope | 16 | 1 | **4.000** (1.00x) |" in md
    [listed] = [line for line in md.splitlines() if str(bad) in line]
    assert "| damaged |" in listed and message in listed
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert {row["run"] for row in rows} == {"good"}


def test_write_report_warns_once_per_damaged_run(tmp_path, capsys):
    make_run(tmp_path / "runs", "good", ppl={16: 4.0, 32: 5.0, 64: 6.0})
    bad = make_run(tmp_path / "runs", "bad")
    (bad / "eval.json").write_text('{"curve": [')
    runs, not_done = load_runs(tmp_path / "runs")
    files = write_report(runs, not_done, tmp_path / "report", "t")
    warnings = capsys.readouterr().err.strip().splitlines()
    assert warnings == [f"posexp: warning: not included: {bad / 'eval.json'} is unreadable: "
                        "Expecting value: line 1 column 12 (char 11)"]
    assert {f.name for f in files} == {"summary.csv", "summary.md", "per_position.png",
                                       "per_position.svg", "extrapolation_nonoverlapping.png",
                                       "extrapolation_nonoverlapping.svg"}


def test_no_runs_is_an_error_and_nothing_is_written(tmp_path):
    root = tmp_path / "results"
    # runs moved aside, lock files and W&B folders are not runs of the report
    make_run(root / "exp" / ".replaced", "rope-L16-s0-20260101T000000Z")
    make_run(root / "exp" / "wandb", "offline-run")
    (root / "exp" / ".locks").mkdir()
    (root / "exp" / ".locks" / "run.json").write_text("{}")
    with pytest.raises(PosexpError, match=f"^no posexp runs under {root}$"):
        load_runs(root)
    with pytest.raises(PosexpError, match="no posexp runs"):
        write_report([], [], tmp_path / "report", "t")
    assert not (tmp_path / "report").exists()

    make_run(root / "exp", "rope-L16-s0")
    runs, not_done = load_runs(root)
    assert [r.path for r in runs] == [root / "exp" / "rope-L16-s0"] and not_done == []


def test_an_unfinished_run_keeps_its_status_and_a_missing_one_says_so(tmp_path):
    run = tmp_path / "failed-run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"status": "failed", "reason": "disk full"}))
    r = load_run(run)
    assert (r.status, r.reason, r.curve) == ("failed", "disk full", [])
    missing = load_run(tmp_path / "nothing")
    assert missing.status == "missing" and "nothing/run.json does not exist" in missing.reason


# --- reproduce ---------------------------------------------------------------------------
THRESHOLDS = {"sinusoidal_blowup_at": 4, "sinusoidal_blowup": 2.0, "alibi_flat_at": [2, 4],
              "alibi_flat": 1.05, "nope_margin": 0.1}
PRESET = OmegaConf.create({"train_seq_len": 16, "thresholds": THRESHOLDS})
# perplexity at 1, 2, 4 x L (and 8 x L = 128 for sinusoidal trained at 2L)
CLAIM_RUNS = {
    ("sinusoidal", 16): {16: 5.0, 32: 9.0, 64: 15.0},
    ("rope", 16): {16: 4.0, 32: 4.5, 64: 6.0},
    ("alibi", 16): {16: 5.0, 32: 5.0, 64: 5.1},
    ("learned", 16): {16: 4.5, 32: None, 64: None},
    ("nope", 16): {16: 7.0, 32: 7.5, 64: 9.0},
    ("sinusoidal", 32): {32: 8.0, 64: 12.0, 128: 20.0},
}


def claim_runs(root: Path, skip=(), regions=None, sliding=None) -> list:
    """The preset's six runs, on REGION unless ``regions`` says otherwise; alibi also scored
    sliding (``sliding``: its perplexities, default flat)."""
    for (enc, L), ppl in CLAIM_RUNS.items():
        if (enc, L) in skip:
            continue
        region = (regions or {}).get((enc, L), REGION)
        points = curve(ppl, region=region)
        if enc == "alibi":
            points += curve(sliding or {16: 4.0, 32: 4.0, 64: 4.1}, "sliding", region)
        make_run(root, f"{enc}-L{L}", encoding=enc, seq_len=L, points=points)
    return load_runs(root)[0]


def by_number(rows) -> dict[int, object]:
    return {int(v.claim.split(".")[0]): v for v in rows}


def test_verdicts_on_the_full_set_of_runs(tmp_path):
    v = by_number(verdicts(claim_runs(tmp_path), PRESET, 512))
    assert {n: v[n].holds for n in v} == {1: True, 2: True, 3: True, 4: True, 5: True, 6: False}
    assert v[1].measured == "sinusoidal ppl(L)=5.000, ppl(4L)=15.000, ratio 3.000"
    assert v[3].measured == ("ppl(2L)/ppl(L)=1.000, ppl(4L)/ppl(L)=1.020; sliding: 2L: 1.000, "
                             "4L: 1.025")
    assert v[5].measured == "alibi(L=16) ppl(2L)=5.000; sinusoidal(L=32) ppl(2L)=8.000"
    assert v[6].measured.startswith("nope ppl(L)=7.000; best: rope 4.000")


def test_a_claim_that_lost_a_run_is_not_measured(tmp_path):
    v = by_number(verdicts(claim_runs(tmp_path, skip={("rope", 16)}), PRESET, 512))
    assert v[2].holds is None and v[6].holds is None
    assert v[2].measured == ("not measured: no completed run of rope L=16 with nonoverlapping "
                             "points")
    # claim 6 is not measured against the best of the others: it needs all five encodings
    assert v[6].measured == v[2].measured
    assert {n: v[n].holds for n in (1, 3, 4, 5)} == {1: True, 3: True, 4: True, 5: True}


def test_verdicts_never_combine_scored_regions(tmp_path):
    # sinusoidal at 2L was scored on other tokens than alibi at L: claim 5 cannot compare them
    runs = claim_runs(tmp_path, regions={("sinusoidal", 32): (3000, 512)})
    v = by_number(verdicts(runs, PRESET, 512))
    assert v[5].holds is None
    assert v[5].measured.startswith("not measured: no scored region of 512 tokens common to "
                                    "its runs (alibi L=16 nonoverlapping: 512 tok @ 1000; "
                                    "sinusoidal L=32 nonoverlapping: 512 tok @ 3000)")
    assert v[1].holds is True  # one run, one region

    # a region of another eval.tokens is not the preset's
    v = by_number(verdicts(runs, PRESET, 256))
    assert all(v[n].holds is None for n in v)
    assert "no scored region of 256 tokens" in v[1].measured


def test_verdicts_take_the_latest_common_region(tmp_path):
    # an older posexp scored sinusoidal at first_token=64; the current region (first 1000)
    # is the end of the split, the latest region the runs hold in common
    make_run(tmp_path, "old-points", encoding="sinusoidal",
             points=curve({16: 5.0, 32: 6.0, 64: 7.0}, region=(64, 512))
             + curve({16: 5.0, 32: 9.0, 64: 15.0}))
    v = by_number(verdicts(load_runs(tmp_path)[0], PRESET, 512))
    assert v[1].measured == "sinusoidal ppl(L)=5.000, ppl(4L)=15.000, ratio 3.000"
    assert v[1].holds is True


def test_verdicts_never_combine_modes(tmp_path):
    # sliding is flat against nonoverlapping ppl(L)=5 (6/5 = 1.2 is not what is compared),
    # but not against its own ppl(L)=4
    runs = claim_runs(tmp_path, sliding={16: 4.0, 32: 6.0, 64: 6.0})
    v = by_number(verdicts(runs, PRESET, 512))
    assert v[3].holds is False
    assert v[3].measured.endswith("sliding: 2L: 1.500, 4L: 1.500")


def _fake_experiment(calls: list, fail: str):
    """experiment.run writing a completed synthetic run (or failing for encoding ``fail``)."""

    def run(cfg: DictConfig, progress: bool = True, group: str | None = None) -> str:
        calls.append((cfg.encoding.name, cfg.train.seq_len, C.EvalMode(cfg.eval.mode).value))
        if cfg.encoding.name == fail:
            raise PosexpError(f"cannot read the corpus for {fail}\nsecond line")
        path = Path(cfg.results_dir) / cfg.experiment / cfg.run_name
        ppl = CLAIM_RUNS[(cfg.encoding.name, cfg.train.seq_len)]
        mode = C.EvalMode(cfg.eval.mode).value
        points = curve({L: ppl.get(L, 50.0) for L in C.eval_lengths(cfg)}, mode)
        if (path / "eval.json").exists():
            points = json.loads((path / "eval.json").read_text())["curve"] + points
        write_run(path, OmegaConf.to_yaml(C.resolve(cfg), resolve=True), points)
        return "completed"

    return run


def test_reproduce_finishes_the_other_runs_and_fails_at_the_end(tmp_path, monkeypatch,
                                                               capsys):
    preset = tmp_path / "tiny.yaml"
    preset.write_text(json.dumps({
        "experiment": "claims", "train_seq_len": 16, "description": "tiny",
        "overrides": ["train.seq_len=16", *SMALL, "eval.tokens=512", "eval.lengths=[16,32,64]"],
        "runs": [["encoding=sinusoidal"], ["encoding=rope"], ["encoding=alibi"],
                 ["encoding=learned"], ["encoding=nope"],
                 ["encoding=sinusoidal", "train.seq_len=32", "eval.lengths=[32,64]"]],
        "thresholds": THRESHOLDS}))
    root = tmp_path / "out" / "claims"
    # a run of the experiment that the preset does not list is not one of its runs
    make_run(root, "alibi-L16-s1", encoding="alibi", seed=1, ppl={16: 50.0, 32: 99.0})
    calls: list = []
    monkeypatch.setattr(posexp.experiment, "run", _fake_experiment(calls, fail="rope"))

    with pytest.raises(PosexpError, match=r"^1 of 6 runs failed; their claims are not measured$"):
        reproduce(str(preset), tmp_path / "out", Path(CONFIG_DIR), compose)

    # every other run was trained and scored in both modes; rope was tried once
    assert len(calls) == 5 * 2 + 1 and calls.count(("rope", 16, "nonoverlapping")) == 1
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "failed" in line] == [
        "posexp reproduce: claims/rope-L16-s0: failed: cannot read the corpus for rope"]
    report = root / "report"
    v = json.loads((report / "verdicts.json").read_text())
    holds = {int(x["claim"].split(".")[0]): x["holds"] for x in v["verdicts"]}
    assert holds == {1: True, 2: None, 3: True, 4: True, 5: True, 6: None}
    assert v["failed"] == {str(root / "rope-L16-s0"): "cannot read the corpus for rope"}
    md = (report / "verdicts.md").read_text()
    assert "Device: cpu; versions: posexp 0.1.0, python 3.11.7, torch 2.13.0\n" in md
    assert f"* {root / 'rope-L16-s0'}: failed: cannot read the corpus for rope" in md
    summary = (report / "summary.md").read_text()
    assert "| not started | cannot read the corpus for rope |" in summary
    rows = list(csv.DictReader((report / "summary.csv").open()))
    assert "alibi-L16-s1" not in {row["run"] for row in rows}
    assert {row["run"] for row in rows} == {"sinusoidal-L16-s0", "alibi-L16-s0",
                                            "learned-L16-s0", "nope-L16-s0",
                                            "sinusoidal-L32-s0"}


def test_reproduce_stops_at_a_signal(tmp_path, monkeypatch):
    from posexp.train import Interrupted

    def interrupted(cfg, progress=True, group=None):
        raise Interrupted(15, 3)

    preset = tmp_path / "tiny.yaml"
    preset.write_text(json.dumps({
        "experiment": "claims", "train_seq_len": 16, "overrides": [*SMALL],
        "runs": [["encoding=rope"], ["encoding=alibi"]], "thresholds": THRESHOLDS}))
    monkeypatch.setattr(posexp.experiment, "run", interrupted)
    with pytest.raises(Interrupted):
        reproduce(str(preset), tmp_path / "out", Path(CONFIG_DIR), compose)
    assert not (tmp_path / "out" / "claims" / "report").exists()


# --- sweep summary -----------------------------------------------------------------------
def test_sweep_summary_lists_a_run_it_cannot_read(tmp_path, capsys):
    jobs = [compose([f"encoding={enc}", "train.seq_len=16", *SMALL, f"results_dir={tmp_path}"])
            for enc in ("rope", "alibi", "nope")]
    root = tmp_path / "default"
    make_run(root, "rope-L16-s0", ppl={16: 4.0, 32: 5.0})
    bad = make_run(root, "alibi-L16-s0", encoding="alibi")
    (bad / "run.json").write_text('{"status": "completed", "encoding": "alibi", "seq_len": 16.5}')
    # nope-L16-s0 never started: no directory
    with pytest.raises(PosexpError, match=r"^2 of 3 runs did not complete$"):
        summarize(jobs)
    out = capsys.readouterr().out
    assert "rope L=16" in out and "4.000" in out
    assert (f"not completed: {bad} (damaged: {bad / 'run.json'} is damaged: 'seq_len' is 16.5, "
            "not an integer)") in out
    assert f"not completed: {root / 'nope-L16-s0'} (not started: failed before training" in out
    md = (root / "summary.md").read_text()
    assert "| damaged |" in md and "| not started |" in md


# --- through the CLI ---------------------------------------------------------------------
def test_cli_report_of_a_directory_without_runs(posexp, tmp_path):
    (tmp_path / "empty").mkdir()
    r = posexp("report", "empty")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == ["posexp: error: no posexp runs under empty"]
    assert list((tmp_path / "empty").iterdir()) == []


def test_cli_report_names_a_damaged_run_and_reports_the_rest(posexp, tmp_path):
    make_run(tmp_path / "res", "good", ppl={16: 4.0, 32: 5.0, 64: 6.0})
    bad = make_run(tmp_path / "res", "bad")
    (bad / "run.json").write_text('{"status": "completed", "encoding": "rope"}')
    r = posexp("report", "res")
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        "posexp: warning: not included: res/bad/run.json is damaged: no 'seq_len'"]
    assert "1 completed runs, 1 not included" in r.stdout
    report = tmp_path / "res" / "report"
    assert (report / "extrapolation_nonoverlapping.png").stat().st_size > 10_000
    md = (report / "summary.md").read_text()
    assert "| rope | 16 | 1 | **4.000** (1.00x) | 5.000 (1.25x) | 6.000 (1.50x) |" in md
    assert "| res/bad | damaged | res/bad/run.json is damaged: no 'seq_len' |" in md
