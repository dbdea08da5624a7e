"""The perplexity figures: the extrapolation curve of each evaluation mode (perplexity
against evaluation length over its ratio to ppl(L)), and the loss at each position of the
longest whole windows.  Each is an entry of the report's figure registry (base.py)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from statistics import NormalDist

from posexp.report.base import Figure, Report, register_figure
from posexp.report.curves import (
    NO_INTERVAL,
    compression_lines,
    mode_curves,
    notes,
    stride_note,
)
from posexp.report.plotting import (
    GREY,
    coinciding,
    draw,
    interval_caption,
    label_axes,
    legend_and_caption,
    log2_x,
    log_y,
    new_figure,
    scored_text,
    seed_lines,
    train_lengths,
)
from posexp.report.series import Series, describe
from posexp.runs import Region, RunResult
from posexp.runs import region as region_of
from posexp.stats import LEVEL, Interval, t_interval


def extrapolation_figure(series: list[Series], mode: str):
    """Perplexity against evaluation length over its ratio to the perplexity at the training
    length, one curve per series (and sliding stride setting) of ``mode``."""
    curves = mode_curves(series, mode)
    ours = list({id(c.series): c.series for c in curves}.values())
    title = (f"Perplexity on {scored_text({s.region for s in ours})} vs evaluation window "
             f"({mode}{stride_note(curves)})")
    fig, body, (ax, rax) = new_figure(title, describe(ours), 7.0, 2, height_ratios=[3, 2])
    values, ratios, drawn = [], [], []
    for c in curves:
        xs = [x for x, cell in c.cells.items() if cell.ppl]
        ppl = [c.cells[x].ppl for x in xs]
        style = c.series.style
        draw(ax, c.colour, style, xs, ppl, c.legend,
             seeds=seed_lines([{x: v[0] for x, v in seed.items()} for seed in c.seeds]))
        rxs = [x for x in xs if c.cells[x].ratio]
        ratio = [c.cells[x].ratio for x in rxs]
        if rxs:
            draw(rax, c.colour, style, rxs, ratio,
                 seeds=seed_lines([{x: v[1] for x, v in seed.items()} for seed in c.seeds]))
        values += ppl
        ratios += ratio
        drawn.append((c.label, ppl + ratio, xs, [iv.value for iv in ppl]))
    lengths = sorted({x for c in curves for x in c.cells})
    for a in (ax, rax):
        log2_x(a, lengths, lengths[0] / 1.25, lengths[-1] * 1.25)
    references = compression_lines(ours)
    log_y(ax, values, extra=tuple(2 ** bits for _, _, bits in references))
    for style, _, bits in references:
        ax.axhline(2 ** bits, color=GREY, linestyle=style, linewidth=1.1, zorder=1)
    log_y(rax, ratios, extra=(1.0,))
    rax.axhline(1, color=GREY, linewidth=0.9, zorder=1)
    train_lengths([ax, rax], sorted({c.series.train_len for c in curves}))
    label_axes(ax, None, "perplexity (log scale)")
    label_axes(rax, "evaluation window in tokens (log₂ scale)",
               "ppl(length) / ppl(L)\n(log scale)")
    caption = (interval_caption([(label, ivs) for label, ivs, _, _ in drawn], paired=True)
               + coinciding([(label, xs, ys) for label, _, xs, ys in drawn])
               + notes(curves, series, mode))
    legend_and_caption(body, ax, caption,
                       references=((":", "training length L"), *(
                           (style, f"{what} on the scored text: {bits:.2f} bits/byte")
                           for style, what, bits in references)))
    return fig


def _longest_record(run: RunResult, region: Region) -> dict | None:
    ours = [p for p in run.per_position if region_of(p) == region]
    return max(ours, key=lambda p: p["length"], default=None)


def _buckets(record: dict) -> tuple:
    return record["length"], tuple(record["position"]), tuple(record["position_end"])


def _position_intervals(records: list[dict]) -> list[Interval]:
    """Each bucket's mean loss: Student-t across the seeds' records (two or more), or one
    record's mean with ± z standard errors across its windows (``loss_se``), if recorded."""
    if len(records) > 1:
        by_bucket = zip(*(p["loss"] for p in records), strict=True)
        return [t_interval(list(losses)) for losses in by_bucket]
    [record] = records
    z = NormalDist().inv_cdf((1 + LEVEL) / 2)
    method = f"±{z:.2f} standard errors across the run's windows (scored tokens / window)"
    se = record.get("loss_se") or [None] * len(record["loss"])
    return [Interval(loss, None, None, 1, NO_INTERVAL) if e is None
            else Interval(loss, loss - z * e, loss + z * e, 1, method)
            for loss, e in zip(record["loss"], se, strict=True)]


def per_position_figure(series: list[Series]):
    """Mean loss at each position of a run's longest whole windows, per config and scored
    region; each bucket of positions at its geometric middle.  None when no run holds a
    per-position record."""
    firsts: dict[tuple, Series] = {}  # (config, region) -> its first series: colour, style
    for s in series:
        if s.scaling is None:  # RoPE-scaled scoring records no per-position loss
            firsts.setdefault((s.config, s.region), s)
    drawn, caption = [], []  # drawn: (series, longest record, its seeds' records)
    for s in firsts.values():
        records = [(r, p) for r in s.members if (p := _longest_record(r, s.region))]
        if not records:
            caption.append(f"no per-position record: {s.label}")
            continue
        longest = max((p for _, p in records), key=lambda p: p["length"])
        drawn.append((s, longest, [p for _, p in records if _buckets(p) == _buckets(longest)]))
        others = [str(r.path) for r, p in records if _buckets(p) != _buckets(longest)]
        if others:
            caption.append(f"{s.label}: other window or buckets, not averaged in: "
                           f"{', '.join(others)}")
    if not drawn:
        return None
    kinds = sorted({p.get("mode", "nonoverlapping") for _, p, _ in drawn})
    title = (f"Loss at each position of whole {' / '.join(kinds)} windows, on "
             f"{scored_text({s.region for s, _, _ in drawn})}")
    fig, body, [ax] = new_figure(title, describe([s for s, _, _ in drawn]), 5.6)
    shown, bare, lines = [], [], []
    for s, longest, same in drawn:
        xs = [math.sqrt((a + 1) * b) for a, b in zip(longest["position"],
                                                       longest["position_end"], strict=True)]
        intervals = _position_intervals(same)
        label = f"{s.label} · window {longest['length']}"
        seeds = f" ({len(same)} seeds)" if len(same) > 1 else ""
        # the bands of early positions overlap: fainter than on the extrapolation figures
        draw(ax, s.colour, s.style, xs, intervals, label + seeds, alpha=0.12,
             seeds=[(xs, p["loss"]) for p in same])
        if all(iv.method == NO_INTERVAL for iv in intervals):
            bare.append(label)
        shown.append((label, intervals))
        lines.append((label, xs, [iv.value for iv in intervals]))
    end = max(p["position_end"][-1] for _, p, _ in drawn)
    log2_x(ax, [2**k for k in range(math.ceil(math.log2(end)) + 1)], 0.85, end * 1.15)
    train_lengths([ax], sorted({s.train_len for s, _, _ in drawn}))
    label_axes(ax, "position inside the window (1: the first token, no context; log₂ scale)",
               "mean loss (nats per token)")
    words = interval_caption(shown, lines="mean over seeds of each bucket of positions, at "
                                          "its geometric middle") + coinciding(lines)
    if bare:
        which = "every curve" if len(bare) == len(drawn) else ", ".join(bare)
        words.append(f"{NO_INTERVAL} (an older eval.json, or a single window): {which}")
    legend_and_caption(body, ax, words + caption)
    return fig


def _extrapolation(report: Report) -> Iterator[tuple[str, object]]:
    for mode in report.modes:
        yield f"extrapolation_{mode}", extrapolation_figure(report.series, mode)


def _per_position(report: Report) -> Iterator[tuple[str, object]]:
    fig = per_position_figure(report.series)
    if fig is not None:
        yield "per_position", fig


register_figure(Figure("extrapolation", 10, _extrapolation))
register_figure(Figure("per_position", 20, _per_position))
