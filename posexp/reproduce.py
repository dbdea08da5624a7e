"""The train-short/test-long claims of Press et al. (ALiBi, ICLR 2022), measured here.

A preset (``configs/reproduce/<name>.yaml``) lists the runs, the common overrides and every
threshold.  Each run trains unless a completed run of the same identity exists, is scored in
both modes, and the verdicts compare what was measured with what the paper claims.  A claim
that does not hold is reported as not holding: the tool reports, it does not assume.

The verdicts read exactly the preset's runs.  A run that fails does not stop the others; every
claim that needs it is "not measured", and so is a claim whose runs hold no common scored
region: a claim never compares points scored on different validation tokens, or in different
modes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from posexp.errors import PosexpError, UsageError
from posexp.report import Series, build_series, curve_stats, region_text, write_report
from posexp.runs import (
    MISSING,
    Region,
    RunResult,
    atomic_write_json,
    atomic_write_text,
    load_run,
    split_runs,
)

NONOVERLAPPING, SLIDING = "nonoverlapping", "sliding"
Need = tuple[str, int, str]  # a curve a claim compares: (encoding, training length, mode)


@dataclass
class Verdict:
    claim: str
    measured: str
    holds: bool | None  # None: not measured (a run is missing, or no common scored region)


def load_preset(name: str, config_dir: Path) -> DictConfig:
    """A preset by name from configs/reproduce/, or a YAML file of the same shape."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else (
        config_dir / "reproduce" / f"{name}.yaml")
    if not path.is_file():
        found = sorted(p.stem for p in (config_dir / "reproduce").glob("*.yaml"))
        raise UsageError(f"there is no reproduce preset {name!r}; available: {', '.join(found)}")
    return OmegaConf.load(path)


def _ppl(stats: dict, length: int) -> float | None:
    s = stats.get(length)
    return s["mean"] if s and s["applicable"] else None


def _f(x: float | None) -> str:
    return "missing" if x is None else f"{x:.3f}"


class Curves:
    """The preset's completed runs as series, for claims to look up by (encoding, training
    length, mode), every curve of one claim on one scored region."""

    def __init__(self, runs: list[RunResult], n_tokens: int) -> None:
        self.series = build_series(runs)[0]
        self.n_tokens = n_tokens

    def measure(self, needs: list[Need]) -> dict[Need, dict[int, dict]] | str:
        """The per-length stats of each needed curve, all on one region of eval.tokens
        tokens, or why there is none.  eval.tokens puts its region at the end of the
        validation split, so of the regions every curve holds, the one that starts latest
        is the preset's own; older runs may hold points on other regions beside it."""
        found: dict[Need, dict[Region, Series]] = {}
        for need in needs:
            enc, train_len, mode = need
            by_region: dict[Region, Series] = {}
            for s in self.series:
                if (s.encoding, s.train_len, s.mode) != need:
                    continue
                if s.region in by_region:
                    return (f"two configs of {enc} L={train_len}: {by_region[s.region].label} "
                            f"and {s.label}")
                by_region[s.region] = s
            if not by_region:
                return f"no completed run of {enc} L={train_len} with {mode} points"
            found[need] = by_region
        common = set.intersection(*(set(by_region) for by_region in found.values()))
        common = {region for region in common if region[1] == self.n_tokens}
        if not common:
            held = "; ".join(f"{enc} L={L} {mode}: "
                             + ", ".join(region_text(r) for r in sorted(found[(enc, L, mode)]))
                             for enc, L, mode in needs)
            return (f"no scored region of {self.n_tokens} tokens common to its runs ({held})")
        region = max(common)
        return {need: curve_stats(found[need][region].members, need[2], region)
                for need in needs}


def _claim(curves: Curves, claim: str, needs: list[Need],
           judge: Callable[..., tuple[str, bool | None]]) -> Verdict:
    """A verdict from ``judge``, called with the stats of each needed curve in order, or "not
    measured" with the reason when the curves cannot be compared."""
    got = curves.measure(needs)
    if isinstance(got, str):
        return Verdict(claim, f"not measured: {got}", None)
    return Verdict(claim, *judge(*(got[need] for need in needs)))


def verdicts(runs: list[RunResult], preset: DictConfig, n_tokens: int) -> list[Verdict]:
    """The claims measured on ``runs`` (the preset's completed runs), each on the region of
    ``n_tokens`` (the preset's eval.tokens) scored tokens."""
    L, th = int(preset.train_seq_len), preset.thresholds
    k = int(th.sinusoidal_blowup_at)
    curves = Curves(runs, n_tokens)
    out = []

    def blowup(sin: dict) -> tuple[str, bool | None]:
        s1, sk = _ppl(sin, L), _ppl(sin, k * L)
        r = sk / s1 if s1 and sk else None
        return (f"sinusoidal ppl(L)={_f(s1)}, ppl({k}L)={_f(sk)}, ratio {_f(r)}",
                None if r is None else r >= th.sinusoidal_blowup)

    out.append(_claim(
        curves, f"1. Sinusoidal does not extrapolate: ppl({k}L) >= {th.sinusoidal_blowup:g} x "
        "ppl(L)", [("sinusoidal", L, NONOVERLAPPING)], blowup))

    def rope_a_little(rope: dict, sin: dict) -> tuple[str, bool | None]:
        r1, rk, sk = _ppl(rope, L), _ppl(rope, k * L), _ppl(sin, k * L)
        return (f"rope ppl(L)={_f(r1)}, ppl({k}L)={_f(rk)}; sinusoidal ppl({k}L)={_f(sk)}",
                None if None in (r1, rk, sk) else r1 < rk < sk)

    out.append(_claim(
        curves, f"2. RoPE extrapolates only a little: ppl({k}L) > ppl(L), and below "
        f"sinusoidal's ppl({k}L)",
        [("rope", L, NONOVERLAPPING), ("sinusoidal", L, NONOVERLAPPING)], rope_a_little))

    def alibi_flat(nonoverlapping: dict, sliding: dict) -> tuple[str, bool | None]:
        # each mode's ratios are to the same mode's ppl(L): the modes are never mixed
        ratios = {}
        for mode, stats in ((NONOVERLAPPING, nonoverlapping), (SLIDING, sliding)):
            base = _ppl(stats, L)
            for m in th.alibi_flat_at:
                at = _ppl(stats, m * L)
                ratios[(mode, m)] = at / base if base and at else None
        measured = ", ".join(f"ppl({m}L)/ppl(L)={_f(ratios[(NONOVERLAPPING, m)])}"
                             for m in th.alibi_flat_at)
        measured += "; sliding: " + ", ".join(f"{m}L: {_f(ratios[(SLIDING, m)])}"
                                              for m in th.alibi_flat_at)
        if None in ratios.values():
            return measured, None
        return measured, all(v <= th.alibi_flat for v in ratios.values())

    out.append(_claim(
        curves, f"3. ALiBi extrapolates: ppl(mL) <= {th.alibi_flat:g} x ppl(L) for m in "
        f"{list(th.alibi_flat_at)} (nonoverlapping), and flat under sliding evaluation",
        [("alibi", L, NONOVERLAPPING), ("alibi", L, SLIDING)], alibi_flat))

    def learned_stops(learned: dict) -> tuple[str, bool | None]:
        beyond = {length: s for length, s in learned.items() if length > L}
        return (", ".join(f"{length}: {'n/a' if not s['applicable'] else 'scored'}"
                          for length, s in beyond.items()) or "missing",
                None if not beyond else all(not s["applicable"] for s in beyond.values()))

    out.append(_claim(
        curves, "4. Learned absolute positions cannot be evaluated past their table",
        [("learned", L, NONOVERLAPPING)], learned_stops))

    def alibi_beats_longer(alibi: dict, sin2: dict) -> tuple[str, bool | None]:
        a2, s22 = _ppl(alibi, 2 * L), _ppl(sin2, 2 * L)
        return (f"alibi(L={L}) ppl(2L)={_f(a2)}; sinusoidal(L={2 * L}) ppl(2L)={_f(s22)}",
                None if a2 is None or s22 is None else a2 <= s22)

    out.append(_claim(
        curves, "5. ALiBi trained at L, evaluated at 2L, is at least as good as sinusoidal "
        "trained at 2L (equal token budget)",
        [("alibi", L, NONOVERLAPPING), ("sinusoidal", 2 * L, NONOVERLAPPING)],
        alibi_beats_longer))

    others = ("learned", "sinusoidal", "rope", "alibi")
    margin = th.nope_margin

    def nope_close(nope: dict, *encoded: dict) -> tuple[str, bool | None]:
        at_l = {enc: _ppl(stats, L) for enc, stats in zip(others, encoded, strict=True)}
        best = min((e for e in at_l if at_l[e]), key=lambda e: at_l[e], default=None)
        n1, nk = _ppl(nope, L), _ppl(nope, k * L)
        return (f"nope ppl(L)={_f(n1)}; best: {best} {_f(at_l.get(best))}; nope extrapolates "
                f"with ppl({k}L)/ppl(L)={_f(nk / n1 if n1 and nk else None)}",
                None if n1 is None or best is None else n1 <= (1 + margin) * at_l[best])

    out.append(_claim(
        curves, f"6. Without any position signal the causal mask still teaches order: NoPE "
        f"ppl(L) within {margin:.0%} of the best encoding",
        [("nope", L, NONOVERLAPPING), *((enc, L, NONOVERLAPPING) for enc in others)],
        nope_close))
    return out


def verdict_table(rows: list[Verdict]) -> str:
    lines = ["| claim | measured | holds |", "|---|---|---|"]
    for v in rows:
        holds = {True: "yes", False: "**no**", None: "not measured"}[v.holds]
        lines.append(f"| {v.claim} | {v.measured} | {holds} |")
    return "\n".join(lines)


def versions_text(versions: object) -> str:
    """{"posexp": "0.1.0", "python": "3.11.7", ...} as "posexp 0.1.0, python 3.11.7, ..."."""
    if not isinstance(versions, dict):
        return "?"
    return ", ".join(f"{name} {version}" for name, version in versions.items())


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def reproduce(name: str, results_dir: Path, config_dir: Path,
              compose: Callable[[list[str]], DictConfig]) -> list[Verdict]:
    """Train what is missing, score every run in both modes, write the report and verdicts.
    ``compose`` turns a list of overrides into a checked config (the CLI's).  A run that fails
    is named and the others go on; after the report, a PosexpError says how many failed."""
    from posexp.experiment import run as run_experiment
    from posexp.train import Interrupted

    preset = load_preset(name, config_dir)
    common = [*preset.overrides, f"experiment={preset.experiment}", f"results_dir={results_dir}"]
    configs = [compose([*common, *run]) for run in preset.runs]  # all checked before any runs
    if not configs:
        raise UsageError(f"preset {name} lists no runs")
    n_tokens = {int(cfg.eval.tokens) for cfg in configs}
    if len(n_tokens) > 1:
        raise UsageError(f"the runs of preset {name} score different eval.tokens "
                         f"({', '.join(map(str, sorted(n_tokens)))}); its claims compare them "
                         "on the same tokens")
    paths = [Path(cfg.results_dir) / cfg.experiment / cfg.run_name for cfg in configs]
    failed: dict[Path, str] = {}
    for i, (cfg, path) in enumerate(zip(configs, paths, strict=True), 1):
        print(f"posexp reproduce: run {i}/{len(configs)}: {cfg.run_name}", file=sys.stderr)
        sliding = OmegaConf.merge(cfg, {"eval": {"mode": SLIDING, "stride": None}})
        try:
            # trains (or finds the run completed), then scores only the sliding points
            for each in (cfg, sliding):
                run_experiment(each)
        except Interrupted:
            raise  # a signal stops the whole suite; the run is checkpointed
        except Exception as e:  # one failed run must not stop the others
            failed[path] = _first_line(e)
            print(f"posexp reproduce: {cfg.experiment}/{cfg.run_name}: failed: {failed[path]}",
                  file=sys.stderr)

    results = []
    for path in paths:
        r = load_run(path)
        if r.status == MISSING and path in failed:  # it failed before its directory held a run
            r = RunResult(path, {"status": "not started", "reason": failed[path]})
        results.append(r)
    runs, not_done = split_runs(results)
    out = results_dir / preset.experiment / "report"
    write_report(runs, not_done, out, f"posexp reproduce --preset {name}")
    # a run that failed after it completed (scoring its sliding points) is in the report, but
    # its claims are not measured
    rows = verdicts([r for r in runs if r.path not in failed], preset, n_tokens.pop())
    table = verdict_table(rows)
    failures = "".join(f"* {path}: failed: {message}\n" for path, message in failed.items())
    first = runs[0].info if runs else {}
    atomic_write_text(out / "verdicts.md", (
        f"# Claims of Press et al. (ALiBi), preset {name}\n\n"
        f"{preset.get('description', '')}\n\n{table}\n\n"
        + (f"Runs that failed (their claims are not measured):\n\n{failures}\n" if failed
           else "")
        + f"Device: {first.get('device', '?')}; versions: {versions_text(first.get('versions'))}"
        "\n"))
    atomic_write_json(out / "verdicts.json", {
        "preset": name, "verdicts": [asdict(v) for v in rows],
        "failed": {str(path): message for path, message in failed.items()},
        "thresholds": OmegaConf.to_container(preset.thresholds)})
    print(f"\n{table}\n\nreport: {out}")
    if failed:
        raise PosexpError(f"{len(failed)} of {len(configs)} runs failed; their claims are not "
                          "measured")
    return rows
