"""The tables printed at the end of a run and of posexp eval: a corpus run's curve (length ->
loss, perplexity, bits) and a task run's accuracy (length -> exact match, token accuracy),
one table per mode and RoPE scaling -- but a mode scored with more than one scaling gets one
method x length table (``format_scalings``), so that methods are read side by side with
their ratio to the run as trained, not across six tables."""

from __future__ import annotations

from posexp import stats
from posexp.runs import point_scaling, region, region_text
from posexp.scaling import key as scaling_key
from posexp.scaling import order as scaling_order
from posexp.scaling import text as scaling_text


def scored_as(p: dict) -> str:
    """How point ``p`` was scored, for a table's title: its RoPE scaling, and a randomized
    run's positions; "" for a model as trained at consecutive positions."""
    scaling = p.get("rope_scaling")
    words = [f"RoPE scaled: {scaling_text(scaling_key(scaling))}"] if scaling else []
    if p.get("positions") == "sampled":
        words.append(f"at sorted random positions (seed {p['positions_seed']})")
    elif p.get("positions"):
        words.append(f"at {p['positions']} positions")
    return "".join(f", {w}" for w in words)


def format_curve(curve: list[dict], train_len: int, title: str, per_byte: bool = False) -> str:
    """The table printed at the end of a run: length -> loss, perplexity, bits per token, and
    bits per byte when tokens are not bytes; one table per mode and RoPE scaling, or per
    mode the scalings' method x length table when it holds more than one."""
    lines = []
    extra = f"  {'bits/byte':>9}" if per_byte else ""
    for mode in dict.fromkeys(p["mode"] for p in curve):
        ours = [p for p in curve if p["mode"] == mode]
        if len({point_scaling(p) for p in ours}) > 1:
            lines.append(format_scalings(ours, train_len, title))
            continue
        scaled = scored_as(ours[0])
        lines.append(f"\n{title}: {mode}{scaled}, at every length "
                     f"{region_text(region(ours[0]))}{documents(ours[0])}")
        lines.append(f"{'length':>8}  {'loss (nats)':>11}  {'ppl':>8}  {'bits/token':>10}{extra}")
        for p in ours:
            mark = "  <- train length" if p["length"] == train_len else ""
            if p["applicable"]:
                bpb = f"  {p['bits_per_byte']:>9.4f}" if per_byte else ""
                lines.append(f"{p['length']:>8}  {p['loss']:>11.4f}  {p['ppl']:>8.3f}  "
                             f"{p['bits_per_token']:>10.4f}{bpb}{mark}")
            else:
                na = f"  {'n/a':>9}" if per_byte else ""
                lines.append(f"{p['length']:>8}  {'n/a':>11}  {'n/a':>8}  {'n/a':>10}{na}  "
                             f"({p['reason']}){mark}")
    return "\n".join(lines)


def ratio_text(num: dict, den: dict) -> str:
    """ppl(num) / ppl(den) with its paired bootstrap interval (the same documents drawn for
    both), or the value alone where the points hold no documents to pair."""
    try:
        return stats.ratio_interval(num, den).text(3)
    except ValueError:
        return f"{num['ppl'] / den['ppl']:.3f}"


def format_scalings(points: list[dict], train_len: int, title: str) -> str:
    """One mode's points of several RoPE scalings as a method x length table: a row of
    perplexity per scaling (plain: as trained, first), and under each scaled row its ratio
    to the plain row at the same length."""
    lengths = sorted({p["length"] for p in points})
    by_scaling: dict = {}
    for p in points:
        by_scaling.setdefault(point_scaling(p), {})[p["length"]] = p
    plain = by_scaling.get(None, {})
    rows = []
    for key in sorted(by_scaling, key=scaling_order):
        at = by_scaling[key]
        rows.append(("plain" if key is None else scaling_text(key),
                     ["" if (p := at.get(n)) is None else f"{p['ppl']:.3f}"
                      if p["applicable"] else "n/a" for n in lengths]))
        if key is not None and plain:
            rows.append(("  / plain", [ratio_text(p, base) if (p := at.get(n)) and (
                base := plain.get(n)) and p["applicable"] and base["applicable"] else ""
                for n in lengths]))
    first = points[0]
    head = (f"\n{title}: {first['mode']}, at every length {region_text(region(first))}"
            f"{documents(first)}\nRoPE scalings by length: perplexity; under each scaling "
            "(/ plain) its ratio to plain at the same length [95% interval, paired over the "
            "documents]" + ("" if plain else " -- none: no point as trained (`posexp eval "
                            "RUN eval.rope_scaling=plain` scores it)"))
    width = max(len(label) for label, _ in rows) + 2
    columns = [max(len(str(n)), *(len(cells[i]) for _, cells in rows)) + 2
               for i, n in enumerate(lengths)]
    marks = ["*" if n == train_len else "" for n in lengths]
    lines = [head, f"{'method':<{width}}" + "".join(
        f"{str(n) + m:>{w}}" for n, m, w in zip(lengths, marks, columns, strict=True))]
    lines += [f"{label:<{width}}" + "".join(f"{c:>{w}}" for c, w in zip(cells, columns,
                                                                       strict=True))
              for label, cells in rows]
    if train_len in lengths:
        lines.append("* the training length")
    return "\n".join(lines)


def documents(p: dict) -> str:
    n = p.get("documents")
    return f" over {n:,} documents" if n else ""


def format_tasks(points: list[dict], n_max: int, title: str) -> str:
    """The table printed at the end of a task run: length (and passkey's depth) -> exact
    match and token accuracy with their 95% intervals, loss per answer token, and the chance
    level (exact / token); n/a with its reason.  One table per RoPE scaling."""
    lines = []
    for scaling in dict.fromkeys(point_scaling(p) for p in points):
        ours = [p for p in points if point_scaling(p) == scaling]
        depth = any(p["depth"] is not None for p in ours)
        scaled = scored_as(ours[0])
        lines.append(f"\n{title}: task {ours[0]['task']}{scaled}, {ours[0]['count']} held-out "
                     f"instances at every length (eval seed {ours[0]['eval_seed']}); trained "
                     f"on lengths up to {n_max}")
        lines.append(f"{'length':>8}  " + (f"{'depth':>5}  " if depth else "")
                     + f"{'exact [95%]':<21}  {'token acc [95%]':<21}  {'answer loss':>11}  "
                     f"{'chance exact/token':>18}")
        for p in ours:
            head = f"{p['length']:>8}  " + (f"{p['depth']:>5g}  " if depth else "")
            mark = "  <- longest trained" if p["length"] == n_max else ""
            if not p["applicable"]:
                lines.append(f"{head}{'n/a':<21}  ({p['reason']}){mark}")
                continue
            exact = f"{p['exact']:.3f} [{p['exact_low']:.3f}, {p['exact_high']:.3f}]"
            acc = f"{p['token_acc']:.3f} [{p['token_acc_low']:.3f}, {p['token_acc_high']:.3f}]"
            chance = f"{p['chance_exact']:.3f} / {p['chance_token']:.3f}"
            lines.append(f"{head}{exact:<21}  {acc:<21}  {p['answer_loss']:>11.4f}  "
                         f"{chance:>18}{mark}")
    return "\n".join(lines)
