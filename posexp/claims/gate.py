"""The learning gate of the language-model claims (issue #43): a claim about behaviour past
the training length is judged only on arms that learned at it.

An arm learned when its bits per byte at L -- nonoverlapping, as trained (no RoPE scaling),
on the scored text -- at its weakest seed lie below a bar the margins file states
(``learned_bar``): what a general-purpose compressor makes of the same text (zlib -9 or xz
-9e, recorded with the scored spans).  A model that compresses the text worse than zlib has
not learned the language, and what it does past L says nothing about its encoding.  A curve
scored with a RoPE scaling is its run's arm; a fine-tune's arm is the run it continued.  A
claim *about* quality at L (``Claim.gated`` false) is judged on every arm: its answer is the
measurement.  verdicts.md prints the bar and every arm's value (``gate_note``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from omegaconf import DictConfig

from posexp.report.curves import models_of, parent_of
from posexp.report.series import build_series
from posexp.runs import Region, RunResult

NONOVERLAPPING = "nonoverlapping"
COMPRESSORS = {"zlib": "zlib -9", "xz": "xz -9e"}


@dataclass(frozen=True)
class Bar:
    """The margins file's learned_bar: the compressor an arm must beat at L, and why."""

    compressor: str  # zlib | xz
    reason: str

    @classmethod
    def of(cls, thresholds: DictConfig) -> Bar | None:
        bar = thresholds.get("learned_bar")
        return None if bar is None else cls(str(bar.compressor), str(bar.reason))

    def value(self, runs: list[RunResult], region: Region) -> float | None:
        """The compressor's bits per byte of the region's scored text, where recorded."""
        name = region[0].split(" ", 1)[1] if " " in region[0] else region[0]
        return next((r.compression[name][self.compressor] for r in runs
                     if self.compressor in r.compression.get(name, {})), None)


def arm_values(members: list[RunResult], region: Region,
               models: dict) -> dict[int, float | None]:
    """seed -> bits per byte at L of the model each member scores (a fine-tune's parent)."""
    out = {}
    for run in members:
        model = parent_of(run, models) if run.identity.get("parent.identity") else run
        point = (model.points(NONOVERLAPPING, region).get(model.train_len)
                 if model is not None else None)
        out[run.seed] = (point["bits_per_byte"] if point and point["applicable"]
                         and point.get("bits_per_byte") is not None else None)
    return out


def unlearned(bar: Bar, series: dict, models: dict) -> str | None:
    """Why a claim on these series (need -> Series) carries no verdict, or None: an arm at or
    above the bar at its weakest seed, or one whose value cannot be read.  Each arm is named
    once, as trained (a scaled curve's run, a fine-tune's parent)."""
    problems: dict[str, str] = {}
    for need, s in series.items():
        limit = bar.value(s.members, s.region)
        if limit is None:
            return f"the gate's bar ({COMPRESSORS[bar.compressor]}) is not recorded for its text"
        arm = arm_text(need)
        values = arm_values(s.members, s.region, models)
        if None in values.values():
            problems[arm] = f"{arm} has no point at its training length to gate on"
            continue
        seed, worst = max(values.items(), key=lambda kv: kv[1])
        if worst >= limit:
            problems[arm] = (f"{arm} {worst:.3f} bits per byte at L (seed {seed}), not below "
                             f"{COMPRESSORS[bar.compressor]}'s {limit:.3f}")
    return f"did not learn: {'; '.join(problems.values())}" if problems else None


def arm_text(need) -> str:
    """The arm a needed curve is gated by, as a verdict names it: the run as trained, or for
    a fine-tune its parent."""
    length = need.fine_tune[0] if need.fine_tune else need.train_len
    return replace(need, train_len=length, mode=NONOVERLAPPING, scaling=None,
                   fine_tune=None).text


def gate_note(budgets: list[tuple[str, list[RunResult]]], preset: DictConfig) -> str | None:
    """The gate's section of verdicts.md: the bar, and each arm's bits per byte at L per
    seed, its weakest and whether it passes, in a table for each training budget
    (``budgets``: (its name, its runs), the main one first; one unnamed for a preset without
    budgets); None for a preset without a bar."""
    bar = Bar.of(preset.thresholds)
    if bar is None:
        return None
    lines = ["## The learning gate", "",
             f"A claim about behaviour past L is judged only on arms whose bits per byte at L "
             f"(nonoverlapping, as trained) at their weakest seed lie below "
             f"{COMPRESSORS[bar.compressor]}'s on the same scored text ({bar.reason}). A "
             "claim about quality at L is judged on every arm. A fine-tune is gated by its "
             "parent."]
    for name, runs in budgets:
        lines += ["", *([f"{name}:", ""] if name else []), *gate_table(bar, runs)]
    return "\n".join(lines)


def gate_table(bar: Bar, runs: list[RunResult]) -> list[str]:
    series = build_series(runs)[0]
    models = models_of(series)
    arms = [s for s in series if s.mode == NONOVERLAPPING and s.scaling is None
            and s.fine_tune is None]  # a fine-tune is its parent's arm
    if not arms:
        return ["No arm of this budget is recorded yet."]
    lines = ["| arm | bits per byte at L, by seed | weakest | bar | learned |",
             "|---|---|---:|---:|---|"]
    for s in sorted(arms, key=lambda s: s.label):
        limit = bar.value(s.members, s.region)
        values = arm_values(s.members, s.region, models)
        read = {k: v for k, v in values.items() if v is not None}
        worst = max(read.values()) if read else None
        by_seed = ", ".join(f"{k}: {v:.3f}" if v is not None else f"{k}: —"
                            for k, v in sorted(values.items()))
        passed = ("—" if worst is None or limit is None or len(read) < len(values)
                  else "yes" if worst < limit else "**no**")
        lines.append(f"| {s.label} | {by_seed} | {_num(worst)} | {_num(limit)} | {passed} |")
    return lines


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"
