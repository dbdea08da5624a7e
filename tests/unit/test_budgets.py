"""Budget stability (claims/budgets.py): a preset's budgets train every run at another
train.tokens too, and each claim is judged on each budget's runs alone; a claim whose
verdict differs reads budget-dependent beside it, one whose other budget is missing is not
compared, and the table gains the column only then."""

import pytest
from omegaconf import OmegaConf

from posexp.claims import verdicts
from posexp.claims.base import FAILS, HOLDS
from posexp.claims.budgets import budget_groups, seeded_budgets, tokens_text
from posexp.claims.campaign import Pending
from posexp.claims.suite import verdict_table, write_budget_reports
from posexp.config import compose
from posexp.runs import load_run, load_runs, split_runs
from tests.unit.test_reproduce import CLAIM_RUNS, EXPECTED, PRESET, by_number, curve, make_run

HALF = 24576  # another budget than the composed default's


@pytest.fixture(scope="module")
def main_tokens():
    assert int(compose([]).train.tokens) != HALF
    return int(compose([]).train.tokens)


def runs_at(root, tokens: int, alibi: dict | None = None) -> None:
    """The preset's runs at seed 0 on ``tokens`` tokens; ``alibi`` its ALiBi curve instead."""
    for (enc, L), ppl in CLAIM_RUNS.items():
        points = curve(alibi if enc == "alibi" and alibi else ppl)
        if enc == "alibi":
            points += curve({16: 4.0, 32: 4.0, 64: 4.1}, "sliding")
        make_run(root, enc, L, 0, points, f"train.tokens={tokens}", suffix=f"-T{tokens}")


def test_each_claim_is_judged_at_each_budget_and_a_change_reads_budget_dependent(
        tmp_path, main_tokens):
    preset = OmegaConf.merge(PRESET, {"budgets": [HALF]})
    runs_at(tmp_path, main_tokens)
    runs_at(tmp_path, HALF, alibi={16: 5.0, 32: 6.0, 64: 7.0})  # ALiBi not flat at 2M
    runs = load_runs(tmp_path)[0]
    v = by_number(verdicts(runs, preset, 512, main=main_tokens))
    # the main budget's verdicts are those of its runs alone (two configs of one curve
    # would otherwise be refused)
    assert {n: v[n].verdict for n in v} == EXPECTED
    full, half = tokens_text(main_tokens), tokens_text(HALF)
    assert (full, half) == ("2M", "24,576")
    assert v[3].budget.startswith(f"budget-dependent ({full}: holds; {half}: {FAILS}")
    assert v[1].budget == f"stable ({full}: {HOLDS}; {half}: {HOLDS})"
    assert "| budgets |" in verdict_table(list(v.values()))
    # a budget whose runs are pending is not compared
    held = [Pending("alibi", 16, None, (), False, HALF)]
    w = by_number(verdicts(runs, preset, 512, held, main=main_tokens))
    assert w[3].verdict == HOLDS and w[3].budget.startswith("not compared")
    # without budgets: no column, and every run in one suite
    only_main = [r for r in runs if r.identity["train.tokens"] == main_tokens]
    plain = verdicts(only_main, PRESET, 512)
    assert all(r.budget is None for r in plain) and "budgets" not in verdict_table(plain)


def test_a_campaign_trains_the_main_budget_before_the_others():
    preset = OmegaConf.create({"budgets": [2000000, 1000000]})
    runs = [["encoding=rope"], ["encoding=alibi"]]
    assert budget_groups(runs, [0, 1], seeded_budgets(preset, [1, 2])) == [
        (runs, [0, 1]),
        ([["encoding=rope", "train.tokens=2000000"], ["encoding=alibi", "train.tokens=2000000"]],
         [1, 2]),
        ([["encoding=rope", "train.tokens=1000000"], ["encoding=alibi", "train.tokens=1000000"]],
         [1, 2])]


def test_a_budget_entry_that_names_its_seeds_trains_at_them_and_the_others_at_budget_seeds():
    preset = OmegaConf.create({"budgets": [{"tokens": 4000000, "seeds": [0, 1, 2]}, 2000000]})
    assert seeded_budgets(preset, [1, 2, 3]) == [(4000000, [0, 1, 2]), (2000000, [1, 2, 3])]
    assert budget_groups([["encoding=rope"]], [0], seeded_budgets(preset, [1, 2, 3]))[1:] == [
        ([["encoding=rope", "train.tokens=4000000"]], [0, 1, 2]),
        ([["encoding=rope", "train.tokens=2000000"]], [1, 2, 3])]


@pytest.mark.parametrize("entry, refusal", [
    ({"tokens": 4000000, "seeds": [0, 0]}, "the seeds of budget 4000000 must be a list of "
                                           "distinct non-negative integers"),
    ({"tokens": 4000000, "seeds": []}, "the seeds of budget 4000000 must be"),
    ({"tokens": 0, "seeds": [1]}, r"budgets must be a list of positive integers"),
    ({"tokens": 4000000}, r"or of \{tokens, seeds\}, got")])
def test_a_budget_entry_with_bad_seeds_or_tokens_is_refused(tmp_path, entry, refusal):
    import yaml

    from posexp.claims.preset import load_preset
    from posexp.errors import UsageError
    from tests.presets import shipped_preset

    (tmp_path / "p.yaml").write_text(yaml.safe_dump({**shipped_preset("cpu"),
                                                     "budgets": [entry]}))
    with pytest.raises(UsageError, match=refusal):
        load_preset(str(tmp_path / "p.yaml"))


def test_the_budget_runs_train_at_the_budget_seeds_and_the_main_runs_at_the_seeds(tmp_path):
    """The cpu suites' budget runs leave out seed 0, whose 2M run is the sweep's: it chose
    the rate, and its weights come back bit for bit only on the machine kind that trained
    it."""
    from posexp.claims.preset import load_preset, preset_seeds
    from posexp.claims.suite import plan

    preset, _ = load_preset("cpu")
    assert preset_seeds(preset, "cpu") == [0, 1, 2]
    assert preset_seeds(preset, "cpu", "budget_seeds") == [1, 2, 3]
    configs, paths, _ = plan("cpu", preset, tmp_path, [0, 1, 2])
    seeds_at = {}
    for cfg in configs:
        seeds_at.setdefault(int(cfg.train.tokens), set()).add(int(cfg.seed))
    # the 4M runs, the main budget until #43, keep the seeds they were recorded at
    assert seeds_at == {16000000: {0, 1, 2}, 4000000: {0, 1, 2}, 2000000: {1, 2, 3}}
    assert len(set(paths)) == len(paths) == 7 * 3 * 3
    without = OmegaConf.merge(preset, {"budget_seeds": None})
    assert preset_seeds(without, "cpu", "budget_seeds") == [0, 1, 2]
    with pytest.raises(Exception, match="budget_seeds must be a list of distinct"):
        preset_seeds(OmegaConf.merge(preset, {"budget_seeds": [1, 1]}), "cpu", "budget_seeds")


def test_a_main_budget_not_recorded_yet_keeps_no_figure_of_another(tmp_path, main_tokens):
    """Its figures before the runs are recorded would show the budget the preset had before
    (the cpu suite's 4M, when it moved to 16M): they go, and the other budget's are drawn."""
    preset = OmegaConf.merge(PRESET, {"budgets": [HALF]})
    runs_at(tmp_path / "exp", HALF)
    runs, _ = split_runs(load_runs(tmp_path / "exp")[0])
    out = tmp_path / "exp" / "report"
    out.mkdir()
    (out / "extrapolation_nonoverlapping.png").write_bytes(b"the old main budget's")
    (out / "choice.md").write_text("a rate's choice stays")
    missing = tmp_path / "exp" / "rope-L16-s1"
    write_budget_reports(runs, [load_run(missing)], out, "p", preset, main_tokens,
                         {r.path: HALF for r in runs} | {missing: main_tokens})
    assert not list(out.glob("*.png")) and (out / "choice.md").is_file()
    assert (out / f"tokens-{tokens_text(HALF)}" / "extrapolation_nonoverlapping.png").is_file()


@pytest.mark.parametrize("bad", [0, -5, 1.5, "2M", True])
def test_a_budget_that_is_not_a_positive_token_count_is_refused(tmp_path, bad):
    import yaml

    from posexp.claims.preset import load_preset
    from posexp.errors import UsageError
    from tests.presets import shipped_preset

    (tmp_path / "p.yaml").write_text(yaml.safe_dump({**shipped_preset("cpu"), "budgets": [bad]}))
    with pytest.raises(UsageError, match=r"p.yaml: budgets must be a list of positive integers "
                                         r"\(train.tokens\) or of \{tokens, seeds\}, got "):
        load_preset(str(tmp_path / "p.yaml"))


def test_each_budget_gets_its_own_report(tmp_path, main_tokens):
    """The main budget's figures and tables never hold the other budget's runs: those go to
    report/tokens-<budget>, a pending run to the report of its own budget."""
    preset = OmegaConf.merge(PRESET, {"budgets": [HALF]})
    runs_at(tmp_path / "exp", main_tokens)
    runs_at(tmp_path / "exp", HALF)
    runs, not_done = split_runs(load_runs(tmp_path / "exp")[0])
    missing = tmp_path / "exp" / "rope-L16-s1-T24576"
    tokens_of = {r.path: int(r.identity["train.tokens"]) for r in runs} | {missing: HALF}
    out = tmp_path / "exp" / "report"
    write_budget_reports(runs, [*not_done, load_run(missing)], out, "p", preset, main_tokens,
                         tokens_of)
    main_table = (out / "summary.md").read_text()
    half_table = (out / f"tokens-{tokens_text(HALF)}" / "summary.md").read_text()
    assert f"-T{HALF}" not in main_table and f"-T{main_tokens}" in main_table
    assert f"-T{main_tokens}" not in half_table and str(missing) in half_table
    assert (out / f"tokens-{tokens_text(HALF)}" / "extrapolation_nonoverlapping.png").is_file()
    assert "(24,576-token budget)" in half_table
