"""Plots and tables across runs, read through runs.py (run.json, config.yaml, eval.json).

Runs form one series when their identities (config.identity: every key that determines the
weights) are equal except the seed (and, for fine-tunes, the parent run of that seed), and
their points are of the same mode, scored region and RoPE scaling: each scaling a run was
scored with (``posexp eval RUN eval.rope_scaling=...``) is a series of its own, labelled
with "+", the method and its factor, and a fine-tune's label says what it continues
("rope L=64 → ft L=256" and its scaling).
A series is the mean over its distinct seeds, with a 95% interval (posexp/stats.py): with
two seeds or more, Student-t across the seeds; with one, the bootstrap over blocks of the
scored tokens that eval.json records for each point (paired, for a ratio of two lengths).
Sliding points scored with several strides give one curve per stride.  A series' label
names its encoding and training length, and whatever else tells the series of one report
apart.  Only completed runs are plotted; the others, damaged ones included, are listed with
their reason, and a run without points of a mode is named under that mode's figure and
table, never silently left out.

Runs trained on an algorithmic task (posexp/data/tasks) hold task points instead of
curve points: exact match on held-out instances at each instance length (and, for passkey,
each depth).  They form series the same way, one per task and RoPE scaling, and get a figure
of accuracy against length per task, a length x depth heatmap for passkey, and a table per
task.

Figures: one colour per encoding, from Okabe & Ito's palette (which colour-blind readers
can tell apart), the same in every figure; line style and marker tell apart the series of
one encoding.  Legends and captions sit outside the axes, so they hide no point.
"""

from __future__ import annotations

import csv
import io
import math
import sys
import textwrap
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from statistics import NormalDist

import numpy as np

from posexp.config import OPTIONAL_KEYS, SEED_KEYS
from posexp.errors import PosexpError
from posexp.runs import (
    DAMAGED,
    MODES,
    Region,
    RunResult,
    Scaling,
    atomic_write,
    atomic_write_text,
    point_scaling,
    scaling_order,
    scaling_text,
)
from posexp.runs import load_runs as load_runs  # cli.py imports it from here
from posexp.stats import LEVEL, Interval, ratio_interval, t_interval

CSV_COLUMNS = ["experiment", "run", "series", "encoding", "train_seq_len", "seed", "n_params",
               "d_model", "n_layer", "n_head", "corpus", "corpus_fingerprint", "tokenizer",
               "tokenizer_fingerprint", "steps", "tokens_trained", "parent", "mode",
               "rope_scaling", "rope_scaling_factor", "stride", "length", "first_token",
               "tokens", "applicable", "loss", "ppl", "ppl_low", "ppl_high", "bits_per_token",
               "bits_per_byte", "reason"]
POINT_COLUMNS = [c for c in CSV_COLUMNS[CSV_COLUMNS.index("mode"):]
                 if not c.startswith("rope_scaling")]
# a task point's own fields (runs.TASK_POINT_KINDS), after the perplexity columns; a row of
# one kind leaves the other kind's columns empty
TASK_COLUMNS = ["task", "train_max_length", "depth", "count", "eval_seed", "exact",
                "exact_low", "exact_high", "token_acc", "token_acc_low", "token_acc_high",
                "answer_loss", "chance_exact", "chance_token", "instances_sha256"]
CSV_COLUMNS += TASK_COLUMNS

ENCODING, TRAIN_LEN, SEED = "encoding.name", "train.seq_len", "seed"
PARENT = "parent.config"  # a fine-tune's parent config: in its identity, and only in its
# Identity keys that config.resolve fills in from others (d_ff from d_model; max_positions
# and batch_size from seq_len): a label names one only when it tells apart series that the
# rest of the label leaves alike, so runs at two lengths are not labelled "batch_size=32".
DERIVED = ("model.d_ff", "encoding.max_positions", "train.batch_size")

# Each registered encoding has its own colour (EncodingSpec.colour, colour-blind-safe) in every
# figure of every report; an encoding the registry does not know (a run from elsewhere) takes
# a spare one in report order, and past them a colour repeats with other line styles.
SPARE_COLOURS = ["#F0E442", "#117733", "#AA4499"]
UNKNOWN_COLOUR = "#000000"
# A report of one encoding with RoPE scalings colours each method (Okabe & Ito again).
METHOD_COLOURS = ["#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000"]
# (line style, marker) of the k-th series of one colour: the first 32 pairs all differ
LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
STYLES = [(LINESTYLES[k % 4], MARKERS[(k + k // 8) % 8]) for k in range(32)]
GREY = "#777777"  # training lengths and the ratio 1: reference lines, no series' colour
MIN_SPAN = 1.05   # a perplexity or ratio axis spans at least x/÷ 5% around its data's middle
HALF = "L/2"      # the sliding stride when eval.stride is unset: half of each window
NO_INTERVAL = "no interval recorded"
PERCENT = f"{LEVEL:.0%}"


def warn(message: str) -> None:
    print(f"posexp: warning: {message}", file=sys.stderr)


# --- series ------------------------------------------------------------------------------
def _region(p: dict) -> Region:
    return p["first_token"], p["tokens"]


def _follows(p: dict, stride: str) -> bool:
    """Whether sliding point ``p`` was scored with the stride setting ``stride``."""
    return p["stride"] == (max(1, p["length"] // 2) if stride == HALF else int(stride))


def stride_settings(points: list[dict]) -> list[str]:
    """The stride settings sliding ``points`` were scored with: HALF (eval.stride unset: half
    of each window) when some point can only be that, then each fixed eval.stride.  A point
    whose stride is half its window and also a fixed stride of other points belongs to both."""
    fixed = sorted({p["stride"] for p in points if p["stride"] != max(1, p["length"] // 2)})
    half = any(p["stride"] == max(1, p["length"] // 2) and p["stride"] not in fixed
               for p in points)
    return [HALF] * half + [str(s) for s in fixed]


@dataclass
class Series:
    """Completed runs of one identity but the seed, scored in one mode on one region: one
    member per distinct seed."""

    config: tuple  # the identity without the seed, as sorted (key, repr(value)) pairs
    scaling: Scaling  # the RoPE scaling its points were scored with; None: as trained
    mode: str
    region: Region
    members: list[RunResult]
    # label: (key name, value; None for another encoding's own setting, which it lacks)
    parts: list[tuple[str, str | None]] = field(default_factory=list)
    scored: str | None = None  # label: the region, when the report holds more than one
    scalings: bool = False  # whether the report holds RoPE-scaled points or fine-tunes
    strides: list[str | None] = field(default_factory=lambda: [None])  # sliding: settings
    colour: str = UNKNOWN_COLOUR
    styles: dict[str | None, tuple[str, str]] = field(default_factory=dict)  # per stride

    @property
    def encoding(self) -> str:
        return self.members[0].encoding

    @property
    def train_len(self) -> int:
        return self.members[0].train_len

    @property
    def fine_tune(self) -> tuple[int, Scaling] | None:
        return self.members[0].fine_tune

    @property
    def root_len(self) -> int:
        """The length the weights were first trained at (a fine-tune's root run's)."""
        return self.fine_tune[0] if self.fine_tune else self.train_len

    @property
    def label(self) -> str:
        words = [curve_name(self.encoding, self.train_len, self.scaling, self.fine_tune),
                 *(f"{k}={v}" for k, v in self.parts if v is not None)]
        if self.scored:
            words.append(f"scored {self.scored}")
        return " · ".join(words)

    def columns(self) -> list[tuple[str, str]]:
        """(heading, value) of what tells this series apart beyond encoding and length."""
        tuned = self.fine_tune
        scaled = [("fine-tune", f"from L={tuned[0]}" + (f", {scaling_text(tuned[1])}"
                                                       if tuned[1] else "") if tuned else "-"),
                  ("RoPE scaling", scaling_text(self.scaling) if self.scaling else "-")]
        return [*((k, "-" if v is None else v) for k, v in self.parts),
                *(scaled if self.scalings else []),
                *([("scored", self.scored)] if self.scored else [])]

    def points(self, run: RunResult, stride: str | None) -> dict[int, dict]:
        """length -> ``run``'s point of this series' mode, region and RoPE scaling (and,
        sliding, of the stride setting ``stride``)."""
        return {p["length"]: p for p in run.curve
                if p["mode"] == self.mode and _region(p) == self.region
                and point_scaling(p) == self.scaling
                and (stride is None or _follows(p, stride))}


def fine_tune_text(train_len: int, fine_tune: tuple[int, Scaling]) -> str:
    """'ft L=256 PI' and the factor: what a fine-tune trained at, and with."""
    return f"ft L={train_len}" + (f" {scaling_text(fine_tune[1])}" if fine_tune[1] else "")


def curve_name(encoding: str, train_len: int, scaling: Scaling,
               fine_tune: tuple[int, Scaling] | None) -> str:
    """A curve's name: the encoding and the length its weights were first trained at; a
    fine-tune's length and scaling after an arrow; after a '+', the RoPE scaling it was
    scored with."""
    name = f"{encoding} L={fine_tune[0] if fine_tune else train_len}"
    if fine_tune:
        name += f" \u2192 {fine_tune_text(train_len, fine_tune)}"
    return name + (f" + {scaling_text(scaling)}" if scaling else "")


def config_key(run: RunResult) -> tuple:
    """The identity but the keys that follow the seed (a fine-tune's parent at that seed)."""
    return tuple(sorted((k, repr(v)) for k, v in run.identity.items() if k not in SEED_KEYS))


def _order(value: object) -> tuple:
    """A sort key for identity values of any type: numbers by value, the rest as text."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (0, value, "") if is_number else (1, 0, str(value))


def _text(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


# keys whose default is the encoding's (config.resolve): sinusoidal's head is untied
PER_ENCODING = ("model.tie_weights",)


def label_keys(identities: list[dict]) -> list[str]:
    """The identity keys, besides encoding, training length and seed, that a label names:
    every key whose value differs between these identities (an encoding's own settings
    between runs of that encoding; a derived key only when the others leave two identities
    alike that it tells apart).  Fine-tunes and runs trained
    from scratch are compared among themselves: a fine-tune's budget, learning rate, parent
    and scaling are in its label's name (curve_name), not in keys."""
    keys = sorted(k for k in set().union(*identities) - {ENCODING, TRAIN_LEN, SEED}
                  if not k.startswith(("parent.", "encoding.scaling.")))
    groups = [[i for i in identities if (PARENT in i) == tuned] for tuned in (False, True)]

    def differs(key: str) -> bool:
        # an encoding's own settings (hparams, base, module) and the keys whose default is
        # the encoding's (model.tie_weights) differ between encodings by nature: they are
        # compared among the runs of one encoding
        members = ([[i for i in group if i.get(ENCODING) == e]
                    for group in groups for e in {i.get(ENCODING) for i in group}]
                   if key.startswith("encoding.") or key in PER_ENCODING else groups)
        return any(len({repr(i.get(key)) for i in m}) > 1 for m in members)

    chosen = [k for k in keys if differs(k) and k not in DERIVED]
    for key in (k for k in keys if k in DERIVED and differs(k)):
        seen: dict[tuple, str] = {}
        for i in identities:
            rest = tuple(repr(i.get(c)) for c in (ENCODING, TRAIN_LEN, PARENT, *chosen))
            if seen.setdefault(rest, repr(i.get(key))) != repr(i.get(key)):
                chosen.append(key)
                break
    return chosen


def label_parts(ident: dict, keys: list[str], names: dict[str, str]) -> list[tuple]:
    """(short name, value) of each label key for one series.  An encoding's own settings
    name only the series of encodings that have them (encoding.base only those that read
    it), and a key that is off unless set (train.random_positions) only those that set it:
    None for the others."""
    return [(names[k], _text(ident.get(k)) if (k in ident or not (
        k.startswith("encoding.") or k in OPTIONAL_KEYS)) and _reads(ident, k) else None)
        for k in keys]


def _reads(ident: dict, key: str) -> bool:
    """Whether the series' encoding reads ``key``: every encoding's config carries
    encoding.base and encoding.max_positions, but only some encodings use them."""
    from posexp.encodings import ENCODINGS
    from posexp.encodings.registry import TOP_LEVEL

    name = key.removeprefix("encoding.")
    spec = ENCODINGS.get(ident.get(ENCODING))
    return (name not in TOP_LEVEL or spec is None
            or name in {f.name for f in fields(spec.config)})


def short_names(keys: list[str], all_keys: set[str]) -> dict[str, str]:
    """'model.d_model' -> 'd_model' where no other identity key ends in the same name."""
    last = Counter(k.rsplit(".", 1)[-1] for k in all_keys)
    return {k: k.rsplit(".", 1)[-1] if last[k.rsplit(".", 1)[-1]] == 1 else k for k in keys}


def region_text(region: Region) -> str:
    first, tokens = region
    return f"{tokens} tok @ {first}"


def encoding_colours(encodings: list[str]) -> dict[str, str]:
    """The colour of each of ``encodings`` (in report order): its own, or the next spare."""
    from posexp.encodings import ENCODINGS  # the registry (imports torch: not at start-up)

    own = {e: ENCODINGS[e].colour for e in encodings if e in ENCODINGS}
    spare = SPARE_COLOURS + [spec.colour for spec in ENCODINGS.values()]
    others = [e for e in encodings if e not in own]
    return {e: own.get(e) or spare[others.index(e) % len(spare)] for e in encodings}


def encoding_rank(encoding: str) -> int:
    """Where an encoding's series stand in figures and tables: the registry's order, and
    encodings it does not know after every one it does."""
    from posexp.encodings import ENCODINGS

    spec = ENCODINGS.get(encoding)
    return spec.order if spec else len(ENCODINGS)


def build_series(runs: list[RunResult]) -> tuple[list[Series], list[list[RunResult]]]:
    """Every series of ``runs`` (completed runs), labelled and styled, in report order:
    encoding (the registry's order), training length, the other label values, region, mode.  Also
    the groups of runs of one identity and one seed: only the first of each counts."""
    by_seed: dict[tuple, dict[object, list[RunResult]]] = defaultdict(dict)
    for r in sorted(runs, key=lambda r: str(r.path)):
        for mode in {p["mode"] for p in r.curve}:
            for scaling in r.scalings(mode):
                for region in r.regions(mode, scaling):
                    by_seed[(config_key(r), scaling, mode, region)].setdefault(
                        r.seed, []).append(r)
    series = [Series(config, scaling, mode, region, [same[0] for same in seeds.values()])
              for (config, scaling, mode, region), seeds in by_seed.items()]
    # a group shows up once per mode and region it was scored in: keep one of each
    duplicates = {tuple(str(r.path) for r in same): same for seeds in by_seed.values()
                  for same in seeds.values() if len(same) > 1}

    identities = {s.config: s.members[0].identity for s in series}
    keys = label_keys(list(identities.values()))
    names = short_names(keys, set().union(*identities.values()))
    several_regions = len({s.region for s in series}) > 1
    scalings = any(s.scaling or s.fine_tune for s in series)
    for s in series:
        ident = identities[s.config]
        s.parts = label_parts(ident, keys, names)
        s.scored = region_text(s.region) if several_regions else None
        s.scalings = scalings
        if s.mode == "sliding":
            s.strides = stride_settings([p for r in s.members for p in r.curve
                                         if p["mode"] == s.mode and _region(p) == s.region])

    def order(s: Series) -> tuple:
        # a fine-tune right after the run it continues, a scaling after the run as trained
        enc = s.encoding
        rank = encoding_rank(enc)
        ident = identities[s.config]
        tuned = s.fine_tune
        return (rank, enc, s.root_len, tuned is not None, s.train_len,
                scaling_order(tuned[1]) if tuned else (), *(_order(ident.get(k)) for k in keys),
                s.region, scaling_order(s.scaling), MODES.index(s.mode))

    series.sort(key=order)
    # a colour per encoding; a style per config and region among the series of one colour,
    # the same in every figure (a series' first stride setting takes it, further ones the
    # next free styles)
    colours = encoding_colours(list(dict.fromkeys(s.encoding for s in series)))
    # one encoding scored with RoPE scalings (or fine-tuned with them): a colour per method
    # instead, the encoding's own for the run as trained
    if scalings and len(colours) == 1:
        [own] = colours.values()
        spare = [c for c in METHOD_COLOURS if c != own]
        methods = [method_of(s) for s in series]
        order = sorted({m for m in methods if m is not None},
                       key=lambda m: scaling_order((("method", m), ("factor", 1.0))))
        by_method = {None: own, **{m: spare[i % len(spare)] for i, m in enumerate(order)}}
        chosen = [by_method[m] for m in methods]
    else:
        chosen = [colours[s.encoding] for s in series]
    taken: Counter = Counter()
    styles: dict[tuple, tuple[str, str]] = {}

    def style(key: tuple, colour: str) -> tuple[str, str]:
        if key not in styles:
            styles[key] = STYLES[taken[colour] % len(STYLES)]
            taken[colour] += 1
        return styles[key]

    for s, colour in zip(series, chosen, strict=True):
        s.colour = colour
        s.styles = {s.strides[0]: style((s.config, s.scaling, s.region), s.colour)}
    for s in series:
        s.styles.update({stride: style((s.config, s.scaling, s.region, stride), s.colour)
                         for stride in s.strides[1:]})
    return series, list(duplicates.values())


def method_of(s: Series) -> str | None:
    """The RoPE scaling method of a series: the one it was scored with, or else the one its
    fine-tune trained with; None for a run as trained."""
    scaling = s.scaling or (s.fine_tune[1] if s.fine_tune else None)
    return dict(scaling)["method"] if scaling else None


def modes(runs: list[RunResult]) -> list[str]:
    found = {p["mode"] for r in runs for p in r.curve}
    return [m for m in MODES if m in found]


# --- curves: a series (and, sliding, one stride setting) as the figures and tables show it
@dataclass
class Cell:
    """One length of a curve: the perplexity and its ratio to the perplexity at the training
    length, each the mean over seeds with its interval; ``ppl`` None where the length is not
    applicable (a learned table ends at its size), ``ratio`` None without a point at the
    training length."""

    ppl: Interval | None
    ratio: Interval | None = None


def _blocks_method(p: dict) -> str:
    return f"bootstrap over {len(p['block_loss'])} blocks" if p.get("block_loss") \
        else "bootstrap over blocks"


def ppl_cell(points: list[dict]) -> Interval:
    """The mean perplexity of one applicable point per seed: Student-t across two seeds or
    more; one seed's own bootstrap interval (eval.json's ppl_low, ppl_high), if recorded."""
    if len(points) > 1:
        return t_interval([p["ppl"] for p in points], log=True)
    [p] = points
    if p.get("ppl_low") is None or p.get("ppl_high") is None:
        return Interval(p["ppl"], None, None, 1, NO_INTERVAL)
    return Interval(p["ppl"], p["ppl_low"], p["ppl_high"], 1, _blocks_method(p))


def ratio_cell(pairs: list[tuple[dict, dict]]) -> Interval:
    """The mean over seeds of ppl(length) / ppl(training length), from (point, point at the
    training length) pairs: Student-t across two seeds or more; for one seed the paired
    bootstrap (the same blocks drawn at both lengths) when both points hold their blocks."""
    if len(pairs) > 1:
        return t_interval([p["ppl"] / base["ppl"] for p, base in pairs], log=True)
    [(p, base)] = pairs
    if p.get("block_loss") and base.get("block_loss") \
            and p.get("block_tokens") == base.get("block_tokens"):
        return ratio_interval(p, base)
    return Interval(p["ppl"] / base["ppl"], None, None, 1, NO_INTERVAL)


@dataclass
class Curve:
    """What a figure draws as one line and a table prints as one row."""

    series: Series
    stride: str | None  # the sliding stride setting; None in nonoverlapping mode
    label: str
    cells: dict[int, Cell]

    @property
    def style(self) -> tuple[str, str]:
        return self.series.styles[self.stride]

    @property
    def legend(self) -> str:
        n = len(self.series.members)
        return self.label + (f" ({n} seeds)" if n > 1 else "")


def curve_cells(s: Series, stride: str | None) -> dict[int, Cell]:
    """length -> the cell of series ``s`` (and, sliding, stride setting ``stride``), at every
    length one of its seeds was scored at."""
    by_run = [s.points(r, stride) for r in s.members]
    cells = {}
    for length in sorted({length for points in by_run for length in points}):
        ok = [points for points in by_run if length in points and points[length]["applicable"]]
        pairs = [(points[length], points[s.train_len]) for points in ok
                 if s.train_len in points and points[s.train_len]["applicable"]]
        cells[length] = Cell(ppl_cell([points[length] for points in ok]) if ok else None,
                             ratio_cell(pairs) if pairs else None)
    return cells


def mode_curves(series: list[Series], mode: str) -> list[Curve]:
    """The curves of ``mode``: one per series, or per series and stride setting (labelled
    with it when the mode's curves hold more than one)."""
    ours = [(s, stride) for s in series if s.mode == mode for stride in s.strides]
    several = len({stride for _, stride in ours}) > 1
    return [Curve(s, stride, s.label + (f" · stride {stride}" if several else ""),
                  curve_cells(s, stride)) for s, stride in ours]


def stride_note(curves: list[Curve]) -> str:
    """', stride L/2' when every curve has the one sliding stride setting it names."""
    strides = {c.stride for c in curves}
    return f", stride {strides.pop()}" if len(strides) == 1 and None not in strides else ""


def not_scored(series: list[Series], mode: str) -> list[str]:
    """One line per run of the report (a seed of a config, on a region) that holds points of
    another mode but none of ``mode``, with the command that scores it."""
    have = {(s.config, s.scaling, s.region, r.seed) for s in series if s.mode == mode
            for r in s.members}
    lines: dict[tuple, str] = {}
    for s in series:
        scaled = "" if s.scaling is None else (
            " eval.rope_scaling={method} eval.rope_scaling.factor={factor:g}"
            .format(**dict(s.scaling)))
        for r in s.members:
            if (s.config, s.scaling, s.region, r.seed) not in have:
                lines.setdefault((str(r.path), s.scaling), f"{s.label}: posexp eval {r.path} "
                                                           f"eval.mode={mode}{scaled}")
    return list(lines.values())


def notes(curves: list[Curve], series: list[Series], mode: str) -> list[str]:
    """What a figure or table of ``mode`` does not show and why: intervals not recorded,
    lengths that are not applicable, curves without a point at their training length (no
    ratio), runs not scored in this mode."""
    lines = []
    bare = [c.label for c in curves
            if any(iv.method == NO_INTERVAL for cell in c.cells.values()
                   for iv in (cell.ppl, cell.ratio) if iv)]
    if bare:
        which = "every curve" if len(bare) == len(curves) else ", ".join(bare)
        lines.append(f"{NO_INTERVAL} (eval.json from before posexp kept block losses; "
                     f"`posexp eval RUN` scores it again): {which}")
    for c in curves:
        na = [length for length, cell in c.cells.items() if cell.ppl is None]
        if na:
            lines.append(f"n/a (no position that far; posexp does not clamp): {c.label} at "
                         f"{', '.join(map(str, na))}")
        if c.cells and not any(cell.ratio for cell in c.cells.values()):
            lines.append(f"no ratio (no point at its training length): {c.label}")
    missing = not_scored(series, mode)
    if missing:
        lines.append(f"not scored in {mode} mode: " + "; ".join(missing))
    return lines


# --- tables ------------------------------------------------------------------------------
def tidy_rows(runs: list[RunResult]) -> list[dict]:
    """One row per run x curve point, then per run x task point, with the label of the
    series the point belongs to; every row holds every column (None where it does not
    apply)."""
    series, _ = build_series(runs)
    labels = {(s.config, s.scaling, s.mode, s.region): s.label for s in series}
    tasks = {(s.task, s.config, s.scaling): s for s in task_series(runs)[0]}
    rows = []
    for r in runs:
        model = r.info.get("model") or {}
        corpus = r.info.get("corpus") or {}
        run_fields = {
            **dict.fromkeys(CSV_COLUMNS),
            "experiment": r.info.get("experiment"), "run": r.name, "encoding": r.encoding,
            "train_seq_len": r.train_len, "seed": r.seed, "n_params": r.info.get("n_params"),
            **{k: r.identity.get(f"model.{k}", model.get(k))
               for k in ("d_model", "n_layer", "n_head")},
            "corpus": corpus.get("name", r.identity.get("data.name")),
            "corpus_fingerprint": corpus.get("fingerprint"),
            "tokenizer": corpus.get("tokenizer"),
            "tokenizer_fingerprint": corpus.get("tokenizer_fingerprint"),
            "steps": r.info.get("steps"), "tokens_trained": r.info.get("tokens_trained"),
            "parent": r.info.get("parent"),
        }
        for p in r.curve:
            label = labels[(config_key(r), point_scaling(p), p["mode"], _region(p))]
            scaling = p.get("rope_scaling") or {}
            rows.append({**run_fields, "series": label,
                         "rope_scaling": scaling_text(point_scaling(p)) if scaling else None,
                         "rope_scaling_factor": scaling.get("factor"),
                         **{k: p.get(k) for k in POINT_COLUMNS}})
        for p in r.tasks:
            s = tasks[(p["task"], config_key(r), point_scaling(p))]
            scaling = p.get("rope_scaling") or {}
            rows.append({**run_fields, "series": s.label,
                         "rope_scaling": scaling_text(point_scaling(p)) if scaling else None,
                         "rope_scaling_factor": scaling.get("factor"),
                         **{k: p.get(k) for k in ("length", "tokens", "applicable", "reason",
                                                  *TASK_COLUMNS)},
                         "train_max_length": s.max_length})
    return rows


def csv_text(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _fmt(x: float) -> str:
    """Four significant digits, never an exponent: 5.523, 14.82, 107.3, 12345."""
    return f"{x:.{max(0, 3 - math.floor(math.log10(abs(x))))}f}" if x else "0"


def _cell_text(iv: Interval | None, fmt: Callable[[float], str], bold: bool = False,
               interval: bool = True) -> str:
    if iv is None:
        return "—"
    value = f"**{fmt(iv.value)}**" if bold else fmt(iv.value)
    if not interval or iv.low is None or iv.high is None:
        return value
    return f"{value} [{fmt(iv.low)}, {fmt(iv.high)}]"


def _ratio_fmt(x: float) -> str:
    return f"{x:.3f}"


def _table(curves: list[Curve], lengths: list[int], stride_column: bool,
           ratios: bool) -> list[str]:
    extra = [heading for heading, _ in curves[0].series.columns()]
    extra += ["stride"] * stride_column
    lines = ["| " + " | ".join(["encoding", "L_train", *extra, "seeds", *map(str, lengths)])
             + " |",
             "|---|---:|" + "---|" * len(extra) + "---:|" * (1 + len(lengths))]
    for c in curves:
        s = c.series
        values = [value.replace("|", "/") for _, value in s.columns()]
        values += [str(c.stride)] * stride_column
        cells = []
        for length in lengths:
            cell, at_train_len = c.cells.get(length), length == s.train_len
            if cell is None:
                cells.append("")
            elif cell.ppl is None:
                cells.append("n/a")
            elif ratios:  # 1 at the training length, by definition: no interval to give
                cells.append(_cell_text(cell.ratio, _ratio_fmt, at_train_len,
                                        interval=not at_train_len))
            else:
                cells.append(_cell_text(cell.ppl, _fmt, at_train_len))
        lines.append("| " + " | ".join([s.encoding, str(s.train_len), *values,
                                        str(len(s.members)), *cells]) + " |")
    return lines


def markdown(runs: list[RunResult], not_done: list[RunResult], title: str) -> str:
    """Per mode, the tables a paper prints: perplexity at each length, and its ratio to the
    perplexity at the training length, each with its 95% interval, one row per curve; a
    column for each key that tells series apart."""
    series = build_series(runs)[0]
    duplicates = duplicate_groups(runs)
    lines = [f"# {title}", ""]
    if series:
        lines += [describe(series), ""]
    for mode in modes(runs):
        curves = mode_curves(series, mode)
        lengths = sorted({length for c in curves for length in c.cells})
        several = len({c.stride for c in curves}) > 1
        heading = f"{mode}{stride_note(curves)}"
        lines += [f"## {heading}: perplexity", "",
                  f"Mean over seeds [{PERCENT} interval: Student-t across the seeds with two "
                  "or more; with one, a bootstrap over blocks of the scored tokens]. Bold: at "
                  "the training length.", "",
                  *_table(curves, lengths, several, ratios=False), "",
                  f"## {heading}: perplexity / perplexity at the training length", "",
                  f"Mean over seeds [{PERCENT} interval: Student-t across the seeds with two "
                  "or more; with one, a paired bootstrap, the same blocks drawn at both "
                  "lengths].", "",
                  *_table(curves, lengths, several, ratios=True), ""]
        lines += [f"* {line}" for line in notes(curves, series, mode)]
        lines.append("")
    lines += task_markdown(task_series(runs)[0])
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


def _plain_table(heading: str, lengths: list[int], rows: list[tuple[str, list[str]]]) -> str:
    width = max([len("series"), *(len(label) for label, _ in rows)]) + 2
    lines = [heading, f"{'series':<{width}}" + "".join(f"{length:>10}" for length in lengths)]
    lines += [f"{label:<{width}}" + "".join(f"{cell:>10}" for cell in cells)
              for label, cells in rows]
    return "\n".join(lines)


def terminal_table(runs: list[RunResult], mode: str = "nonoverlapping") -> str:
    """curve x length -> perplexity (mean over seeds), for the end of a sweep; and for task
    runs, per task, series x length -> exact match (mean over seeds)."""
    curves = mode_curves(build_series(runs)[0], mode)
    tables = []
    by_task = task_groups(task_series(runs)[0])
    if curves or not by_task:
        lengths = sorted({length for c in curves for length in c.cells})
        tables.append(_plain_table(
            f"perplexity ({mode}{stride_note(curves)}; mean over seeds)", lengths,
            [(c.label, ["" if (cell := c.cells.get(length)) is None else "n/a"
                        if cell.ppl is None else _fmt(cell.ppl.value) for length in lengths])
             for c in curves]))
    for task, ours in by_task.items():
        cells = [(s.label, task_cells(s)) for s in ours]
        lengths = sorted({length for _, c in cells for length in c})
        tables.append(_plain_table(
            f"exact match on {task} (mean over seeds{', and depths' * (task == PASSKEY)})",
            lengths, [(label, [_task_cell_text(c.get(length), interval=False)
                               for length in lengths]) for label, c in cells]))
    return "\n\n".join(tables)


# --- figures -----------------------------------------------------------------------------
WIDTH = 10.0        # inches: 1300 px at DPI, read at ~800 px in a README
DPI = 130
TITLE_WRAP = 118    # characters per line of the title (11 pt) over the figure's width
CAPTION_WRAP = 135  # and of the caption (9 pt)


def _count(n: int, digits: int = 2) -> str:
    """0.82M, 12,345."""
    return f"{n / 1e6:.{digits}f}M" if n >= 100_000 else f"{n:,}"


def _param_difference(s: Series, extra: int) -> str:
    """``s``'s parameters beyond (or short of) the other runs' count, and why where posexp
    knows."""
    ident = s.members[0].identity
    rows, width = ident.get("encoding.max_positions"), ident.get("model.d_model")
    vocab = (s.members[0].info.get("corpus") or {}).get("vocab_size")
    if s.encoding == "learned" and rows and width and rows * width == extra:
        return f", +{extra:,} for its {rows}x{width} position table"
    if ident.get("model.tie_weights") is False and vocab and width and vocab * width == extra:
        return f", +{extra:,} for its untied {vocab}x{width} output head"
    return f", {extra:+,}"


MAX_COUNTS_NAMED = 4  # series whose parameter count a title names, beyond the usual count


def describe(series: list[Series]) -> str:
    """The runs of ``series`` in words: corpus and tokens, model shape, parameters (and which
    series differ, and why where posexp knows), training tokens."""
    runs = list({str(r.path): r for s in series for r in s.members}.values())
    corpora = sorted({f"{c.get('name', '?')} corpus, {c.get('tokenizer', '?')} tokens"
                      for r in runs if r.curve or r.info.get("corpus")
                      for c in [r.info.get("corpus") or {}]})
    words = ["; ".join(corpora)] if corpora else []
    shapes = {tuple(r.identity.get(f"model.{k}") for k in ("d_model", "n_layer", "n_head"))
              for r in runs}
    shape = next(iter(shapes))
    if len(shapes) == 1 and None not in shape:
        d_model, n_layer, n_head = shape
        words.append(f"d_model {d_model}, {n_layer} layer{'s' * (n_layer != 1)}, "
                     f"{n_head} head{'s' * (n_head != 1)}")
    else:
        words.append("model shapes in the labels")
    counts = Counter(r.info["n_params"] for r in runs if r.info.get("n_params"))
    if counts:
        usual = max(counts, key=lambda n: (counts[n], -n))  # on a tie, the smallest
        others = {s.label: f"{s.label}: {_count(n)}{_param_difference(s, n - usual)}"
                  for s in series if (n := s.members[0].info.get("n_params")) and n != usual}
        if len(others) > MAX_COUNTS_NAMED:  # else a paragraph: summary.csv has every run's
            words.append(f"{_count(min(counts))} to {_count(max(counts))} parameters "
                         "(each run's: n_params in summary.csv)")
        else:
            words.append(f"{_count(usual)} parameters"
                         + (f" ({'; '.join(others.values())})" if others else ""))
    trained = sorted({r.info["tokens_trained"] for r in runs if r.info.get("tokens_trained")})
    if trained:
        span = " to ".join(dict.fromkeys(_count(n, 1) for n in (trained[0], trained[-1])))
        words.append(f"trained on {span} tokens")
    return " · ".join(words)


def _scored_text(regions: set[Region]) -> str:
    if len(regions) == 1:
        return f"the same {next(iter(regions))[1]:,} validation tokens"
    return "the same validation tokens at every length (one region per label)"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _titled(title: str, subtitle: str, height: float):
    """A figure with the title over its whole width and, below it, a body ``height`` inches
    high.  Returns (figure, body)."""
    lines = [*textwrap.wrap(title, TITLE_WRAP), *textwrap.wrap(subtitle, TITLE_WRAP)]
    head_height = 0.22 * len(lines) + 0.15
    fig = _pyplot().figure(figsize=(WIDTH, head_height + height), layout="constrained")
    grid = fig.add_gridspec(2, 1, height_ratios=[head_height, height])
    head, body = fig.add_subfigure(grid[0, 0]), fig.add_subfigure(grid[1, 0])
    body.heights = grid  # the body grows to fit its legend (_fit_height)
    head.text(0.01, 0.5, "\n".join(lines), ha="left", va="center", fontsize=11)
    return fig, body


def _figure(title: str, subtitle: str, height: float, rows: int = 1,
            height_ratios: list[int] | None = None):
    """A titled figure whose body holds ``rows`` axes stacked on one x axis (the body also
    holds the legend, to their right, and the caption, below them).  Returns (figure,
    body, axes)."""
    fig, body = _titled(title, subtitle, height)
    axes = body.subplots(rows, 1, sharex=True, height_ratios=height_ratios, squeeze=False)
    for ax in axes[:, 0]:
        ax.grid(True, which="major", color="#dddddd", linewidth=0.8)
        ax.tick_params(labelsize=10, labelbottom=True)
    return fig, body, list(axes[:, 0])


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Plain round numbers for a log axis from ``lo`` to ``hi``: 1, 2, 5 in each decade (and
    3 where that gives fewer than four), or, over a short span, evenly spaced ones."""
    from matplotlib.ticker import MaxNLocator

    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    for steps in ((1, 2, 5), (1, 2, 3, 5)):
        ticks = [m * 10.0**d for d in decades for m in steps if lo <= m * 10.0**d <= hi]
        if len(ticks) >= 4:
            return ticks
    if len(ticks) >= 3:
        return ticks
    return [t for t in MaxNLocator(5, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
            if lo <= t <= hi]


def _log_y(ax, intervals: list[Interval], extra: tuple[float, ...] = ()) -> None:
    """A log y axis over the values of ``intervals`` (and ``extra``) and their bands, a band
    cut off at twice the values' range (a t interval over few seeds can be that wide, or
    reach below zero); at least MIN_SPAN either side of the middle, so that a change of a
    fraction of a percent looks as small as it is.  Plain tick labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    values = [iv.value for iv in intervals if iv.value > 0] + list(extra) or [1.0]
    ends = [x for iv in intervals for x in (iv.low, iv.high) if x is not None and x > 0]
    lo = max(min([*values, *ends]), min(values) / 2)
    hi = min(max([*values, *ends]), max(values) * 2)
    middle = math.sqrt(lo * hi)
    lo, hi = min(lo, middle / MIN_SPAN), max(hi, middle * MIN_SPAN)
    pad = (hi / lo) ** 0.04
    ax.set_yscale("log")
    ax.set_ylim(lo / pad, hi * pad)
    ax.yaxis.set_major_locator(FixedLocator(_log_ticks(lo / pad, hi * pad)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _log2_x(ax, ticks: list[int], lo: float, hi: float) -> None:
    """A log2 x axis with plain labels exactly at ``ticks``."""
    from matplotlib.ticker import NullLocator

    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(lo, hi)


def _draw(ax, colour: str, style: tuple[str, str], xs: list[float],
          intervals: list[Interval], label: str | None = None, alpha: float = 0.18) -> None:
    """A curve and its intervals: a band (of opacity ``alpha``), or an error bar for a lone
    point."""
    linestyle, marker = style
    ys = [iv.value for iv in intervals]
    # a lone point (a learned table ends at its training length) is drawn above the curves
    # that may pass through it
    ax.plot(xs, ys, color=colour, linestyle=linestyle, marker=marker, markersize=5,
            linewidth=1.6, label=label, zorder=3 + (len(xs) == 1))
    low = [math.nan if iv.low is None else iv.low for iv in intervals]
    high = [math.nan if iv.high is None else iv.high for iv in intervals]
    if len(xs) == 1 and not math.isnan(low[0]):
        ax.errorbar(xs, ys, yerr=[[ys[0] - low[0]], [high[0] - ys[0]]], color=colour,
                    capsize=3, linewidth=1, zorder=4)
    elif len(xs) > 1:
        ax.fill_between(xs, low, high, color=colour, alpha=alpha, linewidth=0, zorder=2)


def _train_lengths(axes: list, lengths: list[int], label: str = "L={}") -> None:
    """A grey dotted line at each training length inside the x axis' limits, labelled in
    the first of ``axes`` (``label`` with the length in its braces)."""
    lo, hi = axes[0].get_xlim()
    to_axes = axes[0].transAxes.inverted()
    for length in (x for x in lengths if lo < x < hi):
        for ax in axes:
            ax.axvline(length, color=GREY, linestyle=":", linewidth=1.2, zorder=1)
        # where the label would run past the right edge (into the legend), it goes left of
        # its line: a 9 pt character is about 5 pt wide
        text = label.format(length)
        room = 1 - to_axes.transform(axes[0].transData.transform((length, 1)))[0]
        left = room * axes[0].bbox.width < (5 * len(text) + 3) * axes[0].figure.dpi / 72
        axes[0].annotate(text, xy=(length, 1), xycoords=("data", "axes fraction"),
                         xytext=(-3 if left else 3, -3), textcoords="offset points",
                         ha="right" if left else "left", va="top", fontsize=9, color=GREY,
                         in_layout=False)


def _legend_and_caption(body, ax, caption: list[str], bands: bool,
                        references: tuple[tuple[str, str], ...] = ((":", "training length L"),),
                        ) -> None:
    """The series' legend to the right of the axes and the caption below them: outside the
    data, so that neither hides a point.  ``bands``: whether the figure draws intervals;
    ``references``: (line style, meaning) of the grey reference lines."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles, labels = ax.get_legend_handles_labels()
    for linestyle, meaning in references:
        handles.append(Line2D([], [], color=GREY, linestyle=linestyle, linewidth=1.2))
        labels.append(meaning)
    if bands:
        handles.append(Patch(color=GREY, alpha=0.3, linewidth=0))
        labels.append(f"{PERCENT} interval")
    labels = [legend_label(label) for label in labels]
    body.legend(handles, labels, loc="outside right upper", fontsize=10, frameon=False)
    _fit_height(body, labels, len(_caption_lines(caption)))
    _caption(body, caption)


def _fit_height(body, labels: list[str], caption_lines: int) -> None:
    """Make the body tall enough for a legend of ``labels`` (10 pt lines, half a line
    between entries) above a caption of ``caption_lines`` (9 pt): many long labels would
    otherwise run into the caption and off the figure's foot."""
    lines = sum(label.count("\n") + 1 for label in labels)
    needed = (12 * lines + 5 * len(labels) + 13 * caption_lines + 36) / 72  # inches
    grid = body.heights
    head, height = grid.get_height_ratios()
    if needed > height:
        grid.set_height_ratios([head, needed])
        body.figure.set_figheight(head + needed)


def _caption(body, caption: list[str]) -> None:
    """The caption's lines below the body's axes, wrapped."""
    from matplotlib.lines import Line2D

    lines = _caption_lines(caption)
    if lines:
        blank = Line2D([], [], linestyle="none")
        body.legend([blank] * len(lines), lines, loc="outside lower left", fontsize=9,
                    frameon=False, handlelength=0, handletextpad=0, borderaxespad=0.2,
                    labelspacing=0.25)


def _caption_lines(caption: list[str]) -> list[str]:
    return [line for text in caption  # paths and commands stay whole
            for line in textwrap.wrap(text, CAPTION_WRAP, subsequent_indent="    ",
                                      break_long_words=False, break_on_hyphens=False)]


LEGEND_WRAP = 44  # characters: a longer label goes on more lines, so the axes keep their width


def legend_label(label: str) -> str:
    """A series label on lines of at most LEGEND_WRAP characters, broken between its parts
    ('rope L=16 · d_model=32 · ...'); a single part longer than that stays whole."""
    lines: list[str] = []
    for part in label.split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= LEGEND_WRAP:
            lines[-1] += f" · {part}"
        else:
            lines.append(part if not lines else f"· {part}")
    return "\n".join(lines)


def _interval_caption(intervals: list[Interval]) -> list[str]:
    """What the bands are."""
    methods = sorted({iv.method for iv in intervals if iv.method != NO_INTERVAL},
                     key=lambda m: (m.startswith("bootstrap"), m))
    texts = [m + (" of the scored tokens (one seed; a ratio's is paired: the same blocks "
                  "drawn at both lengths)" if m.startswith("bootstrap") else "")
             for m in methods]
    return [f"Lines: mean over seeds. Bands: {PERCENT} intervals, " + "; ".join(texts)
            + "."] if texts else []


def extrapolation_figure(runs: list[RunResult], mode: str):
    """Perplexity against evaluation length over its ratio to the perplexity at the training
    length, one curve per series (and sliding stride setting) of ``mode``."""
    series = build_series(runs)[0]
    curves = mode_curves(series, mode)
    ours = list({id(c.series): c.series for c in curves}.values())
    title = (f"Perplexity on {_scored_text({s.region for s in ours})} vs evaluation window "
             f"({mode}{stride_note(curves)})")
    fig, body, (ax, rax) = _figure(title, describe(ours), 7.0, 2, height_ratios=[3, 2])
    values, ratios = [], []
    for c in curves:
        xs = [x for x, cell in c.cells.items() if cell.ppl]
        ppl = [c.cells[x].ppl for x in xs]
        _draw(ax, c.series.colour, c.style, xs, ppl, c.legend)
        rxs = [x for x in xs if c.cells[x].ratio]
        ratio = [c.cells[x].ratio for x in rxs]
        if rxs:
            _draw(rax, c.series.colour, c.style, rxs, ratio)
        values += ppl
        ratios += ratio
    lengths = sorted({x for c in curves for x in c.cells})
    for a in (ax, rax):
        _log2_x(a, lengths, lengths[0] / 1.25, lengths[-1] * 1.25)
    _log_y(ax, values)
    _log_y(rax, ratios, extra=(1.0,))
    rax.axhline(1, color=GREY, linewidth=0.9, zorder=1)
    _train_lengths([ax, rax], sorted({c.series.train_len for c in curves}))
    ax.set_ylabel("perplexity (log scale)", fontsize=11)
    rax.set_ylabel("ppl(length) / ppl(L)\n(log scale)", fontsize=11)
    rax.set_xlabel("evaluation window in tokens (log₂ scale)", fontsize=11)
    shown = values + ratios
    _legend_and_caption(body, ax, _interval_caption(shown) + notes(curves, series, mode),
                        bands=any(iv.low is not None for iv in shown))
    return fig


def _longest_record(run: RunResult, region: Region) -> dict | None:
    ours = [p for p in run.per_position if (p.get("first_token"), p.get("tokens")) == region]
    return max(ours, key=lambda p: p["length"], default=None)


def _buckets(record: dict) -> tuple:
    return record["length"], tuple(record["position"]), tuple(record["position_end"])


def _position_intervals(records: list[dict]) -> list[Interval]:
    """Each bucket's mean loss: Student-t across the seeds' records (two or more), or one
    record's mean with ± z standard errors across its windows (``loss_se``), if recorded."""
    if len(records) > 1:
        by_bucket = zip(*(p["loss"] for p in records), strict=True)
        return [t_interval(list(losses)) for losses in by_bucket]
    [record] = records
    z = NormalDist().inv_cdf((1 + LEVEL) / 2)
    method = f"±{z:.2f} standard errors across the run's windows (scored tokens / window)"
    se = record.get("loss_se") or [None] * len(record["loss"])
    return [Interval(loss, None, None, 1, NO_INTERVAL) if e is None
            else Interval(loss, loss - z * e, loss + z * e, 1, method)
            for loss, e in zip(record["loss"], se, strict=True)]


def per_position_figure(runs: list[RunResult]):
    """Mean loss at each position of a run's longest whole windows, per config and scored
    region; each bucket of positions at its geometric middle.  None when no run holds a
    per-position record."""
    firsts: dict[tuple, Series] = {}  # (config, region) -> its first series: colour, style
    for s in build_series(runs)[0]:
        if s.scaling is None:  # RoPE-scaled scoring records no per-position loss
            firsts.setdefault((s.config, s.region), s)
    drawn, caption = [], []  # drawn: (series, longest record, its seeds' records)
    for s in firsts.values():
        records = [(r, p) for r in s.members if (p := _longest_record(r, s.region))]
        if not records:
            caption.append(f"no per-position record: {s.label}")
            continue
        longest = max((p for _, p in records), key=lambda p: p["length"])
        drawn.append((s, longest, [p for _, p in records if _buckets(p) == _buckets(longest)]))
        others = [str(r.path) for r, p in records if _buckets(p) != _buckets(longest)]
        if others:
            caption.append(f"{s.label}: other window or buckets, not averaged in: "
                           f"{', '.join(others)}")
    if not drawn:
        return None
    kinds = sorted({p.get("mode", "nonoverlapping") for _, p, _ in drawn})
    title = (f"Loss at each position of whole {' / '.join(kinds)} windows, on "
             f"{_scored_text({s.region for s, _, _ in drawn})}")
    fig, body, [ax] = _figure(title, describe([s for s, _, _ in drawn]), 5.6)
    shown, bare = [], []
    for s, longest, same in drawn:
        xs = [math.sqrt((a + 1) * b) for a, b in zip(longest["position"],
                                                       longest["position_end"], strict=True)]
        intervals = _position_intervals(same)
        label = f"{s.label} · window {longest['length']}"
        seeds = f" ({len(same)} seeds)" if len(same) > 1 else ""
        # the bands of early positions overlap: fainter than on the extrapolation figures
        _draw(ax, s.colour, s.styles[s.strides[0]], xs, intervals, label + seeds, alpha=0.12)
        if all(iv.method == NO_INTERVAL for iv in intervals):
            bare.append(label)
        shown += intervals
    end = max(p["position_end"][-1] for _, p, _ in drawn)
    _log2_x(ax, [2**k for k in range(math.ceil(math.log2(end)) + 1)], 0.85, end * 1.15)
    _train_lengths([ax], sorted({s.train_len for s, _, _ in drawn}))
    ax.set_xlabel("position inside the window (1: the first token, no context; log₂ scale)",
                  fontsize=11)
    ax.set_ylabel("mean loss (nats per token)", fontsize=11)
    methods = sorted({iv.method for iv in shown if iv.method != NO_INTERVAL})
    lines = [f"Lines: mean over seeds of each bucket of positions, at its geometric middle. "
             f"Bands: {PERCENT} intervals, {'; '.join(methods)}."] if methods else []
    if bare:
        which = "every curve" if len(bare) == len(drawn) else ", ".join(bare)
        lines.append(f"{NO_INTERVAL} (an older eval.json, or a single window): {which}")
    _legend_and_caption(body, ax, lines + caption,
                        bands=any(iv.low is not None for iv in shown))
    return fig


# --- task accuracy -------------------------------------------------------------------------
# A run trained on an algorithmic task holds task points (runs.TASK_POINT_KINDS), not curve
# points: exact match on held-out instances at each instance length, and for passkey at each
# depth of the key in its context.  Its series are grouped as perplexity series are (one
# identity but the seed), one per task scored and RoPE scaling.
TASK_MODE = "task"     # a task series' mode, and its region, which holds no meaning there
NO_REGION: Region = (0, 0)
PASSKEY = "passkey"
LENGTH_WORDS = {"copy": "letters", "reverse": "letters", "sort": "letters", "parity": "bits",
                "addition": "digits per operand", "recall": "key-value pairs",
                PASSKEY: "tokens of context"}
MAX_TICKS = 12         # length ticks of a task figure; more evaluated lengths are thinned
ANNOTATED = (8, 6)     # a heatmap of at most this many lengths x depths prints its values
MAX_PANELS = 12        # heatmap panels; the series beyond are named in its caption
PANEL_COLUMNS = 3
WILSON = "Wilson over one seed's instances"


@dataclass
class TaskSeries(Series):
    """A series of task runs: its points are the members' task points of ``task`` with its
    RoPE scaling (``task_points``; the inherited curve ``points`` hold none).
    ``max_length`` is the longest instance length its training drew, None when posexp does
    not know the task."""

    task: str = ""
    max_length: int | None = None

    def task_points(self, run: RunResult) -> dict[tuple[int, float | None], dict]:
        """(length, depth) -> ``run``'s point there; of several (scored with another eval
        seed or count), the one over the most instances."""
        ours = [p for p in run.tasks
                if p["task"] == self.task and point_scaling(p) == self.scaling]
        return {(p["length"], p.get("depth")): p for p in sorted(ours, key=lambda p: p["count"])}


def train_max_length(run: RunResult, task: str) -> int | None:
    """The longest instance length ``run`` trained on: that of its task (identity task.name,
    else ``task``, the one it was scored on) whose instances fit in train.seq_len."""
    from posexp.data.tasks import get_task, max_length_within  # numpy: not at start-up

    if run.train_len is None:
        return None
    try:
        return max_length_within(get_task(run.identity.get("task.name") or task),
                                 run.train_len)
    except ValueError:  # a task posexp does not know, or no instance fits
        return None


def task_rank(task: str) -> tuple[int, str]:
    """posexp's order of the tasks (copy first, passkey last); others after, by name."""
    from posexp.data.tasks import TASKS

    names = list(TASKS)
    return (names.index(task) if task in names else len(names), task)


def task_series(runs: list[RunResult]) -> tuple[list[TaskSeries], list[list[RunResult]]]:
    """Every task series of ``runs``, labelled (by what differs between the series of its
    task) and styled (the encoding's colour; a style per series of one colour), in report
    order: task, then as build_series orders; and the groups of runs of one identity and
    one seed, of which only the first counts."""
    by_seed: dict[tuple, dict[object, list[RunResult]]] = defaultdict(dict)
    for r in sorted(runs, key=lambda r: str(r.path)):
        for task, scaling in {(p["task"], point_scaling(p)) for p in r.tasks}:
            by_seed[(task, config_key(r), scaling)].setdefault(r.seed, []).append(r)
    series = [TaskSeries(config, scaling, TASK_MODE, NO_REGION,
                         [same[0] for same in seeds.values()], task=task,
                         max_length=train_max_length(next(iter(seeds.values()))[0], task))
              for (task, config, scaling), seeds in by_seed.items()]
    duplicates = {tuple(str(r.path) for r in same): same for seeds in by_seed.values()
                  for same in seeds.values() if len(same) > 1}
    keys: dict[str, list[str]] = {}
    for task in {s.task for s in series}:
        ours = [s for s in series if s.task == task]
        identities = [s.members[0].identity for s in ours]
        keys[task] = label_keys(identities)
        names = short_names(keys[task], set().union(*identities))
        scalings = any(s.scaling or s.fine_tune for s in ours)
        for s in ours:
            s.parts = label_parts(s.members[0].identity, keys[task], names)
            s.scalings = scalings

    def order(s: TaskSeries) -> tuple:
        ident, tuned = s.members[0].identity, s.fine_tune
        return (task_rank(s.task), encoding_rank(s.encoding), s.encoding, s.root_len,
                tuned is not None, s.train_len, scaling_order(tuned[1]) if tuned else (),
                *(_order(ident.get(k)) for k in keys[s.task]), scaling_order(s.scaling))

    series.sort(key=order)
    colours = encoding_colours(list(dict.fromkeys(s.encoding for s in series)))
    taken: Counter = Counter()
    for s in series:
        s.colour = colours[s.encoding]
        s.styles = {None: STYLES[taken[(s.task, s.colour)] % len(STYLES)]}
        taken[(s.task, s.colour)] += 1
    return series, list(duplicates.values())


def task_groups(series: list[TaskSeries]) -> dict[str, list[TaskSeries]]:
    """task -> its series, in report order."""
    groups: dict[str, list[TaskSeries]] = {}
    for s in series:
        groups.setdefault(s.task, []).append(s)
    return groups


def duplicate_groups(runs: list[RunResult]) -> list[list[RunResult]]:
    """Groups of runs of one config and seed (perplexity or task runs): the first counts."""
    groups = build_series(runs)[1] + task_series(runs)[1]
    return list({tuple(str(r.path) for r in group): group for group in groups}.values())


@dataclass
class TaskCell:
    """One length of a task series: exact match, the mean over seeds (for passkey, of each
    seed's mean over depths), and the best constant answer's; ``exact`` None where no
    seed's point is applicable, and ``reason`` why."""

    exact: Interval | None
    chance: float | None = None
    reason: str | None = None


def exact_interval(by_seed: list[list[dict]]) -> Interval:
    """The mean exact match of applicable points, one list per seed (one point, or one per
    passkey depth): Student-t across two seeds or more, clipped to [0, 1]; one seed's own
    Wilson interval, pooled over the instances of its depths when there are several."""
    means = [sum(p["exact"] for p in points) / len(points) for points in by_seed]
    if len(by_seed) > 1:
        iv = t_interval(means)
        return Interval(iv.value, max(0.0, iv.low), min(1.0, iv.high), iv.n,
                        f"Student-t over {iv.n} seeds, clipped to [0, 1]")
    [points] = by_seed
    if len(points) == 1:
        [p] = points
        if p.get("exact_low") is None or p.get("exact_high") is None:
            return Interval(p["exact"], None, None, 1, NO_INTERVAL)
        return Interval(p["exact"], p["exact_low"], p["exact_high"], 1, WILSON)
    from posexp.data.tasks import binomial_interval

    hits = sum(round(p["exact"] * p["count"]) for p in points)
    low, high = binomial_interval(hits, sum(p["count"] for p in points))
    return Interval(means[0], low, high, 1, WILSON + " (pooled over depths)")


def task_cells(s: TaskSeries) -> dict[int, TaskCell]:
    """length -> the cell of task series ``s``, at every length one of its seeds was scored
    at."""
    by_run = [s.task_points(r) for r in s.members]
    cells = {}
    for length in sorted({n for points in by_run for n, _ in points}):
        at = [[p for (n, _), p in points.items() if n == length] for points in by_run]
        ok = [ours for points in at if (ours := [p for p in points if p["applicable"]])]
        if not ok:
            reasons = sorted({p.get("reason") or "not applicable" for points in at
                              for p in points})
            cells[length] = TaskCell(None, reason="; ".join(reasons))
            continue
        chance = [p["chance_exact"] for points in ok for p in points
                  if p.get("chance_exact") is not None]
        cells[length] = TaskCell(exact_interval(ok),
                                 sum(chance) / len(chance) if chance else None)
    return cells


def passkey_grid(s: TaskSeries) -> tuple[list[int], list[float], np.ndarray]:
    """(lengths, depths, exact) of passkey series ``s``: exact[i, j] is the mean over seeds
    of exact match at depths[i] and lengths[j], NaN where no seed's point is applicable."""
    by_run = [s.task_points(r) for r in s.members]
    lengths = sorted({n for points in by_run for n, _ in points})
    depths = sorted({d for points in by_run for _, d in points if d is not None})
    grid = np.full((len(depths), len(lengths)), np.nan)
    for i, depth in enumerate(depths):
        for j, length in enumerate(lengths):
            ok = [p["exact"] for points in by_run
                  if (p := points.get((length, depth))) and p["applicable"]]
            if ok:
                grid[i, j] = sum(ok) / len(ok)
    return lengths, depths, grid


def _acc(x: float) -> str:
    return f"{x:.2f}"


def _task_cell_text(cell: TaskCell | None, bold: bool = False, interval: bool = True) -> str:
    if cell is None:
        return ""
    return "n/a" if cell.exact is None else _cell_text(cell.exact, _acc, bold, interval)


def _seeds(s: Series) -> str:
    n = len(s.members)
    return f" ({n} seeds)" if n > 1 else ""


def _instances_text(series: list[TaskSeries]) -> str:
    """How many held-out instances, of which eval seed, each point scores."""
    points = [p for s in series for r in s.members for p in s.task_points(r).values()]
    counts = sorted({p["count"] for p in points})
    seeds = sorted({p["eval_seed"] for p in points})
    per = "per length and depth" if series[0].task == PASSKEY else "per length"
    return (f"{' or '.join(map(str, counts))} held-out instances {per} (eval seed"
            f"{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))})")


def _length_text(task: str) -> str:
    return f"instance length in {LENGTH_WORDS[task]}" if task in LENGTH_WORDS \
        else "instance length"


def task_notes(series: list[TaskSeries], cells: list[dict[int, TaskCell]]) -> list[str]:
    """The lengths not applicable to a series and why, and the series not drawn at all."""
    lines = []
    for s, c in zip(series, cells, strict=True):
        if c and all(cell.exact is None for cell in c.values()):
            reasons = "; ".join(sorted({cell.reason for cell in c.values()}))
            lines.append(f"not drawn, no length applicable ({reasons}): {s.label} "
                         f"({', '.join(str(r.path) for r in s.members)})")
            continue
        by_reason: dict[str, list[int]] = defaultdict(list)
        for length, cell in c.items():
            if cell.exact is None:
                by_reason[cell.reason].append(length)
        lines += [f"n/a ({reason}): {s.label} at {', '.join(map(str, lengths))}"
                  for reason, lengths in by_reason.items()]
    return lines


def task_markdown(series: list[TaskSeries]) -> list[str]:
    """The "Task accuracy" section: per task, exact match at each length, one row per series
    (the best at each length in bold where series compete there), and the chance level."""
    if not series:
        return []
    lines = ["## Task accuracy", "",
             f"Exact match: the share of held-out instances whose whole answer is right "
             f"(teacher-forced argmax, which greedy decoding's exact match equals). Mean over "
             f"seeds [{PERCENT} interval: Student-t across the seeds with two or more, clipped "
             f"to [0, 1]; with one, Wilson over the instances]. Bold: the best at each length "
             f"scored for two series or more. train ≤: the longest instance length trained "
             f"on.", ""]
    for task, ours in task_groups(series).items():
        cells = [task_cells(s) for s in ours]
        lengths = sorted({n for c in cells for n in c})
        best = {n: max(values) for n in lengths
                if len(values := [c[n].exact.value for c in cells
                                  if n in c and c[n].exact is not None]) > 1}
        reasons = list(dict.fromkeys(cell.reason for c in cells for cell in c.values()
                                     if cell.exact is None))
        notes = {reason: f"[^{task}-{k}]" for k, reason in enumerate(reasons, 1)}
        extra = [heading for heading, _ in ours[0].columns()]
        words = LENGTH_WORDS.get(task, "length")
        lines += [f"### {task}: exact match by {words}", "",
                  _instances_text(ours) + (". Mean over the depths at each length "
                                           "(tasks-passkey-heatmap shows each depth)."
                                           if task == PASSKEY else "."), "",
                  "| " + " | ".join(["encoding", "L_train", *extra, "train ≤", "seeds",
                                     *map(str, lengths)]) + " |",
                  "|---|---:|" + "---|" * len(extra) + "---:|" * (2 + len(lengths))]
        for s, c in zip(ours, cells, strict=True):
            texts = [(_task_cell_text(cell, bold=cell.exact is not None
                                      and cell.exact.value == best.get(n))
                      + (notes[cell.reason] if cell.exact is None else ""))
                     if (cell := c.get(n)) else "" for n in lengths]
            values = [value.replace("|", "/") for _, value in s.columns()]
            lines.append("| " + " | ".join([s.encoding, str(s.train_len), *values,
                                            "?" if s.max_length is None else str(s.max_length),
                                            str(len(s.members)), *texts]) + " |")
        chance = [[cell.chance for c in cells if (cell := c.get(n)) and cell.chance is not None]
                  for n in lengths]
        if any(chance):
            lines.append("| " + " | ".join(["chance (best constant answer)",
                                            *[""] * (len(extra) + 3),
                                            *(_acc(sum(v) / len(v)) if v else ""
                                              for v in chance)]) + " |")
        lines.append("")
        lines += [f"{mark}: {reason}" for reason, mark in notes.items()]
        lines += [f"* {line}" for line in task_notes(ours, cells)
                  if line.startswith("not drawn")]
        lines.append("")
    return lines


def _thinned(lengths: list[int]) -> list[int]:
    """At most about MAX_TICKS of ``lengths``, spread evenly on a log axis, the first and
    the last kept."""
    if len(lengths) <= MAX_TICKS:
        return lengths
    step = math.log2(lengths[-1] / lengths[0]) / MAX_TICKS
    kept = [lengths[0]]
    for n in lengths[1:-1]:
        if math.log2(n / kept[-1]) >= step and math.log2(lengths[-1] / n) >= step:
            kept.append(n)
    return [*kept, lengths[-1]]


def _task_subtitle(series: list[TaskSeries]) -> str:
    return " · ".join(filter(None, [f"{series[0].task} task: {_instances_text(series)}",
                                    describe(series)]))


def task_figure(series: list[TaskSeries], task: str):
    """Exact match against instance length on ``task``, one line per series (passkey: the
    mean over depths); None when no series of it has an applicable length."""
    ours = [s for s in series if s.task == task]
    cells = [task_cells(s) for s in ours]
    drawn = [(s, c) for s, c in zip(ours, cells, strict=True)
             if any(cell.exact is not None for cell in c.values())]
    if not drawn:
        return None
    fig, body, [ax] = _figure(f"Exact match on {task} vs {_length_text(task)}",
                              _task_subtitle([s for s, _ in drawn]), 5.0)
    shown: list[Interval] = []
    for s, c in drawn:
        xs = [n for n, cell in c.items() if cell.exact is not None]
        intervals = [c[n].exact for n in xs]
        _draw(ax, s.colour, s.styles[None], xs, intervals, s.label + _seeds(s))
        shown += intervals
    lengths = sorted({n for _, c in drawn for n in c})
    _log2_x(ax, _thinned(lengths), lengths[0] / 1.25, lengths[-1] * 1.25)
    ax.set_ylim(-0.03, 1.12)  # room above 1 for the training lines' labels
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1])
    chance = {n: [c[n].chance for _, c in drawn if n in c and c[n].chance is not None]
              for n in lengths}
    chance = {n: sum(v) / len(v) for n, v in chance.items() if v}
    if len({round(v, 6) for v in chance.values()}) == 1:
        ax.axhline(next(iter(chance.values())), color=GREY, linestyle="--", linewidth=1.2,
                   zorder=1)
    elif chance:
        ax.plot(list(chance), list(chance.values()), color=GREY, linestyle="--",
                linewidth=1.2, zorder=1)
    longest = sorted({s.max_length for s, _ in drawn if s.max_length})
    _train_lengths([ax], longest, "train ≤ {}")
    ax.set_xlabel(f"{_length_text(task)} (log₂ scale)", fontsize=11)
    ax.set_ylabel("exact match (share of instances)", fontsize=11)
    methods = sorted({iv.method for iv in shown if iv.method != NO_INTERVAL})
    caption = [f"Lines: mean over seeds. Bands: {PERCENT} intervals, {'; '.join(methods)}."
               ] if methods else []
    if task == PASSKEY:
        caption.append("Passkey: each point is the accuracy averaged over the depths of the "
                       "key (tasks-passkey-heatmap shows each depth).")
    caption += task_notes(ours, cells)
    references = (((":", "longest training instance"),) * bool(longest)
                  + (("--", "chance (best constant answer)"),) * bool(chance))
    _legend_and_caption(body, ax, caption, bands=any(iv.low is not None for iv in shown),
                        references=references)
    return fig


def passkey_heatmap(series: list[TaskSeries]):
    """Per passkey series (up to MAX_PANELS), exact match over context length x depth, depth
    0 (the key at the start) on top; None when no passkey series has an applicable point."""
    from matplotlib import colormaps, patheffects

    grids = [(s, passkey_grid(s)) for s in series if s.task == PASSKEY]
    drawn = [(s, g) for s, g in grids if np.isfinite(g[2]).any()]
    if not drawn:
        return None
    caption = ["Cells: exact match, mean over seeds; grey: n/a. Dashed line: the longest "
               "training instance, between the lengths it separates."]
    ours = [s for s, _ in grids]
    caption += task_notes(ours, [task_cells(s) for s in ours])
    caption += [f"not drawn, beyond {MAX_PANELS} panels: {s.label}"
                for s, _ in drawn[MAX_PANELS:]]
    drawn = drawn[:MAX_PANELS]
    columns = min(PANEL_COLUMNS, len(drawn))
    rows = math.ceil(len(drawn) / columns)
    fig, body = _titled("Passkey retrieval: exact match by context length and depth of the key",
                        _task_subtitle([s for s, _ in drawn]), 3.0 * rows + 0.6)
    axes = body.subplots(rows, columns, squeeze=False)
    cmap = colormaps["viridis"].with_extremes(bad="#dddddd")
    for k, (ax, (s, (lengths, depths, grid))) in enumerate(zip(axes.flat, drawn, strict=False)):
        image = ax.imshow(grid, cmap=cmap, vmin=0, vmax=1, aspect="auto",
                          interpolation="nearest")
        ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], fontsize=8,
                      rotation=45 * (len(lengths) > 6))
        ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=8)
        ax.set_title("\n".join(textwrap.wrap(s.label + _seeds(s)
                                             + (f" · train ≤ {s.max_length}"
                                                if s.max_length else ""), 42)), fontsize=9)
        if k % columns == 0:
            ax.set_ylabel("depth of the key\n(0: context start)", fontsize=9)
        if k >= len(drawn) - columns:
            ax.set_xlabel("context length (tokens)", fontsize=9)
        if len(lengths) <= ANNOTATED[0] and len(depths) <= ANNOTATED[1]:
            for (i, j), value in np.ndenumerate(grid):
                ax.text(j, i, "n/a" if np.isnan(value) else _acc(value), ha="center",
                        va="center", fontsize=7,
                        color="black" if np.isnan(value) or value > 0.6 else "white")
        within = sum(n <= s.max_length for n in lengths) if s.max_length else 0
        if 0 < within < len(lengths):
            ax.axvline(within - 0.5, color="white", linestyle="--", linewidth=1.5,
                       path_effects=[patheffects.withStroke(linewidth=3, foreground="black")])
    for ax in axes.flat[len(drawn):]:
        ax.set_axis_off()
    body.colorbar(image, ax=axes, label="exact match", shrink=0.9)
    _caption(body, caption)
    return fig


def _save(fig, path: Path) -> list[Path]:
    import matplotlib.pyplot as plt

    written = []
    for ext in ("png", "svg"):
        target = path.with_suffix(f".{ext}")
        atomic_write(target, lambda fh, ext=ext: fig.savefig(fh, format=ext, dpi=DPI))
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
    fig = per_position_figure(runs)
    if fig is not None:
        written += _save(fig, out / "per_position")
    tasks = task_series(runs)[0]
    for task in task_groups(tasks):
        fig = task_figure(tasks, task)
        if fig is not None:
            written += _save(fig, out / f"tasks-{task}")
    fig = passkey_heatmap(tasks)
    if fig is not None:
        written += _save(fig, out / "tasks-passkey-heatmap")
    return written


def write_tables(runs: list[RunResult], not_done: list[RunResult], out: Path,
                 title: str) -> list[Path]:
    """summary.csv and summary.md; runs of one config and seed are named in one warning."""
    for group in duplicate_groups(runs):
        warn(f"{', '.join(str(r.path) for r in group)} are runs of the same config and seed "
             f"({group[0].seed}); counted once")
    atomic_write_text(out / "summary.csv", csv_text(tidy_rows(runs)))
    atomic_write_text(out / "summary.md", markdown(runs, not_done, title))
    return [out / "summary.csv", out / "summary.md"]


def upload_to_wandb(files: list[Path], runs: list[RunResult], out: Path,
                    project: str | None) -> str | None:
    """Log the report's figures and tidy table as one W&B run of job type 'report'.  W&B's
    files go beside the report (``out/wandb``, or under WANDB_DIR), its messages stay off the
    terminal; returns the line that says where the run went (sinks.where_it_went)."""
    import shutil

    import wandb

    from posexp.sinks import wandb_dir, where_it_went

    rows = tidy_rows(runs)
    with wandb.init(project=project, job_type="report", name="report",
                    dir=str(wandb_dir(out)), settings=wandb.Settings(silent=True)) as run:
        run.log({"summary": wandb.Table(columns=CSV_COLUMNS,
                                        data=[[r[c] for c in CSV_COLUMNS] for r in rows])})
        for f in files:
            if f.suffix == ".png":
                run.log({f.stem: wandb.Image(str(f))})
        for f in files:
            if f.suffix in (".md", ".csv"):
                # a copy inside the run's files: wandb.save of an outside file symlinks it
                # and warns on the terminal
                copy = Path(run.dir) / f.name
                shutil.copyfile(f, copy)
                run.save(str(copy), base_path=run.dir, policy="now")
        return where_it_went(run)
