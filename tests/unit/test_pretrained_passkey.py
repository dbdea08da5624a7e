"""Passkey retrieval in a pretrained model's own tokenizer (posexp/pretrained/passkey.py):
instances fixed by the eval seed, prompts that fit their length, greedy decoding as
transformers' generate does it, and scoring on a model patched to answer correctly (exact
match 1) and on a model that always writes one digit (chance)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from posexp.pretrained import passkey
from posexp.pretrained.model import transformers
from tests import pretrained_models as tiny

pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    return tiny.llama(tmp_path_factory.mktemp("passkey") / "tiny-llama")


@pytest.fixture
def model(llama_dir):
    hf = transformers()
    return hf.AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).eval()


@pytest.fixture
def prompter(llama_dir):
    return passkey.Prompter(transformers().AutoTokenizer.from_pretrained(llama_dir))


def test_keys_follow_the_eval_seed_length_and_depth_alone():
    keys = passkey.keys(0, 512, 0.5, 50, 5)
    assert keys == passkey.keys(0, 512, 0.5, 50, 5)
    assert all(len(k) == 5 and k.isdigit() and k[0] != "0" for k in keys)
    for other in (passkey.keys(1, 512, 0.5, 50, 5), passkey.keys(0, 1024, 0.5, 50, 5),
                  passkey.keys(0, 512, 0.25, 50, 5)):
        assert other != keys
    assert len(set(keys)) > 45  # 50 draws of 90,000 keys


@pytest.mark.parametrize("length", [256, 700])
def test_prompts_fit_their_length_with_the_key_at_its_depth(prompter, length):
    tok = prompter.tokenizer
    longest = max(len(tok(" " + s, add_special_tokens=False).input_ids) for s in passkey.FILLER)
    for depth in (0.0, 0.5, 1.0):
        x = prompter.instance(length, depth, "71432")
        assert length - longest <= len(x.prompt) <= length
        assert x.prompt[0] == tok.bos_token_id
        lines = tok.decode(x.prompt, skip_special_tokens=True).split("\n")
        assert lines[0] == passkey.INTRO and lines[-1] == passkey.QUESTION
        assert lines[2] == passkey.KEY_LINE.format(key="71432")
        before, after = len(lines[1].split(".")) - 1, len(lines[3].split(".")) - 1
        assert before == round(depth * (before + after))
        assert tok.decode(x.answer).strip() == "71432"
    assert prompter.instance(40, 0.5, "71432") is None  # no shorter context holds the prompt


def test_instances_are_the_same_from_a_fresh_tokenizer(llama_dir, prompter):
    again = passkey.Prompter(transformers().AutoTokenizer.from_pretrained(llama_dir))
    made = [prompter.instance(300, 0.25, k) for k in passkey.keys(0, 300, 0.25, 4, 5)]
    assert passkey.instances_sha256(made) == passkey.instances_sha256(
        [again.instance(300, 0.25, k) for k in passkey.keys(0, 300, 0.25, 4, 5)])


def test_greedy_decoding_is_transformers_generate(model, prompter):
    for key in passkey.keys(3, 200, 0.5, 3, 5):
        x = prompter.instance(200, 0.5, key)
        ours, loss = passkey.greedy(model, x, 9)
        with torch.no_grad():
            theirs = model.generate(torch.tensor([x.prompt]), max_new_tokens=9,
                                    do_sample=False, pad_token_id=1)[0, len(x.prompt):]
            logits = model(input_ids=torch.tensor([x.prompt + x.answer])).logits[0].double()
        assert ours == theirs.tolist()[:len(ours)]
        targets = torch.tensor(x.answer)
        expected = torch.nn.functional.cross_entropy(logits[len(x.prompt) - 1:-1], targets,
                                                     reduction="sum")
        assert loss == pytest.approx(float(expected), rel=1e-5)


def patched(model, next_token):
    """``model`` whose logits put everything on ``next_token(tokens so far, position)`` at
    every position it returns -- its own forward pass and KV cache run underneath."""
    forward = model.forward
    seen: list[int] = []

    @functools.wraps(forward)
    def answering(*args, **kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        past = cache.get_seq_length() if cache is not None else 0
        seen[past:] = kwargs["input_ids"][0].tolist()
        out = forward(*args, **kwargs)
        logits = torch.full_like(out.logits, -30.0)
        start = len(seen) - logits.shape[1]
        for j in range(logits.shape[1]):
            logits[0, j, next_token(seen, start + j)] = 30.0
        out.logits = logits
        return out

    model.forward = answering
    return model


def score(model, prompter, count=12):
    points = []
    for depth in (0.0, 1.0):
        p = passkey.point(300, depth, count, 0, 5, None)
        points.append(passkey.score_point(model, prompter, p, None))
    return points


def test_a_model_that_answers_correctly_scores_exact_match_one(model, prompter):
    made = {tuple(x.prompt): x.answer for depth in (0.0, 1.0)
            for x in (prompter.instance(300, depth, k) for k in passkey.keys(0, 300, depth, 12, 5))}

    def oracle(seen, position):
        prompt = next(p for p in made if tuple(seen[:len(p)]) == p)
        target = [*prompt, *made[prompt], 1]
        return target[position + 1] if position + 1 < len(target) else 1

    for p in score(patched(model, oracle), prompter):
        assert (p["exact"], p["token_acc"], p["applicable"]) == (1.0, 1.0, True)
        assert p["exact_low"] > 0.75 and p["exact_high"] == 1.0  # Wilson, 12 of 12
        assert p["answer_loss"] < 1e-6
        assert p["chance_exact"] <= 2 / 12 and p["prompt_tokens"] <= 300


def test_a_model_that_always_writes_one_digit_scores_chance(model, prompter):
    seven = prompter.tokenizer("7", add_special_tokens=False).input_ids[0]
    for p in score(patched(model, lambda seen, position: seven), prompter, count=40):
        keys = passkey.keys(0, 300, p["depth"], 40, 5)
        assert p["exact"] == 0.0 <= p["chance_exact"]
        # its digits are right wherever the key has a 7: the share of 7s in the keys
        assert p["token_acc"] == pytest.approx(np.mean([k.count("7") / 5 for k in keys]))
        assert p["token_acc"] <= p["chance_token"]
        assert p["exact_low"] == pytest.approx(0.0, abs=1e-12) and 0.05 < p["exact_high"] < 0.1


def test_a_length_past_a_learned_table_is_not_applicable(model, prompter):
    p = passkey.score_point(model, prompter, passkey.point(300, 0.5, 2, 0, 5, None), 128)
    assert not p["applicable"] and "positions stop at 128" in p["reason"]
    p = passkey.score_point(model, prompter, passkey.point(40, 0.5, 2, 0, 5, None), None)
    assert not p["applicable"] and "without filler, more than 40" in p["reason"]
