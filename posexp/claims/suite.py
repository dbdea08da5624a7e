"""``posexp reproduce``: a claim suite end to end.  The preset's runs (every run at every
seed, all composed and checked before any trains) are trained unless a completed run of the
same identity exists, scored in both modes (unless the preset says ``sliding: false``), its
fine-tunes trained; then the report, verdicts.md and verdicts.json are written under
RESULTS_DIR/<experiment>/<report>.  A run that fails does not stop the others: every claim
that needs it is "not measured"."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from posexp import scaling
from posexp.claims.base import HOLDS, Verdict, correct, variant_of
from posexp.claims.budgets import (
    at_budget,
    budget_groups,
    budgets,
    judged_at_budgets,
    seeded_budgets,
    tokens_text,
)
from posexp.claims.campaign import (
    COMMAND,
    Pending,
    end_campaign,
    mark_pending,
    modes_of,
    run_campaign,
)
from posexp.claims.cost import cost_note
from posexp.claims.gate import gate_note
from posexp.claims.margins import margins_record, margins_text
from posexp.claims.preset import (
    DEFAULT_SET,
    load_preset,
    margins_file,
    preset_path,
    preset_runs,
    preset_seeds,
    report_dir,
    with_lr,
)
from posexp.claims.registry import CLAIM_SETS, ClaimSet
from posexp.claims.scored import scored_text
from posexp.config import RunSpec, check, compose, derive
from posexp.errors import InUse, PosexpError, UsageError, first_line
from posexp.report import check_report_dir, write_report
from posexp.report.tasks import EXACT
from posexp.runs import (
    MISSING,
    RunResult,
    atomic_write_json,
    atomic_write_text,
    code_text,
    continues_protocol,
    load_run,
)
from posexp.runs import split_runs as split
from posexp.sweep.plan import Planning
from posexp.timelimit import Campaign, read_info
from posexp.version import PROTOCOL


def plan(name: str, preset: DictConfig, results_dir: Path, seeds: list[int],
         config_dir: str | None = None,
         ) -> tuple[list[DictConfig], list[Path], list[tuple[Path, list[str]]]]:
    """(every run's checked config at every seed, their directories, each fine-tune at each
    seed as (parent directory, its overrides)), before anything trains."""
    common = [*preset.overrides, f"experiment={preset.experiment}", f"results_dir={results_dir}"]
    groups = budget_groups(preset_runs(preset), seeds, seeded_budgets(
        preset, preset_seeds(preset, name, "budget_seeds")))
    wanted = [(run, seed) for group, group_seeds in groups for seed in group_seeds
              for run in group]
    planning, configs = Planning(len(wanted), "reproduce", "runs"), []
    for run, seed in wanted:
        planning.tick()
        configs.append(compose([*common, *run, f"seed={seed}"], config_dir))
    if not configs:
        raise UsageError(f"preset {name} lists no runs")
    paths = [Path(cfg.results_dir) / cfg.experiment / cfg.run_name for cfg in configs]
    tunes = []
    for entry in preset.get("finetunes") or []:
        for seed in seeds:
            cfg = compose([*common, *with_lr(preset, list(entry.parent)), f"seed={seed}"],
                          config_dir)
            parent = Path(cfg.results_dir) / cfg.experiment / cfg.run_name
            if parent not in paths:
                raise UsageError(f"preset {name}: the parent of fine-tune "
                                 f"{list(entry.overrides)} ({list(entry.parent)}) is not one "
                                 "of its runs")
            factor = entry.get("lr_factor")
            lr = [f"train.lr={float(cfg.train.lr) * factor:g}"] if factor is not None else []
            tunes.append((parent, [*entry.overrides, *lr]))
    return configs, paths, tunes


class Attempts:
    """Runs tried one after another; a failure is recorded under its run's directory and
    the others go on.  A signal stops the whole suite (the run is checkpointed); the time
    limit of its campaign stops the run going then, checkpointed, and no other starts."""

    def __init__(self, campaign: Campaign | None = None) -> None:
        self.failed: dict[Path, str] = {}
        self.campaign = campaign or Campaign(COMMAND, None, [])

    def __call__(self, path: Path, configure: Callable[[], list[DictConfig]], what: str) -> Path:
        """Run the configs ``configure`` gives; a failure is recorded under their run's
        directory (``path`` until they are known)."""
        from posexp.run import run
        from posexp.run.restore import lacks_points, restore_weights
        from posexp.run.training import Interrupted

        try:
            configs = configure()
            for n, each in enumerate(configs):
                path = Path(each.results_dir) / each.experiment / each.run_name
                check(each)
                again = n == 0 and lacks_points(path, [RunSpec.of(c) for c in configs])
                if n == 0 and not self.campaign.admit(path, each, again):
                    return path
                if again:
                    restore_weights(path, RunSpec.of(each))  # a record: its weights again
                run(RunSpec.of(each))
        except InUse as e:  # another campaign trains it: its claims wait, the others go on
            self.campaign.say("skipped", path, f"running elsewhere: {e}")
            return path
        except Interrupted:
            if not self.campaign.expired:
                raise
            self.campaign.say("pending", path, "stopped at the time limit, checkpointed")
            return path
        except Exception as e:  # one failed run must not stop the others
            self.failed[path] = first_line(e)
            print(f"posexp reproduce: {what}: failed: {self.failed[path]}", file=sys.stderr)
            return path
        self.campaign.say("recorded", path)
        return path


def train_all(preset: DictConfig, configs: list[DictConfig], paths: list[Path],
              tunes: list[tuple[Path, list[str]]], campaign: Campaign | None = None,
              ) -> tuple[list[Path], dict[Path, str]]:
    """Train (or find completed) every run, then every fine-tune; (every run's directory,
    the failures by directory)."""
    from posexp.runs.parents import finetune_config

    attempt, paths, total = Attempts(campaign), list(paths), len(configs) + len(tunes)
    for i, (cfg, path) in enumerate(zip(configs, paths, strict=True), 1):
        print(f"posexp reproduce: run {i}/{total}: {cfg.run_name}", file=sys.stderr)
        # trains (or finds the run completed), then scores only the sliding points
        modes = modes_of(preset, cfg)
        attempt(path, lambda modes=modes: modes, f"{cfg.experiment}/{cfg.run_name}")
    for i, (parent, overrides) in enumerate(tunes, len(configs) + 1):
        print(f"posexp reproduce: run {i}/{total}: fine-tune of {parent.name} "
              f"{' '.join(overrides)}", file=sys.stderr)
        placeholder = parent.with_name(f"{parent.name}-ft-{i}")
        if parent in attempt.failed:
            attempt.failed[placeholder] = f"its parent {parent.name} failed"
            paths.append(placeholder)
            continue
        if read_info(parent).get("status") != "completed":  # it starts from those weights
            attempt.campaign.say("pending", placeholder, f"its parent {parent.name} is pending")
            paths.append(placeholder)
            continue
        paths.append(attempt(placeholder,
                             lambda p=parent, o=overrides: [finetune_config(p, o, record=True)],
                             f"fine-tune of {parent}"))
    return paths, attempt.failed


def reproduce(name: str, results_dir: Path, config_dir: str | None = None,
              time_limit: float | None = None, launcher: tuple[str, ...] = ()) -> list[Verdict]:
    """Train what is missing, score every run, fine-tune what the preset lists, write the
    report and verdicts; ``config_dir`` adds config files as --config-dir does; within
    ``time_limit`` seconds and through Hydra's ``launcher`` where given (claims/campaign.py).
    After the report, a PosexpError says how many runs failed or are pending."""
    preset, claim_set = load_preset(name)
    made = provenance(name, preset)  # the preset as read, before hours of training
    sections = claim_set.sections(preset)
    seeds = preset_seeds(preset, name)
    report = report_dir(preset, name)
    configs, paths, tunes = plan(name, preset, results_dir, seeds, config_dir)
    out = results_dir / preset.experiment / report
    if out in paths:  # found now, not after hours of training
        raise UsageError(f"preset {name}: its report directory {out} is the directory of one "
                         f"of its runs; give the report another name (report: NAME) or the "
                         "run another run_name")
    check_report_dir(out)
    continues_protocol([load_run(path) for path in paths], PROTOCOL)  # before any training
    n_tokens = {int(cfg.eval.tokens) for cfg in configs}
    if len(n_tokens) > 1:
        raise UsageError(f"the runs of preset {name} score different eval.tokens "
                         f"({', '.join(map(str, sorted(n_tokens)))}); its claims compare them "
                         "on the same tokens")
    paths, failed, campaign, pending = run_campaign(preset, configs, paths, tunes, config_dir,
                                                    time_limit, launcher, train_all)
    results = []
    for path in paths:
        r = load_run(path)
        if r.status == MISSING and path in failed:  # it failed before its directory held a run
            r = RunResult(path, {"status": "not started", "reason": failed[path]})
        results.append(r)
    runs, not_done = split(results)
    main = int(configs[0].train.tokens)
    # paths: the configs' runs, then the fine-tunes' (whose budget is the main one)
    planned = list(zip(configs, paths[:len(configs)], strict=True))
    asked = {p: {scaling.key(rec) for rec in derive.eval_scalings(c)} for c, p in planned}
    write_budget_reports([as_asked(r, asked.get(r.path)) for r in runs], not_done, out, name,
                         preset, main, {p: int(c.train.tokens) for c, p in planned})
    # a run that failed after it completed (scoring its sliding points) is in the report, but
    # its claims are not measured
    # a claim waits on the runs not recorded yet; a completed run short of a point asked
    # (pending too, for the campaign's count) leaves the claims that read it not measured
    waiting = [what for path, (_, what) in pending.items()
               if read_info(path).get("status") != "completed"]
    rows = verdicts([r for r in runs if r.path not in failed], preset, n_tokens.pop(),
                    waiting, main)
    write_verdicts(out, name, preset, claim_set, sections, rows, runs, failed, seeds, made,
                   main)
    print(f"\n{terminal_verdicts(rows)}\n\nreport: {out}")
    end_campaign(campaign, pending, failed, len(configs) + len(tunes))
    if failed:
        raise PosexpError(f"{len(failed)} of {len(configs) + len(tunes)} runs failed; their "
                          "claims are not measured")
    return rows


def as_asked(run: RunResult, asked: set | None) -> RunResult:
    """``run`` with only the points scored as trained or with a RoPE scaling its preset
    asks for (``asked``, scaling keys; None: a fine-tune, every point): a run another
    suite scores with other scalings shows in this suite's report as this suite scores it."""
    if asked is None:
        return run

    def kept(points: list[dict]) -> list[dict]:
        return [p for p in points if p.get("rope_scaling") is None
                or scaling.key(p["rope_scaling"]) in asked]

    return replace(run, curve=kept(run.curve), tasks=kept(run.tasks))


def write_budget_reports(runs: list[RunResult], not_done: list[RunResult], out: Path,
                         name: str, preset: DictConfig, main: int,
                         tokens_of: dict[Path, int]) -> None:
    """The report of the runs at the preset's own budget in ``out``, and of each other
    budget's (budgets:) in ``out``/tokens-<budget>: one figure never mixes the budgets the
    verdicts judge apart.  ``main`` is the preset's own budget, and ``tokens_of`` each
    planned run's (a fine-tune's is the main one)."""
    for tokens in [main, *budgets(preset)]:
        here = at_budget(runs, tokens, main)
        pending = [r for r in not_done if tokens_of.get(r.path, main) == tokens]
        folder = out if tokens == main else out / f"tokens-{tokens_text(tokens)}"
        # the figures are drawn again from these runs alone: none of other runs stays (the
        # main budget's, before its runs are recorded, would show the budget it was before)
        for old in (*folder.glob("*.png"), *folder.glob("*.svg")):
            old.unlink()
        if here or pending:
            write_report(here, pending, folder,
                         f"posexp reproduce --preset {name}" + (
                             "" if tokens == main else f" ({tokens_text(tokens)}-token budget)"),
                         task_metrics=judged_metrics(preset))


def judged_metrics(preset: DictConfig) -> tuple[str, ...]:
    """The task accuracy the report shows: the one the verdicts compare (a tasks preset's
    thresholds.metric), so that its tables and figures show what was judged; else exact
    match."""
    return (str(preset.thresholds.get("metric") or EXACT),)


def verdicts(runs: list[RunResult], preset: DictConfig, n_tokens: int,
             pending: list[Pending] = (), main: int | None = None) -> list[Verdict]:
    """Every claim of the preset's claim set judged on ``runs`` (its completed runs), on the
    scored region of ``n_tokens`` tokens (its eval.tokens); one that reads a ``pending`` run
    is pending instead.  With the preset's budgets, judged on the runs of the ``main``
    budget (train.tokens) and again on each other's (claims/budgets.py)."""
    claim_set = CLAIM_SETS[preset.get("claims") or DEFAULT_SET]
    sections = claim_set.sections(preset)
    claims = [c for _, s in sections for c in s]

    def judge(subset: list[RunResult], held: list[Pending]) -> list[Verdict]:
        rows = claim_set.judge(sections, subset, preset, n_tokens)
        return correct(mark_pending(rows, claims, held))

    others = budgets(preset)
    if not others or main is None:
        return judge(runs, list(pending))
    return judged_at_budgets(
        lambda tokens: judge(at_budget(runs, tokens, main),
                             [p for p in pending if p.tokens in (tokens, None)]),
        main, others)


def write_verdicts(out: Path, name: str, preset: DictConfig, claim_set: ClaimSet,
                   sections: list, rows: list[Verdict], runs: list[RunResult],
                   failed: dict[Path, str], seeds: list[int], made: dict,
                   main: int | None = None) -> None:
    """verdicts.md and verdicts.json beside the report; ``made``: provenance's record;
    ``main``: the preset's own budget, whose runs the learning gate's table shows."""
    devices = ", ".join(sorted({str(r.info.get("device", "?")) for r in runs})) or "?"
    by_section, start = [], 0
    for title, section in sections:
        by_section.append((title, rows[start:start + len(section)]))
        start += len(section)
    tables = ([("", runs)] if main is None or not budgets(preset) else
              [(f"At {tokens_text(t)} tokens{' (the main budget)' if t == main else ''}",
                at_budget(runs, t, main)) for t in [main, *budgets(preset)]])
    notes = [gate_note(tables, preset),
             claim_set.note(runs, preset), cost_note(tables)]
    note = "\n\n".join(n for n in notes if n) or None
    atomic_write_text(out / "verdicts.md", verdicts_markdown(
        name, preset, by_section, note, failed, devices,
        f"{provenance_text(made, runs, preset.get('reused'))}\n\n{versions_table(runs)}",
        scored_text(runs)))
    atomic_write_json(out / "verdicts.json", {
        "preset": name, **made, "seeds": seeds,
        **({"budget_seeds": recorded_budget_seeds(preset, name)} if budgets(preset) else {}),
        "verdicts": [asdict(v) for v in rows],
        "failed": {str(path): message for path, message in failed.items()},
        "thresholds": OmegaConf.to_container(preset.thresholds)})


def recorded_budget_seeds(preset: DictConfig, name: str) -> list[int] | dict[str, list[int]]:
    """The other budgets' seeds as verdicts.json records them: one list where every budget
    trains at ``budget_seeds``, else each budget's (by its tokens, as 2M)."""
    default = preset_seeds(preset, name, "budget_seeds")
    others = seeded_budgets(preset, default)
    if all(s is default for _, s in others):
        return default
    return {tokens_text(tokens): s for tokens, s in others}


def preset_sha256(name: str) -> str:
    """SHA-256 of the preset file's bytes, as verdicts.json records it."""
    return hashlib.sha256(preset_path(name).read_bytes()).hexdigest()


def provenance(name: str, preset: DictConfig) -> dict:
    """What verdicts.json records of what made it: the preset file's hash -- a test fails
    when a committed report's preset has changed since (tests/unit/test_committed_results.py)
    --, its margins file's hash and history (claims/margins.py), and posexp's version, the
    hash of the code that computes a run's numbers, and of the whole package (the claims'
    judging too)."""
    from posexp.version import __version__, package_sha256, source_sha256

    return {"preset_sha256": preset_sha256(name),
            "margins": margins_record(margins_file(name, preset)),
            "code": {"posexp": __version__, "source_sha256": source_sha256(),
                     "package_sha256": package_sha256()}}


def provenance_text(made: dict, runs: list[RunResult], reused: list | None = None) -> str:
    """The preset's and the code's hashes, and the margins' history against the first run
    of its own (not the runs of the encodings it reuses, plain, from another suite); a
    margins file not fixed before it is also said on the terminal, in one line."""
    code = made["code"]
    names = sorted(reused or [])

    def starts(own: bool) -> list[str]:
        return [str(r.info["started_at"]) for r in runs if r.info.get("started_at")
                and (r.encoding in names and not variant_of(r)) != own]

    theirs = starts(False)
    margins = margins_text(made["margins"], min(starts(True), default=None),
                           (names, min(theirs)) if theirs else None)
    if "**" in margins:  # bold: changed after the first run, uncommitted, never committed
        print(f"posexp reproduce: warning: {margins.replace('**', '')}", file=sys.stderr)
    return (f"Preset file sha256 {made['preset_sha256'][:16]}; posexp {code['posexp']}, "
            f"source {code['source_sha256'][:16]}, package {code['package_sha256'][:16]}.\n\n"
            + margins)


def verdict_table(rows: list[Verdict]) -> str:
    """The verdicts as a markdown table; with a preset's budgets, a column of stability."""
    stability = any(v.budget for v in rows)
    lines = ["| claim | source | kind, margin (why) | scope | measured (95% interval) | "
             f"paper | verdict | p | Holm |{' budgets |' * stability}",
             f"|---|---|---|---|---|---|---|---|---|{'---|' * stability}"]
    for v in rows:
        verdict, holm = (x if x == HOLDS else f"**{x}**" for x in (v.verdict, v.holm))
        # a p-value says which hypothesis it tests; a missing one, why it is not in the family
        p = f"— ({v.tested})" if v.p is None else f"{v.p:.2g} ({v.tested})"
        budget = f" {v.budget or '—'} |" if stability else ""
        lines.append(f"| {v.claim} | {v.source} | {v.kind} | {v.scope} | {v.measured} | "
                     f"{v.paper} | {verdict} | {p} | {holm} |{budget}")
    return "\n".join(lines)


def versions_table(runs: list[RunResult]) -> str:
    """The software every run recorded, one row per package, then the posexp code that
    trained it and its protocol (version.PROTOCOL; 0 before runs recorded one); a row whose
    value differs between runs lists each value with its runs."""
    seen: dict[str, dict[str, list[str]]] = {}
    for r in runs:
        versions = r.info.get("versions")
        code = r.info.get("code")
        for package, version in [*(versions.items() if isinstance(versions, dict) else ()),
                                 *([("posexp code", code_text(code))]
                                   if isinstance(code, dict) else []),
                                 ("protocol", r.protocol)]:
            seen.setdefault(package, {}).setdefault(str(version), []).append(r.name)
    lines = ["| package | version |", "|---|---|"]
    for package, by_version in seen.items():
        text = next(iter(by_version)) if len(by_version) == 1 else "; ".join(
            f"{v} ({', '.join(names)})" for v, names in by_version.items())
        lines.append(f"| {package} | {text} |")
    return "\n".join(lines) if seen else "(no run recorded its versions)"


def verdicts_markdown(name: str, preset: DictConfig, sections: list[tuple[str, list[Verdict]]],
                      note: str | None, failed: dict[Path, str], device: str,
                      versions: str, scored: str = "") -> str:
    """verdicts.md: a table of verdicts per section, ``note`` (a property, not a claim), the
    runs that failed and the software."""
    failures = "".join(f"* {path}: failed: {message}\n" for path, message in failed.items())
    methods = sorted({v.interval for _, rows in sections for v in rows if v.interval})
    tables = "".join(f"## {title}\n\n{verdict_table(rows)}\n\n" for title, rows in sections)
    return (
        f"# Claims about length extrapolation, preset {name}\n\n"
        f"{preset.get('description', '')}\n\n"
        "Each claim declares its kind -- superiority, non-inferiority or equivalence -- and "
        "a margin fixed in the preset with its reason. A test **holds** when the whole 95% "
        "interval of its statistic lies inside the region its kind and margin give, **does "
        "not hold** when it lies wholly outside, and is **inconclusive** otherwise; a claim "
        "holds when all its tests do. p is the claim's one-sided p-value of what its verdict "
        "asserts, named beside it: that it holds (the largest over its tests of inside the "
        "region) or that it does not (the smallest over its tests of outside the region, "
        "times their number); an inconclusive claim carries the nearer of the two. The Holm "
        "column corrects the suite's claims for multiplicity in both directions (Holm's "
        "step-down rule at 2.5% one-sided, the level of a 95% interval clear of its bound): "
        "a claim that holds, or does not hold, only uncorrected reads inconclusive there. A "
        "claim without a p-value is outside the family, and its p cell says why. Intervals: "
        f"{'; '.join(methods) or 'none'}.\n\n" + (f"{scored}\n\n" if scored else "")
        + tables
        + (f"{note}\n\n" if note else "")
        + (f"Runs that failed (their claims are not measured):\n\n{failures}\n" if failed
           else "")
        + f"## Software\n\nDevice: {device}\n\n{versions}\n")


def terminal_verdicts(rows: list[Verdict]) -> str:
    """One block per claim for a terminal: the claim, its verdict, and what was measured."""
    return "\n".join(f"{v.claim}\n    {v.verdict.upper()}"
                     f"{'' if v.holm == v.verdict else f' (after Holm: {v.holm})'}: {v.measured}"
                     + (f"\n    budgets: {v.budget}" if v.budget else "") for v in rows)
