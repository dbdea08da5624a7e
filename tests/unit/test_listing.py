"""posexp ls and posexp compare on run directories whose every number is known."""
import re

from posexp.listing import coloured, ls_lines

ANSI = re.compile(r"\033\[[0-9;]*m")


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
