"""The train-short/test-long claims of Press et al. (ALiBi, ICLR 2022), measured here.

A preset (``configs/reproduce/<name>.yaml``) lists the runs, the common overrides and every
threshold.  Each run trains unless a completed run of the same config exists, is scored in
both modes, and the verdicts compare what was measured with what the paper claims.  A claim
that does not hold is reported as not holding: the tool reports, it does not assume.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from posexp.config import eval_lengths
from posexp.errors import UsageError
from posexp.report import RunResult, curve_stats, grouped, load_runs, write_report
from posexp.runs import Run, atomic_write_json, atomic_write_text


@dataclass
class Verdict:
    claim: str
    measured: str
    holds: bool | None  # None: could not be measured (a run is missing)


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


def verdicts(runs: list[RunResult], preset: DictConfig) -> list[Verdict]:
    L, th = int(preset.train_seq_len), preset.thresholds
    groups = grouped(runs)

    def stats(enc: str, train_len: int = L, mode: str = "nonoverlapping") -> dict:
        members = groups.get((enc, train_len))
        return curve_stats(members, mode) if members else {}

    sin, rope, alibi, nope = (stats(e) for e in ("sinusoidal", "rope", "alibi", "nope"))
    out = []

    k = int(th.sinusoidal_blowup_at)
    s1, sk = _ppl(sin, L), _ppl(sin, k * L)
    r = sk / s1 if s1 and sk else None
    out.append(Verdict(
        f"1. Sinusoidal does not extrapolate: ppl({k}L) >= {th.sinusoidal_blowup:g} x ppl(L)",
        f"sinusoidal ppl(L)={_f(s1)}, ppl({k}L)={_f(sk)}, ratio {_f(r)}",
        None if r is None else r >= th.sinusoidal_blowup))

    r1, rk = _ppl(rope, L), _ppl(rope, k * L)
    holds = None if None in (r1, rk, sk) else (rk > r1 and rk < sk)
    out.append(Verdict(
        f"2. RoPE extrapolates only a little: ppl({k}L) > ppl(L), and below sinusoidal's "
        f"ppl({k}L)",
        f"rope ppl(L)={_f(r1)}, ppl({k}L)={_f(rk)}; sinusoidal ppl({k}L)={_f(sk)}", holds))

    a1 = _ppl(alibi, L)
    ratios = {m: (_ppl(alibi, m * L) / a1 if a1 and _ppl(alibi, m * L) else None)
              for m in th.alibi_flat_at}
    sliding = stats("alibi", mode="sliding")
    s_base = _ppl(sliding, L)
    s_ratios = {m: _ppl(sliding, m * L) / s_base for m in th.alibi_flat_at
                if s_base and _ppl(sliding, m * L)}
    measured = ", ".join(f"ppl({m}L)/ppl(L)={_f(v)}" for m, v in ratios.items())
    measured += "; sliding: " + (", ".join(f"{m}L: {v:.3f}" for m, v in s_ratios.items())
                                 or "missing")
    missing = None in ratios.values() or len(s_ratios) < len(th.alibi_flat_at)
    out.append(Verdict(
        f"3. ALiBi extrapolates: ppl(mL) <= {th.alibi_flat:g} x ppl(L) for m in "
        f"{list(th.alibi_flat_at)} (nonoverlapping), and flat under sliding evaluation",
        measured,
        None if missing else all(v <= th.alibi_flat for v in [*ratios.values(),
                                                                *s_ratios.values()])))

    learned = stats("learned")
    beyond = {length: s for length, s in learned.items() if length > L}
    out.append(Verdict(
        "4. Learned absolute positions cannot be evaluated past their table",
        ", ".join(f"{length}: {'n/a' if not s['applicable'] else 'scored'}"
                  for length, s in beyond.items()) or "missing",
        None if not beyond else all(not s["applicable"] for s in beyond.values())))

    sin2 = stats("sinusoidal", 2 * L)
    a2, s22 = _ppl(alibi, 2 * L), _ppl(sin2, 2 * L)
    out.append(Verdict(
        "5. ALiBi trained at L, evaluated at 2L, is at least as good as sinusoidal trained "
        "at 2L (equal token budget)",
        f"alibi(L={L}) ppl(2L)={_f(a2)}; sinusoidal(L={2 * L}) ppl(2L)={_f(s22)}",
        None if a2 is None or s22 is None else a2 <= s22))

    at_l = {enc: _ppl(stats(enc), L) for enc in ("learned", "sinusoidal", "rope", "alibi")}
    best_enc = min((e for e in at_l if at_l[e]), key=lambda e: at_l[e], default=None)
    n1, nk = _ppl(nope, L), _ppl(nope, k * L)
    margin = th.nope_margin
    holds = None if n1 is None or best_enc is None else n1 <= (1 + margin) * at_l[best_enc]
    out.append(Verdict(
        f"6. Without any position signal the causal mask still teaches order: NoPE ppl(L) "
        f"within {margin:.0%} of the best encoding",
        f"nope ppl(L)={_f(n1)}; best: {best_enc} {_f(at_l.get(best_enc))}; "
        f"nope extrapolates with ppl({k}L)/ppl(L)={_f(nk / n1 if n1 and nk else None)}",
        holds))
    return out


def verdict_table(rows: list[Verdict]) -> str:
    lines = ["| claim | measured | holds |", "|---|---|---|"]
    for v in rows:
        holds = {True: "yes", False: "**no**", None: "not measured"}[v.holds]
        lines.append(f"| {v.claim} | {v.measured} | {holds} |")
    return "\n".join(lines)


def reproduce(name: str, results_dir: Path, config_dir: Path,
              compose: Callable[[list[str]], DictConfig]) -> list[Verdict]:
    """Train what is missing, score every run in both modes, write the report and verdicts.
    ``compose`` turns a list of overrides into a checked config (the CLI's)."""
    from posexp.train import reevaluate, run_training

    preset = load_preset(name, config_dir)
    common = [*preset.overrides, f"experiment={preset.experiment}", f"results_dir={results_dir}"]
    configs = [compose([*common, *run]) for run in preset.runs]  # all checked before any runs
    for i, cfg in enumerate(configs, 1):
        print(f"posexp reproduce: run {i}/{len(configs)}: {cfg.run_name}", file=sys.stderr)
        run_training(cfg)
    for cfg in configs:
        run = Run(Path(cfg.results_dir) / cfg.experiment / cfg.run_name)
        scored = {p["length"] for p in run.read_eval()["curve"] if p["mode"] == "sliding"}
        sliding = OmegaConf.merge(cfg, {"eval": {"mode": "sliding", "stride": None}})
        if not set(eval_lengths(sliding)) <= scored:
            reevaluate(run, sliding)
    root = results_dir / preset.experiment
    out = root / "report"
    runs, not_done = load_runs(root)
    write_report(runs, not_done, out, f"posexp reproduce --preset {name}")
    rows = verdicts(runs, preset)
    table = verdict_table(rows)
    atomic_write_text(out / "verdicts.md", f"# Claims of Press et al. (ALiBi), preset "
                      f"{name}\n\n{preset.get('description', '')}\n\n{table}\n\n"
                      f"Device: {runs[0].info.get('device') if runs else '?'}; versions: "
                      f"{runs[0].info.get('versions') if runs else '?'}\n")
    atomic_write_json(out / "verdicts.json", {
        "preset": name, "verdicts": [asdict(v) for v in rows],
        "thresholds": OmegaConf.to_container(preset.thresholds)})
    print(f"\n{table}\n\nreport: {out}")
    return rows
