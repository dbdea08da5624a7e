"""What the verdicts were scored on, in words beside them: the scored text's tokens and
documents (how many hold spans, how many count -- the effective number 1/sum(w^2) of their
shares), what general-purpose compressors make of it, and at each length the share of
targets a span's last, shorter window scored (it reads less context than a whole window).
A reader judges a perplexity only knowing these: a few documents carrying most targets make
an interval over documents narrow for the wrong reason, and a model that compresses worse
than xz has learned little that a compressor could not."""

from __future__ import annotations

import math

from posexp.runs import RunResult, point_scaling

NONOVERLAPPING = "nonoverlapping"


def scored_text(runs: list[RunResult]) -> str:
    """One paragraph per layout the runs' nonoverlapping points were scored on."""
    points = [(r, p) for r in runs for p in r.curve
              if p["mode"] == NONOVERLAPPING and p.get("spans") and point_scaling(p) is None]
    names = sorted({p["spans"] for _, p in points})
    if not names:
        return "Scored text: no point was scored on spans over the validation split."
    return "\n\n".join(_layout_text(name, [(r, p) for r, p in points if p["spans"] == name])
                       for name in names)


def _layout_text(name: str, points: list[tuple[RunResult, dict]]) -> str:
    runs = {id(r): r for r, _ in points}.values()
    layout = next((r.layouts[name] for r in runs if name in r.layouts), {})
    tokens = points[0][1]["tokens"]
    text = (f"Scored text (layout {name}): {tokens:,} validation targets in spans over "
            f"{layout.get('documents', '?')} documents")
    if layout.get("text_documents") is not None:
        text += f" of the split's {layout['text_documents']} with text"
    if layout.get("effective_documents") is not None:
        text += f", {layout['effective_documents']:.1f} effective documents"
    text += "."
    packed = next((r.compression[name] for r in runs if name in r.compression), None)
    if packed and "xz" in packed:
        text += (f" zlib -9 compresses it to {packed['zlib']:.3f} bits per byte and xz -9e to "
                 f"{packed['xz']:.3f}.")
        text += _early(runs, points, packed["xz"])
    shares = _remainders(points)
    if shares:
        text += (" Share of targets scored by a span's last, shorter window (less context "
                 "than the window length), nonoverlapping: " + ", ".join(shares) + ".")
    return text


def _early(runs, points: list[tuple[RunResult, dict]], xz: float) -> str:
    """The plain sentence for byte-level runs that all compress worse than xz at L."""
    if any((r.info.get("corpus") or {}).get("tokenizer") != "byte" for r in runs):
        return ""
    at_l = [p["loss"] / math.log(2) for r, p in points
            if p["length"] == r.train_len and p.get("loss") is not None]
    if at_l and min(at_l) > xz:
        return (f" Every model here compresses it worse than xz at its training length (best "
                f"{min(at_l):.3f} bits per byte): these are early-training models, and their "
                "verdicts are about models at this stage of training.")
    return ""


def _remainders(points: list[tuple[RunResult, dict]]) -> list[str]:
    """'L: share' at each length, from the points that recorded it (the layout fixes it)."""
    by_length: dict[int, float] = {}
    for _, p in points:
        if p.get("remainder") is not None and p["length"] not in by_length:
            by_length[p["length"]] = p["remainder"] / p["tokens"]
    return [f"{n}: {share:.1%}" for n, share in sorted(by_length.items())]
