"""Randomized positional encodings (Ruoss et al., ACL 2023): train.random_positions=M trains
each sequence on a sorted random subset of the positions 0..M-1 and scores each window at
such a subset too (evaluate/positions.py); eval.positions=consecutive scores it at 0..n-1
beside, a variant the report labels and no claim reads."""

from posexp import config as C
from tests.conftest import TINY, assert_usage_error, read_json

C.register()


def test_training_at_the_training_length_is_the_plain_run_and_learned_scores_past_it(
        posexp, tmp_path):
    r = posexp("train", "encoding=alibi", *TINY, "results_dir=out")
    assert r.returncode == 0, r.stderr
    r = posexp("train", "encoding=alibi", *TINY, "train.random_positions=16",
                    "results_dir=out", "run_name=same")
    assert r.returncode == 0, r.stderr
    runs = tmp_path / "out" / "default"
    plain, same = read_json(runs / "alibi-L16-s0" / "run.json"), read_json(runs / "same"
                                                                           / "run.json")
    assert same["weights_sha256"] == plain["weights_sha256"]
    r = posexp("train", "encoding=learned", *TINY, "train.random_positions=64",
                    "results_dir=out")
    assert r.returncode == 0, r.stderr
    curve = read_json(runs / "learned-L16-s0" / "eval.json")["curve"]
    assert [p["applicable"] for p in curve if p["mode"] == "nonoverlapping"] == [True] * 3
    assert {p["positions"] for p in curve} == {"sampled"}
    r = posexp("eval", str(runs / "learned-L16-s0"), "eval.positions=consecutive")
    assert r.returncode == 0, r.stderr
    assert "at consecutive positions" in r.stdout
    curve = read_json(runs / "learned-L16-s0" / "eval.json")["curve"]
    assert sorted({p["positions"] for p in curve}) == ["consecutive", "sampled"]
    r = posexp("report", str(runs), "--out", "report")
    assert r.returncode == 0, r.stderr
    assert "+ consecutive positions" in (tmp_path / "report" / "summary.md").read_text()
    assert_usage_error(posexp("eval", str(runs / "alibi-L16-s0"), "eval.positions=consecutive"),
                       "trained at consecutive positions")
    r = posexp("train", "encoding=nope", *TINY, "train.random_positions=64",
                    "results_dir=out")
    assert_usage_error(r, "nothing to randomize")
