"""The paper column (#43 item 4): each figure is the cited table's, at the length it gives,
and a ratio of two encodings is derived from that table's own numbers."""
import pytest

from posexp.claims.sources import PRESS_TABLE, press_between, press_degradation


def test_press_table_2_figures_and_their_places():
    sin = press_degradation("sinusoidal", 2)
    assert sin.value == 2.17 and sin.place == f"{PRESS_TABLE}, at 1,012 tokens (2L)"
    assert press_degradation("alibi", 4).value == 0.933  # at 2,512 tokens: 4.9L, said so
    assert "(4.9L)" in press_degradation("alibi", 4).place
    # rotary over ALiBi at 1,012 tokens: each one's ppl at 512 times its ratio there
    assert press_between("rope", "alibi", 2).value == pytest.approx(
        (20.07 * 1.065) / (19.73 * 0.949))
    assert press_between("sinusoidal", "rope", 4).value == pytest.approx(
        (20.05 * 6.60) / (20.07 * 1.573))


def test_no_figure_where_the_table_has_none():
    assert press_degradation("alibi", 16) is None  # Table 2 stops short of 16L
    assert press_degradation("nope", 2) is None  # Press et al. train no NoPE
    assert press_between("nope", "rope", 2) is None
