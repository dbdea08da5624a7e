"""The training figure: each config's validation loss against the tokens it trained on (the
mean over seeds with a Student-t band), so that a reader sees whether the runs were still
learning when they stopped -- the scale every claim was measured at -- and the caption says
by how much each fell over its last quarter of tokens.  An entry of the figure registry."""

from __future__ import annotations

import json
from collections.abc import Iterator

from posexp.report.base import Figure, Report, register_figure
from posexp.report.plotting import (
    coinciding,
    interval_caption,
    label_axes,
    legend_and_caption,
    new_figure,
)
from posexp.report.plotting import draw as draw_curve
from posexp.report.series import Series, describe
from posexp.runs import METRICS, RunResult
from posexp.stats import Interval, t_interval


def val_losses(run: RunResult) -> dict[int, float]:
    """tokens trained -> validation loss, as the run's metrics.jsonl recorded them."""
    out = {}
    try:
        lines = (run.path / METRICS).read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:  # a line cut short by a kill
            continue
        if isinstance(record, dict) and isinstance(record.get("val_loss"), (int, float)) \
                and isinstance(record.get("tokens"), int):
            out[record["tokens"]] = float(record["val_loss"])
    return out


def training_curve(s: Series) -> tuple[list[int], list[Interval]]:
    """The tokens every seed of ``s`` recorded a validation loss at, and its mean there."""
    by_run = [val_losses(r) for r in s.members]
    common = sorted(set.intersection(*(set(v) for v in by_run))) if by_run else []
    return common, [t_interval([v[x] for v in by_run]) for x in common]


def last_quarter(xs: list[int], ivs: list[Interval]) -> float | None:
    """How much the loss fell over the last quarter of tokens, as a share of where it was."""
    before = [iv.value for x, iv in zip(xs, ivs, strict=True) if x <= 0.75 * xs[-1]]
    return (before[-1] - ivs[-1].value) / before[-1] if before and len(xs) > 1 else None


def training_figure(series: list[Series]):
    """One curve per config trained from scratch or fine-tuned (its series as trained), or
    None when no run recorded two validation losses."""
    ours = list({s.config: s for s in series if s.scaling is None}.values())
    if not any(len(training_curve(s)[0]) > 1 for s in ours):
        return None
    drawn, falls, lines = [], [], []
    fig, body, (ax,) = new_figure("Validation loss while training (nats per token, on spans "
                                  "of train.val_tokens validation targets at the training "
                                  "length)", describe(ours), 4.5)
    for s in ours:
        xs, ivs = training_curve(s)
        if len(xs) < 2:
            continue
        seeds = [(xs, [losses[x] for x in xs]) for losses in map(val_losses, s.members)]
        draw_curve(ax, s.colour, s.style, xs, ivs, s.label, seeds=seeds)
        drawn.append((s.label, ivs))
        lines.append((s.label, xs, [iv.value for iv in ivs]))
        fall = last_quarter(xs, ivs)
        if fall is not None:
            falls.append(f"{s.label} {fall:.1%}")
    label_axes(ax, "tokens trained on", "validation loss (nats per token)")
    caption = interval_caption(drawn) + coinciding(lines) + ([
        "Fall over the last quarter of training (of the loss there): " + "; ".join(falls)]
        if falls else [])
    legend_and_caption(body, ax, caption, references=())
    return fig


def _training(report: Report) -> Iterator[tuple[str, object]]:
    fig = training_figure(report.series)
    if fig is not None:
        yield "training", fig


register_figure(Figure("training", 25, _training))
