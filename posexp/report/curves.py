"""Curves: a series (and, sliding, one stride setting) as the figures draw it and the tables
print it, one cell per length: the mean over seeds of perplexity and of its ratio to the
perplexity at the training length, each with its 95% interval over seeds and documents
together (stats.over_seeds; for one seed the cluster bootstrap over the documents that
eval.json records for each point, paired for a ratio of two lengths)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from posexp.report.series import Series
from posexp.runs import Region, RunResult
from posexp.scaling import overrides as scaling_overrides
from posexp.stats import LEVEL, Interval, over_seeds

NO_INTERVAL = "no interval recorded"
PERCENT = f"{LEVEL:.0%}"


@dataclass
class Cell:
    """One length of a curve: the perplexity and its ratio to the perplexity at the training
    length, each the mean over seeds with its interval; ``ppl`` None where the length is not
    applicable (a learned table ends at its size), ``ratio`` None without a point at the
    training length."""

    ppl: Interval | None
    ratio: Interval | None = None


def _checked(iv: Interval) -> Interval:
    """An interval, or the value alone marked NO_INTERVAL where none could be taken."""
    return iv if iv.low is not None else Interval(iv.value, None, None, iv.n, NO_INTERVAL)


def ppl_cell(points: list[dict]) -> Interval:
    """The mean perplexity of one applicable point per seed, over seeds and documents."""
    return _checked(over_seeds(lambda ppl: ppl(0), [lambda _, p=p: p for p in points]))


def ratio_cell(pairs: list[tuple[dict, dict]]) -> Interval:
    """The mean over seeds of ppl(length) / ppl(training length), from (point, point at the
    training length) pairs, over seeds and documents (the same documents drawn at both
    lengths)."""
    return _checked(over_seeds(lambda ppl: ppl(0) / ppl(1),
                               [lambda i, pair=pair: pair[i] for pair in pairs]))


COMPRESSORS = (("--", "zlib -9", "zlib"), ("-.", "xz -9e", "xz"))


def compression_lines(series: list[Series]) -> list[tuple[str, str, float]]:
    """(line style, what, bits per byte) of each compressor on the scored text, where every
    series scored the same byte-level spans and a run recorded them: a byte's perplexity is
    2 ** bits per byte, so they go on the perplexity axis."""
    regions = {s.region for s in series}
    tokenizers = {(r.info.get("corpus") or {}).get("tokenizer") for s in series
                  for r in s.members}
    if len(regions) != 1 or tokenizers != {"byte"}:
        return []
    name = next(iter(regions))[0].split(" ", 1)[1]
    found = next((r.compression[name] for s in series for r in s.members
                  if name in r.compression), None)
    return [] if found is None else [(style, what, found[key])
                                     for style, what, key in COMPRESSORS if key in found]


@dataclass
class Curve:
    """What a figure draws as one line and a table prints as one row."""

    series: Series
    stride: str | None  # the sliding stride setting; None in nonoverlapping mode
    label: str
    cells: dict[int, Cell]
    # each seed's own length -> (ppl, ratio or None): the thin lines under a mean of few
    seeds: list[dict[int, tuple[float, float | None]]] = field(default_factory=list)

    @property
    def colour(self) -> str:
        return self.series.colours[self.stride]

    @property
    def legend(self) -> str:
        n = len(self.series.members)
        return self.label + (f" ({n} seeds)" if n > 1 else "")


Models = dict[tuple, RunResult]  # (identity sha256, weights sha256) -> the report's run


def models_of(series: list[Series]) -> Models:
    """The report's runs by the model each holds: a fine-tune finds its parent there by the
    identity and the weights it recorded of it (parent.identity, parent.weights_sha256),
    wherever the records now lie -- not by the directory it was set up from."""
    keys = [((r.info.get("identity_sha256"), r.info.get("weights_sha256")), r)
            for s in series for r in s.members]
    return {key: r for key, r in keys if None not in key}  # a record of both, or not found


def parent_of(run: RunResult, models: Models) -> RunResult | None:
    """The run a fine-tune continued, where the report holds it."""
    key = (run.identity.get("parent.identity"), run.identity.get("parent.weights_sha256"))
    return None if None in key else models.get(key)


def baseline(s: Series, run: RunResult, stride: str | None, models: Models) -> dict | None:
    """The point ``run``'s ratios (of series ``s``) divide by: its own ppl at the training
    length -- but for a curve scored with a RoPE scaling, its run's point as trained, and for
    a fine-tune, its parent's as trained at the parent's length, where the report holds the
    parent -- so that every curve of one model shares one denominator (a scaling that costs
    perplexity at L does not look flat against its own ppl(L))."""
    if s.fine_tune is not None:
        parent = parent_of(run, models)
        p = parent.points(s.mode, s.region).get(s.fine_tune[0]) if parent else None
    elif s.scaling is not None:
        p = run.points(s.mode, s.region).get(s.train_len)
    else:
        p = s.points(run, stride).get(s.train_len)
    return p if p is not None and p["applicable"] else None


def curve_cells(s: Series, stride: str | None,
                models: Models | None = None) -> dict[int, Cell]:
    """length -> the cell of series ``s`` (and, sliding, stride setting ``stride``), at every
    length one of its seeds was scored at; ratios over ``baseline``'s point (``models``: the
    report's runs, where a fine-tune's parent is found)."""
    by_run = [(r, s.points(r, stride)) for r in s.members]
    bases = {str(r.path): baseline(s, r, stride, models or {}) for r in s.members}
    cells = {}
    for length in sorted({length for _, points in by_run for length in points}):
        ok = [(r, points[length]) for r, points in by_run
              if length in points and points[length]["applicable"]]
        pairs = [(p, bases[str(r.path)]) for r, p in ok if bases[str(r.path)] is not None]
        cells[length] = Cell(ppl_cell([p for _, p in ok]) if ok else None,
                             ratio_cell(pairs) if pairs else None)
    return cells


def seed_values(s: Series, stride: str | None,
                models: Models) -> list[dict[int, tuple[float, float | None]]]:
    """Each seed's (ppl, ratio over ``baseline``'s point) at every applicable length."""
    out = []
    for r in s.members:
        base = baseline(s, r, stride, models)
        out.append({length: (p["ppl"], p["ppl"] / base["ppl"] if base else None)
                    for length, p in s.points(r, stride).items() if p["applicable"]})
    return out


def mode_curves(series: list[Series], mode: str) -> list[Curve]:
    """The curves of ``mode``: one per series, or per series and stride setting (labelled
    with it when the mode's curves hold more than one)."""
    ours = [(s, stride) for s in series if s.mode == mode for stride in s.strides]
    several = len({stride for _, stride in ours}) > 1
    models = models_of(series)
    return [Curve(s, stride, s.label + (f" · stride {stride}" if several else ""),
                  curve_cells(s, stride, models), seed_values(s, stride, models))
            for s, stride in ours]


def stride_note(curves: list[Curve]) -> str:
    """', stride L/2' when every curve has the one sliding stride setting it names."""
    strides = {c.stride for c in curves}
    return f", stride {strides.pop()}" if len(strides) == 1 and None not in strides else ""


def not_scored(series: list[Series], mode: str) -> list[str]:
    """One line per run of the report (a seed of a config, on a region) that holds points of
    another mode but none of ``mode``, with the command that scores it.  lm_eval mode's whole
    documents are never a span mode's region: across the two a run counts as scored in
    ``mode`` by any point of it."""
    def where(s: Series) -> Region | None:
        return None if "lm_eval" in (mode, s.mode) else s.region

    have = {(s.config, s.scaling, at, r.seed) for s in series if s.mode == mode
            for r in s.members for at in (s.region, None)}
    lines: dict[tuple, str] = {}
    for s in series:
        scaled = scaling_overrides(s.scaling)
        for r in s.members:
            if (s.config, s.scaling, where(s), r.seed) not in have:
                lines.setdefault((str(r.path), s.scaling), f"{s.label}: posexp eval {r.path} "
                                                           f"eval.mode={mode}{scaled}")
    return list(lines.values())


def notes(curves: list[Curve], series: list[Series], mode: str) -> list[str]:
    """What a figure or table of ``mode`` does not show and why: intervals not recorded,
    lengths that are not applicable, curves without a point at their training length (no
    ratio), runs not scored in this mode."""
    lines = []
    bare = [c.label for c in curves
            if any(iv.method == NO_INTERVAL for cell in c.cells.values()
                   for iv in (cell.ppl, cell.ratio) if iv)]
    if bare:
        which = "every curve" if len(bare) == len(curves) else ", ".join(bare)
        lines.append(f"{NO_INTERVAL} (eval.json from before posexp kept block losses; "
                     f"`posexp eval RUN` scores it again): {which}")
    for c in curves:
        na = [length for length, cell in c.cells.items() if cell.ppl is None]
        if na:
            random = c.series.members[0].identity.get("train.random_positions")
            why = (f"fewer positions below train.random_positions={random} than tokens to "
                   "draw them for" if random and c.series.scaling is None
                   else "no position that far; posexp does not clamp")
            lines.append(f"n/a ({why}): {c.label} at {', '.join(map(str, na))}")
        if c.cells and not any(cell.ratio for cell in c.cells.values()):
            why = ("its parent, whose ppl(L) it is divided by, is not in the report"
                   if c.series.fine_tune else "no point at its training length")
            lines.append(f"no ratio ({why}): {c.label}")
    if any(c.series.scaling or c.series.fine_tune for c in curves):
        lines.append("ratios of a curve scored with a RoPE scaling are over its run's ppl(L) "
                     "as trained, and those of a fine-tune over its parent's: one "
                     "denominator per model")
    missing = not_scored(series, mode)
    if missing:
        lines.append(f"not scored in {mode} mode: " + "; ".join(missing))
    return lines


def fmt(x: float) -> str:
    """Four significant digits, never an exponent: 5.523, 14.82, 107.3, 12345."""
    return f"{x:.{max(0, 3 - math.floor(math.log10(abs(x))))}f}" if x else "0"


def cell_text(iv: Interval | None, fmt: Callable[[float], str], bold: bool = False,
               interval: bool = True) -> str:
    if iv is None:
        return "—"
    value = f"**{fmt(iv.value)}**" if bold else fmt(iv.value)
    if not interval or iv.low is None or iv.high is None:
        return value
    return f"{value} [{fmt(iv.low)}, {fmt(iv.high)}]"
