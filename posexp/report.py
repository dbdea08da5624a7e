"""Plots and tables across runs, read through runs.py (run.json, config.yaml, eval.json).

Runs form one series when their identities (config.identity: every key that determines the
weights) are equal except the seed, and their points are of the same mode and scored region;
a series is the mean over its distinct seeds, with a min-max band.  A series' label names
its encoding and training length, and whatever else tells the series of one report apart.
Only completed runs are plotted; the others, damaged ones included, are listed with their
reason.
"""

from __future__ import annotations

import csv
import io
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from posexp.errors import PosexpError
from posexp.runs import DAMAGED, MODES, Region, RunResult, atomic_write, atomic_write_text
from posexp.runs import load_runs as load_runs  # cli.py imports it from here

ENCODING_ORDER = ["nope", "learned", "sinusoidal", "rope", "alibi"]
CSV_COLUMNS = ["experiment", "run", "series", "encoding", "train_seq_len", "seed", "n_params",
               "d_model", "n_layer", "n_head", "corpus", "corpus_fingerprint", "tokenizer",
               "tokenizer_fingerprint", "steps", "tokens_trained", "mode", "stride", "length",
               "first_token", "tokens", "applicable", "loss", "ppl", "bits_per_token",
               "bits_per_byte", "reason"]
POINT_COLUMNS = CSV_COLUMNS[CSV_COLUMNS.index("mode"):]

ENCODING, TRAIN_LEN, SEED = "encoding.name", "train.seq_len", "seed"
# Identity keys that config.resolve fills in from others (d_ff from d_model; max_positions
# and batch_size from seq_len): a label names one only when it tells apart series that the
# rest of the label leaves alike, so runs at two lengths are not labelled "batch_size=32".
DERIVED = ("model.d_ff", "encoding.max_positions", "train.batch_size")


def warn(message: str) -> None:
    print(f"posexp: warning: {message}", file=sys.stderr)


# --- series ------------------------------------------------------------------------------
@dataclass
class Series:
    """Completed runs of one identity but the seed, scored in one mode on one region: one
    member per distinct seed."""

    config: tuple  # the identity without the seed, as sorted (key, repr(value)) pairs
    mode: str
    region: Region
    members: list[RunResult]
    parts: list[tuple[str, str]] = field(default_factory=list)  # label: (key name, value)
    scored: str | None = None  # label: the region, when the report holds more than one
    colour: str = "C0"

    @property
    def encoding(self) -> str:
        return self.members[0].encoding

    @property
    def train_len(self) -> int:
        return self.members[0].train_len

    @property
    def label(self) -> str:
        words = [f"{self.encoding} L={self.train_len}", *(f"{k}={v}" for k, v in self.parts)]
        if self.scored:
            words.append(f"scored {self.scored}")
        return " · ".join(words)

    def columns(self) -> list[tuple[str, str]]:
        """(heading, value) of what tells this series apart beyond encoding and length."""
        return [*self.parts, *([("scored", self.scored)] if self.scored else [])]

    def stats(self) -> dict[int, dict]:
        return curve_stats(self.members, self.mode, self.region)


def config_key(run: RunResult) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in run.identity.items() if k != SEED))


def _order(value: object) -> tuple:
    """A sort key for identity values of any type: numbers by value, the rest as text."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (0, value, "") if is_number else (1, 0, str(value))


def _text(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def label_keys(identities: list[dict]) -> list[str]:
    """The identity keys, besides encoding, training length and seed, that a label names:
    every key whose value differs between these identities (a derived key only when the
    others leave two identities alike that it tells apart)."""
    keys = sorted(set().union(*identities) - {ENCODING, TRAIN_LEN, SEED})

    def differs(key: str) -> bool:
        return len({repr(i.get(key)) for i in identities}) > 1

    chosen = [k for k in keys if differs(k) and k not in DERIVED]
    for key in (k for k in keys if k in DERIVED and differs(k)):
        seen: dict[tuple, str] = {}
        for i in identities:
            rest = tuple(repr(i.get(c)) for c in (ENCODING, TRAIN_LEN, *chosen))
            if seen.setdefault(rest, repr(i.get(key))) != repr(i.get(key)):
                chosen.append(key)
                break
    return chosen


def short_names(keys: list[str], all_keys: set[str]) -> dict[str, str]:
    """'model.d_model' -> 'd_model' where no other identity key ends in the same name."""
    last = Counter(k.rsplit(".", 1)[-1] for k in all_keys)
    return {k: k.rsplit(".", 1)[-1] if last[k.rsplit(".", 1)[-1]] == 1 else k for k in keys}


def region_text(region: Region) -> str:
    first, tokens = region
    return f"{tokens} tok @ {first}"


def build_series(runs: list[RunResult]) -> tuple[list[Series], list[list[RunResult]]]:
    """Every series of ``runs`` (completed runs), labelled and coloured, in report order:
    encoding (ENCODING_ORDER), training length, the other label values, region, mode.  Also
    the groups of runs of one identity and one seed: only the first of each counts."""
    by_seed: dict[tuple, dict[object, list[RunResult]]] = defaultdict(dict)
    for r in sorted(runs, key=lambda r: str(r.path)):
        for mode in {p["mode"] for p in r.curve}:
            for region in r.regions(mode):
                by_seed[(config_key(r), mode, region)].setdefault(r.seed, []).append(r)
    series = [Series(config, mode, region, [same[0] for same in seeds.values()])
              for (config, mode, region), seeds in by_seed.items()]
    # a group shows up once per mode and region it was scored in: keep one of each
    duplicates = {tuple(str(r.path) for r in same): same for seeds in by_seed.values()
                  for same in seeds.values() if len(same) > 1}

    identities = {s.config: s.members[0].identity for s in series}
    keys = label_keys(list(identities.values()))
    names = short_names(keys, set().union(*identities.values()))
    several_regions = len({s.region for s in series}) > 1
    for s in series:
        ident = identities[s.config]
        s.parts = [(names[k], _text(ident.get(k))) for k in keys]
        s.scored = region_text(s.region) if several_regions else None

    def order(s: Series) -> tuple:
        enc = s.encoding
        rank = ENCODING_ORDER.index(enc) if enc in ENCODING_ORDER else len(ENCODING_ORDER)
        ident = identities[s.config]
        return (rank, enc, s.train_len, *(_order(ident.get(k)) for k in keys), s.region,
                MODES.index(s.mode))

    series.sort(key=order)
    # one colour per config and region, the same in every figure
    colours: dict[tuple, str] = {}
    for s in series:
        s.colour = colours.setdefault((s.config, s.region), f"C{len(colours) % 10}")
    return series, list(duplicates.values())


def modes(runs: list[RunResult]) -> list[str]:
    found = {p["mode"] for r in runs for p in r.curve}
    return [m for m in MODES if m in found]


def curve_stats(members: list[RunResult], mode: str, region: Region) -> dict[int, dict]:
    """length -> {mean, min, max, n, applicable, reason} of perplexity across ``members``,
    from their points of ``mode`` scored on ``region`` only."""
    by_length: dict[int, list[dict]] = defaultdict(list)
    for r in members:
        for length, p in r.points(mode, region).items():
            by_length[length].append(p)
    stats = {}
    for length in sorted(by_length):
        ps = by_length[length]
        ppl = [p["ppl"] for p in ps if p["applicable"]]
        stats[length] = {
            "mean": sum(ppl) / len(ppl) if ppl else None,
            "min": min(ppl) if ppl else None,
            "max": max(ppl) if ppl else None,
            "n": len(ppl),
            "applicable": bool(ppl),
            "reason": next((p["reason"] for p in ps if not p["applicable"]), None),
        }
    return stats


# --- tables ------------------------------------------------------------------------------
def tidy_rows(runs: list[RunResult]) -> list[dict]:
    """One row per run x curve point, with the label of the series the point belongs to."""
    series, _ = build_series(runs)
    labels = {(s.config, s.mode, s.region): s.label for s in series}
    rows = []
    for r in runs:
        model = r.info.get("model") or {}
        corpus = r.info.get("corpus") or {}
        run_fields = {
            "experiment": r.info.get("experiment"), "run": r.name, "encoding": r.encoding,
            "train_seq_len": r.train_len, "seed": r.seed, "n_params": r.info.get("n_params"),
            **{k: r.identity.get(f"model.{k}", model.get(k))
               for k in ("d_model", "n_layer", "n_head")},
            "corpus": corpus.get("name", r.identity.get("data.name")),
            "corpus_fingerprint": corpus.get("fingerprint"),
            "tokenizer": corpus.get("tokenizer"),
            "tokenizer_fingerprint": corpus.get("tokenizer_fingerprint"),
            "steps": r.info.get("steps"), "tokens_trained": r.info.get("tokens_trained"),
        }
        for p in r.curve:
            label = labels[(config_key(r), p["mode"], (p["first_token"], p["tokens"]))]
            rows.append({**run_fields, "series": label,
                         **{k: p.get(k) for k in POINT_COLUMNS}})
    return rows


def csv_text(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}" if x < 100 else f"{x:.1f}"


def _cells(s: Series, stats: dict[int, dict], lengths: list[int], ratios: bool) -> list[str]:
    """Perplexity at each length; in markdown, bold at the training length, with its ratio to
    the perplexity there."""
    base = stats.get(s.train_len, {}).get("mean")
    cells = []
    for length in lengths:
        st = stats.get(length)
        if st is None:
            cells.append("")
        elif not st["applicable"]:
            cells.append("n/a")
        elif not ratios:
            cells.append(_fmt(st["mean"]))
        else:
            ratio = f" ({st['mean'] / base:.2f}x)" if base else ""
            mark = "**" if length == s.train_len else ""
            cells.append(f"{mark}{_fmt(st['mean'])}{mark}{ratio}")
    return cells


def markdown(runs: list[RunResult], not_done: list[RunResult], title: str) -> str:
    """Per mode, the table a paper prints: perplexity at each length and its ratio to the
    perplexity at the training length, one row per series; a column for each key that tells
    series apart."""
    lines = [f"# {title}", ""]
    series, duplicates = build_series(runs)
    for mode in modes(runs):
        rows = [s for s in series if s.mode == mode]
        stats = [s.stats() for s in rows]
        lengths = sorted({length for st in stats for length in st})
        extra = [heading for heading, _ in rows[0].columns()]
        lines += [f"## {mode}: perplexity (ratio to perplexity at the training length)", "",
                  "| " + " | ".join(["encoding", "L_train", *extra, "seeds", *map(str, lengths)])
                  + " |",
                  "|---|---:|" + "---|" * len(extra) + "---:|" * (1 + len(lengths))]
        for s, st in zip(rows, stats, strict=True):
            values = [value.replace("|", "/") for _, value in s.columns()]
            lines.append("| " + " | ".join([s.encoding, str(s.train_len), *values,
                                            str(len(s.members)),
                                            *_cells(s, st, lengths, ratios=True)]) + " |")
        lines.append("")
    if any(not p["applicable"] for r in runs for p in r.curve):
        lines += ["n/a: the encoding has no position that far (a learned table ends at its "
                  "size); posexp does not clamp.", ""]
    if duplicates:
        lines += ["Runs of the same config and seed, counted once (the first of each line):", ""]
        lines += [f"* {', '.join(str(r.path) for r in group)}" for group in duplicates]
        lines.append("")
    if not_done:
        lines += ["## Runs not included", "", "| run | status | reason |", "|---|---|---|"]
        for r in not_done:
            reason = str(r.reason or "").replace("|", "/").replace("\n", " ")
            lines.append(f"| {r.path} | {r.status} | {reason} |")
        lines.append("")
    return "\n".join(lines)


def terminal_table(runs: list[RunResult], mode: str = "nonoverlapping") -> str:
    """series x length -> perplexity, for the end of a sweep."""
    rows = [s for s in build_series(runs)[0] if s.mode == mode]
    stats = [s.stats() for s in rows]
    lengths = sorted({length for st in stats for length in st})
    width = max([len("series"), *(len(s.label) for s in rows)]) + 2
    lines = [f"perplexity ({mode}; mean over seeds)",
             f"{'series':<{width}}" + "".join(f"{length:>10}" for length in lengths)]
    for s, st in zip(rows, stats, strict=True):
        lines.append(f"{s.label:<{width}}"
                     + "".join(f"{c:>10}" for c in _cells(s, st, lengths, ratios=False)))
    return "\n".join(lines)


# --- figures -----------------------------------------------------------------------------
def _describe(runs: list[RunResult]) -> str:
    corpora = sorted({str((r.info.get("corpus") or {}).get("name", "?")) for r in runs})
    sizes = sorted({r.info.get("n_params") or 0 for r in runs})
    size = "/".join(f"{s / 1e6:.2f}M" for s in sizes)
    shapes = {tuple(r.identity.get(f"model.{k}") for k in ("d_model", "n_layer", "n_head"))
              for r in runs}
    # the model's shape when every run shares it; otherwise the labels name what differs
    dims = ""
    if len(shapes) == 1 and None not in next(iter(shapes)):
        d, n_layer, n_head = next(iter(shapes))
        dims = f", d={d}, {n_layer} layers, {n_head} heads"
    return f"corpus: {', '.join(corpora)}; model: {size} params{dims}"


def _axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(8, 5.2), constrained_layout=True)


def _finish(ax, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"{xlabel} (log₂ scale); dotted: training length")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def extrapolation_figure(runs: list[RunResult], mode: str):
    fig, ax = _axes()
    for s in build_series(runs)[0]:
        if s.mode != mode:
            continue
        stats = s.stats()
        xs = [length for length, st in stats.items() if st["applicable"]]
        if not xs:
            continue
        label = s.label + (f" ({len(s.members)} seeds)" if len(s.members) > 1 else "")
        if len(xs) < len(stats):
            skipped = [length for length, st in stats.items() if not st["applicable"]]
            label += f" — n/a at {', '.join(map(str, skipped))}"
        ax.plot(xs, [stats[x]["mean"] for x in xs], "o-", color=s.colour, label=label)
        if len(s.members) > 1:
            ax.fill_between(xs, [stats[x]["min"] for x in xs], [stats[x]["max"] for x in xs],
                            color=s.colour, alpha=0.2, linewidth=0)
        ax.axvline(s.train_len, color=s.colour, linestyle=":", linewidth=1)
    ax.set_yscale("log")
    _finish(ax, "evaluation length in tokens", "perplexity (log scale)",
            f"Perplexity vs evaluation length ({mode})\n{_describe(runs)}")
    return fig


def per_position_figure(runs: list[RunResult]):
    """Mean loss by position in the longest window, per config and scored region (the
    per-position records come from whole nonoverlapping windows, whatever the mode)."""
    fig, ax = _axes()
    drawn: set[tuple] = set()
    for s in build_series(runs)[0]:
        if (s.config, s.region) in drawn:
            continue
        drawn.add((s.config, s.region))
        records = []  # each member's record at its longest window on this region
        for r in s.members:
            ours = [p for p in r.per_position
                    if (p.get("first_token"), p.get("tokens")) == s.region]
            if ours:
                records.append(max(ours, key=lambda p: p["length"]))
        if not records:
            continue
        longest = max(p["length"] for p in records)
        records = [p for p in records if p["length"] == longest]
        # each bucket at the middle of the span [start, end) it covers
        xs = [(a + b) / 2 for a, b in zip(records[0]["position"], records[0]["position_end"],
                                          strict=True)]
        ys = [sum(p["loss"][j] for p in records) / len(records) for j in range(len(xs))]
        ax.plot(xs, ys, "-", color=s.colour, label=f"{s.label} (window {longest})")
        ax.axvline(s.train_len, color=s.colour, linestyle=":", linewidth=1)
    _finish(ax, "position inside the window", "mean loss (nats per token)",
            f"Loss by position in the longest window\n{_describe(runs)}")
    return fig


def _save(fig, path: Path) -> list[Path]:
    import matplotlib.pyplot as plt

    written = []
    for ext in ("png", "svg"):
        target = path.with_suffix(f".{ext}")
        atomic_write(target, lambda fh, ext=ext: fig.savefig(fh, format=ext, dpi=130))
        written.append(target)
    plt.close(fig)
    return written


def write_report(runs: list[RunResult], not_done: list[RunResult], out: Path,
                 title: str) -> list[Path]:
    """Figures and tables for ``runs`` (completed, from load_runs), written to ``out``; each
    damaged run in ``not_done`` gets one warning line.  With no run at all, a PosexpError
    and nothing written."""
    if not runs and not not_done:
        raise PosexpError(f"no posexp runs to report in {out}")
    for r in not_done:
        if r.status == DAMAGED:
            warn(f"not included: {r.reason}")
    out.mkdir(parents=True, exist_ok=True)
    written = write_tables(runs, not_done, out, title)
    for mode in modes(runs):
        written += _save(extrapolation_figure(runs, mode), out / f"extrapolation_{mode}")
    if any(r.per_position for r in runs):
        written += _save(per_position_figure(runs), out / "per_position")
    return written


def write_tables(runs: list[RunResult], not_done: list[RunResult], out: Path,
                 title: str) -> list[Path]:
    """summary.csv and summary.md; runs of one config and seed are named in one warning."""
    for group in build_series(runs)[1]:
        warn(f"{', '.join(str(r.path) for r in group)} are runs of the same config and seed "
             f"({group[0].seed}); counted once")
    atomic_write_text(out / "summary.csv", csv_text(tidy_rows(runs)))
    atomic_write_text(out / "summary.md", markdown(runs, not_done, title))
    return [out / "summary.csv", out / "summary.md"]


def upload_to_wandb(files: list[Path], runs: list[RunResult], project: str) -> None:
    """Log the report's figures and tidy table as one W&B run of job type 'report'."""
    import wandb

    rows = tidy_rows(runs)
    with wandb.init(project=project, job_type="report", name="report") as run:
        run.log({"summary": wandb.Table(columns=CSV_COLUMNS,
                                        data=[[r[c] for c in CSV_COLUMNS] for r in rows])})
        for f in files:
            if f.suffix == ".png":
                run.log({f.stem: wandb.Image(str(f))})
        for f in files:
            if f.suffix in (".md", ".csv"):
                run.save(str(f), base_path=str(f.parent), policy="now")
