"""Randomized positional encodings (Ruoss et al., ACL 2023): train.random_positions=M trains
each sequence on a sorted random subset of the positions 0..M-1; evaluation reads ordinary
positions."""

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
    r = posexp("train", "encoding=nope", *TINY, "train.random_positions=64",
                    "results_dir=out")
    assert_usage_error(r, "nothing to randomize")
