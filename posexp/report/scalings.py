"""The method x length table of RoPE scalings: a run scored as trained and with each scaling
(``posexp eval RUN eval.rope_scaling=...``), one row per scaling (method and factor) below
the plain row, one column per evaluation length.  Each cell holds the perplexity and its
ratio to the plain row at the same length -- paired: the same run's same documents scored
both ways, so the text's difficulty cancels and the interval is that of the scaling's
effect, not of two unrelated numbers.  One table per model, mode and scored region, instead
of one curve table per scaling, so that methods are read side by side."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from posexp.report.curves import PERCENT, Cell, fmt, ppl_cell, ratio_cell
from posexp.report.series import Series
from posexp.scaling import METHODS, Key, yarn_bands
from posexp.scaling import text as scaling_text
from posexp.stats import Interval

LLAMA2 = (4096, 128, yarn_bands(128, 10000.0, 4096))  # the regime YaRN was made for


@dataclass
class ScalingTable:
    """One model's scorings in one mode (and, sliding, one stride setting): ``rows`` are
    (label, length -> Cell whose ``ratio`` is over the plain row at that length)."""

    model: str  # the plain series' label
    mode: str
    lengths: list[int]
    rows: list[tuple[str, dict[int, Cell]]]
    notes: list[str]  # lines below the table: YaRN's bands at this model's L and head size


def _cells(scaled: Series, plain: Series, stride: str | None) -> dict[int, Cell]:
    """length -> the scaled series' perplexity (over its seeds) and its ratio to the plain
    series' at that length (over the seeds scored both ways, paired run by run)."""
    plain_points = {str(r.path): plain.points(r, stride) for r in plain.members}
    by_run = [(r, scaled.points(r, stride)) for r in scaled.members]
    cells = {}
    for length in sorted({n for _, points in by_run for n in points}):
        ok = [(r, points[length]) for r, points in by_run
              if length in points and points[length]["applicable"]]
        pairs = [(p, base) for r, p in ok
                 if (base := plain_points.get(str(r.path), {}).get(length)) is not None
                 and base["applicable"]]
        cells[length] = Cell(ppl_cell([p for _, p in ok]) if ok else None,
                             ratio_cell(pairs) if pairs else None)
    return cells


def scaling_tables(series: list[Series], mode: str) -> list[ScalingTable]:
    """A table for each series of ``mode`` scored as trained that was also scored with a
    RoPE scaling (fine-tunes are models of their own, not rows here)."""
    tables = []
    for plain in (s for s in series if s.mode == mode and s.scaling is None):
        scaled = [s for s in series if s.mode == mode and s.scaling is not None
                  and (s.config, s.region) == (plain.config, plain.region)]
        if not scaled:
            continue
        for stride in plain.strides:
            rows = [("plain", _cells(plain, plain, stride))]
            rows += [(scaling_text(s.scaling), _cells(s, plain, stride)) for s in scaled]
            lengths = sorted({n for _, cells in rows for n in cells})
            label = plain.label + (f" · stride {stride}" if len(plain.strides) > 1 else "")
            tables.append(ScalingTable(label, mode, lengths, rows,
                                       bands_notes(plain, [s.scaling for s in scaled])))
    return tables


def bands_notes(plain: Series, scalings: list[Key]) -> list[str]:
    """For each YaRN setting among ``scalings``, how many of the model's frequency pairs it
    keeps, blends and interpolates at the length the model was trained at -- beside Llama
    2's, the regime the method was made for -- so that a reader sees how far the setting is
    from it (at a short L nearly every pair is interpolated: YaRN is nearly PI)."""
    ident = plain.members[0].identity
    if ident.get("encoding.base") is None or not ident.get("model.n_head"):
        return []
    d = int(ident["model.d_model"]) // int(ident["model.n_head"])
    L = plain.root_len  # RoPE scaling's L: a fine-tune's is its root run's (original_len)
    settings = sorted({(r["beta_fast"], r["beta_slow"]) for k in scalings if k is not None
                       and (r := dict(k)).get("method") == "yarn"})

    def shares(bands: tuple[int, int, int]) -> str:
        return " / ".join(f"{100 * n / sum(bands):.0f}%" for n in bands)

    notes = []
    for fast, slow in settings:
        bands = yarn_bands(d, float(ident["encoding.base"]), L, fast, slow)
        paper = {"beta_fast": fast, "beta_slow": slow} == METHODS["yarn"].defaults()
        params = "" if paper else f", beta_fast {fast:g}, beta_slow {slow:g}"
        notes.append(f"YaRN's frequency pairs at L={L}, head size {d}{params}: {shares(bands)} "
                     f"kept / blended / interpolated ({bands[0]}, {bands[1]}, {bands[2]} of "
                     f"{sum(bands)}); Llama 2 at L={LLAMA2[0]}, head size {LLAMA2[1]}: "
                     f"{shares(LLAMA2[2])}.")
    return notes


def ratio_fmt(x: float) -> str:
    return f"{x:.3f}"


def cell_text(cell: Cell | None, plain_row: bool,
              text: Callable[[Interval, Callable[[float], str]], str] | None = None,
              times: str = "\u00d7") -> str:
    """'ppl [low, high] (xratio [low, high])'; the plain row's ratio is 1 by definition and
    left out.  ``text`` writes a value with its interval (interval_text by default; the
    LaTeX table passes its own) and ``times`` is the ratio's sign."""
    if cell is None:
        return ""
    if cell.ppl is None:
        return "n/a"
    text = text or interval_text
    ppl = text(cell.ppl, fmt)
    if plain_row or cell.ratio is None:
        return ppl
    return f"{ppl} ({times}{text(cell.ratio, ratio_fmt)})"


def interval_text(iv: Interval, form: Callable[[float], str]) -> str:
    if iv.low is None or iv.high is None:
        return form(iv.value)
    return f"{form(iv.value)} [{form(iv.low)}, {form(iv.high)}]"


CAPTION = (f"Perplexity, mean over seeds [{PERCENT} interval], and \u00d7 its ratio to the plain "
           f"row at the same length [{PERCENT} interval, paired: each run's own documents "
           "scored as trained and scaled].")


def scaling_markdown(series: list[Series], mode: str, heading: str) -> list[str]:
    """The report's section of ``mode``'s scaling tables (none without a scaled series)."""
    tables = scaling_tables(series, mode)
    if not tables:
        return []
    lines = [f"## {heading}: RoPE scalings by length", "", CAPTION, ""]
    for t in tables:
        lines += [f"### {t.model}", "",
                  "| method | " + " | ".join(map(str, t.lengths)) + " |",
                  "|---|" + "---:|" * len(t.lengths)]
        for i, (label, cells) in enumerate(t.rows):
            texts = [cell_text(cells.get(n), i == 0) for n in t.lengths]
            lines.append("| " + " | ".join([label, *texts]) + " |")
        lines += [""] + [line for note in t.notes for line in (note, "")]
    return lines
