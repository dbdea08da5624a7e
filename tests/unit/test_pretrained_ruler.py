"""RULER's tasks as prompts for a pretrained model (posexp/pretrained/ruler.py): each
generator checked by a solver written from RULER's definition, reading only the prompt's
text; prompts that fill the length asked for and no more; the needles at their depths; and
``posexp pretrained MODEL task=<ruler task>`` scoring a tiny local Llama at 4 lengths x 3
depths, with bad settings refused in one line."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from posexp.errors import UsageError
from posexp.pretrained import ruler
from posexp.pretrained.passkey import Prompter
from tests import pretrained_models as tiny

pytest.importorskip("transformers")
LENGTH = 1536


@pytest.fixture(scope="module")
def prompter():
    return Prompter(tiny.tokenizer())


def solve(name: str, text: str) -> list[str]:
    """The answer's strings, from the prompt's text by the task's definition."""
    if name in ("niah_multikey", "niah_multivalue"):
        key = re.search(r"numbers? for (\w+) mentioned in the provided text\?", text).group(1)
        return re.findall(rf"special magic numbers for {key} is: (\d+)\.", text)
    if name == "variable_tracking":
        value = re.search(r"assigned the value (\d+) in the text above", text).group(1)
        holds, found = {value}, []
        for var, what in re.findall(r"VAR ([A-Z]{5}) = (?:VAR )?(\w+)\.", text):
            if what in holds:  # assigned in chain order: a variable after the one it copies
                holds.add(var)
                found.append(var)
        return found
    listed = re.findall(r"\d+\. (\w+)", text.split("\n")[1])
    counts = Counter(listed)
    top = {w for w, _ in counts.most_common(10)}
    assert len({counts[w] for w in top}) == 1 and counts.most_common(11)[-1][1] < \
        counts.most_common(1)[0][1]  # ten words, clearly the commonest
    return list(dict.fromkeys(w for w in listed if w in top))


@pytest.mark.parametrize("name", list(ruler.TASKS))
def test_each_generator_is_solved_from_its_prompt_and_fills_the_length(name, prompter):
    task = ruler.TASKS[name]
    depths = [0.0, 0.5, 1.0] if task.takes_depth else [None]
    for depth in depths:
        for make in ruler.drawn(task, 0, LENGTH, depth, 4):
            made, tokens = ruler.fit(prompter, make, LENGTH)
            assert sorted(solve(name, made.text)) == sorted(made.answers), (name, depth)
            assert tokens == prompter.encode(made.text) and len(tokens) <= LENGTH
            n = next(k for k in range(100_000) if make(k).text == made.text)
            assert len(prompter.encode(make(n + 1).text)) > LENGTH  # the most that fits
            x = ruler.instance(prompter, made, tokens)
            assert prompter.tokenizer.decode(x.answer).strip() == made.written.strip()
    # the same seed, length and depth draw the same instances; another seed others
    again = [m(5).text for m in ruler.drawn(task, 0, LENGTH, depths[0], 3)]
    assert again == [m(5).text for m in ruler.drawn(task, 0, LENGTH, depths[0], 3)]
    assert again != [m(5).text for m in ruler.drawn(task, 1, LENGTH, depths[0], 3)]


def test_the_queried_needle_sits_at_its_depth(prompter):
    task = ruler.TASKS["niah_multikey"]
    for depth, where in ((0.0, "first"), (1.0, "last")):
        make = ruler.drawn(task, 0, LENGTH, depth, 1)[0]
        text = make(200).text
        value = make(200).answers[0]
        sentences = text.split("\n")[1].split(". ")
        at = next(i for i, s in enumerate(sentences) if s.endswith(f"is: {value}")
                  or f"is: {value}" in s)
        assert (at == 0) if where == "first" else (at >= len(sentences) - 4), (depth, at)


def test_common_words_repeats_as_ruler_by_length():
    short = ruler.TASKS["common_words"].draw(__import__("numpy").random.default_rng(0), None,
                                             1024)(20)
    long = ruler.TASKS["common_words"].draw(__import__("numpy").random.default_rng(0), None,
                                            8192)(20)
    for made, (common, other) in ((short, (6, 1)), (long, (30, 3))):
        counts = Counter(re.findall(r"\d+\. (\w+)", made.text.split("\n")[1]))
        assert sorted(set(counts.values())) == [other, common]


def test_a_constant_output_scores_as_chance_says():
    assert ruler.chance([("1",), ("1",), ("2",)]) == (2 / 3, 2 / 3)
    assert ruler.chance([("a", "b"), ("a", "c")]) == (0.5, 0.75)


@pytest.mark.slow
def test_a_pretrained_model_is_scored_on_ruler_tasks(tmp_path, monkeypatch, cache_dir):
    """4 lengths x 3 depths of niah_multikey, then variable_tracking by posexp eval."""
    from posexp.pretrained.lifecycle import pretrained

    monkeypatch.setenv("POSEXP_CACHE", str(cache_dir))
    model, text = tiny.llama(tmp_path / "tiny-llama"), tiny.corpus(tmp_path / "text")
    base = ["data=text", f"data.path={text}", "data.val_fraction=0.3", "eval.tokens=512",
            "eval.lengths=[64]", f"results_dir={tmp_path}", "device=cpu"]
    pretrained(str(model), None, [*base, "task=niah_multikey", "task.eval_count=2",
                                  "task.lengths=[256,512,768,1024]", "task.depths=[0,0.5,1]"],
               progress=False)
    run = tmp_path / "default" / "tiny-llama"
    points = json.loads((run / "eval.json").read_text())["tasks"]
    assert sorted((p["length"], p["depth"]) for p in points) == \
        [(n, d) for n in (256, 512, 768, 1024) for d in (0.0, 0.5, 1.0)]
    scored = [p for p in points if p["applicable"]]
    assert {p["length"] for p in scored} == {512, 768, 1024}  # 256 holds no bare prompt
    assert all("without filler takes more than 256 tokens" in p["reason"] for p in points
               if not p["applicable"])
    assert all(0 <= p["token_acc"] <= 1 and p["answer_loss"] > 0
               and p["prompt_tokens"] <= p["length"] for p in scored)
    from typer.testing import CliRunner

    from posexp.cli.app import app

    result = CliRunner().invoke(app, ["eval", str(run), "task=variable_tracking",
                                      "task.lengths=[512,1024]", "task.eval_count=2"])
    assert result.exit_code == 0, result.output
    names = Counter(p["task"] for p in json.loads((run / "eval.json").read_text())["tasks"])
    assert names == {"niah_multikey": 12, "variable_tracking": 2}


@pytest.mark.parametrize("args, words", [
    (["task=variable_tracking", "task.depths=[0.5]"], "has no depth"),
    (["task=niah_multikey", "task.digits=3"], "passkey's key length"),
    (["task=niah_multikey", "task.depths=[1.5]"], "depth"),
    (["task=qa_squad"], "is scored on passkey, niah_multikey"),
])
def test_bad_ruler_settings_are_one_line(args, words, tmp_path):
    from posexp.pretrained.lifecycle import build

    model = tiny.llama(tmp_path / "m")
    with pytest.raises(UsageError, match=re.escape(words)):
        build(str(model), None, ["data=text", f"data.path={tmp_path}", *args])
