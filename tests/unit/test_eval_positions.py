"""A run trained on randomized positions (Ruoss et al., ACL 2023) is scored as it was trained
and as the reference code (google-deepmind/randomized_positional_encodings) scores it: each
window or instance at a sorted random subset of distinct positions below M, drawn by a
recorded seed, the length and the window (instance) alone.  Consecutive positions are a
variant beside it that judges nothing; points recorded before are that variant."""

import numpy as np
import pytest
import torch

from posexp import config as C
from posexp import scaling
from posexp.config import compose_overrides
from posexp.data.tasks import TASKS, VOCAB_SIZE, heldout
from posexp.errors import UsageError
from posexp.evaluate.positions import PLAIN, EvalPositions, task_keys
from posexp.evaluate.tasks import score_instances, task_curve
from posexp.evaluate.windows import Scoring, extrapolation_curve, scored_spans, span_windows
from posexp.model import GPT, GPTConfig
from posexp.runs import point_scaling
from posexp.runs.results import legacy_positions
from tests.conftest import TINY

C.register()
M = 96
SAMPLED = EvalPositions(M)


def _model(name: str = "rope", vocab: int = 50) -> GPT:
    """A model whose attention is far from uniform, so that positions change its losses."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=vocab, d_model=32, n_layer=2, n_head=4, d_ff=64,
                          encoding=name, max_positions=M)).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.mul_(8)
        model.head.weight.mul_(20)
    return model


def test_draws_are_sorted_distinct_below_m_and_fixed_by_their_key_alone():
    ends = np.array([40, 57, 91, 300])
    p = SAMPLED.draw(32, ends)
    assert p.shape == (4, 32) and (p[:, 1:] > p[:, :-1]).all() and p.min() >= 0 and p.max() < M
    for i, e in enumerate(ends):  # one row drawn alone is that row: batching changes nothing
        assert np.array_equal(SAMPLED.draw(32, np.array([e]))[0], p[i])
    assert not np.array_equal(SAMPLED.draw(33, ends)[:, :32], p)  # another length, other draws
    assert np.array_equal(SAMPLED.draw(M, ends), np.tile(np.arange(M), (4, 1)))  # n = M: all
    counts = np.bincount(SAMPLED.draw(16, np.arange(4000)).ravel(), minlength=M)
    assert counts.min() > 0.8 * counts.mean() and counts.max() < 1.2 * counts.mean()
    assert PLAIN.at(8, ends, torch.device("cpu")) is None
    assert EvalPositions(M, consecutive=True).at(8, ends, torch.device("cpu")) is None


def _curve(model, at: EvalPositions, batch_tokens: int = 4096, lengths=(16, 64, 128)):
    val = np.random.default_rng(1).integers(0, 50, 3000)
    spans = scored_spans(len(val), np.array([0, 1200]), 512)
    scoring = Scoring("nonoverlapping", None, 512, batch_tokens, 4, at)
    return val, spans, extrapolation_curve(model, val, list(lengths), scoring, spans,
                                           torch.device("cpu"))


def test_a_randomized_run_is_scored_at_the_positions_drawn_for_each_window():
    model = _model()
    val, spans, (curve, per_position) = _curve(model, SAMPLED)
    windows = span_windows(spans, 64)
    total = 0.0
    with torch.no_grad():  # each window by hand, at its own draw
        for e, c in zip(windows.ends, windows.counts, strict=True):
            tokens = torch.from_numpy(val[e - 64:e + 1].astype(np.int64))[None]
            at = torch.from_numpy(SAMPLED.draw(64, np.array([e])))
            total += model.token_losses(tokens[:, :-1], tokens[:, 1:],
                                        positions=at)[0, -c:].double().sum().item()
    point = next(p for p in curve if p["length"] == 64)
    assert point["loss"] == pytest.approx(total / spans.tokens, rel=1e-6)
    assert (point["positions"], point["positions_seed"]) == ("sampled", 0)
    assert per_position["positions"] == "sampled"
    # scored at consecutive positions the number is another: this test fails on that scoring
    _, _, (consecutive, _) = _curve(model, EvalPositions(M, consecutive=True))
    other = next(p for p in consecutive if p["length"] == 64)
    assert other["positions"] == "consecutive" and abs(other["loss"] - point["loss"]) > 1e-3
    # the same numbers at any batch size
    _, _, (again, _) = _curve(model, SAMPLED, batch_tokens=64)
    assert [p["loss"] for p in again if p["applicable"]] == pytest.approx(
        [p["loss"] for p in curve if p["applicable"]], rel=1e-9)


def test_a_length_past_m_is_not_applicable_at_sampled_positions_only():
    _, _, (curve, _) = _curve(_model(), SAMPLED, lengths=(16, 128))
    past = next(p for p in curve if p["length"] == 128)
    assert not past["applicable"] and "random positions below 96" in past["reason"]
    _, _, (consecutive, per_position) = _curve(_model(), EvalPositions(M, consecutive=True),
                                               lengths=(16, 128))
    assert all(p["applicable"] for p in consecutive)
    assert per_position is None  # the per-position loss is the run's as trained only


def test_a_plain_run_s_points_are_as_they_always_were():
    _, _, (curve, per_position) = _curve(_model(), PLAIN, lengths=(16,))
    assert "positions" not in curve[0] and "positions" not in per_position


def test_task_instances_are_scored_at_their_own_draws_whatever_the_batch():
    task, model = TASKS["copy"], _model(vocab=VOCAB_SIZE)
    instances = heldout(task, 12, 20, 7, None)
    cpu = torch.device("cpu")
    _, _, loss, count = score_instances(model, instances, cpu, at=SAMPLED, eval_seed=7)
    one = [score_instances(model, [inst], cpu, at=SAMPLED, eval_seed=7, batch_tokens=1)
           for inst in instances]
    assert loss != pytest.approx(sum(s[2] for s in one))  # not its index 0 each time
    by_hand = 0.0
    with torch.no_grad():
        for i, inst in enumerate(instances):
            tokens = torch.from_numpy(inst.tokens.astype(np.int64))[None]
            at = torch.from_numpy(SAMPLED.draw(len(inst.tokens) - 1, task_keys(7, i, 1)))
            logits = model.head(model.hidden(tokens[:, :-1], at)).float()
            by_hand += torch.nn.functional.cross_entropy(
                logits[0, inst.answer_start - 1:], tokens[0, inst.answer_start:],
                reduction="sum").item()
    assert loss == pytest.approx(by_hand, rel=1e-6)
    _, _, small, _ = score_instances(model, instances, cpu, at=SAMPLED, eval_seed=7,
                                     batch_tokens=60)
    assert small == pytest.approx(loss, rel=1e-9)
    _, _, plain, _ = score_instances(model, instances, cpu)
    assert abs(plain - loss) > 1e-3  # fails if a randomized run is scored at 0..n-1
    [p] = task_curve(model, task, [(12, None)], 20, 7, cpu, at=SAMPLED)
    assert p["positions"] == "sampled" and p["answer_loss"] == pytest.approx(loss / count)
    [past] = task_curve(model, task, [(60, None)], 20, 7, cpu, at=SAMPLED)
    assert not past["applicable"] and "distinct positions" in past["reason"]


def test_points_recorded_before_are_the_consecutive_variant_and_judge_nothing():
    data = {"curve": [{"mode": "nonoverlapping"}, {"mode": "sliding", "rope_scaling": None}],
            "tasks": [{"task": "copy"}], "per_position": [{"length": 16}]}
    legacy_positions(data)
    assert {p["positions"] for p in (*data["curve"], *data["tasks"])} == {"consecutive"}
    assert data["per_position"] == []
    variant = point_scaling(data["curve"][0])
    assert variant is not None and scaling.text(variant) == "consecutive positions"
    assert scaling.overrides(variant) == " eval.positions=consecutive"
    assert scaling.order(None) < scaling.order(variant)
    yarn = point_scaling({"rope_scaling": {"method": "yarn", "factor": 2.0},
                          "positions": "consecutive"})
    assert scaling.text(yarn).endswith("at consecutive positions")
    assert point_scaling({"positions": "sampled", "positions_seed": 0}) is None


@pytest.mark.parametrize(("overrides", "message"), [
    (["encoding=rope", "eval.positions=consecutive"], "trained at consecutive positions"),
    (["encoding=rope", "train.random_positions=64", "eval.positions=sampled"],
     "must be null"),
    (["encoding=rope", "train.random_positions=64", "eval.rope_scaling=yarn",
      "eval.rope_scaling.factor=2"], "add eval.positions=consecutive"),
])
def test_bad_positions_are_refused_in_one_line(overrides, message):
    with pytest.raises(UsageError, match=message):
        C.check(compose_overrides([*TINY, *overrides]))


def test_the_variant_and_a_scaling_of_it_are_accepted():
    C.check(compose_overrides([*TINY, "encoding=rope", "train.random_positions=64",
                               "eval.positions=consecutive", "eval.rope_scaling=yarn",
                               "eval.rope_scaling.factor=2"]))
