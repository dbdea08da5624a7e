"""The task formats of the literature (posexp/data/tasks/formats.py), each checked by an
independent solver on the printed instance: parse the prompt as a person reads it, solve it,
and compare with the answer the generator wrote."""

import re
from pathlib import Path

import numpy as np
import pytest

from posexp.data.tasks import TASKS, decode, encode
from posexp.data.tasks.vocab import HINTS


def parts(instance) -> tuple[list[str], list[str]]:
    words = decode(instance.tokens).split()
    sep = words.index("|")
    assert words[-1] == "."
    return words[:sep], words[sep + 1:-1]


def unhint(words: list[str]) -> tuple[list[int], list[str]]:
    """('#5 a #6 b') -> ([5, 6], ['a', 'b']), checking the hints alternate with symbols."""
    assert all(w.startswith("#") for w in words[0::2])
    assert not any(w.startswith("#") for w in words[1::2])
    return [int(w[1:]) for w in words[0::2]], words[1::2]


def reversed_number(digits: list[str]) -> int:
    return int("".join(reversed(digits)))


@pytest.mark.parametrize("n", [1, 2, 5, 13])
def test_reversed_addition_is_the_sum_least_significant_digit_first(n):
    rng = np.random.default_rng(n)
    for _ in range(50):
        prompt, answer = parts(TASKS["addition_reversed"].sample(rng, n))
        plus = prompt.index("+")
        a, b = reversed_number(prompt[:plus]), reversed_number(prompt[plus + 1:])
        assert len(prompt[:plus]) == len(prompt[plus + 1:]) == n and len(answer) == n + 1
        assert reversed_number(answer) == a + b


@pytest.mark.parametrize("task,solve", [("copy_hints", lambda xs: xs),
                                        ("reverse_hints", lambda xs: xs[::-1])])
@pytest.mark.parametrize("n", [1, 3, 9, 40])
def test_hinted_copy_and_reverse(task, solve, n):
    rng = np.random.default_rng(n)
    starts = set()
    for _ in range(50):
        instance = TASKS[task].sample(rng, n)
        assert len(instance.tokens) == TASKS[task].tokens_for(n)
        prompt, answer = parts(instance)
        hints, symbols = unhint(prompt)
        assert hints == list(range(hints[0], hints[0] + n)) and hints[-1] < HINTS
        pairs = list(zip(hints, symbols, strict=True))
        assert [tuple(p) for p in zip(*unhint(answer), strict=True)] == solve(pairs)
        starts.add(hints[0])
    assert len(starts) > 10  # the hints start anywhere, so training reaches every one


@pytest.mark.parametrize("n", [1, 4, 17])
def test_hinted_addition_puts_digit_i_of_each_number_under_one_hint(n):
    rng = np.random.default_rng(n)
    for _ in range(50):
        prompt, answer = parts(TASKS["addition_hints"].sample(rng, n))
        plus = prompt.index("+")
        (ha, a), (hb, b), (hs, s) = (unhint(x) for x in (prompt[:plus], prompt[plus + 1:],
                                                          answer))
        assert ha == hb == hs[:n] and hs == list(range(hs[0], hs[0] + n + 1))
        assert reversed_number(s) == reversed_number(a) + reversed_number(b)


@pytest.mark.parametrize("n", [1, 2, 6, 20])
def test_the_carries_scratchpad_is_column_addition_written_out(n):
    """Solved as a person adds in columns: per column the operands' digits and the carry
    in give the sum digit, then the carry out; the sum digits and the last carry read back
    (least significant first) are a + b, and an instance fills tokens_for(n)."""
    rng = np.random.default_rng(n)
    carried = 0
    for _ in range(50):
        instance = TASKS["addition_carries"].sample(rng, n)
        assert len(instance.tokens) == TASKS["addition_carries"].tokens_for(n)
        prompt, answer = parts(instance)
        plus = prompt.index("+")
        a, b = prompt[:plus], prompt[plus + 1:]
        assert len(a) == len(b) == n and len(answer) == 2 * n
        carry = 0
        for i in range(n):
            total = int(a[i]) + int(b[i]) + carry
            assert answer[2 * i:2 * i + 2] == [str(total % 10), str(total // 10)]
            carry = total // 10
            carried += carry
        assert reversed_number([*answer[0::2], answer[-1]]) == \
            reversed_number(a) + reversed_number(b)
    assert carried > 0  # the instances exercise carries


def test_a_length_past_the_hints_is_not_applicable():
    assert TASKS["copy_hints"].why_not(HINTS) is None
    assert "needs 129 index hints, past the 128" in TASKS["copy_hints"].why_not(HINTS + 1)
    with pytest.raises(ValueError, match="index hints"):
        TASKS["copy_hints"].sample(np.random.default_rng(0), HINTS + 1)


def test_the_printed_examples_of_the_docstrings():
    assert decode(TASKS["addition_reversed"].make(57, 68, 2).tokens) == "7 5 + 8 6 | 5 2 1 ."
    assert decode(TASKS["addition_hints"].make(57, 68, 2).tokens) == (
        "#0 7 #1 5 + #0 8 #1 6 | #0 5 #1 2 #2 1 .")
    assert decode(TASKS["reverse_hints"].make(encode("a b"), start=4).tokens) == (
        "#4 a #5 b | #5 b #4 a .")
    assert decode(TASKS["addition_carries"].make(57, 68, 2).tokens) == "7 5 + 8 6 | 5 1 2 1 ."


def test_the_readme_prints_what_its_instance_printer_prints(capsys):
    """The README's instance printer, run as it stands, prints the block below it: one
    instance of each format, as the generators write it now."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("A task's held-out instances"):]
    code, shown = re.findall(r"```(?:python)?\n(.*?)```", section, re.S)[:2]
    exec(code, {})  # the README's own snippet
    assert capsys.readouterr().out == shown
    assert all(f"\n{name} " in f"\n{shown}" for name in
               ("addition_reversed", "copy_hints", "reverse_hints", "addition_hints"))
