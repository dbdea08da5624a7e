"""Figures that go into a paper unchanged: the paper style (no title, the caption beside the
figure, vector formats, column widths), series told apart by a fixed role -> style mapping
and shades of their encoding's colour, choosing and renaming series, and bands drawn only
where they are honest (none over two seeds, whose own lines are drawn instead)."""

import dataclasses
import math

import pytest

from posexp import scaling
from posexp.config import schema
from posexp.encodings import ENCODINGS
from posexp.errors import UsageError
from posexp.report import Report, write_report
from posexp.report.figures import extrapolation_figure
from posexp.report.plotting import SEED, coinciding
from posexp.report.select import Selection
from posexp.report.style import (
    FINE_TUNED,
    LONE,
    PAPER_ONE,
    PAPER_TWO,
    RANDOMIZED,
    ROLES,
    SCALED,
    SCREEN,
    TRAINED,
    look_of,
    ramp,
    using,
)
from posexp.runs import load_runs
from tests.unit.test_report import (
    NO,
    band_ys,
    caption,
    curves_drawn,
    make_run,
    panels,
    scored,
    scored_curve,
    series_lines,
)

YARN = scaling.record("yarn", 4, dataclasses.asdict(schema.ScalingParams()))


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def scaled_curve(ppl: dict[int, float]) -> list[dict]:
    """Points scored with YaRN x4 at evaluation (posexp eval RUN eval.rope_scaling=yarn)."""
    return [{**scored(NO, length, v), "rope_scaling": YARN} for length, v in ppl.items()]


def looks(runs) -> dict[str, tuple[str, str, str]]:
    """Legend label -> (colour, line style, marker) of its curve in the extrapolation figure."""
    fig = extrapolation_figure(Report.of(runs).series, NO)
    return {label: (line.get_color(), line.get_linestyle(), line.get_marker())
            for label, line in series_lines(fig).items()}


# --- one mapping of role to line style and marker, shades of one colour --------------------
def test_a_role_has_one_line_style_and_marker_in_every_report(tmp_path):
    plain = {16: 5.0, 32: 6.0, 64: 8.0}
    make_run(tmp_path / "a", "rope", points=scored_curve(plain) + scaled_curve(
        {16: 5.1, 32: 5.3, 64: 5.6}))
    make_run(tmp_path / "a", "rope-random", "train.random_positions=64", points=scored_curve(
        {16: 5.2, 32: 5.4, 64: 6.0}))
    make_run(tmp_path / "a", "alibi", encoding="alibi", points=scored_curve(plain))
    # another report, other series: alibi alone, and a rope run with only a scaled curve
    make_run(tmp_path / "b", "alibi", encoding="alibi", points=scored_curve(plain))
    make_run(tmp_path / "b", "sinusoidal-random", "train.random_positions=64",
             encoding="sinusoidal", points=scored_curve(plain))
    make_run(tmp_path / "b", "rope", points=scored_curve(plain) + scaled_curve(plain))
    a, b = looks(load_runs(tmp_path / "a")[0]), looks(load_runs(tmp_path / "b")[0])
    scaled = "rope L=16 + YaRN \u00d74"
    assert {label: look[1:] for label, look in a.items()} == {
        "rope L=16": ("-", "o"), scaled: (":", "D"),
        "rope L=16 · random_positions=64": ("--", "s"), "alibi L=16": ("-", "o")}
    assert b[scaled][1:] == a[scaled][1:] == ROLES[SCALED]
    assert b["sinusoidal L=16 · random_positions=64"][1:] == ROLES[RANDOMIZED]
    assert b["alibi L=16"] == a["alibi L=16"] == (ENCODINGS["alibi"].colour, "-", "o")
    # the three rope curves of report a: three shades of rope's colour, light to dark
    rope = [a["rope L=16"][0], a[scaled][0], a["rope L=16 · random_positions=64"][0]]
    assert sorted(rope) == sorted(ramp(ENCODINGS["rope"].colour, 3))
    assert len({ROLES[r] for r in (TRAINED, RANDOMIZED, FINE_TUNED, SCALED)}) == 4


def test_a_ramp_runs_from_light_to_dark_through_the_colour():
    light, middle, dark = ramp("#0072B2", 3)
    assert ramp("#0072B2", 1) == ["#0072B2"]

    def lightness(c: str) -> int:
        return sum(int(c[i:i + 2], 16) for i in (1, 3, 5))

    assert lightness(light) > lightness(middle) > lightness(dark)
    assert middle.lower() != "#0072b2" and len(set(ramp("#0072B2", 14))) == 14


def test_a_lone_point_is_drawn_larger_than_the_curves(tmp_path):
    make_run(tmp_path, "rope", points=scored_curve({16: 5.0, 32: 6.0}))
    make_run(tmp_path, "learned", encoding="learned", points=scored_curve({16: 5.0, 32: None}))
    lines = series_lines(extrapolation_figure(Report.of(load_runs(tmp_path)[0]).series, NO))
    assert lines["learned L=16"].get_markersize() == LONE * lines["rope L=16"].get_markersize()
    assert lines["learned L=16"].get_zorder() > lines["rope L=16"].get_zorder()


def test_curves_that_lie_on_one_another_are_named():
    assert coinciding([("copy a", [8, 16], [0.0, 0.0]), ("copy b", [8, 16], [0.0, 0.0]),
                       ("copy c", [8, 16], [0.0, 0.5]), ("copy d", [8], [0.0])]) == [
        "2 curves lie on 0 throughout, drawn as one: copy a; copy b"]
    assert coinciding([("x", [8], [0.25]), ("y", [8], [0.25])]) == [
        "2 curves lie on one another throughout, drawn as one: x; y"]


# --- uncertainty ---------------------------------------------------------------------------
def seeds_of(root, n: int, encoding: str = "rope") -> None:
    for seed in range(n):
        j = 1 + 0.05 * seed
        make_run(root, f"{encoding}-s{seed}", encoding=encoding, seed=seed,
                 points=scored_curve({16: 5.0 * j, 32: 6.0 * j, 64: 8.0 * j}, seed=seed))


def seed_lines(ax) -> list:
    return [line for line in ax.get_lines() if line.get_gid() == SEED]


def test_two_seeds_draw_their_own_lines_and_no_band_and_the_caption_says_so(tmp_path):
    seeds_of(tmp_path, 2)
    fig = extrapolation_figure(Report.of(load_runs(tmp_path)[0]).series, NO)
    for ax in panels(fig):
        assert band_ys(ax) == []  # a t interval over two seeds: multiplier 12.7
        assert len(seed_lines(ax)) == 2
    [ppl] = curves_drawn(panels(fig)[0])
    low, high = sorted(seed_lines(panels(fig)[0]), key=lambda line: line.get_ydata()[0])
    assert list(low.get_ydata()) == pytest.approx([5.0, 6.0, 8.0])
    assert list(high.get_ydata()) == pytest.approx([5.25, 6.3, 8.4])
    assert list(ppl.get_ydata()) == pytest.approx([math.sqrt(5.0 * 5.25), math.sqrt(6.0 * 6.3),
                                                   math.sqrt(8.0 * 8.4)])
    text = caption(fig)
    assert "2 seeds: per-seed lines, no interval: rope L=16." in text
    assert "Bands:" not in text and "95% interval" not in text  # nor in the legend
    assert "each seed (thin)" in text


def test_three_seeds_draw_a_band_over_their_own_lines(tmp_path):
    seeds_of(tmp_path, 3)
    fig = extrapolation_figure(Report.of(load_runs(tmp_path)[0]).series, NO)
    for ax in panels(fig):
        assert len(band_ys(ax)) == 1 and len(seed_lines(ax)) == 3
    assert "2 seeds" not in caption(fig)
    assert "Bands: 95% intervals, t over 3 seeds" in caption(fig)


def test_bands_of_two_kinds_say_whose_is_whose(tmp_path):
    seeds_of(tmp_path, 3, "alibi")
    make_run(tmp_path, "rope", points=scored_curve({16: 5.0, 32: 6.0, 64: 8.0}))
    text = caption(extrapolation_figure(Report.of(load_runs(tmp_path)[0]).series, NO))
    assert ("Bands: 95% intervals of 2 kinds, not comparable: t over 3 seeds + cluster "
            "bootstrap over 16 documents (log scale) for alibi L=16; one seed: cluster "
            "bootstrap over 16 documents for rope L=16 (a ratio's is paired: the same "
            "documents drawn at both lengths).") in text


# --- the paper style ----------------------------------------------------------------------
def test_the_paper_style_writes_vector_files_and_the_caption_beside_a_figure_without_title(
        tmp_path):
    seeds_of(tmp_path / "runs", 2)
    runs, not_done = load_runs(tmp_path / "runs")
    files = write_report(runs, not_done, tmp_path / "paper", "t", look=PAPER_ONE,
                         command="posexp report runs --style paper --width one")
    names = {f.name for f in files}
    for stem in ("extrapolation_nonoverlapping", "per_position"):
        assert {f"{stem}.{ext}" for ext in ("pdf", "svg", "png", "caption.txt")} <= names
    assert (tmp_path / "paper" / "per_position.pdf").read_bytes().startswith(b"%PDF")
    text = (tmp_path / "paper" / "extrapolation_nonoverlapping.caption.txt").read_text()
    lines = text.splitlines()
    assert lines[0].startswith("Perplexity on the same 512 validation tokens")
    assert lines[1].startswith("Runs: stdlib corpus, byte tokens · d_model 32, 1 layer")
    assert "2 seeds: per-seed lines, no interval: rope L=16." in lines
    assert lines[-1] == "Made by: posexp report runs --style paper --width one"
    # screen: the figures of before, no caption file
    names = {f.name for f in write_report(runs, not_done, tmp_path / "screen", "t")}
    assert "extrapolation_nonoverlapping.svg" in names and not any(
        n.endswith((".pdf", ".caption.txt")) for n in names)


@pytest.mark.parametrize(("look", "width"), [(PAPER_ONE, 3.25), (PAPER_TWO, 6.75)])
def test_a_paper_figure_has_no_title_and_a_column_width(tmp_path, look, width):
    seeds_of(tmp_path, 1)
    series = Report.of(load_runs(tmp_path)[0]).series
    with using(look):
        fig = extrapolation_figure(series, NO)
        fig.canvas.draw()
    assert fig.get_figwidth() == width and fig.get_suptitle() == ""
    [body] = fig.subfigs  # the body alone, without a title
    assert body.texts == [] and fig.texts == []
    [legend] = body.legends  # the series', below the axes; no caption drawn
    assert {t.get_fontsize() for t in legend.get_texts()} == {7}
    assert {t.get_fontsize() for t in body.axes[0].get_yticklabels()} == {7}
    assert fig.words.caption and fig.words.title.startswith("Perplexity on")
    renderer = fig.canvas.get_renderer()
    assert legend.get_window_extent(renderer).y1 <= min(
        ax.get_window_extent(renderer).y0 for ax in body.axes)
    with using(SCREEN):
        titled = extrapolation_figure(series, NO)
    assert titled.get_figwidth() == 10 and titled.subfigs[0].texts[0].get_text().startswith(
        "Perplexity on")


def test_styles_and_widths_are_chosen_by_name():
    assert look_of("screen", None) is SCREEN
    assert look_of("paper", None) is PAPER_TWO and look_of("paper", "one") is PAPER_ONE
    for style, width, message in (("print", None, "--style 'print'"),
                                  ("paper", "three", "--width 'three'"),
                                  ("screen", "one", "use it with --style paper")):
        with pytest.raises(ValueError, match=message):
            look_of(style, width)


# --- choosing and renaming series --------------------------------------------------------
def four_series(root) -> list:
    for enc in ("rope", "alibi", "nope"):
        make_run(root, enc, encoding=enc, points=scored_curve({16: 5.0, 32: 6.0, 64: 8.0}))
    make_run(root, "rope-lr", "train.lr=0.003", points=scored_curve({16: 5.0, 32: 7.0}))
    return load_runs(root)[0]


def test_include_exclude_and_label_choose_and_rename_series(tmp_path):
    runs = four_series(tmp_path)
    report = Report.of(runs)
    labels = [s.label for s in report.series]
    assert labels == ["nope L=16 · lr=0.002", "rope L=16 · lr=0.002", "rope L=16 · lr=0.003",
                      "alibi L=16 · lr=0.002"]
    # a label holds '=': OLD is the label before one of them
    chosen = Selection.parse(["rope*", "alibi*"], ["*lr=0.003"],
                             ["alibi L=16 · lr=0.002=ALiBi, L=16"]).apply(report)
    rope = next(s for s in chosen.series if s.encoding == "rope")
    assert [s.label for s in chosen.series] == ["rope L=16 · lr=0.002", "ALiBi, L=16"]
    assert {r.encoding for r in chosen.runs} == {"rope", "alibi"}
    # shaded again among the kept: rope alone now has its own colour
    assert rope.colour == ENCODINGS["rope"].colour
    fig = extrapolation_figure(chosen.series, NO)
    assert set(series_lines(fig)) == {rope.label, "ALiBi, L=16"}


@pytest.mark.parametrize(("options", "message"), [
    ((["zz*"], [], []), "--include 'zz*' matches no series; the report's labels: nope L=16 ·"),
    (([], ["zz*"], []), "--exclude 'zz*' matches no series"),
    (([], ["*"], []), "--include/--exclude leave no series"),
    (([], [], ["rope L=16=RoPE"]), "--label 'rope L=16=RoPE': no series is labelled what"),
    (([], [], ["rope"]), "--label 'rope': write --label OLD=NEW"),
    (([], [], ["rope L=16 · lr=0.002="]), "write --label OLD=NEW"),
    (([], [], ["=RoPE"]), "--label '=RoPE': write --label OLD=NEW"),
    # two series called alike: by two --label, or one NEW that is another series' label
    (([], [], ["rope L=16 · lr=0.002=R", "rope L=16 · lr=0.003=R"]),
     "--label would call two series 'R' ('rope L=16 · lr=0.002' and 'rope L=16 · lr=0.003')"),
    (([], [], ["rope L=16 · lr=0.003=rope L=16 · lr=0.002"]),
     "--label would call two series 'rope L=16 · lr=0.002'"),
])
def test_a_selection_that_names_nothing_is_refused(tmp_path, options, message):
    report = Report.of(four_series(tmp_path))
    with pytest.raises(UsageError) as e:
        Selection.parse(*options).apply(report)
    assert message in str(e.value)


def test_a_figure_drawn_without_the_shared_layout_still_gets_its_caption_file(tmp_path):
    from posexp.report.plotting import pyplot, save

    fig = pyplot().figure()  # an extension's figure: no title, no caption
    with using(PAPER_TWO):
        files = save(fig, tmp_path / "throwaway", "posexp report runs --style paper")
    assert [f.name for f in files] == ["throwaway.pdf", "throwaway.svg", "throwaway.png",
                                       "throwaway.caption.txt"]
    assert (tmp_path / "throwaway.caption.txt").read_text() == (
        "throwaway\nMade by: posexp report runs --style paper\n")


def test_the_training_figure_draws_two_seeds_as_lines_without_a_band(tmp_path):
    import json

    from posexp.report.training import training_figure

    for seed in (0, 1):
        run = make_run(tmp_path, f"rope-s{seed}", seed=seed)
        (run / "metrics.jsonl").write_text("\n".join(json.dumps(
            {"tokens": t, "val_loss": 3.0 - t / 1000 + seed / 10}) for t in (0, 500, 1000)))
    fig = training_figure(Report.of(load_runs(tmp_path)[0]).series)
    [ax] = panels(fig)
    assert band_ys(ax) == []
    assert sorted(list(line.get_ydata()) for line in seed_lines(ax)) == [
        pytest.approx([3.0, 2.5, 2.0]), pytest.approx([3.1, 2.6, 2.1])]
    assert "2 seeds: per-seed lines, no interval: rope L=16." in caption(fig)
