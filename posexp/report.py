"""Plots and tables across runs, read from what runs.py wrote (run.json and eval.json).

Only completed runs are plotted; failed, diverged, interrupted or unreadable ones are listed
with their reason.  Seeds of the same (encoding, training length) are averaged, with a
min-max band.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from posexp.runs import EVAL, RUN, atomic_write, atomic_write_text

ENCODING_ORDER = ["nope", "learned", "sinusoidal", "rope", "alibi"]
CSV_COLUMNS = ["experiment", "run", "encoding", "train_seq_len", "seed", "mode", "stride",
               "length", "applicable", "loss", "ppl", "bits_per_token", "bits_per_byte",
               "tokens", "reason"]


@dataclass
class RunResult:
    path: Path
    info: dict
    curve: list[dict] = field(default_factory=list)
    per_position: list[dict] = field(default_factory=list)

    @property
    def group(self) -> tuple[str, int]:
        return self.info["encoding"], int(self.info["seq_len"])

    def points(self, mode: str) -> dict[int, dict]:
        """length -> point; with several sliding strides at one length, the smallest stride
        (the most context per token) stands for that length."""
        out: dict[int, dict] = {}
        for p in sorted((p for p in self.curve if p["mode"] == mode), key=lambda p: -p["stride"]):
            out[p["length"]] = p
        return out


def warn(message: str) -> None:
    print(f"posexp: warning: {message}", file=sys.stderr)


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        warn(f"skipping {path}: unreadable ({type(e).__name__})")
        return None
    if not isinstance(data, dict):
        warn(f"skipping {path}: not a JSON object")
        return None
    return data


def load_run(path: Path) -> RunResult | None:
    """A run directory's result; its curve only when run.json says completed."""
    info = _read_json(path / RUN)
    if info is None or "encoding" not in info or "seq_len" not in info:
        return None
    result = RunResult(path, info)
    if info.get("status") == "completed":
        data = _read_json(path / EVAL)
        if data is None or not isinstance(data.get("curve"), list):
            result.info = {**info, "status": "incomplete", "reason": "eval.json unreadable"}
        else:
            result.curve, result.per_position = data["curve"], data.get("per_position", [])
    return result


def split_runs(results: list[RunResult]) -> tuple[list[RunResult], list[RunResult]]:
    """(completed runs, runs that are not complete)."""
    done = [r for r in results if r.info.get("status") == "completed"]
    return done, [r for r in results if r.info.get("status") != "completed"]


def load_runs(root: Path) -> tuple[list[RunResult], list[RunResult]]:
    """(completed runs with their curves, runs that are not complete) under ``root``."""
    found = (load_run(p.parent) for p in sorted(root.rglob(RUN)) if "wandb" not in p.parts)
    return split_runs([r for r in found if r is not None])


def _group_order(key: tuple[str, int]) -> tuple:
    enc, length = key
    return (ENCODING_ORDER.index(enc) if enc in ENCODING_ORDER else len(ENCODING_ORDER), enc,
            length)


def grouped(runs: list[RunResult]) -> dict[tuple[str, int], list[RunResult]]:
    groups: dict[tuple[str, int], list[RunResult]] = defaultdict(list)
    for r in runs:
        groups[r.group].append(r)
    return {k: groups[k] for k in sorted(groups, key=_group_order)}


def modes(runs: list[RunResult]) -> list[str]:
    found = {p["mode"] for r in runs for p in r.curve}
    return [m for m in ("nonoverlapping", "sliding") if m in found]


def curve_stats(members: list[RunResult], mode: str) -> dict[int, dict]:
    """length -> {mean, min, max, n, applicable, reason} of perplexity across seeds."""
    by_length: dict[int, list[dict]] = defaultdict(list)
    for r in members:
        for length, p in r.points(mode).items():
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
    rows = []
    for r in runs:
        for p in r.curve:
            rows.append({
                "experiment": r.info.get("experiment"), "run": r.info.get("name"),
                "encoding": r.info["encoding"], "train_seq_len": r.info["seq_len"],
                "seed": r.info.get("seed"), **{k: p.get(k) for k in CSV_COLUMNS[5:]},
            })
    return rows


def csv_text(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}" if x < 100 else f"{x:.1f}"


def markdown(runs: list[RunResult], not_done: list[RunResult], title: str) -> str:
    """Per mode, the table a paper prints: perplexity at each length and its ratio to the
    perplexity at the training length."""
    lines = [f"# {title}", ""]
    groups = grouped(runs)
    for mode in modes(runs):
        stats = {k: curve_stats(v, mode) for k, v in groups.items()}
        lengths = sorted({length for s in stats.values() for length in s})
        lines += [f"## {mode}: perplexity (ratio to perplexity at the training length)", "",
                  "| encoding | L_train | seeds | " + " | ".join(map(str, lengths)) + " |",
                  "|---|---:|---:|" + "---:|" * len(lengths)]
        for (enc, train_len), s in stats.items():
            base = s.get(train_len, {}).get("mean")
            cells = []
            for length in lengths:
                st = s.get(length)
                if st is None:
                    cells.append("")
                elif not st["applicable"]:
                    cells.append("n/a")
                else:
                    ratio = f" ({st['mean'] / base:.2f}x)" if base else ""
                    mark = "**" if length == train_len else ""
                    cells.append(f"{mark}{_fmt(st['mean'])}{mark}{ratio}")
            lines.append(f"| {enc} | {train_len} | {len(groups[(enc, train_len)])} | "
                         + " | ".join(cells) + " |")
        lines.append("")
    if any(not p["applicable"] for r in runs for p in r.curve):
        lines += ["n/a: the encoding has no position that far (a learned table ends at its "
                  "size); posexp does not clamp.", ""]
    if not_done:
        lines += ["## Runs not included", "", "| run | status | reason |", "|---|---|---|"]
        for r in not_done:
            reason = str(r.info.get("reason") or "").replace("|", "/")
            lines.append(f"| {r.path} | {r.info.get('status')} | {reason} |")
        lines.append("")
    return "\n".join(lines)


def terminal_table(runs: list[RunResult], mode: str = "nonoverlapping") -> str:
    """encoding x length -> perplexity, for the end of a sweep."""
    groups = grouped(runs)
    stats = {k: curve_stats(v, mode) for k, v in groups.items()}
    lengths = sorted({length for s in stats.values() for length in s})
    head = f"{'encoding':<12}{'L_train':>8}" + "".join(f"{length:>10}" for length in lengths)
    lines = [f"perplexity ({mode}; mean over seeds)", head]
    for (enc, train_len), s in stats.items():
        cells = []
        for length in lengths:
            st = s.get(length)
            cells.append("" if st is None else "n/a" if not st["applicable"] else _fmt(st["mean"]))
        lines.append(f"{enc:<12}{train_len:>8}" + "".join(f"{c:>10}" for c in cells))
    return "\n".join(lines)


# --- figures -----------------------------------------------------------------------------
def _describe(runs: list[RunResult]) -> str:
    corpora = sorted({str(r.info.get("corpus", {}).get("name", "?")) for r in runs})
    sizes = sorted({r.info.get("n_params", 0) for r in runs})
    size = "/".join(f"{s / 1e6:.2f}M" for s in sizes)
    model = runs[0].info.get("model", {})
    dims = (f", d={model['d_model']}, {model['n_layer']} layers, {model['n_head']} heads"
            if model else "")
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
    for i, ((enc, train_len), members) in enumerate(grouped(runs).items()):
        stats = curve_stats(members, mode)
        xs = [length for length, s in stats.items() if s["applicable"]]
        if not xs:
            continue
        color = f"C{i % 10}"
        label = f"{enc} (L_train={train_len}" + (f", {len(members)} seeds)" if len(members) > 1
                                                 else ")")
        if len(xs) < len(stats):
            skipped = [length for length, s in stats.items() if not s["applicable"]]
            label += f" — n/a at {', '.join(map(str, skipped))}"
        ax.plot(xs, [stats[x]["mean"] for x in xs], "o-", color=color, label=label)
        if len(members) > 1:
            ax.fill_between(xs, [stats[x]["min"] for x in xs], [stats[x]["max"] for x in xs],
                            color=color, alpha=0.2, linewidth=0)
        ax.axvline(train_len, color=color, linestyle=":", linewidth=1)
    ax.set_yscale("log")
    _finish(ax, "evaluation length in tokens", "perplexity (log scale)",
            f"Perplexity vs evaluation length ({mode})\n{_describe(runs)}")
    return fig


def per_position_figure(runs: list[RunResult]):
    fig, ax = _axes()
    for i, ((enc, train_len), members) in enumerate(grouped(runs).items()):
        curves = [max(r.per_position, key=lambda p: p["length"]) for r in members
                  if r.per_position]
        if not curves:
            continue
        longest = max(c["length"] for c in curves)
        curves = [c for c in curves if c["length"] == longest]
        # each bucket at the middle of the span [start, end) it covers
        xs = [(s + e) / 2 for s, e in zip(curves[0]["position"], curves[0]["position_end"],
                                          strict=True)]
        ys = [sum(c["loss"][j] for c in curves) / len(curves) for j in range(len(xs))]
        color = f"C{i % 10}"
        ax.plot(xs, ys, "-", color=color, label=f"{enc} (L_train={train_len}, window {longest})")
        ax.axvline(train_len, color=color, linestyle=":", linewidth=1)
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
    """Figures and tables for ``runs`` (from load_runs), written to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = write_tables(runs, not_done, out, title)
    if runs:
        for mode in modes(runs):
            written += _save(extrapolation_figure(runs, mode), out / f"extrapolation_{mode}")
        if any(r.per_position for r in runs):
            written += _save(per_position_figure(runs), out / "per_position")
    return written


def write_tables(runs: list[RunResult], not_done: list[RunResult], out: Path,
                 title: str) -> list[Path]:
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
