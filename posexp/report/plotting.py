"""Drawing: the figure layout every report figure shares (a title over the whole width, a
body with the axes, the legend to their right and the caption below, outside the data),
log axes with plain ticks, a curve with its band, reference lines, and saving as PNG and
SVG."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

from posexp.report.curves import NO_INTERVAL, PERCENT
from posexp.report.series import Region
from posexp.runs import atomic_write, is_spread
from posexp.stats import Interval

GREY = "#777777"  # training lengths and the ratio 1: reference lines, no series' colour
MIN_SPAN = 1.05   # a perplexity or ratio axis spans at least x/÷ 5% around its data's middle

WIDTH = 10.0        # inches: 1300 px at DPI, read at ~800 px in a README
DPI = 130
TITLE_WRAP = 118    # characters per line of the title (11 pt) over the figure's width
CAPTION_WRAP = 135  # and of the caption (9 pt)


def scored_text(regions: set[Region]) -> str:
    if len(regions) == 1:
        region = next(iter(regions))
        spread = " spread over the split" if is_spread(region) else ""
        return f"the same {region[1]:,} validation tokens{spread}"
    return "the same validation tokens at every length (one region per label)"


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def titled(title: str, subtitle: str, height: float):
    """A figure with the title over its whole width and, below it, a body ``height`` inches
    high.  Returns (figure, body)."""
    lines = [*textwrap.wrap(title, TITLE_WRAP), *textwrap.wrap(subtitle, TITLE_WRAP)]
    head_height = 0.22 * len(lines) + 0.15
    fig = pyplot().figure(figsize=(WIDTH, head_height + height), layout="constrained")
    grid = fig.add_gridspec(2, 1, height_ratios=[head_height, height])
    head, body = fig.add_subfigure(grid[0, 0]), fig.add_subfigure(grid[1, 0])
    body.heights = grid  # the body grows to fit its legend (_fit_height)
    head.text(0.01, 0.5, "\n".join(lines), ha="left", va="center", fontsize=11)
    return fig, body


def new_figure(title: str, subtitle: str, height: float, rows: int = 1,
            height_ratios: list[int] | None = None):
    """A titled figure whose body holds ``rows`` axes stacked on one x axis (the body also
    holds the legend, to their right, and the caption, below them).  Returns (figure,
    body, axes)."""
    fig, body = titled(title, subtitle, height)
    axes = body.subplots(rows, 1, sharex=True, height_ratios=height_ratios, squeeze=False)
    for ax in axes[:, 0]:
        ax.grid(True, which="major", color="#dddddd", linewidth=0.8)
        ax.tick_params(labelsize=10, labelbottom=True)
    return fig, body, list(axes[:, 0])


def log_ticks(lo: float, hi: float) -> list[float]:
    """Plain round numbers for a log axis from ``lo`` to ``hi``: 1, 2, 5 in each decade (and
    3 where that gives fewer than four), or, over a short span, evenly spaced ones."""
    from matplotlib.ticker import MaxNLocator

    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    for steps in ((1, 2, 5), (1, 2, 3, 5)):
        ticks = [m * 10.0**d for d in decades for m in steps if lo <= m * 10.0**d <= hi]
        if len(ticks) >= 4:
            return ticks
    if len(ticks) >= 3:
        return ticks
    return [t for t in MaxNLocator(5, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
            if lo <= t <= hi]


def log_y(ax, intervals: list[Interval], extra: tuple[float, ...] = ()) -> None:
    """A log y axis over the values of ``intervals`` (and ``extra``) and their bands, a band
    cut off at twice the values' range (a t interval over few seeds can be that wide, or
    reach below zero); at least MIN_SPAN either side of the middle, so that a change of a
    fraction of a percent looks as small as it is.  Plain tick labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    values = [iv.value for iv in intervals if iv.value > 0] + list(extra) or [1.0]
    ends = [x for iv in intervals for x in (iv.low, iv.high) if x is not None and x > 0]
    lo = max(min([*values, *ends]), min(values) / 2)
    hi = min(max([*values, *ends]), max(values) * 2)
    middle = math.sqrt(lo * hi)
    lo, hi = min(lo, middle / MIN_SPAN), max(hi, middle * MIN_SPAN)
    pad = (hi / lo) ** 0.04
    ax.set_yscale("log")
    ax.set_ylim(lo / pad, hi * pad)
    ax.yaxis.set_major_locator(FixedLocator(log_ticks(lo / pad, hi * pad)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def log2_x(ax, ticks: list[int], lo: float, hi: float) -> None:
    """A log2 x axis with plain labels exactly at ``ticks``."""
    from matplotlib.ticker import NullLocator

    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(lo, hi)


def draw(ax, colour: str, style: tuple[str, str], xs: list[float],
          intervals: list[Interval], label: str | None = None, alpha: float = 0.18) -> None:
    """A curve and its intervals: a band (of opacity ``alpha``), or an error bar for a lone
    point."""
    linestyle, marker = style
    ys = [iv.value for iv in intervals]
    # a lone point (a learned table ends at its training length) is drawn above the curves
    # that may pass through it
    ax.plot(xs, ys, color=colour, linestyle=linestyle, marker=marker, markersize=5,
            linewidth=1.6, label=label, zorder=3 + (len(xs) == 1))
    low = [math.nan if iv.low is None else iv.low for iv in intervals]
    high = [math.nan if iv.high is None else iv.high for iv in intervals]
    if len(xs) == 1 and not math.isnan(low[0]):
        ax.errorbar(xs, ys, yerr=[[ys[0] - low[0]], [high[0] - ys[0]]], color=colour,
                    capsize=3, linewidth=1, zorder=4)
    elif len(xs) > 1:
        ax.fill_between(xs, low, high, color=colour, alpha=alpha, linewidth=0, zorder=2)


def train_lengths(axes: list, lengths: list[int], label: str = "L={}") -> None:
    """A grey dotted line at each training length inside the x axis' limits, labelled in
    the first of ``axes`` (``label`` with the length in its braces)."""
    lo, hi = axes[0].get_xlim()
    to_axes = axes[0].transAxes.inverted()
    for length in (x for x in lengths if lo < x < hi):
        for ax in axes:
            ax.axvline(length, color=GREY, linestyle=":", linewidth=1.2, zorder=1)
        # where the label would run past the right edge (into the legend), it goes left of
        # its line: a 9 pt character is about 5 pt wide
        text = label.format(length)
        room = 1 - to_axes.transform(axes[0].transData.transform((length, 1)))[0]
        left = room * axes[0].bbox.width < (5 * len(text) + 3) * axes[0].figure.dpi / 72
        axes[0].annotate(text, xy=(length, 1), xycoords=("data", "axes fraction"),
                         xytext=(-3 if left else 3, -3), textcoords="offset points",
                         ha="right" if left else "left", va="top", fontsize=9, color=GREY,
                         in_layout=False)


def legend_and_caption(body, ax, caption: list[str], bands: bool,
                        references: tuple[tuple[str, str], ...] = ((":", "training length L"),),
                        ) -> None:
    """The series' legend to the right of the axes and the caption below them: outside the
    data, so that neither hides a point.  ``bands``: whether the figure draws intervals;
    ``references``: (line style, meaning) of the grey reference lines."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles, labels = ax.get_legend_handles_labels()
    for linestyle, meaning in references:
        handles.append(Line2D([], [], color=GREY, linestyle=linestyle, linewidth=1.2))
        labels.append(meaning)
    if bands:
        handles.append(Patch(color=GREY, alpha=0.3, linewidth=0))
        labels.append(f"{PERCENT} interval")
    labels = [legend_label(label) for label in labels]
    body.legend(handles, labels, loc="outside right upper", fontsize=10, frameon=False)
    _fit_height(body, labels, len(_caption_lines(caption)))
    add_caption(body, caption)


def _fit_height(body, labels: list[str], caption_lines: int) -> None:
    """Make the body tall enough for a legend of ``labels`` (10 pt lines, half a line
    between entries) above a caption of ``caption_lines`` (9 pt): many long labels would
    otherwise run into the caption and off the figure's foot."""
    lines = sum(label.count("\n") + 1 for label in labels)
    needed = (12 * lines + 5 * len(labels) + 13 * caption_lines + 36) / 72  # inches
    grid = body.heights
    head, height = grid.get_height_ratios()
    if needed > height:
        grid.set_height_ratios([head, needed])
        body.figure.set_figheight(head + needed)


def add_caption(body, caption: list[str]) -> None:
    """The caption's lines below the body's axes, wrapped."""
    from matplotlib.lines import Line2D

    lines = _caption_lines(caption)
    if lines:
        blank = Line2D([], [], linestyle="none")
        body.legend([blank] * len(lines), lines, loc="outside lower left", fontsize=9,
                    frameon=False, handlelength=0, handletextpad=0, borderaxespad=0.2,
                    labelspacing=0.25)


def _caption_lines(caption: list[str]) -> list[str]:
    return [line for text in caption  # paths and commands stay whole
            for line in textwrap.wrap(text, CAPTION_WRAP, subsequent_indent="    ",
                                      break_long_words=False, break_on_hyphens=False)]


LEGEND_WRAP = 44  # characters: a longer label goes on more lines, so the axes keep their width


def legend_label(label: str) -> str:
    """A series label on lines of at most LEGEND_WRAP characters, broken between its parts
    ('rope L=16 · d_model=32 · ...'); a single part longer than that stays whole."""
    lines: list[str] = []
    for part in label.split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= LEGEND_WRAP:
            lines[-1] += f" · {part}"
        else:
            lines.append(part if not lines else f"· {part}")
    return "\n".join(lines)


def interval_caption(intervals: list[Interval]) -> list[str]:
    """What the bands are."""
    methods = sorted({iv.method for iv in intervals if iv.method != NO_INTERVAL},
                     key=lambda m: (m.startswith("one seed"), m))
    texts = [m + (" (a ratio's is paired: the same documents drawn at both lengths)"
                  if "documents" in m else " (a ratio's is paired: the same blocks drawn at "
                  "both lengths)" if "blocks" in m else "") for m in methods]
    return [f"Lines: mean over seeds. Bands: {PERCENT} intervals, " + "; ".join(texts)
            + "."] if texts else []



def save(fig, path: Path) -> list[Path]:
    import matplotlib.pyplot as plt

    written = []
    for ext in ("png", "svg"):
        target = path.with_suffix(f".{ext}")
        atomic_write(target, lambda fh, ext=ext: fig.savefig(fh, format=ext, dpi=DPI))
        written.append(target)
    plt.close(fig)
    return written
