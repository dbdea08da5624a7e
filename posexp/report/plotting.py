"""Drawing: the figure layout every report figure shares (on screen a title over the whole
width, a body with the axes, the legend to their right and the caption below, outside the
data; in a paper the body alone, its legend below the axes: style.py), log axes with plain
ticks, a curve with its band and its seeds' own lines, reference lines, and saving in the
style's formats -- in a paper with the words the figure leaves out in NAME.caption.txt."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from posexp.report.curves import NO_INTERVAL, PERCENT
from posexp.report.series import Region
from posexp.report.style import FEW_SEEDS, LONE, NO_BAND_SEEDS, SEED_LINE, current
from posexp.runs import atomic_write, atomic_write_text, is_spread
from posexp.stats import Interval

GREY = "#777777"  # training lengths and the ratio 1: reference lines, no series' colour
MIN_SPAN = 1.05   # a perplexity or ratio axis spans at least x/÷ 5% around its data's middle

TITLE_WRAP = 118    # characters per line of the title (11 pt) over a screen figure's width
CAPTION_WRAP = 135  # and of the caption (9 pt)
BAND, SEED = "band", "seed"  # the gid of a band's (or error bar's) artists, of a seed's line


@dataclass
class Words:
    """What a figure says in words: on screen drawn in it, in a paper written beside it."""

    title: str
    subtitle: str
    caption: list[str] = field(default_factory=list)

    def text(self, command: str) -> str:
        """NAME.caption.txt: one paragraph a line."""
        runs = [f"Runs: {self.subtitle}"] if self.subtitle else []
        return "\n".join([self.title, *runs, *self.caption, f"Made by: {command}"]) + "\n"


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
    """A figure with, on screen, the title over its whole width and, below it, a body
    ``height`` inches high; in a paper the body alone, its height scaled to the column.
    Returns (figure, body); ``body.words`` holds the title and caption in either style."""
    look = current()
    lines = [*textwrap.wrap(title, TITLE_WRAP), *textwrap.wrap(subtitle, TITLE_WRAP)]
    head = 0.22 * len(lines) + 0.15 if look.words_inside else 0.0
    height *= look.scale
    fig = pyplot().figure(figsize=(look.width, head + height), layout="constrained")
    if look.words_inside:
        grid = fig.add_gridspec(2, 1, height_ratios=[head, height])
        top, body = fig.add_subfigure(grid[0, 0]), fig.add_subfigure(grid[1, 0])
        top.text(0.01, 0.5, "\n".join(lines), ha="left", va="center", fontsize=look.label)
    else:
        grid, body = None, fig.add_subfigure(fig.add_gridspec(1, 1)[0, 0])
    # the body grows to fit its legend (_fit_height)
    body.grid, body.head, body.height = grid, head, height
    fig.words = body.words = Words(title, subtitle)
    return fig, body


def new_figure(title: str, subtitle: str, height: float, rows: int = 1,
            height_ratios: list[int] | None = None):
    """A titled figure whose body holds ``rows`` axes stacked on one x axis (the body also
    holds the legend, to their right, and the caption, below them).  Returns (figure,
    body, axes)."""
    fig, body = titled(title, subtitle, height)
    axes = body.subplots(rows, 1, sharex=True, height_ratios=height_ratios, squeeze=False)
    for ax in axes[:, 0]:
        ax.grid(True, which="major", color="#dddddd", linewidth=0.8 * current().line / 1.6)
        ax.tick_params(labelsize=current().small, labelbottom=True)
    return fig, body, list(axes[:, 0])


def label_axes(ax, x: str | None, y: str) -> None:
    """Axis labels in the style's size."""
    if x is not None:
        ax.set_xlabel(x, fontsize=current().label)
    ax.set_ylabel(y, fontsize=current().label)


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


def banded(iv: Interval) -> bool:
    """Whether an interval is drawn: not over two seeds, whose t interval (multiplier 12.7)
    would swallow the figure; their seeds' own lines are drawn instead."""
    return iv.low is not None and iv.high is not None and iv.n != NO_BAND_SEEDS


def draw(ax, colour: str, style: tuple[str, str], xs: list[float],
         intervals: list[Interval], label: str | None = None, alpha: float = 0.18,
         seeds: list[tuple[list[float], list[float]]] = ()) -> None:
    """A curve and its intervals: a band (of opacity ``alpha``), or an error bar for a lone
    point; under it, with FEW_SEEDS seeds or fewer, each seed's own (xs, ys) as a thin line."""
    look, (linestyle, marker) = current(), style
    ys = [iv.value for iv in intervals]
    # a lone point (a learned table ends at its training length) is drawn larger and above
    # the curves that may pass through it
    lone = len(xs) == 1
    ax.plot(xs, ys, color=colour, linestyle=linestyle, marker=marker, label=label,
            markersize=look.marker * (LONE if lone else 1), linewidth=look.line,
            zorder=3 + lone, **({"markeredgecolor": "white", "markeredgewidth": 0.6}
                                if lone else {}))
    if 1 < len(seeds) <= FEW_SEEDS:
        for sx, sy in seeds:
            ax.plot(sx, sy, color=colour, linestyle=linestyle, linewidth=look.line * SEED_LINE,
                    alpha=0.7, zorder=2.5, gid=SEED)
    low = [iv.low if banded(iv) else math.nan for iv in intervals]
    high = [iv.high if banded(iv) else math.nan for iv in intervals]
    if lone and not math.isnan(low[0]):
        bars = ax.errorbar(xs, ys, yerr=[[ys[0] - low[0]], [high[0] - ys[0]]], color=colour,
                           capsize=3, linewidth=1, zorder=4)
        for artist in bars.lines[2]:
            artist.set_gid(BAND)
    elif len(xs) > 1 and not all(map(math.isnan, low)):
        ax.fill_between(xs, low, high, color=colour, alpha=alpha, linewidth=0, zorder=2,
                        gid=BAND)


def seed_lines(by_seed: list[dict[float, float | None]]) -> list[tuple[list, list]]:
    """(xs, ys) of each seed's values, x -> y (None: not there)."""
    return [([x for x, y in ys.items() if y is not None],
             [y for y in ys.values() if y is not None]) for ys in by_seed]


def train_lengths(axes: list, lengths: list[int], label: str = "L={}") -> None:
    """A grey dotted line at each training length inside the x axis' limits, labelled in
    the first of ``axes`` (``label`` with the length in its braces)."""
    lo, hi = axes[0].get_xlim()
    to_axes = axes[0].transAxes.inverted()
    for length in (x for x in lengths if lo < x < hi):
        for ax in axes:
            ax.axvline(length, color=GREY, linestyle=":", linewidth=1.2, zorder=1)
        # where the label would run past the right edge (into the legend), it goes left of
        # its line: a character is about 0.55 of its size wide
        text, size = label.format(length), current().note
        room = 1 - to_axes.transform(axes[0].transData.transform((length, 1)))[0]
        left = room * axes[0].bbox.width < (0.55 * size * len(text) + 3) * axes[0].figure.dpi / 72
        axes[0].annotate(text, xy=(length, 1), xycoords=("data", "axes fraction"),
                         xytext=(-3 if left else 3, -3), textcoords="offset points",
                         ha="right" if left else "left", va="top", fontsize=size, color=GREY,
                         in_layout=False)


def legend_and_caption(body, ax, caption: list[str],
                       references: tuple[tuple[str, str], ...] = ((":", "training length L"),),
                       ) -> None:
    """The series' legend (on screen to the right of the axes, in a paper below them) and
    the caption: outside the data, so that neither hides a point.  ``references``: (line
    style, meaning) of the grey reference lines.  The legend names bands and seeds' lines
    where the body's axes draw them."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    look = current()
    handles, labels = ax.get_legend_handles_labels()
    for linestyle, meaning in references:
        handles.append(Line2D([], [], color=GREY, linestyle=linestyle, linewidth=1.2))
        labels.append(meaning)
    drawn = {a.get_gid() for axes in body.axes for a in (*axes.collections, *axes.lines)}
    if BAND in drawn:
        handles.append(Patch(color=GREY, alpha=0.3, linewidth=0))
        labels.append(f"{PERCENT} interval")
    if SEED in drawn:
        handles.append(Line2D([], [], color=GREY, linewidth=look.line * SEED_LINE))
        labels.append("each seed (thin)")
    labels = [legend_label(label) for label in labels]
    if look.legend_columns:
        body.legend(handles, labels, loc="outside lower center", ncols=look.legend_columns,
                    fontsize=look.small, frameon=False, columnspacing=1.2)
    else:
        body.legend(handles, labels, loc="outside right upper", fontsize=look.small,
                    frameon=False)
    _fit_height(body, labels, len(_caption_lines(caption)) * look.words_inside)
    add_caption(body, caption)


def _fit_height(body, labels: list[str], caption_lines: int) -> None:
    """Make the body tall enough for its legend and the caption of ``caption_lines`` below
    it: on screen, a legend right of the axes as tall as ``labels`` (half a line between
    entries) must fit beside them; in a paper, the legend's rows go below the axes.  Many
    long labels would otherwise run into the caption and off the figure's foot."""
    look = current()
    lines = [label.count("\n") + 1 for label in labels]
    line = 1.2 * look.small
    if look.legend_columns:
        rows = [max(lines[k:k + look.legend_columns])
                for k in range(0, len(lines), look.legend_columns)]
        needed = body.height + (line * sum(rows) + 0.5 * line * len(rows) + 6) / 72
    else:
        needed = (line * sum(lines) + 0.5 * line * len(labels)
                  + 1.45 * look.note * caption_lines + 36) / 72
    if body.grid is None:
        body.figure.set_figheight(needed)
    elif needed > body.height:
        body.grid.set_height_ratios([body.head, needed])
        body.figure.set_figheight(body.head + needed)


def add_caption(body, caption: list[str]) -> None:
    """The caption's lines: on screen below the body's axes, wrapped; always in the words
    the figure keeps (``body.words``), which a paper writes beside it."""
    from matplotlib.lines import Line2D

    body.words.caption += caption
    lines = _caption_lines(caption) if current().words_inside else []
    if lines:
        blank = Line2D([], [], linestyle="none")
        body.legend([blank] * len(lines), lines, loc="outside lower left",
                    fontsize=current().note, frameon=False, handlelength=0, handletextpad=0,
                    borderaxespad=0.2, labelspacing=0.25)


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


def interval_caption(drawn: list[tuple[str, list[Interval]]], paired: bool = False,
                     lines: str = "mean over seeds") -> list[str]:
    """What the bands are, for (curve label, its intervals) of each curve drawn: where they
    are of more than one kind (a seed's bootstrap beside a t interval over seeds), which
    curve has which; and which curves of two seeds have their seeds' lines and no band.
    ``paired``: the intervals include ratios of two lengths of one run."""
    kinds: dict[str, list[str]] = {}
    for label, intervals in drawn:
        for iv in intervals:
            if iv.method != NO_INTERVAL and banded(iv):
                kinds.setdefault(iv.method, [])
                if label not in kinds[iv.method]:
                    kinds[iv.method].append(label)
    methods = sorted(kinds, key=lambda m: (m.startswith("one seed"), m))
    paired_by = ["documents" if "documents" in m else "blocks" if "blocks" in m else ""
                 for m in methods] if paired else []
    notes = [f" (a ratio's is paired: the same {what} drawn at both lengths)"
             for what in dict.fromkeys(paired_by) if what]
    if len(methods) == 1:
        text = methods[0] + "".join(notes)
    else:  # not comparable with one another: say whose is whose
        text = (f"of {len(methods)} kinds, not comparable: "
                + "; ".join(f"{m} for {', '.join(kinds[m])}" for m in methods) + "".join(notes))
    out = [f"Lines: {lines}. Bands: {PERCENT} intervals{',' * (len(methods) == 1)} {text}."
           ] if methods else []
    two = [label for label, intervals in drawn if any(iv.n == NO_BAND_SEEDS for iv in intervals)]
    if two:
        out.append(f"{NO_BAND_SEEDS} seeds: per-seed lines, no interval: {', '.join(two)}.")
    return out


def coinciding(drawn: list[tuple[str, list[float], list[float]]]) -> list[str]:
    """A note naming the curves, of (label, xs, ys), that lie on one another at every x:
    only the one drawn last would be seen."""
    groups: dict[tuple, list[str]] = {}
    for label, xs, ys in drawn:
        groups.setdefault(tuple(zip(xs, (round(y, 9) for y in ys), strict=True)),
                          []).append(label)
    notes = []
    for points, labels in groups.items():
        if len(labels) > 1:
            where = ("on 0 throughout" if all(y == 0 for _, y in points)
                     else "on one another throughout")
            notes.append(f"{len(labels)} curves lie {where}, drawn as one: {'; '.join(labels)}")
    return notes


# no date in a figure file: a report regenerated from the same records is the same bytes
UNDATED = {"svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}}


def save(fig, path: Path, command: str) -> list[Path]:
    """``fig`` in each of the style's formats; in a paper also the words it leaves out --
    title, provenance, caption and ``command`` that made it -- in NAME.caption.txt."""
    import matplotlib.pyplot as plt

    look, written = current(), []
    for ext in look.formats:
        target = path.with_suffix(f".{ext}")
        with plt.rc_context({"svg.hashsalt": path.name}):  # ids from the name, not at random
            atomic_write(target, lambda fh, ext=ext: fig.savefig(
                fh, format=ext, dpi=look.dpi, metadata=UNDATED.get(ext)))
        written.append(target)
    if not look.words_inside:
        target = path.with_name(f"{path.name}.caption.txt")
        # a figure drawn without titled() (an extension's) says only what made it
        words = getattr(fig, "words", None) or Words(path.name, "")
        atomic_write_text(target, words.text(command))
        written.append(target)
    plt.close(fig)
    return written
