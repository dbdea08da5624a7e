"""The claim set ``tasks`` (configs/reproduce/tasks.yaml, tasks-gpu.yaml): length
generalization on algorithmic tasks -- NoPE against the explicit encodings (Kazemnejad et al.),
randomized positions against plain ones (Ruoss et al.).  Every statistic is a difference of
accuracies beyond the longest trained length (judge_accuracy): Student-t over seeds on the
plain scale, or for one seed the points' own Wilson or bootstrap intervals combined."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from posexp import stats
from posexp.claims.base import (
    INCONCLUSIVE,
    NON_INFERIORITY,
    OUTSIDE,
    SUPERIORITY,
    UNMEASURED,
    Claim,
    Kind,
    Margin,
    Verdict,
    claim_p,
    combined,
    consecutive_only,
    decide,
    kind_text,
    scope_text,
    variant_of,
)
from posexp.claims.registry import ClaimSet, Sections, numbered, register_claim_set
from posexp.claims.sources import KAZEMNEJAD, KAZEMNEJAD_SCALE, RUOSS, RUOSS_SCALE
from posexp.config.check import check_name
from posexp.errors import UsageError
from posexp.runs import RunResult, load_runs, point_scaling
from posexp.scaling import CONSECUTIVE

# An arm of a task claim: (task, encoding, variant) -- runs of one task and encoding, plain
# (variant ()) or on random positions (VARIANT_KEYS' values, as variant_of gives them).
Arm = tuple


@dataclass
class Thresholds:
    tasks: list  # the tasks the claims are judged on
    explicit: list  # the explicit encodings NoPE is compared with: those of the paper trained
    randomized: list  # encodings trained with and without random positions
    random_positions: int  # M of the randomized runs
    metric: str  # exact | token_acc: the accuracy the claims compare
    learned: float  # an arm is compared only if its exact match at n_max is at least this
    tie: Margin  # NoPE's claim: NoPE minus each explicit encoding, above -margin
    min_gain: Margin  # Ruoss et al.'s claim: randomized minus plain, above margin
    # task -> the experiment of its recipe search: a task left out of `tasks` because no
    # recipe learned it at this scale, reported with what its search reached (searched_note)
    searched: dict | None = None


def at_least(margin: float) -> Kind:
    """Superiority of a difference of accuracies: above ``margin``."""
    return Kind(SUPERIORITY, margin, None, margin, "difference")


def not_below(margin: float) -> Kind:
    """Non-inferiority of a difference of accuracies: above -``margin``."""
    return Kind(NON_INFERIORITY, -margin, None, margin, "difference")


@dataclass(frozen=True)
class AccuracyTest:
    """One comparison of a task claim: the mean accuracy beyond the longest trained length of
    arm ``a`` minus that of arm ``b``, read against ``kind``, on the same held-out
    instances."""

    label: str
    a: Arm
    b: Arm
    kind: Kind


def arm_text(arm: Arm) -> str:
    task, enc, variant = arm
    return " ".join([f"{enc} on {task}", *(f"{k}={v}" for k, v in variant)])


# Kazemnejad et al. find NoPE ahead of every explicit encoding they test (absolute positions,
# T5's bias, ALiBi, rotary), not only of the absolute ones this claim first read
EXPLICIT = ("compared with every explicit encoding in 6e96f12 (#43); it compared NoPE with "
            "learned and sinusoidal positions only")


def task_claims(th: Thresholds) -> tuple[list[Claim], list[Claim]]:
    """(NoPE against the explicit encodings, randomized positions against plain ones) on the
    preset's tasks, with its thresholds: the claim set ``tasks``.  Every statistic is a
    difference of accuracies (thresholds.metric: exact or token_acc) averaged over the task
    lengths scored beyond the longest one trained on."""
    metric, M = th.metric, th.random_positions
    if metric not in ("exact", "token_acc"):  # checked before any run trains
        raise UsageError(f"thresholds.metric must be exact or token_acc, got {metric!r}")
    for task, experiment in (th.searched or {}).items():  # read beside the preset's
        check_name(f"thresholds.searched.{task}", experiment)
    what = "exact match" if metric == "exact" else "token accuracy"
    nope = [
        Claim(f"NoPE generalizes to longer {task} instances at least as well as every "
              f"explicit positional encoding ({', '.join(th.explicit)})",
              f"{KAZEMNEJAD}, §4 and Fig. 3 (copy, reverse, addition among their tasks)",
              KAZEMNEJAD_SCALE, th.tie.reason,
              [(task, enc, ()) for enc in ("nope", *th.explicit)],
              [AccuracyTest(f"nope - {enc} {what} beyond n_max", (task, "nope", ()),
                            (task, enc, ()), not_below(th.tie.margin))
               for enc in th.explicit],
              respecified=EXPLICIT)
        for task in th.tasks]
    random = [
        Claim(f"Training {enc} on random positions below {M} raises its accuracy on {task} "
              "beyond the training lengths", f"{RUOSS}, §4 and Table 1", RUOSS_SCALE,
              f"{th.min_gain.reason}; the runs share their batches, so the positions are the "
              "only difference",
              [(task, enc, ()), (task, enc, (("train.random_positions", M),))],
              [AccuracyTest(f"{enc} randomized - plain {what} beyond n_max",
                            (task, enc, (("train.random_positions", M),)), (task, enc, ()),
                            at_least(th.min_gain.margin))])
        for task, enc in ((t, e) for t in th.tasks for e in th.randomized)]
    return nope, random


def arm_points(runs: list[RunResult], arms: list[Arm],
               train_len: int) -> dict[Arm, dict[int, RunResult]] | str:
    """seed -> run of each arm trained at ``train_len``, or why there is none (no run; two
    runs of one arm and seed)."""
    found: dict[Arm, dict[int, RunResult]] = {}
    for arm in arms:
        by_seed: dict[int, RunResult] = {}
        for r in runs:
            if (r.task, r.encoding, variant_of(r)) != arm or r.train_len != train_len:
                continue
            if r.seed in by_seed:
                return (f"two runs of {arm_text(arm)} at seed {r.seed}: {by_seed[r.seed].name} "
                        f"and {r.name}")
            by_seed[r.seed] = r
        if not by_seed:
            return f"no completed run of {arm_text(arm)} at train.seq_len={train_len}"
        stale = sorted(r.name for r in by_seed.values() if r.tasks and all(
            p.get("positions") == CONSECUTIVE for p in r.tasks))
        if stale:
            return consecutive_only(f"{arm_text(arm)} ({', '.join(stale)})")
        found[arm] = by_seed
    return found


def beyond_points(runs: list[RunResult]) -> dict[Path, list[dict]] | str:
    """Each run's task points (as trained; by the run's path) at the lengths beyond the
    longest it trained on, on the instances every run was scored on -- the largest instance
    count they share -- or why there are none.  The runs must share the longest trained length."""
    n_max = {(r.info.get("corpus") or {}).get("max_train_length") for r in runs}
    if len(n_max) != 1 or None in n_max:
        return "its runs trained on different lengths (max_train_length " \
               f"{', '.join(sorted(map(str, n_max)))})"
    n = n_max.pop()
    groups = [{(p["count"], p["eval_seed"]) for p in r.tasks if point_scaling(p) is None}
              for r in runs]
    common = set.intersection(*groups)
    if not common:
        return "its runs share no held-out instances (task.eval_count, task.eval_seed)"
    count, seed = max(common, key=lambda g: (g[0], -g[1]))
    lengths = set.intersection(*({p["length"] for p in r.tasks if point_scaling(p) is None
                                  and (p["count"], p["eval_seed"]) == (count, seed)
                                  and p["length"] > n} for r in runs))
    # a length no run could be scored at is one the task cannot represent (addition past
    # its digit limit): left out; one that only some runs lack makes the claim unmeasured
    lengths -= {p["length"] for p in runs[0].tasks if not p["applicable"] and all(
        not q["applicable"] for r in runs for q in r.tasks if q["length"] == p["length"]
        and (q["count"], q["eval_seed"]) == (count, seed))}
    if not lengths:
        return f"its runs share no task length beyond n_max = {n} that they could score"
    out: dict[Path, list[dict]] = {}
    hashes: dict[tuple, str] = {}
    for r in runs:
        chosen = [p for p in r.tasks if point_scaling(p) is None and p["length"] in lengths
                  and (p["count"], p["eval_seed"]) == (count, seed)]
        for p in chosen:
            if not p["applicable"]:
                return f"{r.name} has no score at length {p['length']}: {p['reason']}"
            key = (p["length"], p.get("depth"))
            if hashes.setdefault(key, p["instances_sha256"]) != p["instances_sha256"]:
                return f"{r.name} was scored on other instances at length {p['length']}"
        out[r.path] = chosen
    return out


def in_distribution(run: RunResult) -> float | None:
    """The run's exact match at the longest length it trained on (n_max), as trained, on
    the most held-out instances it was scored on there; None when it was not scored there."""
    n_max = (run.info.get("corpus") or {}).get("max_train_length")
    at = [p for p in run.tasks if p["length"] == n_max and point_scaling(p) is None
          and p["applicable"]]
    return max(at, key=lambda p: p["count"])["exact"] if at else None


def unlearned(found: dict, seeds: list[int], arms: list[Arm], threshold: float) -> str | None:
    """Why the claim cannot compare its arms: the first arm whose exact match at n_max is
    below ``threshold`` at its weakest seed -- that seed did not learn the task in
    distribution, so how it fails beyond n_max says nothing about length generalization, and
    a mean over seeds would let two good seeds carry it ([0.75, 1.0, 1.0] passes 0.9)."""
    for arm in arms:
        values = [in_distribution(found[arm][s]) for s in seeds]
        if None in values:
            return f"{arm_text(arm)} was not scored at n_max"
        weakest = min(values)
        if weakest < threshold:
            seed = seeds[values.index(weakest)]
            return (f"{arm_text(arm)} did not learn {arm[0]} (exact match {weakest:.3f} at "
                    f"n_max with seed {seed}, below {threshold:g})")
    return None


def gate_table(runs: list[RunResult], preset: DictConfig, th: Thresholds) -> str | None:
    """verdicts.md's gate: each arm's exact match at n_max (in distribution) at each seed,
    a value below thresholds.learned marked -- the claims compare only arms that pass at
    every seed -- so that a reader sees which arms learned each task at all."""
    L = int(preset.train_seq_len)
    arms = list(dict.fromkeys(arm for c in (c for _, s in sections(preset, th) for c in s)
                              for arm in c.needs))
    seeds = sorted({r.seed for r in runs if r.task is not None})
    if not seeds:
        return None
    rows = []
    for arm in arms:
        by_seed = {r.seed: in_distribution(r) for r in runs
                   if (r.task, r.encoding, variant_of(r)) == arm and r.train_len == L}
        cells = ["-" if by_seed.get(s) is None else f"{by_seed[s]:.3f}"
                 + (" \u2717" if by_seed[s] < th.learned else "") for s in seeds]
        rows.append(f"| {arm[0]} | {arm[1]}"
                    f"{' randomized' if arm[2] else ''} | " + " | ".join(cells) + " |")
    return "\n".join([
        "## The gate: exact match at n_max", "",
        f"Each arm's exact match at the longest length it trained on (n_max), per seed; "
        f"\u2717 below {th.learned:g}, where the arm did not learn the task in "
        "distribution and its claims are not measured; - not scored.", "",
        "| task | arm | " + " | ".join(f"seed {s}" for s in seeds) + " |",
        "|---|---|" + "---:|" * len(seeds), *rows])


def searched_note(runs: list[RunResult], th: Thresholds) -> str | None:
    """For each task of thresholds.searched, what its recipe search (the completed runs of
    its experiment, beside the preset's under the same results directory) reached: the
    best exact match at n_max and the run that reached it -- "not learned at this scale"
    when it is below thresholds.learned, so that the task's claims are said to be out of
    reach rather than left out in silence."""
    searched, learned = th.searched or {}, th.learned
    if not searched or not runs:
        return None
    root = Path(runs[0].path).parent.parent
    lines = []
    for task, experiment in searched.items():
        found = load_runs(root / experiment)[0] if (root / experiment).is_dir() else []
        scored = [(v, r.name) for r in found if (v := in_distribution(r)) is not None]
        if not scored:
            lines.append(f"- **{task}**: not measured: no completed run of its search in "
                         f"{experiment}/.")
            continue
        best, name = max(scored)
        lines.append(f"- **{task}**: {_search_verdict(best, name, found, th)}; the best "
                     f"of the {len(scored)} runs of its recipe search ({experiment}/) reached "
                     f"exact match {best:.3f} at n_max ({name}), against {learned:g} to be "
                     "compared.")
    return "\n".join(["## Tasks searched for a recipe", "",
                      "What the recipe search of each task reached in distribution at this "
                      "scale:", "", *lines])


def _search_verdict(best: float, name: str, found: list[RunResult], th: Thresholds) -> str:
    """Whether a search's best run learned its task, and whether the preset judges that
    run's task (format) -- so a learned format left out of the claims is said to be."""
    if best < th.learned:
        return "**not learned at this scale**"
    task = next(r.task for r in found if r.name == name)
    if task in th.tasks:
        return f"a recipe learned it ({task}): its claims are judged above"
    return f"a recipe learned it ({task}): train the preset's arms on it to judge its claims"


def tasks_note(runs: list[RunResult], preset: DictConfig, th: Thresholds) -> str | None:
    """verdicts.md's sections after the verdicts: the gate table and the searched tasks."""
    parts = [gate_table(runs, preset, th), searched_note(runs, th)]
    return "\n\n".join(p for p in parts if p) or None


def judge_accuracy(claim: Claim, runs: list[RunResult], metric: str,
                   train_len: int, number: int, learned: float = 0.0) -> Verdict:
    """A task claim's verdict.  Per seed, each test's statistic is a difference of mean
    accuracies beyond n_max; over two or more seeds its interval is Student-t on the plain
    scale; for one seed it combines the points' own 95% intervals (Wilson for exact match,
    the bootstrap over instances for token accuracy) by Newcombe's rule for a difference.
    An arm that did not learn the task in distribution (``unlearned``) makes the claim not
    measured; when no arm beats the chance level beyond n_max it is inconclusive: a
    difference of two failures says nothing about generalization."""
    what = "exact match" if metric == "exact" else "token accuracy"
    chance_key = "chance_exact" if metric == "exact" else "chance_token"

    read: list[RunResult] = []  # the runs compared, for the scope column

    def verdict(measured: str, outcome: str, method: str = "", p: float | None = None,
                tested: str = f"{OUTSIDE}: not measured") -> Verdict:
        return Verdict(claim.title(number), claim.source, kind_text(claim),
                       scope_text(claim, read), measured, outcome, method, p, tested=tested)

    found = arm_points(runs, claim.needs, train_len)
    if isinstance(found, str):
        return verdict(f"not measured: {found}", UNMEASURED)
    seeds = sorted(set.intersection(*(set(by_seed) for by_seed in found.values())))
    if not seeds:
        return verdict("not measured: its runs share no seed", UNMEASURED)
    read.extend(found[arm][s] for arm in claim.needs for s in seeds)
    if (why := unlearned(found, seeds, claim.needs, learned)) is not None:
        return verdict(f"not measured: {why}", UNMEASURED)
    points = beyond_points(read)
    if isinstance(points, str):
        return verdict(f"not measured: {points}", UNMEASURED)

    def mean(arm: Arm, seed: int, key: str = metric) -> float:
        return float(np.mean([p[key] for p in points[found[arm][seed].path]]))

    level = {arm: float(np.mean([mean(arm, s) for s in seeds])) for arm in claim.needs}
    chance = {arm: float(np.mean([mean(arm, s, chance_key) for s in seeds]))
              for arm in claim.needs}
    lengths = sorted({p["length"] for ps in points.values() for p in ps})
    where = f"lengths {', '.join(map(str, lengths))}"
    means = ", ".join(f"{arm[1]}{' randomized' if arm[2] else ''} {level[arm]:.3f}"
                      for arm in claim.needs)
    if all(level[arm] <= chance[arm] for arm in claim.needs):
        return verdict(f"no arm above chance beyond n_max ({where}: {means}; chance "
                       f"{max(chance.values()):.3f})", INCONCLUSIVE, "",
                       tested=f"{OUTSIDE}: no arm above chance beyond n_max, nothing to test")
    intervals, method = _differences(claim, seeds, mean, lambda arm: points[
        found[arm][seeds[0]].path], metric)
    outcome = combined([decide(i, t.kind) for i, t in zip(intervals, claim.tests, strict=True)])
    p, tested = claim_p(intervals, [t.kind for t in claim.tests], outcome)
    measured = "; ".join(f"{t.label} = {i.value:+.3f} [{i.low:+.3f}, {i.high:+.3f}]"
                         for t, i in zip(claim.tests, intervals, strict=True))
    return verdict(f"{measured} ({where}, {what}: {means})", outcome, method, p, tested)


def _differences(claim: Claim, seeds: list[int], mean, one_seed_points,
                 metric: str) -> tuple[list[stats.Interval], str]:
    """Each test's difference of accuracies with its interval, and how it was taken."""
    if len(seeds) > 1:
        return ([stats.t_interval([mean(t.a, s) - mean(t.b, s) for s in seeds])
                 for t in claim.tests],
                f"Student-t over seeds {', '.join(map(str, seeds))} (plain scale)")
    return ([newcombe(one_seed_points(t.a), one_seed_points(t.b), metric)
             for t in claim.tests],
            f"one seed ({seeds[0]}): Newcombe's difference of the points' 95% intervals "
            "(Wilson for exact match, bootstrap over instances for token accuracy)")


def newcombe(a: list[dict], b: list[dict], metric: str) -> stats.Interval:
    """One seed: mean(a) - mean(b) over the lengths, with the 95% interval of
    stats.difference_interval; each mean's distances to its limits are the points' own,
    added in quadrature and divided by their number (each length's instances drawn apart)."""
    def spread(points: list[dict]) -> tuple[float, float, float]:
        value = float(np.mean([p[metric] for p in points]))
        below = math.sqrt(sum((p[metric] - p[f"{metric}_low"]) ** 2 for p in points))
        above = math.sqrt(sum((p[f"{metric}_high"] - p[metric]) ** 2 for p in points))
        return value, value - below / len(points), value + above / len(points)

    return stats.difference_interval(spread(a), spread(b))


def sections(preset: DictConfig, th: Thresholds) -> Sections:
    nope, random = task_claims(th)
    return [(f"NoPE against the explicit encodings on tasks ({KAZEMNEJAD.split(',')[0]})", nope),
            (f"Randomized positions on tasks ({RUOSS.split(',')[0]})", random)]


def judge_tasks(sections: Sections, runs: list[RunResult], preset: DictConfig, th: Thresholds,
                n_tokens: int) -> list[Verdict]:
    return [judge_accuracy(c, runs, th.metric, int(preset.train_seq_len), n, th.learned)
            for n, c in numbered(sections)]


register_claim_set(ClaimSet("tasks", Thresholds, sections, judged_by=judge_tasks,
                            noted_by=tasks_note))
