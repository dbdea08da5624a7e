"""Budget stability: a suite judged again on the same runs trained on fewer tokens.

A verdict at one training budget may be a fact about the encoding or about how far training
got.  A preset's ``budgets`` (train.tokens values below its own) trains every run at each of
them too, at its ``budget_seeds`` (default its seeds) or at the seeds an entry names
(``{tokens: 4000000, seeds: [0, 1, 2]}``: a former main budget keeps its seeds), and each
claim is judged at each budget on those runs alone.  The CPU suites' budget seeds are 1, 2
and 3: seed 0's run at the chosen rate on the sweep's budget is the sweep's own, which
chose the rate (a winner's curse), and its weights, needed for the points it was not scored
at, come back bit for bit only on the kind of machine that trained it (tests/golden: other
CPUs round the last bits otherwise).
A claim whose verdict differs between budgets reads *budget-dependent* beside its verdict,
with the verdict at each other budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from omegaconf import DictConfig

from posexp.claims.base import FAILS, HOLDS, INCONCLUSIVE, Verdict
from posexp.runs import RunResult

STABLE, DEPENDENT, UNCOMPARED = "stable", "budget-dependent", "not compared"
JUDGED = (HOLDS, FAILS, INCONCLUSIVE)


def budgets(preset: DictConfig) -> list[int]:
    """The preset's other training budgets, in tokens, in its order."""
    return [tokens for tokens, _ in seeded_budgets(preset, [])]


def seeded_budgets(preset: DictConfig, budget_seeds: list[int]) -> list[tuple[int, list[int]]]:
    """(tokens, seeds) of each other budget: the seeds its entry names, else ``budget_seeds``."""
    return [(int(b["tokens"]), [int(s) for s in b["seeds"]]) if isinstance(b, Mapping)
            else (int(b), budget_seeds) for b in preset.get("budgets") or []]


def budget_groups(runs: list[list[str]], seeds: list[int],
                  others: list[tuple[int, list[int]]]) -> list[tuple[list[list[str]], list[int]]]:
    """The preset's runs at its own budget and ``seeds``, then at each other budget and its
    seeds (``others``, from seeded_budgets): a campaign trains the main suite first."""
    return [(runs, seeds), *(([[*run, f"train.tokens={b}"] for run in runs], b_seeds)
                             for b, b_seeds in others)]


def at_budget(runs: list[RunResult], tokens: int, main: int) -> list[RunResult]:
    """The runs trained on ``tokens`` tokens (their identity's train.tokens); a fine-tune
    (trained on its own budget) belongs to the ``main`` budget's suite only."""
    return [r for r in runs if (r.identity.get("train.tokens") == tokens
                                if r.identity.get("parent.identity") is None
                                else tokens == main)]


def tokens_text(tokens: int) -> str:
    return f"{tokens / 1e6:g}M" if tokens >= 1e6 else f"{tokens:,}"


def judged_at_budgets(judge: Callable[[int], list[Verdict]], main: int,
                      others: list[int]) -> list[Verdict]:
    """``judge``'s verdicts at the ``main`` budget (judge(tokens) judges the suite's runs
    at that budget), each saying whether the same claim judged at each other budget agrees
    (uncorrected and after Holm)."""
    rows = judge(main)
    elsewhere = {b: judge(b) for b in others}
    out = []
    for i, v in enumerate(rows):
        seen = {b: elsewhere[b][i] for b in others}
        detail = "; ".join(f"{tokens_text(b)}: {w.verdict}"
                           + ("" if w.holm == w.verdict else f", after Holm {w.holm}")
                           for b, w in {main: v, **seen}.items())
        if any(x.verdict not in JUDGED for x in (v, *seen.values())):
            word = UNCOMPARED  # a budget whose runs are missing says nothing of stability
        else:
            same = all((w.verdict, w.holm) == (v.verdict, v.holm) for w in seen.values())
            word = STABLE if same else DEPENDENT
        out.append(replace(v, budget=f"{word} ({detail})"))
    return out
