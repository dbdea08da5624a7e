"""posexp ls and posexp compare on run directories whose every number is known."""
import re

from posexp.listing import coloured, ls_lines, main_region, summary_points
from posexp.runs import is_spread, load_run, point_key, region_text
from tests.runs_on_disk import curve_point, losses, write_run

ANSI = re.compile(r"\033\[[0-9;]*m")
NO = "nonoverlapping"


def test_ls_on_a_terminal_colours_the_status_and_fits_the_width(listed_runs):
    root, curve = listed_runs
    lines = ls_lines(root, coloured, width=110)
    plain = [ANSI.sub("", line) for line in lines]
    assert "\033[32mcompleted\033[0m" in lines[1] and "\033[31mdamaged  \033[0m" in lines[-1]
    assert plain[0].index("STATUS") == plain[1].index("completed")  # colour shifts nothing
    # reasons are cut to fit; the perplexities of a completed run never are
    assert [len(line) for line in plain if "…" in line] == [110, 110, 110]
    assert plain[1].endswith("]") and plain == ls_lines(root, width=110)
    # narrower than a completed run's line: its intervals are left out, and it says so
    narrow = [ANSI.sub("", line) for line in ls_lines(root, coloured, width=90)]
    assert all(len(line) <= 90 for line in narrow)
    assert narrow[1].split()[-3:] == [f"{curve[0]['ppl']:.2f}", "64", f"{curve[2]['ppl']:.2f}"]
    assert narrow[-1] == ("(95% intervals left out to fit the terminal; posexp ls | cat shows "
                          "them)")


def test_a_run_is_summarised_on_its_spread_spans_before_an_older_stretch(tmp_path):
    """A run scored again after posexp spread its spans holds points of both: ls sums it up
    on the spans, though the stretch of its older eval.json has more points."""
    spread = [curve_point(NO, L, losses(1.5, seed=L)) for L in (16, 32)]
    stretch = [curve_point(NO, L, losses(2.5, seed=L), first=1000) for L in (16, 32, 64)]
    r = load_run(write_run(tmp_path / "exp" / "rope-L16-s0", ["encoding=rope"],
                           stretch + spread))
    name = spread[0]["spans"]
    assert sorted(r.regions(NO)) == [(f"spans {name}", 512), ("tail 1000", 512)]
    assert main_region(r, NO) == (f"spans {name}", 512) and is_spread(main_region(r, NO))
    first, last = summary_points(r)
    assert (first["ppl"], last["ppl"]) == (spread[0]["ppl"], spread[1]["ppl"])
    assert region_text((f"spans {name}", 512)) == f"512 validation tokens in spans {name}"
    assert region_text(("tail 1000", 512)) == \
        "the 512 validation targets 1,001-1,512 (one stretch)"
    # the keys by which a point replaces another: the same length on other text is another
    assert point_key(spread[0]) != point_key(stretch[0])
    assert point_key(spread[0]) == point_key({**spread[0], "ppl": 9.0})


def test_a_task_runs_longest_is_the_longest_length_its_task_has_instances_of():
    """Addition's default lengths reach 28 digits, past its 20-digit limit: every arm's
    point there is n/a, which says nothing of the model, so ls shows the longest length
    the task has (14) and exact match there (the committed tasks suite's records)."""
    from tests.unit.test_committed_results import RESULTS

    rows = [line.split() for line in ls_lines(RESULTS / "reproduce-tasks", width=200)
            if line.startswith("reproduce-tasks/addition_carries-rope-L32-s0")]
    assert rows and rows[0][-3:] == ["n=14", "exact", "0.00"]
    copy = [line.split() for line in ls_lines(RESULTS / "reproduce-tasks", width=200)
            if line.startswith("reproduce-tasks/copy-nope-L32-s0")]
    assert copy[0][-3] == "n=60"  # copy has instances at every length scored
