"""Series: completed runs of one identity but the seed, scored in one mode on one region
(and one RoPE scaling), labelled by what tells them apart and styled the same in every
figure of every report.

Runs form one series when their identities (config.identity: every key that determines the
weights) are equal except the seed (and, for fine-tunes, the parent run of that seed), they
were trained on the same text -- the same corpus and tokenizer fingerprints in run.json:
a corpus file edited between two seeds makes two series, never one average -- a task
run's points score the same held-out instances (task.eval_count and task.eval_seed, which
the identity leaves out), and their points are of the same mode, scored region and RoPE
scaling: each scaling a run was
scored with (``posexp eval RUN eval.rope_scaling=...``) is a series of its own, labelled
with "+", the method and its factor, and a fine-tune's label says what it continues
("rope L=64 → ft L=256" and its scaling).  A series' label names its encoding and training
length, and whatever else tells the series of one report apart.

Colours: one per encoding, from Okabe & Ito's palette (which colour-blind readers can tell
apart), shaded where series share it; line style and marker say the series' role, the same
in every report (style.py).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, fields

from posexp.config.identity import OFF_UNLESS_SET, SEED_KEYS
from posexp.report.style import ROLES, colour_curves, role
from posexp.runs import MODES, Region, RunResult, point_scaling
from posexp.runs import region as region_of
from posexp.scaling import Key as Scaling
from posexp.scaling import order as scaling_order
from posexp.scaling import text as scaling_text

ENCODING, TRAIN_LEN, SEED = "encoding.name", "train.seq_len", "seed"
PRETRAINED = "pretrained.id"  # a pretrained model's run (posexp/pretrained): in its identity
PARENT = "parent.config"  # a fine-tune's parent config: in its identity, and only in its
# Identity keys that config.resolve fills in from others (d_ff from d_model; max_positions
# and batch_size from seq_len): a label names one only when it tells apart series that the
# rest of the label leaves alike, so runs at two lengths are not labelled "batch_size=32".
DERIVED = ("model.d_ff", "encoding.max_positions", "train.batch_size")
# What a series is of beyond the identity (series_identity): the text it was trained and
# scored on, by fingerprint, and a task run's held-out instances.  Like DERIVED keys, a
# label names them only when nothing else tells two series apart.
CORPUS, TOKENIZER, INSTANCES = "corpus_fingerprint", "tokenizer_fingerprint", "task.instances"
BEYOND = (CORPUS, TOKENIZER, INSTANCES)

# Each registered encoding has its own colour (EncodingSpec.colour, colour-blind-safe) in every
# figure of every report; an encoding the registry does not know (a run from elsewhere) takes
# a spare one in report order, and past them a colour repeats.
SPARE_COLOURS = ["#F0E442", "#117733", "#AA4499"]
UNKNOWN_COLOUR = "#000000"
# A report of one encoding with RoPE scalings colours each method (Okabe & Ito again).
METHOD_COLOURS = ["#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000"]
HALF = "L/2"  # the sliding stride when eval.stride is unset: half of each window


# --- series ------------------------------------------------------------------------------
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
    colours: dict[str | None, str] = field(default_factory=dict)  # per stride setting
    name: str | None = None  # the label it was given (posexp report --label OLD=NEW)

    @property
    def encoding(self) -> str:
        return self.members[0].encoding

    @property
    def train_len(self) -> int:
        return self.members[0].train_len

    @property
    def fine_tune(self) -> tuple[int, Scaling, int] | None:
        """(root training length, training-time scaling, tokens) of a fine-tune."""
        return self.members[0].fine_tune

    @property
    def root_len(self) -> int:
        """The length the weights were first trained at (a fine-tune's root run's)."""
        return self.fine_tune[0] if self.fine_tune else self.train_len

    @property
    def colour(self) -> str:
        """The colour of its first curve (stride setting)."""
        return self.colours.get(self.strides[0], UNKNOWN_COLOUR)

    @property
    def style(self) -> tuple[str, str]:
        """(line style, marker): its role's, in every report."""
        return ROLES[role(self)]

    @property
    def label(self) -> str:
        if self.name is not None:
            return self.name
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
                if p["mode"] == self.mode and region_of(p) == self.region
                and point_scaling(p) == self.scaling
                and (stride is None or _follows(p, stride))}


def fine_tune_text(train_len: int, fine_tune: tuple) -> str:
    """'ft L=256 PI' and the factor: what a fine-tune trained at, and with."""
    return f"ft L={train_len}" + (f" {scaling_text(fine_tune[1])}" if fine_tune[1] else "")


def curve_name(encoding: str, train_len: int, scaling: Scaling,
               fine_tune: tuple | None) -> str:
    """A curve's name: the encoding and the length its weights were first trained at; a
    fine-tune's length and scaling after an arrow; after a '+', the RoPE scaling it was
    scored with."""
    name = f"{encoding} L={fine_tune[0] if fine_tune else train_len}"
    if fine_tune:
        name += f" \u2192 {fine_tune_text(train_len, fine_tune)}"
    return name + (f" + {scaling_text(scaling)}" if scaling else "")


def series_identity(run: RunResult) -> dict:
    """What a series of ``run`` is of: its identity, and what its numbers depend on that
    the config does not hold -- the corpus and tokenizer it was trained on, by the
    fingerprints run.json records (data.path names a file, not its text), and for a task
    run the held-out instances its points score, "COUNT of eval seed SEED" (task.eval_seed
    is an evaluation setting, so not identity; two seeds scored on different instances are
    not averaged as one series)."""
    ident = dict(run.identity)
    corpus = run.info.get("corpus") or {}
    for key, field_name in ((CORPUS, "fingerprint"), (TOKENIZER, "tokenizer_fingerprint")):
        if isinstance(corpus.get(field_name), str):
            ident[key] = corpus[field_name][:12]
    if run.tasks:
        ident[INSTANCES] = "; ".join(f"{count} of eval seed {seed}" for count, seed in sorted(
            {(p["count"], p["eval_seed"]) for p in run.tasks}))
    return ident


def config_key(run: RunResult) -> tuple:
    """The series identity but the keys that follow the seed (a fine-tune's parent at that
    seed)."""
    return tuple(sorted((k, repr(v)) for k, v in series_identity(run).items()
                        if k not in SEED_KEYS))


def _order(value: object) -> tuple:
    """A sort key for identity values of any type: numbers by value, the rest as text."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (0, value, "") if is_number else (1, 0, str(value))


def _text(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


# keys each encoding sets for itself: its learning rate, from its preset's sweep
PER_ENCODING = ("train.lr",)


def label_keys(identities: list[dict]) -> list[str]:
    """The identity keys, besides encoding, training length and seed, that a label names:
    every key whose value differs between these identities (an encoding's own settings
    between runs of that encoding; a derived key only when the others leave two identities
    alike that it tells apart).  Fine-tunes and runs trained
    from scratch are compared among themselves: a fine-tune's budget, learning rate, parent
    and scaling are in its label's name (curve_name), not in keys; a pretrained model's runs
    among the runs of that model (its name is the label's)."""
    keys = sorted(k for k in set().union(*identities) - {ENCODING, TRAIN_LEN, SEED}
                  if not k.startswith(("parent.", "encoding.scaling.")))
    models = {i.get(ENCODING) for i in identities if PRETRAINED in i}  # posexp/pretrained
    groups = [[i for i in identities if (PARENT in i) == tuned and PRETRAINED not in i]
              for tuned in (False, True)] + [[i for i in identities if PRETRAINED in i
                                              and i.get(ENCODING) == m] for m in models]

    def differs(key: str) -> bool:
        # an encoding's own settings (hparams, base, module) and the keys each encoding
        # sets for itself (PER_ENCODING) differ between encodings by nature: they are
        # compared among the runs of one encoding
        members = ([[i for i in group if i.get(ENCODING) == e]
                    for group in groups for e in {i.get(ENCODING) for i in group}]
                   if key.startswith("encoding.") or key in PER_ENCODING else groups)
        return any(len({repr(i.get(key)) for i in m}) > 1 for m in members)

    chosen = [k for k in keys if differs(k) and k not in DERIVED + BEYOND]
    for key in (k for k in keys if k in DERIVED + BEYOND and differs(k)):
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
    it), and a key that is off unless set (train.random_positions, model.ssmax) only those
    that set it: None for the others."""
    return [(names[k], _text(ident.get(k)) if (k in ident or not (
        k.startswith("encoding.") or k in OFF_UNLESS_SET or PRETRAINED in ident))
        and _reads(ident, k) else None) for k in keys]


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
    """A region in a label: short."""
    what, tokens = region
    kind, name = what.split(" ", 1)
    return f"{tokens} tok in {name}" if kind == "spans" else f"{tokens} tok @ {name}"


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
    keys = _label(series)
    identities = {s.config: series_identity(s.members[0]) for s in series}

    def order(s: Series) -> tuple:
        # a fine-tune right after the run it continues, a scaling after the run as trained
        ident, tuned = identities[s.config], s.fine_tune
        return (encoding_rank(s.encoding), s.encoding, s.root_len, tuned is not None,
                s.train_len, scaling_order(tuned[1]) if tuned else (),
                *(_order(ident.get(k)) for k in keys), s.region, scaling_order(s.scaling),
                MODES.index(s.mode))

    series.sort(key=order)
    style_series(series)
    return series, list(duplicates.values())


def _label(series: list[Series]) -> list[str]:
    """Give each series the label parts that tell it apart; returns the label keys."""
    identities = {s.config: series_identity(s.members[0]) for s in series}
    keys = label_keys(list(identities.values()))
    names = short_names(keys, set().union(*identities.values()))
    several_regions = len({s.region for s in series}) > 1
    scalings = any(s.scaling or s.fine_tune for s in series)
    for s in series:
        s.parts = label_parts(identities[s.config], keys, names)
        s.scored = region_text(s.region) if several_regions else None
        s.scalings = scalings
        if s.mode == "sliding":
            s.strides = stride_settings([p for r in s.members for p in r.curve
                                         if p["mode"] == s.mode and region_of(p) == s.region])
    return keys


def style_series(series: list[Series]) -> None:
    """A colour per encoding (or, for one encoding scored with RoPE scalings or fine-tuned
    with them, a colour per method, the encoding's own for the run as trained), shaded where
    several curves share it; a curve is a config, scaling and region (and stride setting
    beyond a series' first), so that it has one colour in every figure and mode."""
    colours = encoding_colours(list(dict.fromkeys(s.encoding for s in series)))
    by_method: dict[str | None, str] = {}
    if any(s.scaling or s.fine_tune for s in series) and len(colours) == 1:
        [own] = colours.values()
        spare = [c for c in METHOD_COLOURS if c != own]
        ordered = sorted({m for s in series if (m := method_of(s)) is not None},
                         key=lambda m: scaling_order((("method", m), ("factor", 1.0))))
        by_method = {None: own, **{m: spare[i % len(spare)] for i, m in enumerate(ordered)}}

    def base(s: Series) -> str:
        return by_method[method_of(s)] if by_method else colours[s.encoding]

    colour_curves(series, base, lambda s, stride: (s.config, s.scaling, s.region,
                                                   None if stride == s.strides[0] else stride))


def method_of(s: Series) -> str | None:
    """The RoPE scaling method of a series: the one it was scored with, or else the one its
    fine-tune trained with; None for a run as trained (a randomized run scored at
    consecutive positions takes its colour)."""
    scaling = dict(s.scaling or ()).get("method") and s.scaling
    scaling = scaling or (s.fine_tune[1] if s.fine_tune else None)
    return dict(scaling)["method"] if scaling else None


def modes(runs: list[RunResult]) -> list[str]:
    found = {p["mode"] for r in runs for p in r.curve}
    return [m for m in MODES if m in found]


def _count(n: int, digits: int = 2) -> str:
    """0.82M, 12,345."""
    return f"{n / 1e6:.{digits}f}M" if n >= 100_000 else f"{n:,}"


def _param_difference(s: Series, extra: int) -> str:
    """``s``'s parameters beyond (or short of) the other runs' count, and why where posexp
    knows."""
    from posexp.encodings import ENCODINGS  # the registry (imports torch: not at start-up)

    ident = s.members[0].identity
    rows, width = ident.get("encoding.max_positions"), ident.get("model.d_model")
    vocab = (s.members[0].info.get("corpus") or {}).get("vocab_size")
    table = s.encoding in ENCODINGS and ENCODINGS[s.encoding].position_table
    if table and rows and width and rows * width == extra:
        return f", +{extra:,} for its {rows}x{width} position table"
    if ident.get("model.tie_weights") is False and vocab and width and vocab * width == extra:
        return f", +{extra:,} for its untied {vocab}x{width} output head"
    if ident.get("model.tie_weights") is True and vocab and width and vocab * width == -extra:
        return f", {extra:,} for its head tied to the token embeddings"
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
        per = f" ({trained[-1] / usual:.1f} per parameter)" if counts else ""
        words.append(f"trained on {span} tokens{per}")
    return " · ".join(words)
