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
    for mode in dict.fromkeys(p["mode"] for p in curve):
        ours = [p for p in curve if p["mode"] == mode]
        if len({point_scaling(p) for p in ours}) > 1:
            lines.append(format_scalings(ours, train_len, title))
            continue
        lm_eval = "word_perplexity" in ours[0]  # lm_eval mode's: lm-eval's numbers too
        lines.append(f"\n{title}: {mode}{scored_as(ours[0])}, at every length "
                     + (whole_text(ours[0]) if lm_eval else
                        f"{region_text(region(ours[0]))}{documents(ours[0])}"))
        columns = [("loss (nats)", 11, ".4f", "loss"), ("ppl", 8, ".3f", "ppl"),
                   ("bits/token", 10, ".4f", "bits_per_token")]
        columns += [("bits/byte", 9, ".4f", "bits_per_byte")] if per_byte or lm_eval else []
        columns += [("word ppl", 9, ".4g", "word_perplexity")] if lm_eval else []
        lines.append(f"{'length':>8}" + "".join(f"  {c[0]:>{c[1]}}" for c in columns))
        for p in ours:
            mark = "  <- train length" if p["length"] == train_len else ""
            cells = "".join(f"  {p[key]:>{width}{form}}" if p["applicable"] else
                            f"  {'n/a':>{width}}" for _, width, form, key in columns)
            why = "" if p["applicable"] else f"  ({p['reason']})"
            lines.append(f"{p['length']:>8}{cells}{why}{mark}")
    return "\n".join(lines)


def whole_text(p: dict) -> str:
    """How a table names an lm_eval point's text: its documents, whole, and their counts."""
    n = p["documents"]
    return (f"{p['tokens']:,} tokens of {n:,} whole validation document{'s' * (n != 1)} "
            f"({p['words']:,} words, {p['bytes']:,} bytes; spans {p['spans']}), each after "
            f"token {p['prefix_token']} (lm-evaluation-harness's protocol)")


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
