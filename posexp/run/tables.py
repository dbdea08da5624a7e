"""The tables printed at the end of a run and of posexp eval: a corpus run's curve (length ->
loss, perplexity, bits) and a task run's accuracy (length -> exact match, token accuracy),
one table per mode and RoPE scaling."""

from __future__ import annotations

from posexp.runs import point_scaling, region, region_text
from posexp.scaling import text as scaling_text


def format_curve(curve: list[dict], train_len: int, title: str, per_byte: bool = False) -> str:
    """The table printed at the end of a run: length -> loss, perplexity, bits per token, and
    bits per byte when tokens are not bytes; one table per mode and RoPE scaling."""
    lines = []
    extra = f"  {'bits/byte':>9}" if per_byte else ""
    for mode, scaling in dict.fromkeys((p["mode"], point_scaling(p)) for p in curve):
        points = [p for p in curve if p["mode"] == mode and point_scaling(p) == scaling]
        scaled = f", RoPE scaled: {scaling_text(scaling)}" if scaling else ""
        lines.append(f"\n{title}: {mode}{scaled}, at every length "
                     f"{region_text(region(points[0]))}{documents(points[0])}")
        lines.append(f"{'length':>8}  {'loss (nats)':>11}  {'ppl':>8}  {'bits/token':>10}{extra}")
        for p in points:
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
        scaled = f", RoPE scaled: {scaling_text(scaling)}" if scaling else ""
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
