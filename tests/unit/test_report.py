"""Reports, the claim suite's verdicts and the sweep summary, on synthetic run directories.

Each run directory is written as posexp writes one (config.yaml of a composed config,
run.json, eval.json) with chosen perplexities, so every number a test checks is known.
Only two tests go through the real CLI.
"""
import csv
import functools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy import stats as sps

from posexp import config as C
from posexp import stats
from posexp.config import compose_overrides
from posexp.encodings import ENCODINGS, in_order
from posexp.errors import PosexpError
from posexp.report import write_report
from posexp.report.curves import curve_cells, mode_curves
from posexp.report.plotting import GREY
from posexp.report.series import (
    SPARE_COLOURS,
    build_series,
    describe,
    encoding_colours,
    stride_settings,
)
from posexp.report.style import ROLES, TRAINED, ramp
from posexp.report.tables import CSV_COLUMNS
from posexp.runs import load_run, load_runs
from posexp.spans import Spans
from posexp.sweep.launch import summarize
from tests.conftest import compose_args as compose
from tests.reports import (
    extrapolation_figure,
    markdown,
    per_position_figure,
    terminal_table,
    write_tables,
)
from tests.runs_on_disk import as_trained, eval_file, spans_of

C.register()


@pytest.fixture(autouse=True)
def _close_figures():
    """The figures a test draws are closed after it (pyplot keeps every one open)."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


SMALL = ("model.d_model=32", "model.n_layer=1", "model.n_head=2")


NO = "nonoverlapping"


TOKENS = 512
# the spans every point here scores unless a test says otherwise (eval.json names them)
SPANS = spans_of(TOKENS, val_tokens=20_000)
# a stretch of the stream (first_token, tokens): what posexp scored before it spread spans
STRETCH = (1000, 512)


VERSIONS = {"posexp": "0.1.0", "python": "3.11.7", "torch": "2.13.0"}


@functools.lru_cache
def config_text(overrides: tuple[str, ...]) -> str:
    """config.yaml of a composed, checked and resolved config, as a run writes it
    (composing takes a third of a second, so once per set of overrides)."""
    cfg = compose_overrides(list(overrides))
    C.check(cfg)
    return OmegaConf.to_yaml(C.resolve(cfg), resolve=True)


def region_fields(region: Spans | tuple[int, int]) -> dict:
    """What a point says it scored: its spans, or (eval.json of an older posexp) a stretch."""
    if isinstance(region, Spans):
        return {"spans": region.id, "documents": region.documents, "first_token": None,
                "tokens": region.tokens}
    first, tokens = region
    return {"first_token": first, "tokens": tokens}


def point(mode: str, length: int, ppl: float | None, region=SPANS) -> dict:
    """A curve point as evaluate/windows.py writes it, without the sums of its documents (no
    interval); ppl None: not applicable at that length."""
    loss = None if ppl is None else math.log(ppl)
    bits = None if loss is None else loss / math.log(2)
    return {"mode": mode, "length": length, "stride": length if mode == NO else length // 2,
            **region_fields(region), "applicable": ppl is not None,
            "reason": None if ppl is not None else f"positions stop before {length}",
            "loss": loss, "ppl": ppl, "bits_per_token": bits, "bits_per_byte": bits,
            "seconds": 0.5}


def curve(ppl: dict[int, float | None], mode: str = NO, region=SPANS) -> list[dict]:
    return [point(mode, length, v, region) for length, v in ppl.items()]


def scored(mode: str, length: int, ppl: float, region=SPANS, stride: int | None = None,
           seed: int = 0) -> dict:
    """A point as posexp writes it now: per-token losses with mean exactly log(ppl), summed
    per document (a stretch: into blocks), and the bootstrap interval of its perplexity."""
    p = point(mode, length, ppl, region)
    p["stride"] = stride or p["stride"]
    losses = np.random.default_rng([seed, length]).normal(0.0, 0.5, p["tokens"])
    losses += math.log(ppl) - losses.mean()
    p["block_loss"], p["block_tokens"] = stats.cluster_sums(losses, region) \
        if isinstance(region, Spans) else stats.block_sums(losses)
    p["ppl_low"], p["ppl_high"] = stats.ppl_interval(p)
    return p


def scored_curve(ppl: dict[int, float | None], mode: str = NO, seed: int = 0) -> list[dict]:
    return [scored(mode, length, v, seed=seed) if v is not None else point(mode, length, None)
            for length, v in ppl.items()]


def write_run(path: Path, text: str, points: list[dict], name: str | None = None,
              per_position: dict | None = None, n_params: int = 12345) -> Path:
    """A completed run directory: config.yaml ``text``, run.json and eval.json."""
    cfg = OmegaConf.create(text)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text(text)
    (path / "run.json").write_text(json.dumps({
        "status": "completed", "reason": None, "name": name or path.name,
        "experiment": path.parent.name, "encoding": cfg.encoding.name,
        "seq_len": cfg.train.seq_len, "seed": cfg.seed, "n_params": n_params,
        "model": {k: cfg.model[k] for k in ("d_model", "n_layer", "n_head")},
        "corpus": {"name": "stdlib", "fingerprint": "c0ffee", "tokenizer": "byte",
                   "tokenizer_fingerprint": "b17e5", "vocab_size": 256,
                   "train_tokens": 1_000_000, "val_tokens": 20_000},
        "steps": 100, "tokens_trained": 204_800, "device": "cpu", "versions": VERSIONS}))
    longest = max(p["length"] for p in points)
    ends = [2**k for k in range(longest.bit_length())]  # buckets 1, 2, 3-4, 5-8, ...
    per_position = per_position or {
        "length": longest, **{k: points[0].get(k) for k in ("spans", "first_token", "tokens")},
        "position": [0, *ends[:-1]], "position_end": ends,
        "loss": [3.0 - k / 10 for k in range(len(ends))]}
    random = cfg.train.get("random_positions")
    (path / "eval.json").write_text(eval_file(as_trained(points, random),
                                              as_trained([per_position], random)))
    return path


def make_run(root: Path, name: str, *overrides: str, encoding: str = "rope", seq_len: int = 16,
             seed: int = 0, ppl: dict | None = None, points: list[dict] | None = None,
             **fields) -> Path:
    text = config_text((f"encoding={encoding}", f"train.seq_len={seq_len}", f"seed={seed}",
                        *SMALL, *overrides))
    points = points or curve(ppl or {seq_len: 5.0, 2 * seq_len: 6.0, 4 * seq_len: 8.0})
    return write_run(root / name, text, points, **fields)


def value(iv: stats.Interval | None) -> float | None:
    """An interval's value to twelve digits: the mean over seeds is taken on the log scale,
    so one seed's 5.0 comes back as exp(log 5), 4.999999999999999."""
    return iv and float(f"{iv.value:.12g}")


def ppl_at(s, length: int) -> float | None:
    """The series' mean perplexity at ``length`` (None: not applicable)."""
    return value(curve_cells(s, s.strides[0])[length].ppl)


# --- series ------------------------------------------------------------------------------
def test_seeds_of_one_config_form_one_series(tmp_path):
    make_run(tmp_path, "rope-s0", seed=0, ppl={16: 4.0, 32: 5.0, 64: 6.0})
    make_run(tmp_path, "rope-s1", seed=1, ppl={16: 6.0, 32: 7.0, 64: 10.0})
    runs, not_done = load_runs(tmp_path)
    assert len(runs) == 2 and not_done == []
    assert runs[0].identity["seed"] == 0 and runs[0].identity["model.d_model"] == 32

    series, duplicates = build_series(runs)
    assert duplicates == []
    [s] = series
    assert s.label == "rope L=16" and len(s.members) == 2
    cells = curve_cells(s, None)
    # two seeds: the geometric mean with the Student-t interval of the log perplexities,
    # t(0.975, 1) * sd / sqrt(2) = 12.7062 * |ln 6 - ln 4| / 2; positive however wide
    half = 12.7062 * math.log(6 / 4) / 2
    assert cells[16].ppl.value == pytest.approx(math.sqrt(24))
    assert cells[16].ppl.method == "t over 2 seeds (log scale)"
    assert (cells[16].ppl.low, cells[16].ppl.high) == pytest.approx(
        (math.sqrt(24) * math.exp(-half), math.sqrt(24) * math.exp(half)), rel=1e-4)
    assert cells[64].ppl.value == pytest.approx(math.sqrt(60))
    # the ratio is the geometric mean of the seeds' own ratios: sqrt(6/4 * 10/6)
    assert cells[64].ratio.value == pytest.approx(math.sqrt(1.5 * 10 / 6))
    md = markdown(runs, [], "t")
    assert "| encoding | L_train | seeds | 16 | 32 | 64 |" in md
    assert "| rope | 16 | 2 | **4.899** [0.3727, 64.39] | 5.916 [0.6977, 50.16] |" in md
    assert "| rope | 16 | 2 | **1.000** | 1.208 [0.779, 1.872] | 1.581 [0.810, 3.088] |" in md


def test_configs_that_differ_are_separate_series_named_by_what_differs(tmp_path):
    make_run(tmp_path, "a", ppl={16: 4.0, 32: 4.0, 64: 4.0})
    make_run(tmp_path, "b", "model.d_model=64", ppl={16: 5.0, 32: 5.0, 64: 5.0})
    make_run(tmp_path, "c", "train.lr=0.001", ppl={16: 6.0, 32: 6.0, 64: 6.0})
    # another training length also changes batch_size and max_positions (derived from it)
    make_run(tmp_path, "d", seq_len=32, ppl={32: 7.0, 64: 7.0, 128: 7.0})
    runs, _ = load_runs(tmp_path)
    series, _ = build_series(runs)
    assert [(s.label, ppl_at(s, s.train_len)) for s in series] == [
        ("rope L=16 · d_model=32 · lr=0.001", 6.0),
        ("rope L=16 · d_model=32 · lr=0.002", 4.0),
        ("rope L=16 · d_model=64 · lr=0.002", 5.0),
        ("rope L=32 · d_model=32 · lr=0.002", 7.0),
    ]
    assert all(len(s.members) == 1 for s in series)
    table = terminal_table(runs)
    assert "rope L=16 · d_model=64 · lr=0.002" in table and "d_ff" not in table
    md = markdown(runs, [], "t")
    assert "| encoding | L_train | d_model | lr | seeds | 16 | 32 | 64 | 128 |" in md
    assert "| rope | 16 | 64 | 0.002 | 1 | **5.000** | 5.000 | 5.000 |" in md
    assert "| rope | 16 | 64 | 0.002 | 1 | **1.000** | 1.000 | 1.000 |" in md
    assert "batch_size" not in md and "max_positions" not in md


def test_a_derived_key_is_named_when_only_it_tells_series_apart(tmp_path):
    make_run(tmp_path, "short", encoding="learned", ppl={16: 4.0, 32: None, 64: None})
    make_run(tmp_path, "long", "encoding.max_positions=64", encoding="learned",
             ppl={16: 5.0, 32: 6.0, 64: 7.0})
    series, _ = build_series(load_runs(tmp_path)[0])
    assert [s.label for s in series] == ["learned L=16 · max_positions=16",
                                         "learned L=16 · max_positions=64"]
    assert ppl_at(series[0], 32) is None and ppl_at(series[1], 32) == 6.0


def test_an_encodings_own_settings_label_only_its_series(tmp_path):
    """Sinusoidal variants differ in their hparams; the learned run beside them has none:
    its label and table cells do not name sinusoidal's settings (not as 'None' either)."""
    make_run(tmp_path, "paper", encoding="sinusoidal", ppl={16: 5.0, 32: 9.0})
    make_run(tmp_path, "small", "encoding.hparams.table_scale=0.25", encoding="sinusoidal",
             ppl={16: 6.0, 32: 9.0})
    make_run(tmp_path, "learned", encoding="learned", ppl={16: 4.0, 32: None})
    runs, _ = load_runs(tmp_path)
    series, _ = build_series(runs)
    assert [s.label for s in series] == ["learned L=16", "sinusoidal L=16 · table_scale=0.25",
                                         "sinusoidal L=16 · table_scale=1"]
    # a key that is off unless set names only the runs that set it
    make_run(tmp_path, "random", "train.random_positions=64", encoding="learned",
             ppl={16: 4.5, 32: 5.0})
    series, _ = build_series(load_runs(tmp_path)[0])
    assert sorted(s.label for s in series if s.encoding == "learned") == [
        "learned L=16", "learned L=16 · random_positions=64"]
    runs = [r for r in load_runs(tmp_path)[0] if r.name != "random"]
    md = markdown(runs, [], "t")
    assert "| encoding | L_train | table_scale | seeds | 16 | 32 |" in md
    assert "| learned | 16 | - | 1 | **4.000** | n/a |" in md
    assert "| sinusoidal | 16 | 0.25 | 1 | **6.000** | 9.000 |" in md
    # every encoding's config carries encoding.base; only the encodings that read it name it
    make_run(tmp_path, "base", "encoding.base=1000", encoding="sinusoidal",
             ppl={16: 6.5, 32: 9.0})
    runs = [r for r in load_runs(tmp_path)[0] if r.name != "random"]
    md = markdown(runs, [], "t")
    assert "| encoding | L_train | base | table_scale | seeds | 16 | 32 |" in md
    assert "| learned | 16 | - | - | 1 | **4.000** | n/a |" in md
    assert "| sinusoidal | 16 | 1000 | 1 | 1 | **6.500** | 9.000 |" in md


def test_each_encodings_own_learning_rate_does_not_split_the_labels(tmp_path):
    """Each encoding trains at the learning rate its preset's sweep chose: the labels compare
    it among the runs of one encoding, never across encodings."""
    make_run(tmp_path, "rope", "train.lr=0.002", ppl={16: 4.0, 32: 5.0})
    make_run(tmp_path, "alibi", "train.lr=0.001", encoding="alibi", ppl={16: 4.0, 32: 4.5})
    series, _ = build_series(load_runs(tmp_path)[0])
    assert sorted(s.label for s in series) == ["alibi L=16", "rope L=16"]
    make_run(tmp_path, "rope-slow", "train.lr=0.0005", ppl={16: 4.5, 32: 5.5})
    series, _ = build_series(load_runs(tmp_path)[0])
    # two of one encoding: the key is named, in every label
    assert sorted(s.label for s in series) == ["alibi L=16 · lr=0.001", "rope L=16 · lr=0.0005",
                                               "rope L=16 · lr=0.002"]


def test_runs_of_the_same_config_and_seed_count_once(tmp_path, capsys):
    make_run(tmp_path, "a-s0", ppl={16: 4.0, 32: 4.0, 64: 4.0})
    make_run(tmp_path, "b-s0", ppl={16: 100.0, 32: 100.0, 64: 100.0})  # same seed as a-s0
    make_run(tmp_path, "c-s1", seed=1, ppl={16: 6.0, 32: 6.0, 64: 6.0})
    runs, _ = load_runs(tmp_path)
    [s], duplicates = build_series(runs)
    assert [r.path.name for r in s.members] == ["a-s0", "c-s1"]
    assert ppl_at(s, 16) == pytest.approx(math.sqrt(4 * 6))  # geometric: b-s0 not counted
    assert [[r.path.name for r in group] for group in duplicates] == [["a-s0", "b-s0"]]

    write_tables(runs, [], tmp_path, "t")
    warnings = capsys.readouterr().err.strip().splitlines()
    assert len(warnings) == 1
    assert "a-s0" in warnings[0] and "b-s0" in warnings[0] and "counted once" in warnings[0]
    assert "| rope | 16 | 2 | **4.899**" in (tmp_path / "summary.md").read_text()
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert len(rows) == 3 * 3  # every run x point is still a row


def test_points_of_different_scored_regions_are_never_averaged(tmp_path):
    make_run(tmp_path, "s0", seed=0, ppl={16: 4.0, 32: 4.0, 64: 4.0})
    # seed 1 was scored on the same spans and, after eval.tokens changed, on other ones
    other = spans_of(256, val_tokens=20_000)
    make_run(tmp_path, "s1", seed=1,
             points=curve({16: 6.0, 32: 6.0, 64: 6.0})
             + curve({16: 20.0, 32: 20.0, 64: 20.0}, region=other))
    # seed 2 holds points of a stretch of as many tokens, from before posexp spread spans
    make_run(tmp_path, "s2", seed=2, points=curve({16: 9.0, 32: 9.0, 64: 9.0},
                                                  region=STRETCH))
    runs, _ = load_runs(tmp_path)
    series, _ = build_series(runs)
    assert sorted((s.label, len(s.members), ppl_at(s, 16)) for s in series) == sorted([
        (f"rope L=16 · scored 512 tok in {SPANS.id}", 2, pytest.approx(math.sqrt(4 * 6))),
        (f"rope L=16 · scored 256 tok in {other.id}", 1, 20.0),
        ("rope L=16 · scored 512 tok @ 1000", 1, 9.0),
    ])
    md = markdown(runs, [], "t")
    assert "| encoding | L_train | scored | seeds |" in md
    assert f"| rope | 16 | 256 tok in {other.id} | 1 | **20.00** | 20.00 | 20.00 |" in md
    assert "| rope | 16 | 512 tok @ 1000 | 1 | **9.000** | 9.000 | 9.000 |" in md
    write_tables(runs, [], tmp_path, "t")
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    others = [row for row in rows if row["spans"] == other.id]
    assert len(others) == 3 and {row["run"] for row in others} == {"s1"}
    assert {row["series"] for row in others} == {f"rope L=16 · scored 256 tok in {other.id}"}
    assert {row["documents"] for row in others} == {str(other.documents)}
    stretch = [row for row in rows if row["run"] == "s2"]
    assert {(row["spans"], row["documents"], row["tokens"]) for row in stretch} == {
        ("", "", "512")}


def test_modes_are_separate_series(tmp_path):
    make_run(tmp_path, "r", points=curve({16: 4.0, 32: 5.0}) + curve({16: 3.0, 32: 3.5},
                                                                     mode="sliding"))
    series, _ = build_series(load_runs(tmp_path)[0])
    assert [(s.mode, ppl_at(s, 32)) for s in series] == [(NO, 5.0), ("sliding", 3.5)]
    # one config, one colour and style in every figure
    assert series[0].colour == series[1].colour == ENCODINGS["rope"].colour
    assert series[0].style == series[1].style == ROLES[TRAINED]


# --- summary.csv -------------------------------------------------------------------------
def test_summary_csv_has_a_row_per_run_and_point_with_the_run_columns(tmp_path):
    make_run(tmp_path, "rope-L16-s3", seed=3, ppl={16: 5.0, 32: None})
    runs, _ = load_runs(tmp_path)
    write_tables(runs, [], tmp_path, "t")
    with (tmp_path / "summary.csv").open() as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == CSV_COLUMNS
        rows = list(reader)
    assert len(rows) == 2
    first = rows[0]
    assert {k: first[k] for k in ("experiment", "run", "series", "encoding", "train_seq_len",
                                  "seed", "n_params", "d_model", "n_layer", "n_head",
                                  "corpus", "corpus_fingerprint", "tokenizer",
                                  "tokenizer_fingerprint", "steps", "tokens_trained", "mode",
                                  "stride", "length", "spans", "documents", "tokens",
                                  "applicable")} == {
        "experiment": tmp_path.name, "run": "rope-L16-s3", "series": "rope L=16",
        "encoding": "rope", "train_seq_len": "16", "seed": "3", "n_params": "12345",
        "d_model": "32", "n_layer": "1", "n_head": "2", "corpus": "stdlib",
        "corpus_fingerprint": "c0ffee", "tokenizer": "byte", "tokenizer_fingerprint": "b17e5",
        "steps": "100", "tokens_trained": "204800", "mode": NO, "stride": "16",
        "length": "16", "spans": SPANS.id, "documents": "16", "tokens": "512",
        "applicable": "True"}
    assert float(first["ppl"]) == pytest.approx(5.0)
    assert float(first["loss"]) == pytest.approx(math.log(5.0))
    assert rows[1]["applicable"] == "False" and rows[1]["ppl"] == ""
    assert rows[1]["reason"] == "positions stop before 32"


# --- figures -----------------------------------------------------------------------------
def legends(fig) -> list:
    """The figure's legends: the series' (right of the axes) and the caption (below)."""
    return [legend for sub in fig.subfigs for legend in sub.legends]


def caption(fig) -> str:
    """The legends' text, its wrapped lines joined."""
    return " ".join(" ".join(t.get_text() for legend in legends(fig)
                             for t in legend.get_texts()).split())


def panels(fig) -> list:
    """The axes with data: perplexity, then ratio (extrapolation), or loss (per position)."""
    return fig.subfigs[1].axes


def curves_drawn(ax) -> list:
    """The lines of curves (a series' points), not reference lines or error-bar caps."""
    return [line for line in ax.get_lines() if line.get_marker() in {m for _, m in ROLES.values()}]


def series_lines(fig) -> dict[str, object]:
    """Legend label -> the curve's line in the first panel."""
    return {line.get_label(): line for line in curves_drawn(panels(fig)[0])}


def band_ys(ax) -> list[np.ndarray]:
    """The y coordinates of each band's outline."""
    return [path.vertices[:, 1] for band in ax.collections for path in band.get_paths()]


ALL = {("nope", 16), ("learned", 16), ("sinusoidal", 16), ("sinusoidal", 32), ("rope", 16),
       ("alibi", 16)}


def every_encoding(root: Path) -> list:
    for enc, L in sorted(ALL):
        ppl = {L: 5.0, 2 * L: None if enc == "learned" else 6.0, 4 * L: None if enc == "learned"
               else 7.0}
        make_run(root, f"{enc}-L{L}", encoding=enc, seq_len=L,
                 points=scored_curve(ppl) + scored_curve(ppl, "sliding"))
    return load_runs(root)[0]


def test_an_encoding_has_one_colour_in_every_figure_and_styles_tell_its_series_apart(
        tmp_path):
    runs = every_encoding(tmp_path)
    figures = [extrapolation_figure(runs, NO), extrapolation_figure(runs, "sliding"),
               per_position_figure(runs)]
    looks: dict[str, set] = {}
    for fig in figures:
        for label, line in series_lines(fig).items():
            series = label.split(" · ")[0]  # per position: "rope L=16 · window 64"
            looks.setdefault(series, set()).add((line.get_color(), line.get_linestyle(),
                                                 line.get_marker()))
    assert set(looks) == {f"{enc} L={L}" for enc, L in ALL}
    assert all(len(look) == 1 for look in looks.values())  # the same in all three figures
    colour = {series: next(iter(look))[0] for series, look in looks.items()}
    for enc in {enc for enc, _ in ALL} - {"sinusoidal"}:
        assert colour[f"{enc} L=16"] == ENCODINGS[enc].colour
    # two series of one encoding: two shades of its colour, light to dark, one style
    assert [colour["sinusoidal L=16"], colour["sinusoidal L=32"]] == ramp(
        ENCODINGS["sinusoidal"].colour, 2)
    assert {one[1:] for look in looks.values() for one in look} == {ROLES[TRAINED]}
    # training-length lines are grey, not a series' colour
    for fig in figures:
        references = [line for line in panels(fig)[0].get_lines() if line not in
                      curves_drawn(panels(fig)[0]) and line.get_linestyle() == ":"]
        assert references and {line.get_color() for line in references} == {GREY}


def test_series_beyond_the_palette_stay_distinguishable():
    # every registered encoding its own colour; encodings the registry does not know (runs
    # from elsewhere) the spare ones, then registered colours again
    colours = encoding_colours(in_order())
    assert len(set(colours.values())) == len(ENCODINGS) >= 10
    assert not set(SPARE_COLOURS) & set(colours.values())
    colours = encoding_colours(["rope", "zope", "pope", "mope", "hope"])
    assert colours["rope"] == ENCODINGS["rope"].colour
    assert [colours[e] for e in ("zope", "pope", "mope")] == SPARE_COLOURS
    assert colours["hope"] in colours.values()  # the palette repeats...


def test_series_of_one_colour_get_distinct_shades(tmp_path):
    # ... and series of one colour never share a shade: ten rope series
    for i, lr in enumerate((1, 2, 3, 4, 5, 6, 7, 8, 9, 10)):
        make_run(tmp_path, f"r{i}", f"train.lr={lr / 1000}")
    series, _ = build_series(load_runs(tmp_path)[0])
    assert [s.colour for s in series] == ramp(ENCODINGS["rope"].colour, 10)
    assert len({s.colour for s in series}) == 10


def test_ticks_are_plain_numbers_at_the_evaluated_lengths(tmp_path):
    runs = every_encoding(tmp_path)
    fig = extrapolation_figure(runs, NO)
    fig.canvas.draw()
    for ax in panels(fig):
        assert list(ax.get_xticks()) == [16, 32, 64, 128]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32", "64", "128"]
        ys = [t.get_text() for t in ax.get_yticklabels()]
        assert len(ys) >= 3 and all(float(y) > 0 for y in ys)  # "5", "5.5": no powers
    fig = per_position_figure(runs)
    fig.canvas.draw()
    assert [t.get_text() for t in panels(fig)[0].get_xticklabels()] == [
        "1", "2", "4", "8", "16", "32", "64", "128"]


def test_the_legend_and_the_caption_cover_no_point(tmp_path):
    runs = every_encoding(tmp_path)
    for fig in (extrapolation_figure(runs, NO), per_position_figure(runs)):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        boxes = [legend.get_window_extent(renderer) for legend in legends(fig)]
        assert len(boxes) == 2  # series and caption
        for ax in panels(fig):
            assert not any(box.overlaps(ax.get_window_extent(renderer)) for box in boxes)
            for line in curves_drawn(ax):
                for x, y in ax.transData.transform(line.get_xydata()):
                    assert not any(box.contains(x, y) for box in boxes)


def test_a_change_of_a_fraction_of_a_percent_looks_small(tmp_path):
    make_run(tmp_path, "alibi", encoding="alibi", ppl={16: 5.0, 32: 5.004, 64: 5.002})
    fig = extrapolation_figure(load_runs(tmp_path)[0], NO)
    fig.canvas.draw()
    for ax, (low, high) in zip(panels(fig), ((5.0, 5.004), (1.0, 1.0008)), strict=True):
        (_, y0), (_, y1) = ax.transData.transform([(16, low), (32, high)])
        assert 0 < (y1 - y0) / ax.bbox.height < 0.01  # 0.08% of a span of at least ±5%


def test_one_seed_is_drawn_with_its_bootstrap_intervals(tmp_path):
    make_run(tmp_path, "rope", points=scored_curve({16: 5.0, 32: 6.0, 64: 8.0}))
    runs = load_runs(tmp_path)[0]
    [s] = build_series(runs)[0]
    points = {p["length"]: p for p in runs[0].curve}
    cells = curve_cells(s, None)
    for length, p in points.items():
        # the cluster bootstrap over the point's documents, as eval.json records it
        assert (cells[length].ppl.low, cells[length].ppl.high) == pytest.approx(
            (p["ppl_low"], p["ppl_high"]), rel=1e-12)
        assert cells[length].ppl.low < p["ppl"] < cells[length].ppl.high
        assert cells[length].ppl.method == "one seed: cluster bootstrap over 16 documents"
        # the ratio's is paired: the same documents drawn at both lengths
        paired = stats.ratio_interval(p, points[16])
        ratio = cells[length].ratio
        assert ratio.value == pytest.approx(paired.value)
        assert (ratio.low, ratio.high) == pytest.approx((paired.low, paired.high), rel=1e-6)
    assert cells[16].ratio.low == pytest.approx(1.0) == cells[16].ratio.high
    assert cells[64].ratio.method == "one seed: cluster bootstrap over 16 documents"

    fig = extrapolation_figure(runs, NO)
    ppl_band, ratio_band = (band_ys(ax)[0] for ax in panels(fig))
    assert min(ppl_band) == pytest.approx(points[16]["ppl_low"])
    assert max(ppl_band) == pytest.approx(points[64]["ppl_high"])
    assert max(ratio_band) == cells[64].ratio.high
    assert ("95% intervals, one seed: cluster bootstrap over 16 documents (a ratio's is "
            "paired: the same documents drawn at both lengths)") in caption(fig)

    write_tables(runs, [], tmp_path, "t")
    md = (tmp_path / "summary.md").read_text()
    p32 = points[32]
    assert (f"| rope | 16 | 1 | **5.000** [{points[16]['ppl_low']:.3f}, "
            f"{points[16]['ppl_high']:.3f}] | 6.000 [{p32['ppl_low']:.3f}, "
            f"{p32['ppl_high']:.3f}] |") in md
    assert f"| **1.000** | 1.200 [{cells[32].ratio.low:.3f}, {cells[32].ratio.high:.3f}] |" \
        in md
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert [(float(r["ppl_low"]), float(r["ppl_high"])) for r in rows] == [
        (points[L]["ppl_low"], points[L]["ppl_high"]) for L in (16, 32, 64)]


def test_a_stretch_of_an_older_eval_json_is_resampled_in_blocks(tmp_path):
    make_run(tmp_path, "rope", points=[scored(NO, L, v, region=STRETCH)
                                       for L, v in {16: 5.0, 32: 6.0}.items()])
    runs = load_runs(tmp_path)[0]
    [s] = build_series(runs)[0]
    cells = curve_cells(s, None)
    p = runs[0].curve[1]
    assert (cells[32].ppl.low, cells[32].ppl.high) == pytest.approx(
        (p["ppl_low"], p["ppl_high"]), rel=1e-12)
    assert cells[32].ratio.method == "one seed: cluster bootstrap over 64 blocks of one stretch"
    fig = extrapolation_figure(runs, NO)
    assert "the same 512 validation tokens vs" in fig.subfigs[0].texts[0].get_text()
    assert "95% intervals, one seed: cluster bootstrap over 64 blocks of one stretch" \
        in caption(fig)


def test_several_seeds_are_drawn_with_a_t_interval_across_them(tmp_path):
    """The seeds' spread (Student-t, on the log scale) and the documents' (the cluster
    bootstrap of the seeds' mean, each seed's documents drawn alike) add up."""
    ppl = {0: {16: 4.0, 32: 5.0, 64: 6.0}, 1: {16: 4.2, 32: 5.5, 64: 7.0},
           2: {16: 4.1, 32: 5.1, 64: 6.5}}
    for seed, values in ppl.items():
        make_run(tmp_path, f"rope-s{seed}", seed=seed, points=scored_curve(values, seed=seed))
    runs = load_runs(tmp_path)[0]
    [s] = build_series(runs)[0]
    cells = curve_cells(s, None)
    at = {r.seed: {p["length"]: p for p in r.curve} for r in runs}

    def expected(statistic):
        logs = np.log([statistic(lambda L, seed=seed: at[seed][L]["ppl"]) for seed in at])
        boot = np.mean([np.log(statistic(lambda L, seed=seed: np.exp(
            stats.resampled_loss(at[seed][L])))) for seed in at], axis=0)
        variances = [logs.var(ddof=1) / 3, boot.var(ddof=1)]
        dfs = [2, stats.document_df(at[0][16])]
        df = stats.satterthwaite(variances, dfs)
        half = max(sps.t.ppf(0.975, df) * math.sqrt(sum(variances)),
                   *(sps.t.ppf(0.975, d) * math.sqrt(v)
                     for v, d in zip(variances, dfs, strict=True)))
        return [math.exp(logs.mean() + d) for d in (0, -half, half)]

    assert [cells[32].ppl.value, cells[32].ppl.low, cells[32].ppl.high] == pytest.approx(
        expected(lambda ppl: ppl(32)), rel=1e-5)
    assert cells[32].ppl.value == pytest.approx((5.0 * 5.5 * 5.1) ** (1 / 3))
    assert [cells[64].ratio.value, cells[64].ratio.low, cells[64].ratio.high] == \
        pytest.approx(expected(lambda ppl: ppl(64) / ppl(16)), rel=1e-5)
    method = "t over 3 seeds + cluster bootstrap over 16 documents (log scale)"
    assert cells[32].ppl.method == cells[64].ratio.method == method
    # never narrower than the seeds alone
    alone = stats.t_interval([5.0, 5.5, 5.1], log=True)
    assert cells[32].ppl.low <= alone.low and cells[32].ppl.high >= alone.high
    fig = extrapolation_figure(runs, NO)
    assert "rope L=16 (3 seeds)" in series_lines(fig)
    assert f"95% intervals, {method} (a ratio's is paired" in caption(fig)


def test_identical_seeds_add_no_width_of_their_own(tmp_path):
    """Seeds that agree to the last token leave the documents' share alone: without the
    documents' sums the band has zero width, with them it is the cluster bootstrap's (of the
    seeds' mean, the one seed's) with the documents' t quantile: Welch-Satterthwaite's degrees
    of freedom are theirs when the seeds add no variance."""
    for seed in (0, 1, 2):
        make_run(tmp_path / "bare", f"rope-s{seed}", seed=seed,
                 ppl={16: 5.0, 32: 5.0, 64: 5.0})
    runs = load_runs(tmp_path / "bare")[0]
    fig = extrapolation_figure(runs, NO)
    ppl_band, ratio_band = (band_ys(ax)[0] for ax in panels(fig))
    assert ppl_band == pytest.approx([5.0] * len(ppl_band))
    assert ratio_band == pytest.approx([1.0] * len(ratio_band))
    assert "| rope | 16 | 3 | **5.000** [5.000, 5.000] | 5.000 [5.000, 5.000] |" \
        in markdown(runs, [], "t")

    for seed in (0, 1, 2):
        make_run(tmp_path / "scored", f"rope-s{seed}", seed=seed,
                 points=scored_curve({16: 5.0, 32: 5.0, 64: 5.0}))
    runs = load_runs(tmp_path / "scored")[0]
    [s] = build_series(runs)[0]
    cells = curve_cells(s, None)
    p = runs[0].curve[1]
    half = sps.t.ppf(0.975, stats.document_df(p)) * stats.resampled_loss(p).std(ddof=1)
    assert (cells[32].ppl.low, cells[32].ppl.high) == pytest.approx(
        (5.0 * math.exp(-half), 5.0 * math.exp(half)), rel=1e-5)
    # a point's ratio to itself: the same documents drawn for both, 1 in every resample
    assert (cells[16].ratio.low, cells[16].ratio.high) == pytest.approx((1.0, 1.0))


def test_points_without_block_losses_are_drawn_without_a_band_and_say_so(tmp_path):
    make_run(tmp_path, "rope", ppl={16: 5.0, 32: 6.0, 64: 8.0})  # eval.json of an older posexp
    fig = extrapolation_figure(load_runs(tmp_path)[0], NO)
    assert all(band_ys(ax) == [] for ax in panels(fig))
    note = "no interval recorded (eval.json from before posexp kept block losses; `posexp " \
           "eval RUN` scores it again): "
    assert f"{note}every curve" in caption(fig) and "95% interval" not in caption(fig)

    make_run(tmp_path, "alibi", encoding="alibi", points=scored_curve({16: 5.0, 32: 5.0}))
    runs = load_runs(tmp_path)[0]
    fig = extrapolation_figure(runs, NO)
    assert [len(band_ys(ax)) for ax in panels(fig)] == [1, 1]  # alibi's
    assert f"{note}rope L=16" in caption(fig) and f"* {note}rope L=16" in markdown(runs, [], "t")


def test_a_run_without_points_of_a_mode_is_named_with_the_command_that_scores_it(tmp_path):
    make_run(tmp_path, "rope", points=curve({16: 4.0, 32: 5.0}) + curve({16: 3.0, 32: 3.5},
                                                                         mode="sliding"))
    learned = make_run(tmp_path, "learned", encoding="learned", ppl={16: 4.5, 32: None})
    runs = load_runs(tmp_path)[0]
    line = f"not scored in sliding mode: learned L=16: posexp eval {learned} eval.mode=sliding"
    assert line in caption(extrapolation_figure(runs, "sliding"))
    assert "not scored" not in caption(extrapolation_figure(runs, NO))
    sliding = markdown(runs, [], "t").split("## sliding", 1)[1]
    assert f"* {line}" in sliding
    assert "n/a (no position that far; posexp does not clamp): learned L=16 at 32" \
        in markdown(runs, [], "t")


def test_lm_eval_documents_are_no_region_of_a_span_mode(tmp_path):
    """A run with nonoverlapping and lm_eval points (whole documents: another layout) is
    scored in both; one without lm_eval points is named in the lm_eval figure alone."""
    whole = spans_of(256, val_tokens=20_000)
    make_run(tmp_path, "rope", points=curve({16: 4.0, 32: 5.0})
             + curve({16: 3.0, 32: 3.5}, mode="lm_eval", region=whole))
    alibi = make_run(tmp_path, "alibi", encoding="alibi", ppl={16: 4.5, 32: 4.4})
    runs = load_runs(tmp_path)[0]
    lm_eval = caption(extrapolation_figure(runs, "lm_eval"))
    missing = lm_eval.split("not scored in lm_eval mode: ", 1)[1]
    assert missing.startswith("alibi L=16") and missing.count("posexp eval") == 1
    assert missing.endswith(f"posexp eval {alibi} eval.mode=lm_eval")
    assert "not scored" not in caption(extrapolation_figure(runs, NO))


def test_stride_settings_of_sliding_points():
    def points(*pairs):
        return [{"length": length, "stride": stride} for length, stride in pairs]

    assert stride_settings(points((16, 8), (32, 16), (64, 32))) == ["L/2"]
    # eval.stride=8 only: its point at length 16 is not a second setting
    assert stride_settings(points((16, 8), (32, 8), (64, 8))) == ["8"]
    assert stride_settings(points((16, 8), (32, 16), (32, 8), (64, 8))) == ["L/2", "8"]


def test_several_sliding_strides_are_one_curve_each(tmp_path):
    half = curve({16: 5.0, 32: 5.0, 64: 5.1}, mode="sliding")  # strides 8, 16, 32
    fixed = [dict(p, stride=8, ppl=p["ppl"] - 0.5) for p in half[1:]]
    make_run(tmp_path, "alibi", encoding="alibi", points=curve({16: 5.5, 32: 5.5}) + half
             + fixed)
    make_run(tmp_path, "rope", points=curve({16: 4.0, 32: 5.0}) + curve({16: 3.0, 32: 3.5},
                                                                         mode="sliding"))
    runs = load_runs(tmp_path)[0]
    series, _ = build_series(runs)
    curves = mode_curves(series, "sliding")
    assert [(c.label, {L: value(cell.ppl) for L, cell in c.cells.items()}) for c in curves] == [
        ("rope L=16 · stride L/2", {16: 3.0, 32: 3.5}),
        ("alibi L=16 · stride L/2", {16: 5.0, 32: 5.0, 64: 5.1}),
        # the point at 16 has stride 8, half its window: it belongs to both
        ("alibi L=16 · stride 8", {16: 5.0, 32: 4.5, 64: 4.6}),
    ]
    assert curves[1].colour != curves[2].colour  # two shades of alibi's, one role
    assert curves[1].series.style == curves[2].series.style
    lines = series_lines(extrapolation_figure(runs, "sliding"))
    assert {"alibi L=16 · stride L/2", "alibi L=16 · stride 8"} <= set(lines)
    md = markdown(runs, [], "t")
    assert "| encoding | L_train | stride | seeds | 16 | 32 | 64 |" in md
    assert "| alibi | 16 | 8 | 1 | **5.000** | 4.500 | 4.600 |" in md
    # one setting: named once, in the title and the heading
    (tmp_path / "alibi" / "eval.json").unlink()
    runs = load_runs(tmp_path)[0]
    assert "## sliding, stride L/2: perplexity" in markdown(runs, [], "t")


def test_per_position_figure_draws_positions_from_1_with_standard_error_bands(tmp_path):
    record = {"mode": NO, "length": 64, "spans": SPANS.id, "tokens": TOKENS,
              "windows": 8, "position": [0, 1, 2, 4, 8, 16, 32],
              "position_end": [1, 2, 4, 8, 16, 32, 64],
              "loss": [3.0, 2.5, 2.2, 2.0, 1.9, 1.8, 2.4],
              "loss_se": [0.2, 0.1, 0.1, None, 0.05, 0.05, 0.05]}
    make_run(tmp_path, "rope", points=scored_curve({16: 5.0, 32: 6.0, 64: 8.0}),
             per_position=record)
    fig = per_position_figure(load_runs(tmp_path)[0])
    fig.canvas.draw()
    [ax] = panels(fig)
    [line] = curves_drawn(ax)
    assert line.get_label() == "rope L=16 · window 64"
    xs = [math.sqrt((a + 1) * b) for a, b in zip(record["position"], record["position_end"],
                                                  strict=True)]
    assert list(line.get_xdata()) == pytest.approx(xs) and xs[0] == 1
    assert list(line.get_ydata()) == record["loss"]
    # the bucket without a standard error breaks the band in two
    before, after = band_ys(ax)
    z = 1.959964
    assert max(before) == pytest.approx(3.0 + z * 0.2, abs=1e-5)
    assert min(after) == pytest.approx(1.8 - z * 0.05, abs=1e-5)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8", "16", "32",
                                                            "64"]
    title = fig.subfigs[0].texts[0].get_text()
    assert title.startswith("Loss at each position of whole nonoverlapping windows, on the "
                            "same 512 validation tokens")
    assert "±1.96 standard errors across the run's windows" in caption(fig)
    assert "no interval recorded" not in caption(fig)


def test_titles_say_what_the_numbers_are_and_why_parameter_counts_differ(tmp_path):
    make_run(tmp_path, "rope", ppl={16: 5.0, 32: 6.0})
    # a learned table of max_positions (16) x d_model (32) rows
    make_run(tmp_path, "learned", encoding="learned", ppl={16: 5.0, 32: None},
             n_params=12345 + 16 * 32)
    runs = load_runs(tmp_path)[0]
    text = describe(build_series(runs)[0])
    assert text == ("stdlib corpus, byte tokens · d_model 32, 1 layer, 2 heads · 12,345 "
                    "parameters (learned L=16: 12,857, +512 for its 16x32 position table) · "
                    "trained on 0.2M tokens (16.6 per parameter)")
    title = extrapolation_figure(runs, NO).subfigs[0].texts[0].get_text()
    assert title.startswith("Perplexity on the same 512 validation tokens spread over the "
                            "split vs evaluation window (nonoverlapping)\nstdlib corpus")
    assert text in markdown(runs, [], "t")
    # sinusoidal's head is untied, as every encoding's: the same count as rope's, unnamed
    make_run(tmp_path, "sinusoidal", encoding="sinusoidal", ppl={16: 5.0, 32: 9.0})
    series = build_series(load_runs(tmp_path)[0])[0]
    assert describe(series) == text
    assert [s.label for s in series] == ["learned L=16", "sinusoidal L=16", "rope L=16"]
    # a tied head (model.tie_weights=true) has vocabulary (256) x d_model (32) weights fewer,
    # said in the title, and the label names the setting that tells it apart
    make_run(tmp_path, "tied", "model.tie_weights=true", encoding="sinusoidal",
             ppl={16: 5.0, 32: 9.0}, n_params=12345 - 256 * 32)
    series = build_series(load_runs(tmp_path)[0])[0]
    assert "sinusoidal L=16 · tie_weights=True: 4,153, -8,192 for its head tied to the token " \
        "embeddings" in describe(series)
    assert [s.label for s in series] == [
        "learned L=16 · tie_weights=False", "sinusoidal L=16 · tie_weights=False",
        "sinusoidal L=16 · tie_weights=True", "rope L=16 · tie_weights=False"]
    # more series of their own counts than a title can name: the range, and where each is
    for i in range(4):
        make_run(tmp_path, f"wide{i}", f"model.d_ff={64 + 32 * i}", ppl={16: 5.0, 32: 6.0},
                 n_params=20000 + i)
    text = describe(build_series(load_runs(tmp_path)[0])[0])
    assert "4,153 to 20,003 parameters (each run's: n_params in summary.csv)" in text


# --- damaged runs ------------------------------------------------------------------------
def _edit_json(file: str, change):
    def edit(run: Path) -> None:
        data = json.loads((run / file).read_text())
        change(data)
        (run / file).write_text(json.dumps(data))
    return edit


def _write(file: str, text: str):
    return lambda run: (run / file).write_text(text)


# kind -> (how the run is damaged, the file the reason names, what the reason says)
DAMAGE = {
    "run.json not JSON": (_write("run.json", '{"status": "compl'), "run.json", "is unreadable"),
    "run.json a list": (_write("run.json", "[1, 2]"), "run.json",
                        "is damaged: not a JSON object"),
    "eval.json a list": (_write("eval.json", "[1, 2]"), "eval.json",
                         "is damaged: the file is not a JSON object"),
    "run.json without encoding": (_write("run.json", '{"status": "completed"}'), "run.json",
                                  "is damaged: no 'encoding'"),
    "seq_len not a number": (_edit_json("run.json", lambda d: d.update(seq_len="abc")),
                             "run.json", "is damaged: 'seq_len' is 'abc', not an integer"),
    "status not a string": (_edit_json("run.json", lambda d: d.update(status=1)), "run.json",
                            "is damaged: 'status' is 1, not a string"),
    "model not numbers": (_edit_json("run.json", lambda d: d["model"].update(d_model="big")),
                          "run.json", "is damaged: model: 'd_model' is 'big', not an integer"),
    "config.yaml missing": (lambda run: (run / "config.yaml").unlink(), "config.yaml",
                            "does not exist"),
    "config.yaml not YAML": (_write("config.yaml", "model: [unclosed\n"), "config.yaml",
                             "is unreadable"),
    "config.yaml without keys": (_write("config.yaml", "seed: 0\n"), "config.yaml",
                                 ": cannot tell the run's identity"),
    "config.yaml of another run": (
        lambda run: (run / "config.yaml").write_text(
            (run / "config.yaml").read_text().replace("name: rope", "name: alibi")),
        "config.yaml", "disagree: encoding.name is 'alibi', run.json says encoding 'rope'"),
    "eval.json missing": (lambda run: (run / "eval.json").unlink(), "eval.json",
                          "does not exist"),
    "eval.json not JSON": (_write("eval.json", '{"curve": ['), "eval.json", "is unreadable"),
    "curve not a list": (_write("eval.json", '{"curve": {"a": 1}}'), "eval.json",
                         "is damaged: 'curve' is {'a': 1}, not a list"),
    "curve empty": (_write("eval.json", '{"curve": []}'), "eval.json",
                    "is damaged: the curve holds no points"),
    "point without tokens": (_edit_json("eval.json", lambda d: d["curve"][1].pop("tokens")),
                             "eval.json", "is damaged: curve point 2: no 'tokens'"),
    "unknown mode": (_edit_json("eval.json", lambda d: d["curve"][0].update(mode="../x")),
                     "eval.json", "curve point 1: 'mode' is '../x', not nonoverlapping or sliding"),
    "ppl not a number": (_edit_json("eval.json", lambda d: d["curve"][0].update(ppl="x")),
                         "eval.json", "is damaged: curve point 1: 'ppl' is 'x', not a number"),
    "spans not in the file": (_edit_json("eval.json", lambda d: d["spans"].clear()),
                              "eval.json", "curve point 1: its spans '"),
    "spans ragged": (_edit_json("eval.json", lambda d: d["spans"][SPANS.id]["length"].pop()),
                     "eval.json", f"is damaged: spans {SPANS.id}: first, length and document "
                     "are not lists of one length of non-negative integers"),
    "point of no region": (_edit_json("eval.json", lambda d: d["curve"][0].pop("spans")),
                           "eval.json", "curve point 1: it names neither its spans nor its "
                           "first_token"),
    "per_position ragged": (
        _edit_json("eval.json", lambda d: d["per_position"][0].update(loss=[1.0])),
        "eval.json", "is damaged: per_position record 1: position, position_end, loss and "
        "loss_se are not lists of numbers of one length"),
}


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_run_is_listed_with_its_file_and_the_rest_reported(tmp_path, kind):
    damage, file, message = DAMAGE[kind]
    make_run(tmp_path / "runs", "good", ppl={16: 4.0, 32: 5.0, 64: 6.0})
    bad = make_run(tmp_path / "runs", "bad", ppl={16: 9.0, 32: 9.0, 64: 9.0})
    damage(bad)

    runs, not_done = load_runs(tmp_path / "runs")
    assert [r.path.name for r in runs] == ["good"]
    [damaged] = not_done
    assert damaged.status == "damaged"
    assert str(bad / file) in damaged.reason and message in damaged.reason

    write_tables(runs, not_done, tmp_path, "t")
    md = (tmp_path / "summary.md").read_text()
    assert "| rope | 16 | 1 | **4.000** | 5.000 | 6.000 |" in md
    [listed] = [line for line in md.splitlines() if str(bad) in line]
    assert "| damaged |" in listed and message in listed
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert {row["run"] for row in rows} == {"good"}


def test_write_report_warns_once_per_damaged_run(tmp_path, capsys):
    make_run(tmp_path / "runs", "good", ppl={16: 4.0, 32: 5.0, 64: 6.0})
    bad = make_run(tmp_path / "runs", "bad")
    (bad / "eval.json").write_text('{"curve": [')
    runs, not_done = load_runs(tmp_path / "runs")
    files = write_report(runs, not_done, tmp_path / "report", "t")
    warnings = capsys.readouterr().err.strip().splitlines()
    assert warnings == [f"posexp: warning: not included: {bad / 'eval.json'} is unreadable: "
                        "Expecting value: line 1 column 12 (char 11)"]
    assert {f.name for f in files} == {"summary.csv", "summary.md", "summary.tex",
                                       "per_position.png", "per_position.svg",
                                       "extrapolation_nonoverlapping.png",
                                       "extrapolation_nonoverlapping.svg"}


def test_no_runs_is_an_error_and_nothing_is_written(tmp_path):
    root = tmp_path / "results"
    # runs moved aside, lock files and W&B folders are not runs of the report
    make_run(root / "exp" / ".replaced", "rope-L16-s0-20260101T000000Z")
    make_run(root / "exp" / "wandb", "offline-run")
    (root / "exp" / ".locks").mkdir()
    (root / "exp" / ".locks" / "run.json").write_text("{}")
    with pytest.raises(PosexpError, match=f"^no posexp runs under {root}$"):
        load_runs(root)
    with pytest.raises(PosexpError, match="no posexp runs"):
        write_report([], [], tmp_path / "report", "t")
    assert not (tmp_path / "report").exists()

    make_run(root / "exp", "rope-L16-s0")
    runs, not_done = load_runs(root)
    assert [r.path for r in runs] == [root / "exp" / "rope-L16-s0"] and not_done == []


def test_an_unfinished_run_keeps_its_status_and_a_missing_one_says_so(tmp_path):
    run = tmp_path / "failed-run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"status": "failed", "reason": "disk full"}))
    r = load_run(run)
    assert (r.status, r.reason, r.curve) == ("failed", "disk full", [])
    missing = load_run(tmp_path / "nothing")
    assert missing.status == "missing" and "nothing/run.json does not exist" in missing.reason


# --- sweep summary -----------------------------------------------------------------------
def test_sweep_summary_lists_a_run_it_cannot_read(tmp_path, capsys):
    jobs = [compose([f"encoding={enc}", "train.seq_len=16", *SMALL, f"results_dir={tmp_path}"])
            for enc in ("rope", "alibi", "nope")]
    root = tmp_path / "default"
    make_run(root, "rope-L16-s0", ppl={16: 4.0, 32: 5.0})
    bad = make_run(root, "alibi-L16-s0", encoding="alibi")
    (bad / "run.json").write_text('{"status": "completed", "encoding": "alibi", "seq_len": 16.5}')
    # nope-L16-s0 never started: no directory
    with pytest.raises(PosexpError, match=r"^2 of 3 runs did not complete$"):
        summarize(jobs)
    out = capsys.readouterr().out
    assert "rope L=16" in out and "4.000" in out
    assert (f"not completed: {bad} (damaged: {bad / 'run.json'} is damaged: 'seq_len' is 16.5, "
            "not an integer)") in out
    assert f"not completed: {root / 'nope-L16-s0'} (not started: failed before training" in out
    md = (root / "summary.md").read_text()
    assert "| damaged |" in md and "| not started |" in md


def test_a_tall_legend_grows_the_figure_instead_of_running_off_it(tmp_path):
    # fourteen series of long labels (an ablation) need more height than the axes: the figure
    # grows, so the legend ends above the caption, inside the figure
    for i in range(14):
        make_run(tmp_path, f"r{i}", f"train.lr=0.00{i + 1}",
                 f"encoding.hparams.table_scale={1 + i % 2}",
                 f"encoding.hparams.unit_tokens={i // 2 % 2 == 0}",
                 f"encoding.hparams.learn_scale={i // 4 % 2 == 0}", encoding="sinusoidal",
                 ppl={16: 5.0 + i / 10, 32: 9.0})
    fig = extrapolation_figure(load_runs(tmp_path)[0], NO)
    fig.canvas.draw()
    legend, caption_box = fig.subfigs[1].legends
    assert sum(t.get_text().count("\n") + 1 for t in legend.get_texts()) > 40
    top, foot = legend.get_window_extent(), caption_box.get_window_extent()
    assert fig.get_figheight() > 9
    assert top.y0 >= foot.y1 - 1 and foot.y0 >= 0


def test_long_legend_labels_break_between_their_parts():
    from posexp.report.plotting import LEGEND_WRAP, legend_label

    label = ("sinusoidal L=64 · learn_scale=False · scale_tokens=True · table_scale=1 · "
             "tie_weights=False (2 seeds)")
    lines = legend_label(label).split("\n")
    assert lines == ["sinusoidal L=64 · learn_scale=False", "· scale_tokens=True · table_scale=1",
                     "· tie_weights=False (2 seeds)"]
    assert all(len(line) <= LEGEND_WRAP for line in lines)
    assert legend_label("rope L=16") == "rope L=16"
    assert legend_label("x" * 60) == "x" * 60  # one part stays whole
