"""Choose a setting from a grid of runs by their final training loss, their final validation
loss at L, or a task run's exact match at n_max, never by what the claims are judged on
(lengths past L): writes choice.md into the directory's report.

    python scripts/choose.py results/ablate-policy --by policy   # one policy for all
    python scripts/choose.py results/lr-sweep --by lr            # each encoding's own lr
    python scripts/choose.py results/cpu-L128 --by lr --score val --only train.tokens=2000000
    python scripts/choose.py results/task-recipe --by recipe --score exact   # a task recipe

A run's final training loss is the mean of the training losses it logged over its last 10% of
tokens (train.log_every: every step's batch at 1, a few batches a point at 5). Training is
one pass over the corpus, so it estimates the held-out loss without reading the validation
split that the claims are judged on. ``--score val`` reads the final model's loss at L on the
scored spans (the suites' tuning protocol: its sweep scores at L only, so the choice sees no
number past L). ``--only KEY=VALUE`` keeps the runs whose identity has that value (the
sweep's budget, where the suite's runs share its directory). ``--score exact`` reads a task
run's exact match at n_max instead (higher is better, ties broken by the loss): whether the
recipe learns the task in distribution, the learnability gate's measure -- the claims compare
lengths past n_max, which choose nothing. Per encoding (and task) and setting the value is
the mean over seeds, beside their range; ``--by policy`` chooses the policy (model.init,
model.tie_weights) whose mean over the encodings is best, ``--by lr`` each encoding's
learning rate, ``--by recipe`` its learning rate and batch in tokens, and says when the best
lies at an edge of the grid (then the grid is too narrow to call it best). ppl(L) on the
scored spans is shown beside, for the reader, and chooses nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from posexp import load_runs
from posexp.claims.tasks import in_distribution
from posexp.config.identity import OFF_UNLESS_SET

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
    if by == "recipe":  # the batch in tokens, as train.batch_tokens sets it
        batch = identity["train.batch_size"] * identity["train.seq_len"]
        return f"lr {identity['train.lr']:g}, batch {batch}"
    tie = "tied" if identity["model.tie_weights"] else "untied"
    return f"{identity.get('model.init', 'gpt2')}-{tie}"


def ppl_at_train_len(run) -> float | None:
    points = [p for p in run.curve if p["mode"] == "nonoverlapping" and p.get("spans")
              and p["length"] == run.train_len and p["applicable"]]
    return points[0]["ppl"] if points else None


def numbers(label: str) -> tuple[float, ...]:
    """The numbers of a setting's label, in order: its coordinates in the grid."""
    return tuple(float(x) for x in re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", label))


def at_edge(best: str, settings: list[str]) -> bool:
    """Whether a coordinate of ``best`` (a learning rate, a batch) is the lowest or highest
    the grid tried: a best at an edge may lie outside it."""
    grid = [numbers(s) for s in settings]
    return any(len({g[i] for g in grid}) > 1 and numbers(best)[i] in
               (min(g[i] for g in grid), max(g[i] for g in grid))
               for i in range(len(numbers(best))))


def kept(identity: dict, only: list[str]) -> bool:
    """Whether every KEY=VALUE of ``only`` holds of the identity (values compared as text)."""
    return all(str(identity.get(k)) == v for k, _, v in (o.partition("=") for o in only))


def row(run) -> str:
    """A run's row: its encoding (on its task), and the switches it sets that are off unless
    set (model.ssmax: RoPE with SSMax is its own arm, swept apart from RoPE)."""
    name = f"{run.encoding} on {run.task}" if run.task else run.encoding
    variant = [f"{k.rsplit('.', 1)[-1]}={run.identity[k]}" for k in OFF_UNLESS_SET
               if run.identity.get(k) not in (None, False) and k != "task"]
    return " ".join([name, *variant])


def scores(root: Path, by: str, score: str, only: list[str]) -> tuple[dict, dict, dict,
                                                                      list[int]]:
    """Per (row, setting): the final losses (training, or validation at L with ``--score
    val``), the exact matches at n_max (``--score exact``) and ppl(L) of the completed runs
    ``only`` keeps, and their seeds; a row is an encoding, or an encoding on a task."""
    runs = [r for r in load_runs(root) if r.status == "completed" and kept(r.identity, only)]
    if not runs:  # a choice.md of an empty table would read as a choice made
        raise SystemExit(f"choose.py: no completed run under {root}"
                         f"{' with ' + ', '.join(only) if only else ''}: nothing to choose "
                         "from")
    loss: dict[tuple[str, str], list[float]] = defaultdict(list)
    exact: dict[tuple[str, str], list[float]] = defaultdict(list)
    ppl: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in runs:
        key = (row(r), setting(r.identity, by))
        if score == "val":
            if (value := ppl_at_train_len(r)) is None:
                raise SystemExit(f"choose.py: {r.path} has no point at L on the scored spans")
            loss[key].append(float(np.log(value)))
        else:
            loss[key].append(final_loss(r.path))
        if score == "exact":
            if (value := in_distribution(r)) is None:
                raise SystemExit(f"choose.py: {r.path} has no exact match at n_max (a task "
                                 "run scored at its longest trained length)")
            exact[key].append(value)
        if (value := ppl_at_train_len(r)) is not None:
            ppl[key].append(value)
    return loss, exact, ppl, sorted({r.seed for r in runs})


def table(root: Path, by: str, score: str = "loss", only: tuple[str, ...] = ()) -> str:
    loss, exact, ppl, seeds = scores(root, by, score, list(only))
    rows = list(dict.fromkeys(e for e, _ in sorted(loss)))
    settings = sorted({s for _, s in loss},
                      key=lambda s: s if by == "policy" else (numbers(s), s))
    mean = {k: float(np.mean(v)) for k, v in loss.items()}
    # the lower the better: the loss, or (minus the exact match, then the loss)
    rank = {k: (-float(np.mean(exact[k])), mean[k]) if score == "exact" else (mean[k],)
            for k in loss}
    shown = exact if score == "exact" else loss

    def cell(key: tuple[str, str], best: bool) -> str:
        if key not in loss:
            return "—"
        v = shown[key]
        spread = f" ({min(v):.4f}-{max(v):.4f})" if len(v) > 1 else ""
        p = f"; ppl {np.exp(np.mean(np.log(ppl[key]))):.3f}" if ppl.get(key) else ""
        text = f"{np.mean(v):.4f}{spread}{p}"
        return f"**{text}**" if best else text

    lines = [f"| encoding | {' | '.join(settings)} | chosen |",
             f"|---|{'---:|' * len(settings)}---|"]
    for row in rows:
        best = min((s for s in settings if (row, s) in rank), key=lambda s: rank[(row, s)])
        edge = " (an edge of the grid)" if by != "policy" and at_edge(best, settings) else ""
        lines.append(f"| {row} | {' | '.join(cell((row, s), s == best) for s in settings)} | "
                     f"{best}{edge} |")
    if by == "policy":
        overall = {s: float(np.mean([mean[(e, s)] for e in rows])) for s in settings
                   if all((e, s) in mean for e in rows)}
        chosen = min(overall, key=overall.get)
        row = " | ".join(f"{overall[s]:.4f}" if s in overall else "—" for s in settings)
        lines.append(f"| mean | {row} | **{chosen}** |")
    title, what = WHAT[score]
    kept_text = f" Runs with {', '.join(only)} only." if only else ""
    return (f"# Choice by {title} ({by}), {root}\n\n{what},{kept_text} mean over seeds "
            f"{', '.join(map(str, seeds))} (their "
            "range); ppl(L) on the scored spans beside it (geometric mean over seeds), which "
            "chooses nothing. Bold: the best of each row.\n\n" + "\n".join(lines) + "\n")


WHAT = {  # --score: (the title, what the table shows)
    "exact": ("exact match at n_max", "Exact match at n_max (the held-out instances of the "
              "longest trained length; ties broken by the final training loss)"),
    "loss": ("final training loss", f"Final training loss (nats/token; the mean of the losses "
             f"logged over the last {TAIL:.0%} of tokens)"),
    "val": ("final validation loss at L", "Final validation loss at L (nats/token: the final "
            "model's loss on the scored spans in windows of the training length)"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the experiment directory of the grid's runs")
    parser.add_argument("--by", choices=("policy", "lr", "recipe"), required=True)
    parser.add_argument("--score", choices=tuple(WHAT), default="loss",
                        help="final training loss or validation loss at L (lowest), or a "
                             "task run's exact match at n_max (highest)")
    parser.add_argument("--only", action="append", default=[], metavar="KEY=VALUE",
                        help="keep the runs whose identity has this value (repeatable)")
    args = parser.parse_args()
    if args.by == "policy" and args.score == "exact":  # one policy for all is chosen by loss
        parser.error("--by policy chooses by the mean final loss over the encodings; "
                     "--score exact chooses per encoding (--by lr or --by recipe)")
    if not args.root.is_dir():
        parser.error(f"{args.root} is not a directory of runs")
    if any("=" not in o for o in args.only):
        parser.error("--only takes KEY=VALUE, e.g. --only train.tokens=2000000")
    text = table(args.root, args.by, args.score, tuple(args.only))
    out = args.root / "report" / "choice.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(f"written: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
