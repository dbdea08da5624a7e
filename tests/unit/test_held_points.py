"""Points of an eval.json of other code, scored again (run/evaluation.set_aside_other_code):
each workload gives the overrides of the run's config that score a held point again, and
the run scored under them asks for exactly that point's key -- its mode, stride, scored
tokens, positions and scaling, or its task, instance count, eval seed and depth."""
import pytest

from posexp import config as C
from posexp.config import RunSpec
from posexp.pretrained.scoring import PretrainedWorkload
from posexp.run.workloads import curve_wants, eval_positions, workload_of
from posexp.runs import point_key, task_point_key
from tests.conftest import TINY
from tests.conftest import compose_args as compose

NTK = {"method": "ntk", "factor": 4.0}


@pytest.fixture(autouse=True)
def schemas():
    C.register()


def curve(mode, length, stride, tokens=512, record=None, spans="abc", **at):
    return {"mode": mode, "length": length, "stride": stride, "tokens": tokens,
            "spans": spans, "rope_scaling": record, **at}


def asks_for(spec: RunSpec, p: dict) -> bool:
    """Whether ``spec`` scores the curve point ``p`` (its key among spec's wants)."""
    e = spec.eval
    return point_key(p) in curve_wants(e.mode, e.stride, [p["length"]], p["spans"], e.tokens,
                                       [p["rope_scaling"]], eval_positions(spec))


def test_each_held_curve_point_is_asked_for_by_its_overrides():
    spec = RunSpec.of(compose(["encoding=rope", *TINY, "train.random_positions=64"]))
    points = [curve("nonoverlapping", 16, 16), curve("nonoverlapping", 32, 32, record=NTK),
              curve("sliding", 32, 16), curve("sliding", 64, 8, tokens=256),  # stride given
              curve("nonoverlapping", 16, 16, positions="consecutive"),
              curve("nonoverlapping", 16, 16, positions="sampled", positions_seed=0)]
    held, lost = workload_of(spec).held(points)
    assert lost == []
    assert sum(len(items) for _, wanted in held for _, items in wanted) == len(points)
    for overrides, wanted in held:
        again = spec.scored_as(overrides)
        asked = [p for p in points if asks_for(again, p)]
        assert sorted(n for _, items in wanted for n in items) == \
            sorted(p["length"] for p in asked)
    # a point of the layout before spans (the tail of the split) is one no config scores
    tail = {**curve("nonoverlapping", 16, 16, spans=None), "first_token": 0}
    assert workload_of(spec).held([tail]) == ([], [tail])


def test_each_held_task_point_is_asked_for_by_its_overrides():
    tiny = [a for a in TINY if not a.startswith("eval.")]
    spec = RunSpec.of(compose(["encoding=rope", "data=task", "task=copy", *tiny,
                               "train.random_positions=64"]))
    n = spec.task_lengths[0]
    points = [{"task": "copy", "length": n, "depth": None, "count": c, "eval_seed": s,
               "rope_scaling": r, **at}
              for c, s, r, at in [(500, 0, None, {}), (100, 3, None, {}), (500, 0, NTK, {}),
                                  (500, 0, None, {"positions": "consecutive"})]]
    other = {**points[0], "task": "reverse"}
    held, lost = workload_of(spec).held([*points, other])
    assert lost == [other]
    for overrides, wanted in held:
        again = workload_of(spec.scored_as(overrides))
        keys = set(again.requested([record for record, _ in wanted]))
        assert [p for p in points if task_point_key(p) in keys] != []
    assert sum(task_point_key(p) in set(workload_of(spec.scored_as(o)).requested(
        [r for r, _ in w])) for p in points for o, w in held) == len(points)


def test_a_pretrained_model_s_held_points_are_curve_and_passkey_alike():
    passkey = {"task": "passkey", "length": 64, "depth": 0.5, "count": 20, "eval_seed": 1,
               "digits": 5, "rope_scaling": None}
    held, lost = PretrainedWorkload.held([curve("sliding", 32, 16), passkey])
    assert lost == []
    assert [o for o, _ in held] == [
        {"eval": {"mode": "sliding", "stride": None, "tokens": 512, "positions": None}},
        {"eval": {"task": {"name": "passkey", "eval_count": 20, "eval_seed": 1,
                           "digits": 5}}}]  # a pretrained run's passkey is eval.task
    assert [w for _, w in held] == [[(None, [32])], [(None, [(64, 0.5)])]]


def test_a_held_lm_eval_point_is_scored_again_on_documents_drawn_for_its_eval_tokens():
    """An lm_eval point's tokens are its whole documents' (more than eval.tokens asked): it
    is scored again with the eval.tokens it was drawn for."""
    spec = RunSpec.of(compose(["encoding=rope", *TINY]))
    p = {**curve("lm_eval", 32, 32, tokens=900), "eval_tokens": 512}
    (overrides, wanted), = workload_of(spec).held([p])[0]
    assert overrides["eval"]["mode"] == "lm_eval" and overrides["eval"]["tokens"] == 512
    assert wanted == [(None, [32])] and spec.scored_as(overrides).eval.tokens == 512


def test_a_per_position_record_no_held_group_rebuilds_is_scored_again_on_its_own():
    """Two commands' records, [16, 32, 64] and [128], re-scored as one group make the
    per-position loss at 128 only: the record at 64 is rebuilt by a group of 64 alone."""
    from posexp.run.evaluation import per_position_again

    spec = RunSpec.of(compose(["encoding=rope", *TINY]))
    work = workload_of(spec)
    points = [curve("nonoverlapping", n, n) for n in (16, 32, 64, 128)]
    records = [{"mode": "nonoverlapping", "length": n, "spans": "abc", "tokens": 512}
               for n in (64, 128)]
    held, lost = work.held(points)
    assert lost == [] and [max(items) for _, w in held for _, items in w] == [128]
    again, unbuilt = per_position_again(work, {"curve": points, "per_position": records},
                                        held)
    assert unbuilt == [] and [w for _, w in again] == [[(None, [64])]]
    # spans no longer than 40: the group makes its record at 32, and one at 32 needs no other
    at32 = {"curve": points, "per_position": [{**records[0], "length": 32}],
            "spans": {"abc": {"length": [40, 30]}}}
    assert per_position_again(work, at32, held) == ([], [])
    # a record with no curve point of its length and region is one nothing rebuilds
    orphan = {**records[0], "length": 256}
    assert per_position_again(work, {"curve": points, "per_position": [orphan]}, held) \
        == ([], [orphan])
