"""The claim set ``tasks`` (Kazemnejad et al.; Ruoss et al.) on synthetic task runs whose
accuracies are chosen, and the preset end to end at a tiny scale."""
import functools
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posexp import config as C
from posexp import stats
from posexp.claims import verdicts
from posexp.claims.base import FAILS, HOLDS, INCONCLUSIVE, UNMEASURED
from posexp.claims.preset import load_preset, preset_runs
from posexp.claims.registry import CLAIM_SETS
from posexp.claims.tasks import gate_table, searched_note, task_claims
from posexp.config import compose_overrides
from posexp.data.tasks import binomial_interval
from posexp.errors import UsageError
from posexp.runs import load_runs
from tests.runs_on_disk import as_trained

C.register()


SMALL = ("model.d_model=32", "model.n_layer=1", "model.n_head=2", "train.seq_len=16")


N_MAX = 7  # copy, reverse and addition at seq_len 16: 7 (addition: 3 digits)


THRESHOLDS = {"tasks": ["copy"], "explicit": ["learned", "sinusoidal"], "randomized": ["rope"],
              "random_positions": 64, "metric": "exact", "learned": 0.9,
              "tie": {"margin": 0.0, "reason": "a tie"},
              "min_gain": {"margin": 0.05, "reason": "a boost of five points"}}


PRESET = OmegaConf.create({"claims": "tasks", "train_seq_len": 16, "thresholds": THRESHOLDS})


def typed(preset):
    """The thresholds the claim code is handed (ClaimSet.typed)."""
    return CLAIM_SETS["tasks"].typed(preset)


COUNT = 100


@functools.lru_cache
def config_text(overrides: tuple[str, ...]) -> str:
    cfg = compose_overrides(list(overrides))
    C.check(cfg)
    return OmegaConf.to_yaml(C.resolve(cfg), resolve=True)


def task_point(task: str, length: int, exact: float | None, chance: float = 0.01,
               count: int = COUNT, eval_seed: int = 0) -> dict:
    """A task point as evaluate/tasks.py writes it, with ``exact`` (and token accuracy) chosen;
    None: n/a."""
    p = {"task": task, "length": length, "depth": None, "count": count,
         "eval_seed": eval_seed, "tokens": 2 * length + 3, "rope_scaling": None,
         "applicable": exact is not None, "reason": None if exact is not None else
         f"positions stop before length {length}", "exact": None, "exact_low": None,
         "exact_high": None, "token_acc": None, "token_acc_low": None, "token_acc_high": None,
         "answer_loss": None, "chance_exact": None, "chance_token": None,
         "instances_sha256": f"{task}-{length}-{count}-{eval_seed}", "seconds": 0.1}
    if exact is not None:
        low, high = binomial_interval(round(exact * count), count)
        p.update(exact=exact, exact_low=low, exact_high=high, token_acc=exact,
                 token_acc_low=max(0.0, exact - 0.02), token_acc_high=min(1.0, exact + 0.02),
                 answer_loss=1.0, chance_exact=chance, chance_token=chance)
    return p


def make_run(root: Path, task: str, encoding: str, seed: int, beyond: list[float | None],
             *overrides: str, at_n_max: float = 1.0, suffix: str = "",
             count: int = COUNT) -> Path:
    """A completed task run whose exact match is ``at_n_max`` at n_max and ``beyond`` at
    2, 4 x n_max."""
    text = config_text(("data=task", f"task={task}", f"encoding={encoding}", f"seed={seed}",
                        *SMALL, *overrides))
    cfg = OmegaConf.create(text)
    path = root / f"{task}-{encoding}-L16-s{seed}{suffix}"
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(text)
    (path / "run.json").write_text(json.dumps({
        "status": "completed", "name": path.name, "experiment": root.name,
        "encoding": encoding, "seq_len": 16, "seed": seed, "n_params": 1234, "device": "cpu",
        "corpus": {"name": f"task:{task}", "task": task, "max_train_length": N_MAX,
                   "vocab_size": cfg.data.vocab_size}}))
    points = [task_point(task, n, e, count=count) for n, e in
              zip((N_MAX, 2 * N_MAX, 4 * N_MAX), (at_n_max, *beyond), strict=True)]
    (path / "eval.json").write_text(json.dumps({
        "curve": [], "per_position": [],
        "tasks": as_trained(points, cfg.train.get("random_positions"))}))
    return path


def arms(root: Path, seeds, nope, learned, sinusoidal, rope, rope_random, task="copy"):
    """One run per arm and seed; each arm's accuracies beyond n_max are a function of the
    seed."""
    for seed in seeds:
        make_run(root, task, "nope", seed, nope(seed))
        make_run(root, task, "learned", seed, learned(seed), "encoding.max_positions=64")
        make_run(root, task, "sinusoidal", seed, sinusoidal(seed))
        make_run(root, task, "rope", seed, rope(seed))
        make_run(root, task, "rope", seed, rope_random(seed), "train.random_positions=64",
                 suffix="-random64")
    return load_runs(root)[0]


def by_number(rows) -> dict:
    return {int(v.claim.split(".")[0]): v for v in rows}


def test_three_seeds_give_t_intervals_on_differences_of_accuracy(tmp_path):
    runs = arms(tmp_path, (0, 1, 2),
                nope=lambda s: [0.6 + 0.02 * s, 0.4 + 0.02 * s],
                learned=lambda s: [0.2, 0.1], sinusoidal=lambda s: [0.3, 0.1 + 0.01 * s],
                rope=lambda s: [0.5, 0.3], rope_random=lambda s: [0.5 + 0.1 * s, 0.3])
    v = by_number(verdicts(runs, PRESET, 16384))
    assert {n: v[n].verdict for n in v} == {1: HOLDS, 2: INCONCLUSIVE}
    # nope - learned per seed: mean of (0.6+0.02s, 0.4+0.02s) - 0.15 = 0.35 + 0.02 s
    expected = stats.t_interval([0.35, 0.37, 0.39])
    assert v[1].measured.startswith(
        f"nope - learned exact match beyond n_max = +0.370 [{expected.low:+.3f}, "
        f"{expected.high:+.3f}]")
    assert "lengths 14, 28" in v[1].measured
    assert v[1].interval == "Student-t over seeds 0, 1, 2 (plain scale)"
    assert v[1].source.startswith("Kazemnejad et al.")
    # rope randomized - plain: 0.05 s -> 0, 0.05, 0.1: the interval straddles min_gain 0.05
    gain = stats.t_interval([0.0, 0.05, 0.1])
    assert gain.low < 0.05 < gain.high
    assert v[2].source.startswith("Ruoss et al.")
    assert v[2].measured.endswith("(lengths 14, 28, exact match: rope 0.400, rope randomized "
                                  "0.450)")
    assert v[2].kind.startswith("rope randomized - plain exact match beyond n_max: "
                                "superiority, margin 0.05 (> 0.05)")


def test_nope_behind_an_absolute_encoding_does_not_hold(tmp_path):
    runs = arms(tmp_path, (0, 1), nope=lambda s: [0.1, 0.0 + 0.01 * s],
                learned=lambda s: [0.5, 0.3], sinusoidal=lambda s: [0.1, 0.0],
                rope=lambda s: [0.2, 0.1], rope_random=lambda s: [0.6 + 0.01 * s, 0.4])
    v = by_number(verdicts(runs, PRESET, 16384))
    assert v[1].verdict == FAILS  # behind learned, whatever sinusoidal says
    assert v[2].verdict == HOLDS


def test_two_failures_are_inconclusive_not_a_tie(tmp_path):
    # every arm at 0 beyond n_max: nope - learned = 0 >= 0 would read as 'holds'
    zero = lambda s: [0.0, 0.0]  # noqa: E731
    runs = arms(tmp_path, (0, 1, 2), zero, zero, zero, zero, zero)
    v = by_number(verdicts(runs, PRESET, 16384))
    assert v[1].verdict == v[2].verdict == INCONCLUSIVE
    assert v[1].measured.startswith("no arm above chance beyond n_max (lengths 14, 28: nope "
                                    "0.000, learned 0.000, sinusoidal 0.000; chance 0.010)")
    # nothing was tested, so the claim is outside the Holm family and says why
    assert v[1].p is None and v[1].tested == ("outside the Holm family: no arm above chance "
                                              "beyond n_max, nothing to test")


def test_one_seed_combines_the_points_wilson_intervals(tmp_path):
    runs = arms(tmp_path, (0,), nope=lambda s: [0.5, 0.5], learned=lambda s: [0.1, 0.1],
                sinusoidal=lambda s: [0.5, 0.5], rope=lambda s: [0.2, 0.2],
                rope_random=lambda s: [0.25, 0.25])
    v = by_number(verdicts(runs, PRESET, 16384))
    assert v[1].interval.startswith("one seed (0): Newcombe's difference")
    # nope - sinusoidal = 0 exactly; each mean of two Wilson points at 0.5 (n = 100) has a
    # half-width of about 0.097 / sqrt(2): the difference's interval is about +-0.097
    low, _ = binomial_interval(50, 100)
    half = ((0.5 - low) ** 2 * 2) ** 0.5 / 2
    text = v[1].measured.split("; ")[1]
    assert text.startswith(f"nope - sinusoidal exact match beyond n_max = +0.000 "
                           f"[{-(2 * half ** 2) ** 0.5:+.3f}, {(2 * half ** 2) ** 0.5:+.3f}]")
    assert v[1].verdict == INCONCLUSIVE
    assert v[2].verdict == INCONCLUSIVE  # a gain of 0.05 within an interval of about +-0.12
    # Newcombe's interval has no p-value: outside the Holm family, named with its reason
    assert v[1].p is None and v[1].tested == ("outside the Holm family: its intervals "
                                              "(Newcombe) give no p-value")


def test_a_missing_arm_or_an_n_a_point_is_not_measured(tmp_path):
    for seed in (0, 1):
        make_run(tmp_path, "copy", "nope", seed, [0.5, 0.4])
        make_run(tmp_path, "copy", "learned", seed, [None, None])  # a table of 16 rows
        make_run(tmp_path, "copy", "sinusoidal", seed, [0.1, 0.0])
        make_run(tmp_path, "copy", "rope", seed, [0.1, 0.0])
    v = by_number(verdicts(load_runs(tmp_path)[0], PRESET, 16384))
    assert v[1].verdict == UNMEASURED
    assert v[1].measured.startswith("not measured: copy-learned-L16-s0 has no score at "
                                    "length 14: positions stop before length 14")
    assert v[2].verdict == UNMEASURED
    assert v[2].measured == ("not measured: no completed run of rope on copy "
                             "train.random_positions=64 at train.seq_len=16")


def test_claims_compare_only_the_same_instances(tmp_path):
    make_run(tmp_path, "copy", "rope", 0, [0.1, 0.0])
    make_run(tmp_path, "copy", "rope", 0, [0.5, 0.4], "train.random_positions=64",
             suffix="-random64", count=50)
    v = by_number(verdicts(load_runs(tmp_path)[0], PRESET, 16384))
    assert v[2].measured == ("not measured: its runs share no held-out instances "
                             "(task.eval_count, task.eval_seed)")


def test_the_tasks_presets_hold_the_claims_of_the_issue():
    """Issues #26 and #34: copy and reverse (on the CPU plain and with index hints, and
    addition with the carry scratchpad its search found learned; on the GPU addition with
    hints), every arm under the corpus suites'
    policy, judged on exact match only where it is learned; every task of the claims has
    every arm trained."""
    tasks = {"tasks": {"copy", "reverse", "copy_hints", "reverse_hints", "addition_carries"},
             "tasks-gpu": {"copy", "reverse", "addition_hints"}}
    for name in ("tasks", "tasks-gpu"):
        preset = load_preset(name)[0]
        assert preset.claims == "tasks" and len(preset.seeds) == 3
        assert set(preset.thresholds.tasks) == tasks[name]
        trained = {(o.split("=")[1], e.split("=")[1]) for run in preset.runs
                   for o in run if o.startswith("task=") for e in run if e.startswith("encoding=")}
        assert trained == {(t, e) for t in tasks[name]
                           for e in ("nope", "learned", "sinusoidal", "rope", "alibi")}
        assert sum("train.random_positions" in " ".join(run) for run in preset.runs) == \
            len(tasks[name])
        assert set(preset.thresholds.explicit) == {"learned", "sinusoidal", "rope", "alibi"}
        assert (preset.thresholds.metric, preset.thresholds.learned) == ("exact", 0.9)
        assert {"model.init=torch", "model.tie_weights=false"} <= set(preset.overrides)
        encodings = {o.split("=")[1] for run in preset.runs for o in run
                     if o.startswith("encoding=")}
        assert encodings == {"nope", "learned", "sinusoidal", "rope", "alibi"}
        assert set(preset.learning_rates) == encodings
        # one run of each arm (every run composes in test_every_shipped_preset_composes_every_run)
        arms = {next(o for o in run if o.startswith("encoding=")) + str(
            any("random_positions" in o for o in run)): run for run in preset_runs(preset)}
        for run in arms.values():
            cfg = C.resolve(compose_overrides([*preset.overrides, *run]))
            assert cfg.train.lr == preset.learning_rates[cfg.encoding.name]
            assert cfg.train.batch_size * cfg.train.seq_len in (512, 2048)  # small steps
            assert cfg.train.warmup_tokens > 0 and cfg.task.eval_count == 500


def test_a_length_no_run_could_score_is_left_out(tmp_path):
    # addition past its digit limit: n/a for every run, so the claims read length 14 only
    runs = arms(tmp_path, (0, 1), nope=lambda s: [0.5 + 0.01 * s, None],
                learned=lambda s: [0.1, None], sinusoidal=lambda s: [0.2, None],
                rope=lambda s: [0.3, None], rope_random=lambda s: [0.4, None])
    v = by_number(verdicts(runs, PRESET, 16384))
    assert v[1].verdict == v[2].verdict == HOLDS
    assert "(lengths 14, exact match: nope 0.505, learned 0.100, sinusoidal 0.200)" in \
        v[1].measured


def test_an_arm_that_did_not_learn_the_task_is_not_compared(tmp_path):
    """NoPE far ahead beyond n_max, but learned solved only 40% of instances at n_max: the
    claim compares nothing, and says which arm did not learn the task."""
    for seed in (0, 1):
        make_run(tmp_path, "copy", "nope", seed, [0.6, 0.4])
        make_run(tmp_path, "copy", "learned", seed, [0.0, 0.0], "encoding.max_positions=64",
                 at_n_max=0.4 + 0.02 * seed)
        make_run(tmp_path, "copy", "sinusoidal", seed, [0.1, 0.0])
    v = by_number(verdicts(load_runs(tmp_path)[0], PRESET, 16384))
    assert v[1].verdict == UNMEASURED
    assert v[1].measured == ("not measured: learned on copy did not learn copy (exact match "
                             "0.400 at n_max with seed 0, below 0.9)")


def test_the_learnability_gate_reads_the_weakest_seed(tmp_path):
    """learned at n_max [0.75, 1.0, 1.0] over three seeds: its mean, 0.917, would pass a 0.9
    gate, but seed 0 did not learn the task, so the claim compares nothing."""
    for seed, at_n_max in enumerate((0.75, 1.0, 1.0)):
        make_run(tmp_path, "copy", "nope", seed, [0.6, 0.4])
        make_run(tmp_path, "copy", "learned", seed, [0.2, 0.1], "encoding.max_positions=64",
                 at_n_max=at_n_max)
        make_run(tmp_path, "copy", "sinusoidal", seed, [0.1, 0.0])
    v = by_number(verdicts(load_runs(tmp_path)[0], PRESET, 16384))
    assert v[1].verdict == UNMEASURED
    assert v[1].measured == ("not measured: learned on copy did not learn copy (exact match "
                             "0.750 at n_max with seed 0, below 0.9)")


def test_an_arm_just_at_the_learnability_threshold_is_compared(tmp_path):
    runs = arms(tmp_path, (0, 1), nope=lambda s: [0.6, 0.4], learned=lambda s: [0.2, 0.1],
                sinusoidal=lambda s: [0.3, 0.1], rope=lambda s: [0.5, 0.3],
                rope_random=lambda s: [0.5, 0.3])
    for r in runs:  # every arm at exactly 0.9 at n_max
        for p in r.tasks:
            if p["length"] == N_MAX:
                p["exact"] = 0.9
    v = by_number(verdicts(runs, PRESET, 16384))
    assert v[1].verdict == HOLDS


def test_the_gate_table_shows_each_arm_and_seed_at_n_max(tmp_path):
    for seed, at_n_max in enumerate((0.75, 1.0)):
        make_run(tmp_path, "copy", "nope", seed, [0.6, 0.4])
        make_run(tmp_path, "copy", "learned", seed, [0.2, 0.1], "encoding.max_positions=64",
                 at_n_max=at_n_max)
    make_run(tmp_path, "copy", "rope", 1, [0.5, 0.3], "train.random_positions=64",
             suffix="-random64", at_n_max=0.95)
    table = gate_table(load_runs(tmp_path)[0], PRESET, typed(PRESET)).splitlines()
    assert table[0] == "## The gate: exact match at n_max"
    rows = {tuple(line.split(" | ")[:2]): line.split(" | ")[2:] for line in table
            if line.startswith("| copy")}
    assert rows[("| copy", "nope")] == ["1.000", "1.000 |"]
    assert rows[("| copy", "learned")] == ["0.750 \u2717", "1.000 |"]  # below 0.9 at seed 0
    assert rows[("| copy", "rope randomized")] == ["-", "0.950 |"]  # no run at seed 0
    assert rows[("| copy", "sinusoidal")] == ["-", "- |"]
    assert gate_table([], PRESET, typed(PRESET)) is None


def test_a_searched_task_reads_what_its_search_reached(tmp_path):
    """Issue #34: a task left out of the claims because no recipe learned it reads "not
    learned at this scale" with the best exact match at n_max of its search's runs (read
    from the search's experiment beside the preset's), never a number of another task."""
    suite, search = tmp_path / "reproduce-tasks", tmp_path / "addition-recipe"
    make_run(suite, "copy", "nope", 0, [0.6, 0.4])
    preset = OmegaConf.merge(PRESET, {"thresholds": {"searched": {"addition": search.name}}})
    assert searched_note(load_runs(suite)[0], typed(preset)).splitlines()[-1] == (
        "- **addition**: not measured: no completed run of its search in addition-recipe/.")
    make_run(search, "addition_reversed", "rope", 0, [0.0, 0.0], at_n_max=0.012)
    make_run(search, "addition_carries", "rope", 0, [0.0, 0.0], at_n_max=0.25)
    note = searched_note(load_runs(suite)[0], typed(preset))
    assert note.splitlines()[0] == "## Tasks searched for a recipe"
    assert note.splitlines()[-1] == (
        "- **addition**: **not learned at this scale**; the best of the 2 runs of its recipe "
        "search (addition-recipe/) reached exact match 0.250 at n_max "
        "(addition_carries-rope-L16-s0), against 0.9 to be compared.")
    make_run(search, "addition_carries", "nope", 0, [0.0, 0.0], at_n_max=0.95)
    assert "- **addition**: a recipe learned it (addition_carries): train the preset's arms " \
        "on it to judge its claims; the best of the 3 runs" in searched_note(
            load_runs(suite)[0], typed(preset))
    judged = OmegaConf.merge(preset, {"thresholds": {"tasks": ["copy", "addition_carries"]}})
    assert "- **addition**: a recipe learned it (addition_carries): its claims are judged " \
        "above;" in searched_note(load_runs(suite)[0], typed(judged))
    assert searched_note(load_runs(suite)[0], typed(PRESET)) is None  # nothing searched


def test_a_searched_experiment_must_be_a_plain_name():
    preset = OmegaConf.merge(PRESET, {"thresholds": {"searched": {"addition": "../../etc"}}})
    with pytest.raises(UsageError, match=r"thresholds\.searched\.addition must be a plain "
                                         "directory name"):
        task_claims(typed(preset))
