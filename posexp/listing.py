"""What `posexp ls` and `posexp compare` print: runs read back through posexp.runs, as aligned
text.

``ls`` gives one line per run under a directory: who it is (encoding, training length, seed,
model size), how it ended, and its perplexity at the training length and at the longest
length it was scored at (nonoverlapping windows, with the 95% bootstrap interval when the
point has one).  ``compare`` puts two runs side by side: the config keys that differ
(identity first), then both curves per (mode, length) with the ratio B/A, paired over the
same blocks of tokens (stats.ratio_interval) where both points scored the same tokens, one
row per RoPE scaling a run was scored with.  ``ls`` summarises each run as trained; a
task run (data=task) by its task's exact match at its longest training length and at the
longest length scored, where a corpus run has perplexities.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from omegaconf import OmegaConf

from posexp.config import flatten, in_identity
from posexp.data.tasks import TASKS
from posexp.errors import UsageError
from posexp.runs import (
    MODES,
    RUN,
    Region,
    Run,
    RunResult,
    is_spread,
    load_run,
    point_scaling,
    region_text,
    run_dirs,
    shorten,
)
from posexp.runs import region as region_of
from posexp.scaling import order as scaling_order
from posexp.scaling import text as scaling_text

MODE = "nonoverlapping"  # ls shows the curve of whole windows, every run has it
WHERE = ("results_dir", "experiment", "run_name")  # where a run is, not what it is
Style = Callable[[str, str], str]  # (text, status) -> text, coloured on a terminal


def plain(text: str, status: str) -> str:
    return text


COLOURS = {"completed": "32", "running": "33", "interrupted": "33"}  # others: red (31)


def coloured(text: str, status: str) -> str:
    """A status cell on a terminal: green completed, yellow running or interrupted, red
    failed, diverged or damaged."""
    return f"\033[{COLOURS.get(status, '31')}m{text}\033[0m" if status else text


def table(rows: Sequence[Sequence[str]], right: set[int] = frozenset(), indent: str = "",
          style: Style = plain, statuses: Sequence[str] = (), styled: int = -1) -> list[str]:
    """Rows of cells as aligned lines (column ``i`` right-aligned when in ``right``).  The
    last cell of a row shorter than the others spans the columns it lacks, so it widens
    none of them; no line ends in blanks.  The cell in column ``styled`` of row ``r`` goes
    through ``style(cell, statuses[r])`` after it is padded, so colour never shifts a
    column."""
    n = max(len(row) for row in rows)
    widths = [max((len(row[i]) for row in rows if i < len(row) - (len(row) < n)), default=0)
              for i in range(n)]
    lines = []
    for r, row in enumerate(rows):
        last = max((i for i, cell in enumerate(row) if cell), default=0)
        cells = []
        for i, cell in enumerate(row[:last + 1]):
            spans = len(row) < n and i == len(row) - 1
            text = cell if spans else cell.rjust(widths[i]) if i in right else \
                cell if i == last else cell.ljust(widths[i])
            cells.append(style(text, statuses[r]) if i == styled and r < len(statuses)
                         else text)
        lines.append(indent + "  ".join(cells))
    return lines


def number(x: float) -> str:
    """A perplexity to about three significant digits (two decimals below 10)."""
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def ppl_text(p: dict | None, interval: bool = True) -> str:
    """A point's perplexity with its interval when it has one (and ``interval``); n/a where
    the encoding cannot reach the length; - for no point."""
    if p is None:
        return "-"
    if not p["applicable"]:
        return "n/a"
    low, high = p.get("ppl_low"), p.get("ppl_high")
    if low is None or high is None or not interval:
        return number(p["ppl"])
    return f"{number(p['ppl'])} [{number(low)}, {number(high)}]"


def value_text(v: object) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return "[" + ",".join(value_text(x) for x in v) + "]"
    return "null" if v is None else str(v)


def model_size(r: RunResult) -> str:
    """Width and depth, d128\u00d74L, from config.yaml's identity or else run.json."""
    model = r.info.get("model") or {}
    d = r.identity.get("model.d_model", model.get("d_model"))
    n = r.identity.get("model.n_layer", model.get("n_layer"))
    return f"d{d}\u00d7{n}L" if d is not None and n is not None else "-"


def reason_text(r: RunResult, width: int = 70) -> str:
    """Why a run is not completed, on one line, its own directory left out of file names."""
    reason = " ".join(str(r.reason or "").split())
    for prefix in (f"{r.path.resolve()}/", f"{r.path}/"):
        reason = reason.replace(prefix, "")
    return shorten(reason, width)


def main_region(r: RunResult, mode: str) -> Region | None:
    """The scored region a run is summarised on: the one with its training-length point and
    the most points, then the most tokens."""
    regions = r.regions(mode)
    if not regions:
        return None

    def weight(region: Region) -> tuple:
        points = r.points(mode, region)
        return (is_spread(region), r.train_len in points, len(points), region[1])

    return max(regions, key=weight)


def summary_points(r: RunResult) -> tuple[dict | None, dict | None]:
    """(point at the training length, point at the longest length) of the run's
    nonoverlapping curve."""
    region = main_region(r, MODE)
    if region is None:
        return None, None
    points = r.points(MODE, region)
    return points.get(r.train_len), points[max(points)]


def task_cells(r: RunResult) -> tuple[str, str, str]:
    """A task run's ls cells: "TASK n=N: exact X" at the longest task length n it was trained
    on, the longest length scored that the task has instances of ("n=M": addition's 28
    digits, past its 20-digit limit, say nothing of the model), and exact match there; as
    trained, on the instances (count, eval seed) most of its points were scored on, averaged
    over passkey's depths."""
    plain = [p for p in r.tasks if point_scaling(p) is None]
    if not plain:
        return f"{r.task}: -", "-", "-"
    common = Counter((p["count"], p["eval_seed"]) for p in plain).most_common(1)[0][0]
    by_length: dict[int, list[dict]] = {}
    for p in plain:
        if (p["count"], p["eval_seed"]) == common:
            by_length.setdefault(p["length"], []).append(p)

    def exact(points: list[dict]) -> str:
        if not points:
            return "-"
        if not all(p["applicable"] for p in points):
            return "n/a"
        return f"exact {sum(p['exact'] for p in points) / len(points):.2f}"

    n_max = (r.info.get("corpus") or {}).get("max_train_length")
    task = TASKS.get(r.task)
    longest = max([n for n in by_length if task is None or task.why_not(n) is None]
                  or by_length)
    return f"{r.task} n={n_max}: {exact(by_length.get(n_max, []))}", f"n={longest}", \
        exact(by_length[longest])


def runs_under(root: Path) -> list[RunResult]:
    """Every run under ``root``, damaged ones included; a UsageError when there is none."""
    if not root.exists():
        raise UsageError(f"{root} does not exist")
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory")
    dirs = run_dirs(root)
    if not dirs:
        raise UsageError(f"no posexp runs under {root}")
    return [load_run(d) for d in dirs]


LS_HEADER = ("RUN", "ENCODING", "L", "SEED", "MODEL", "STATUS", "PPL@L", "LONGEST",
             "PPL@LONGEST")
# when every run listed is a task run: task lengths n (not tokens) and exact match
LS_TASK_HEADER = (*LS_HEADER[:6], "EXACT@TRAINED", "LONGEST", "EXACT@LONGEST")


def ls_rows(runs: list[RunResult], intervals: bool) -> list[tuple[str, ...]]:
    """The header and a row per run.  A run that is not completed has no perplexities: the
    reason it gives takes their place."""
    tasks_only = all(r.task is not None for r in runs)
    rows: list[tuple[str, ...]] = [LS_TASK_HEADER if tasks_only else LS_HEADER]
    for r in runs:
        who = (f"{r.path.parent.name}/{r.path.name}", str(r.encoding or "-"),
               str(r.train_len if r.train_len is not None else "-"),
               str(r.seed if r.seed is not None else "-"), model_size(r), r.status)
        if r.status == "completed" and r.task is not None:
            rows.append((*who, *task_cells(r)))
        elif r.status == "completed":
            at_train, longest = summary_points(r)
            rows.append((*who, ppl_text(at_train, intervals),
                         str(longest["length"]) if longest else "-",
                         ppl_text(longest, intervals)))
        else:
            rows.append((*who, reason_text(r)))
    return rows


def ls_lines(root: Path, style: Style = plain, width: int | None = None) -> list[str]:
    """`posexp ls`: a header and one aligned line per run under ``root``.  Given a
    terminal's ``width``, reasons are cut to fit it, and intervals are left out (saying so)
    when the perplexities of a run would not fit."""
    runs = runs_under(root)
    right = {2, 3, 7}
    rows, footer = ls_rows(runs, intervals=True), []
    if width and any(len(line) > width for line, row in zip(table(rows, right), rows,
                                                            strict=True)
                     if len(row) == len(LS_HEADER)):
        rows = ls_rows(runs, intervals=False)
        footer = ["(95% intervals left out to fit the terminal; posexp ls | cat shows them)"]
    if width:
        for i, line in enumerate(table(rows, right)):
            if len(line) > width and len(rows[i]) < len(LS_HEADER):
                note = rows[i][-1]
                rows[i] = (*rows[i][:-1], shorten(note, max(12, len(note) - len(line) + width)))
    statuses = ["", *(r.status for r in runs)]
    return table(rows, right, style=style, statuses=statuses, styled=5) + footer


# --- compare ------------------------------------------------------------------------------
def completed_run(path: Path) -> RunResult:
    """The completed run in ``path``, or a UsageError saying why it cannot be compared."""
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory")
    if not os.path.lexists(path / RUN):  # a FIFO there: load_run says it is damaged
        raise UsageError(f"{path} is not a posexp run (no {RUN})")
    r = load_run(path)
    if r.status != "completed":
        why = f": {reason_text(r, 120)}" if r.reason else ""
        raise UsageError(f"{path} is {r.status}{why}; posexp compare needs two completed runs")
    return r


def describe(r: RunResult) -> str:
    return f"{r.encoding} L={r.train_len} seed {r.seed} {model_size(r)}"


def differing_keys(a: RunResult, b: RunResult) -> tuple[list[tuple[str, str, str]],
                                                        list[tuple[str, str, str]]]:
    """(identity keys, other keys) whose values differ: (key, value in A, value in B).
    Where a run is written (results_dir, experiment, run_name) is left out."""
    ident = [(k, value_text(a.identity.get(k)), value_text(b.identity.get(k)))
             for k in sorted(set(a.identity) | set(b.identity))
             if a.identity.get(k) != b.identity.get(k)]
    flat = [flatten(OmegaConf.to_container(Run(r.path).config(), resolve=False))
            for r in (a, b)]
    other = [(k, value_text(flat[0].get(k)), value_text(flat[1].get(k)))
             for k in sorted(set(flat[0]) | set(flat[1]))
             if not in_identity(k) and k not in WHERE and flat[0].get(k) != flat[1].get(k)]
    return ident, other


def corpus_line(a: RunResult, b: RunResult) -> str | None:
    """One line when the runs were trained and scored on different text or tokens."""
    ca, cb = a.info.get("corpus") or {}, b.info.get("corpus") or {}
    for key, what in (("fingerprint", "corpora"), ("tokenizer_fingerprint", "tokenizers")):
        if ca.get(key) and cb.get(key) and ca[key] != cb[key]:
            name = "name" if key == "fingerprint" else "tokenizer"
            return (f"different {what}: A {ca.get(name)} ({ca[key][:12]}), B {cb.get(name)} "
                    f"({cb[key][:12]}); their perplexities are not comparable")
    return None




def regions_to_compare(a: RunResult, b: RunResult,
                       mode: str) -> tuple[Region | None, Region | None]:
    """The scored region of A and of B whose points go side by side: one both runs scored
    (the one with the most points, then the most tokens), else each run's own main one."""
    shared = set(a.regions(mode)) & set(b.regions(mode))
    if shared:
        best = max(shared, key=lambda g: (len(a.points(mode, g)) + len(b.points(mode, g)), g[1]))
        return best, best
    return main_region(a, mode), main_region(b, mode)


def ratio_text(pa: dict | None, pb: dict | None, comparable: bool) -> str:
    if pa is None or pb is None or not (pa["applicable"] and pb["applicable"]):
        return "-"
    if not comparable:
        return "different corpora"
    from posexp import stats  # scipy takes seconds to import: only compare needs it

    if not stats.same_clusters(pa, pb):
        return "different tokens: not comparable"

    try:
        return stats.ratio_interval(pb, pa).text(3)
    except ValueError:  # points without block losses: the ratio, without its interval
        return f"{pb['ppl'] / pa['ppl']:.3f}"


def curve_lines(a: RunResult, b: RunResult, comparable: bool) -> list[str]:
    """Per mode, one row per (RoPE scaling, length, stride) of the points on the regions
    compared (regions_to_compare): A's and B's perplexity and B/A; points on other regions
    are named in a line, not mixed in."""
    lines = []
    for mode in MODES:
        chosen = regions_to_compare(a, b, mode)
        if chosen == (None, None):
            continue
        points = [{(point_scaling(p), p["length"], p["stride"]): p for p in r.curve
                   if p["mode"] == mode and region_of(p) == region}
                  for r, region in zip((a, b), chosen, strict=True)]
        keys = sorted(points[0].keys() | points[1].keys(),
                      key=lambda k: (scaling_order(k[0]), k[1], k[2]))
        scaled = any(scaling is not None for scaling, _, _ in keys)
        rows = [("length" if mode == "nonoverlapping" else "length/stride",
                 *(["RoPE scaling"] * scaled), "A ppl [95%]", "B ppl [95%]", "B/A [95%]", "")]
        for scaling, length, stride in keys:
            pa, pb = (side.get((scaling, length, stride)) for side in points)
            trained = [n for n, r in (("A", a), ("B", b)) if r.train_len == length]
            rows.append((
                str(length) if mode == "nonoverlapping" else f"{length}/{stride}",
                *([scaling_text(scaling) if scaling else "as trained"] * scaled),
                ppl_text(pa), ppl_text(pb), ratio_text(pa, pb, comparable),
                f"<- {' and '.join(trained)} trained at {length}" if trained else ""))
        scored = region_text(chosen[0]) if chosen[0] == chosen[1] else ", ".join(
            f"{n} {region_text(g)}" for n, g in zip("AB", chosen, strict=True) if g)
        lines += ["", f"{mode}: {scored}", *table(rows, right={0}, indent="  ")]
        for n, r, region in zip("AB", (a, b), chosen, strict=True):
            others = [g for g in r.regions(mode) if g != region]
            if others:
                lines.append(f"  not shown: {n}'s points on "
                             f"{'; '.join(region_text(g) for g in others)}")
    return lines


def exact_text(p: dict | None) -> str:
    if p is None:
        return "-"
    if not p["applicable"]:
        return "n/a"
    return f"{p['exact']:.3f} [{p['exact_low']:.3f}, {p['exact_high']:.3f}]"


def task_lines(a: RunResult, b: RunResult) -> list[str]:
    """Two runs of one task: one row per (RoPE scaling, length, depth, instances) with A's
    and B's exact match and B - A with its 95% interval (stats.difference_interval of the
    two Wilson intervals) where both scored the same instances."""
    from posexp import stats

    def key(p: dict) -> tuple:
        return (point_scaling(p), p["length"], p.get("depth"), p["count"], p["eval_seed"])

    points = [{key(p): p for p in r.tasks} for r in (a, b)]
    keys = sorted(points[0].keys() | points[1].keys(), key=lambda k: (
        scaling_order(k[0]), k[1], -1.0 if k[2] is None else k[2], k[3], k[4]))
    depth = any(k[2] is not None for k in keys)
    scaled = any(k[0] is not None for k in keys)
    rows = [("length", *(["depth"] * depth), *(["RoPE scaling"] * scaled), "instances",
             "A exact [95%]", "B exact [95%]", "B-A [95%]")]
    for k in keys:
        pa, pb = (side.get(k) for side in points)
        if pa is None or pb is None or not (pa["applicable"] and pb["applicable"]):
            diff = "-"
        elif pa["instances_sha256"] != pb["instances_sha256"]:
            diff = "other instances: not comparable"
        else:
            d = stats.difference_interval(
                (pb["exact"], pb["exact_low"], pb["exact_high"]),
                (pa["exact"], pa["exact_low"], pa["exact_high"]))
            diff = f"{d.value:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"
        rows.append((str(k[1]), *([f"{k[2]:g}" if k[2] is not None else "-"] * depth),
                     *([scaling_text(k[0]) if k[0] else "as trained"] * scaled),
                     f"{k[3]} (seed {k[4]})", exact_text(pa), exact_text(pb), diff))
    return ["", f"task {a.task}: exact match on held-out instances", *table(rows, right={0},
                                                                          indent="  ")]


def compare_lines(path_a: Path, path_b: Path) -> list[str]:
    """`posexp compare`: what differs between two completed runs, and their curves."""
    a, b = completed_run(path_a), completed_run(path_b)
    lines = table([("A", str(a.path), describe(a)), ("B", str(b.path), describe(b))])
    ident, other = differing_keys(a, b)
    for title, keys in (("identity keys that differ", ident), ("other keys that differ", other)):
        if keys:
            lines += ["", f"{title}:", *table([("key", "A", "B"), *keys], indent="  ")]
    if not ident and not other:
        lines += ["", "the configs are the same (but for where the runs are written)"]
    if a.task is not None or b.task is not None:
        if a.task != b.task:
            return [*lines, "", f"A is trained on {a.task or 'a corpus'}, B on "
                    f"{b.task or 'a corpus'}: their scores are not comparable"]
        return lines + task_lines(a, b)
    corpus = corpus_line(a, b)
    if corpus:
        lines += ["", corpus]
    else:
        region_a = {region_of(p) for p in a.curve}
        region_b = {region_of(p) for p in b.curve}
        if not region_a & region_b:
            lines += ["", "A and B scored different validation tokens (eval.tokens or the "
                          "validation split differ): no ratio is comparable"]
    return lines + curve_lines(a, b, corpus is None)
