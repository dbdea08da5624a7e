"""Choose a setting from a grid of runs by their final training loss, never by the scored
validation text: writes choice.md into the directory's report.

    python scripts/choose.py results/ablate-policy --by policy   # one policy for all
    python scripts/choose.py results/lr-sweep --by lr            # each encoding's own lr

A run's final training loss is the mean of the training losses it logged over its last 10% of
tokens (train.log_every: every step's batch at 1, a few batches a point at 5).  Training is
one pass over the corpus, so it estimates the held-out loss without reading the validation
split that the claims are judged on.  Per encoding and setting the value is the mean over
seeds, beside their range; ``--by policy`` chooses the policy (model.init, model.tie_weights)
whose mean over the encodings is lowest, ``--by lr`` each encoding's learning rate, and says
when the best lies at an edge of the grid (then the grid is too narrow to call it best).
ppl(L) on the scored spans is shown beside, for the reader, and chooses nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from posexp import load_runs

TAIL = 0.10  # the share of training whose logged losses make the final loss


def final_loss(path: Path) -> float:
    """The mean logged training loss over the run's last TAIL of tokens."""
    records = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    losses = [(r["tokens"], r["loss"]) for r in records if "loss" in r]
    if not losses:
        raise SystemExit(f"choose.py: {path} logged no training loss")
    last = losses[-1][0]
    return float(np.mean([loss for tokens, loss in losses if tokens >= (1 - TAIL) * last]))


def setting(identity: dict, by: str) -> str:
    if by == "lr":
        return f"{identity['train.lr']:g}"
    tie = "tied" if identity["model.tie_weights"] else "untied"
    return f"{identity.get('model.init', 'gpt2')}-{tie}"


def ppl_at_train_len(run) -> float | None:
    points = [p for p in run.curve if p["mode"] == "nonoverlapping" and p.get("spans")
              and p["length"] == run.train_len and p["applicable"]]
    return points[0]["ppl"] if points else None


def table(root: Path, by: str) -> str:
    runs = [r for r in load_runs(root) if r.status == "completed"]
    loss: dict[tuple[str, str], list[float]] = defaultdict(list)
    ppl: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in runs:
        key = (r.encoding, setting(r.identity, by))
        loss[key].append(final_loss(r.path))
        if (value := ppl_at_train_len(r)) is not None:
            ppl[key].append(value)
    encodings = list(dict.fromkeys(e for e, _ in sorted(loss)))
    settings = sorted({s for _, s in loss}, key=lambda s: (float(s) if by == "lr" else s))
    mean = {k: float(np.mean(v)) for k, v in loss.items()}

    def cell(key: tuple[str, str], best: bool) -> str:
        if key not in loss:
            return "—"
        v = loss[key]
        spread = f" ({min(v):.4f}-{max(v):.4f})" if len(v) > 1 else ""
        p = f"; ppl {np.exp(np.mean(np.log(ppl[key]))):.3f}" if ppl.get(key) else ""
        text = f"{mean[key]:.4f}{spread}{p}"
        return f"**{text}**" if best else text

    lines = [f"| encoding | {' | '.join(settings)} | chosen |",
             f"|---|{'---:|' * len(settings)}---|"]
    per_encoding = {}
    for enc in encodings:
        have = [s for s in settings if (enc, s) in mean]
        best = min(have, key=lambda s: mean[(enc, s)])
        per_encoding[enc] = best
        edge = " (an edge of the grid)" if by == "lr" and best in (settings[0], settings[-1]) \
            else ""
        lines.append(f"| {enc} | {' | '.join(cell((enc, s), s == best) for s in settings)} | "
                     f"{best}{edge} |")
    if by == "policy":
        overall = {s: float(np.mean([mean[(e, s)] for e in encodings])) for s in settings
                   if all((e, s) in mean for e in encodings)}
        chosen = min(overall, key=overall.get)
        row = " | ".join(f"{overall[s]:.4f}" if s in overall else "—" for s in settings)
        lines.append(f"| mean | {row} | **{chosen}** |")
    seeds = sorted({r.seed for r in runs})
    return (f"# Choice by final training loss ({by}), {root}\n\n"
            f"Final training loss (nats/token; the mean of the losses logged over the last "
            f"{TAIL:.0%} of tokens), mean over seeds {', '.join(map(str, seeds))} (their range); "
            "ppl(L) on the scored spans beside it (geometric mean over seeds), which chooses "
            "nothing. Bold: the lowest loss of each encoding.\n\n" + "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the experiment directory of the grid's runs")
    parser.add_argument("--by", choices=("policy", "lr"), required=True)
    args = parser.parse_args()
    text = table(args.root, args.by)
    out = args.root / "report" / "choice.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(f"written: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
