"""How a report looks: the figure style it is drawn in, and how its series are told apart.

**Styles** (``LOOKS``, ``posexp report --style screen|paper --width one|two``): ``screen``
is read on a screen or in a README -- 10 inches wide, the title over the figure and the
caption below it, PNG and SVG.  ``paper`` goes into a paper unchanged: one column (3.25
inches) or two (6.75), 8 pt text that stays legible at that size, no title, the legend below
the axes so that they keep the column's width, and the title, provenance and caption written
beside each figure (``NAME.caption.txt``, for the LaTeX caption) rather than in it; PDF and
SVG (text kept as text, TrueType fonts: what journals accept) besides PNG.  Drawing code reads
the style in force (``current``), set once per report by ``using``, so no function takes it
as an argument.

**Series**: a series' line style and marker say its *role* (``ROLES``: trained as is, trained
on randomized positions, fine-tuned, scored with a RoPE scaling, a randomized run scored at
consecutive positions) and are the same in every report, whichever series it holds.  Colour
says which encoding (or, in a report of one encoding with RoPE scalings, which method);
series that share one colour each take a shade of it, from light to dark in report order
(``ramp``), so that fourteen runs of one encoding are fourteen shades, not fourteen copies.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Look:
    """One figure style: sizes in inches and points."""

    width: float  # inches
    scale: float  # the axes' height, as a share of the height a figure asks for on screen
    dpi: int
    formats: tuple[str, ...]
    words_inside: bool  # the title and caption drawn in the figure, or written beside it
    legend_columns: int  # 0: the legend right of the axes; n: below them, in n columns
    label: float  # pt: axis labels
    small: float  # pt: ticks and legend
    note: float  # pt: the caption, annotations of lines, heatmap cells
    line: float  # width of a series' line
    marker: float  # size of a series' marker
    rc: tuple[tuple[str, object], ...] = ()  # matplotlib settings while drawing and saving


# 1300 px wide at 130 dpi, read at ~800 px in a README
SCREEN = Look(width=10.0, scale=1.0, dpi=130, formats=("png", "svg"), words_inside=True,
              legend_columns=0, label=11, small=10, note=9, line=1.6, marker=5)
# TrueType fonts in PDF and text as text in SVG: what journals and LaTeX take
PAPER_RC = (("font.size", 8), ("pdf.fonttype", 42), ("svg.fonttype", "none"),
            ("axes.linewidth", 0.6), ("xtick.major.width", 0.6), ("ytick.major.width", 0.6))
PAPER_TWO = Look(width=6.75, scale=0.5, dpi=300, formats=("pdf", "svg", "png"),
                 words_inside=False, legend_columns=2, label=8, small=7, note=7, line=1.1,
                 marker=3.5, rc=PAPER_RC)
PAPER_ONE = replace(PAPER_TWO, width=3.25, scale=0.42, legend_columns=1, line=1.0, marker=3.2)
LOOKS = {("screen", None): SCREEN, ("paper", "two"): PAPER_TWO, ("paper", "one"): PAPER_ONE}
STYLES, WIDTHS = ("screen", "paper"), ("one", "two")

_in_force = [SCREEN]


def look_of(style: str, width: str | None) -> Look:
    """The look ``--style`` and ``--width`` name; a ValueError says what is wrong."""
    if style not in STYLES:
        raise ValueError(f"--style {style!r}: choose one of {', '.join(STYLES)}")
    if width is not None and width not in WIDTHS:
        raise ValueError(f"--width {width!r}: choose one or two (columns of a paper)")
    if style == "screen" and width is not None:
        raise ValueError("--width sizes a paper's figures: use it with --style paper")
    return LOOKS[(style, width or "two") if style == "paper" else (style, None)]


def current() -> Look:
    return _in_force[-1]


@contextmanager
def using(look: Look) -> Iterator[Look]:
    """Draw and save in ``look`` until the block ends."""
    import matplotlib

    _in_force.append(look)
    try:
        with matplotlib.rc_context(dict(look.rc)):
            yield look
    finally:
        _in_force.pop()


# --- series ------------------------------------------------------------------------------
TRAINED, RANDOMIZED, FINE_TUNED, SCALED = ("trained", "randomized positions", "fine-tuned",
                                           "RoPE-scaled at eval")
CONSECUTIVE = "randomized, scored at consecutive positions"
# role -> (line style, marker): one mapping for every report
ROLES = {TRAINED: ("-", "o"), RANDOMIZED: ("--", "s"), FINE_TUNED: ("-.", "^"),
         SCALED: (":", "D"), CONSECUTIVE: ((0, (3, 1, 1, 1, 1, 1)), "v")}
LONE = 1.8  # a series of one point: its marker this much larger, so no curve hides it
SEED_LINE = 0.45  # a seed's own line: this share of the mean's width
FEW_SEEDS = 3  # up to this many seeds, each seed's line is drawn under the mean
NO_BAND_SEEDS = 2  # a t interval over two seeds (multiplier 12.7) is not drawn as a band


def role(s) -> str:
    """What a series is, for its line style: a RoPE scaling at evaluation wins over a
    randomized run scored at consecutive positions, then a fine-tune, then randomized
    training positions."""
    if s.scaling:
        return SCALED if "method" in dict(s.scaling) else CONSECUTIVE
    if s.fine_tune:
        return FINE_TUNED
    return RANDOMIZED if s.members[0].identity.get("train.random_positions") else TRAINED


TINT, SHADE = 0.45, 0.5  # a ramp runs from the colour this far to white, to this far to black


def ramp(colour: str, n: int) -> list[str]:
    """``n`` shades of ``colour``, from light to dark; the colour itself for one."""
    from matplotlib.colors import to_hex, to_rgb

    if n == 1:
        return [colour]
    rgb = to_rgb(colour)
    out = []
    for k in range(n):
        t = -TINT + (TINT + SHADE) * k / (n - 1)  # <0: towards white, >0: towards black
        out.append(to_hex([c + (1 - c) * -t if t < 0 else c * (1 - t) for c in rgb]))
    return out


def shade(units: list[tuple[Hashable, Hashable, str]]) -> dict[Hashable, str]:
    """unit -> its colour, for ``units`` (key, group, base colour) in report order: the base
    colour where a unit has it alone in its group (one figure's series: a task's), else its
    shade of the ramp of the units there that share it."""
    sharing: dict[tuple, list[Hashable]] = defaultdict(list)
    for key, group, colour in units:
        if key not in sharing[(group, colour)]:
            sharing[(group, colour)].append(key)
    return {key: c for (_, colour), keys in sharing.items()
            for key, c in zip(keys, ramp(colour, len(keys)), strict=True)}


def colour_curves(series: list, base: Callable[[object], str],
                  unit: Callable[[object, object], Hashable],
                  group: Callable[[object], Hashable] = lambda s: None) -> None:
    """Give each series' curves (one per sliding stride setting) their colours: ``base``,
    the series' colour before shading; ``unit(series, stride)``, what counts as one curve
    (the same unit in two figures gets the same shade); ``group``, which series share
    figures (a ramp spans the series of one group)."""
    colours = shade([(unit(s, stride), group(s), base(s)) for s in series
                     for stride in s.strides])
    for s in series:
        s.colours = {stride: colours[unit(s, stride)] for stride in s.strides}
