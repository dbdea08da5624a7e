"""RULER's synthetic tasks as prompts for a pretrained base model (Hsieh et al. 2024, after
NVIDIA/RULER's generators and templates, read and worded anew): retrieval beyond one passkey.

Each instance is a prompt in the model's own tokenizer, no chat template, of at most the
length asked for -- as passkey's (passkey.py): the most filler that fits -- ending in the
start of its answer, and the model answers by greedy decoding.  Score (RULER's
``string_match_all``): the share of the answer's strings its output holds, case aside
(``token_acc``, with a bootstrap interval over instances); ``exact``: every one of them
(with a Wilson interval); ``answer_loss``: nats per token of the answer written out after
the prompt, teacher forced.

* ``niah_multikey`` (RULER's niah_multikey_1): four needles "One of the special magic numbers
  for KEY is: NUMBER.", keys words of their own, numbers of 7 digits; the question names one
  key.  The queried needle sits after round(depth x n) of the n filler sentences, the others
  at places drawn uniformly.
* ``niah_multivalue``: four needles of one key, four numbers; every number is asked for.
  The first sits at the depth, the others where drawn.
* ``variable_tracking`` (RULER's vt, one chain, four hops): "VAR X1 = 12345.", "VAR X2 = VAR
  X1.", ... at places drawn in chain order, names of five capitals; every variable holding
  the number is asked for.  No depth.
* ``common_words`` (RULER's cwe): a numbered list of words, ten common ones and n others,
  shuffled -- each common word 6 times and each other once in a context shorter than 4,096
  tokens, 30 and 3 times from 4,096 on, as RULER; the ten common words are asked for.  No
  depth.

Differences from RULER, all for an offline, dependency-free generator: the haystack is
passkey's repeated sentences (RULER's "noise"; niah_multikey_1 and niah_multivalue read Paul
Graham's essays there), words are made-up two-syllable words (RULER draws English nouns,
verbs and adjectives with wonderwords), and no worked example precedes vt's or cwe's prompt.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from posexp.data.tasks import binomial_interval
from posexp.evaluate.tasks import bootstrap_mean
from posexp.pretrained.passkey import (
    FILLER,
    Instance,
    Prompter,
    greedy,
    instances_sha256,
)

TEMPLATE = 1  # part of every instance's seed: a new wording draws new instances
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
CAPITALS = list("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


@dataclass(frozen=True)
class Made:
    """An instance's prompt with some filler, the strings its answer must hold, and the
    answer written out as the prompt's last words lead into it (teacher forced)."""

    text: str
    answers: tuple[str, ...]
    written: str


Maker = Callable[[int], Made]  # filler units -> the instance with that much filler


@dataclass(frozen=True)
class PromptTask:
    name: str  # the task registry's (posexp/data/tasks/ruler.py): figures draw its points
    takes_depth: bool
    new_tokens: int  # RULER's tokens_to_generate
    draw: Callable[[np.random.Generator, float | None, int], Maker]  # (rng, depth, length)

    @property
    def source(self) -> str:
        return f"Hsieh et al. 2024 (RULER), {self.name}"


def made_up_words(rng: np.random.Generator, k: int) -> list[str]:
    """``k`` distinct two-syllable words."""
    picks = rng.choice(len(SYLLABLES) ** 2, size=k, replace=False)
    return [SYLLABLES[i // len(SYLLABLES)] + SYLLABLES[i % len(SYLLABLES)] for i in picks]


def _hidden(blocks: list[str], fractions: list[float], n: int) -> str:
    """n filler sentences with each block after round(fraction x n) of them (ties in order)."""
    at = [round(f * n) for f in fractions]
    out, done = [], 0
    for i in sorted(range(len(blocks)), key=lambda i: at[i]):
        out += [FILLER[j % len(FILLER)] for j in range(done, at[i])] + [blocks[i]]
        done = at[i]
    return " ".join(out + [FILLER[j % len(FILLER)] for j in range(done, n)])


def _numbers(rng: np.random.Generator, k: int, digits: int) -> list[str]:
    out: list[str] = []
    while len(out) < k:
        if (x := str(int(rng.integers(10 ** (digits - 1), 10**digits)))) not in out:
            out.append(x)
    return out


NIAH_INTRO = ("Some special magic numbers are hidden within the following text. Make sure to "
              "memorize it. I will quiz you about the numbers afterwards.")
NEEDLE = "One of the special magic numbers for {key} is: {value}."


def _niah(rng: np.random.Generator, depth: float | None, one_key: bool) -> Maker:
    keys, values = made_up_words(rng, 4), _numbers(rng, 4, 7)
    keys = [keys[0]] * 4 if one_key else keys
    fractions = [float(depth), *rng.uniform(size=3).tolist()]
    needles = [NEEDLE.format(key=k, value=v) for k, v in zip(keys, values, strict=True)]
    key = keys[0]
    if one_key:
        question = (f"What are all the special magic numbers for {key} mentioned in the "
                    f"provided text? The special magic numbers for {key} mentioned in the "
                    "provided text are")
        answers = tuple(values)
    else:
        question = (f"What is the special magic number for {key} mentioned in the provided "
                    f"text? The special magic number for {key} mentioned in the provided "
                    "text is")
        answers = (values[0],)

    def make(n: int) -> Made:
        at = [round(f * n) for f in fractions]  # the numbers in the order they stand
        stated = [answers[i] for i in sorted(range(len(answers)), key=lambda i: (at[i], i))]
        return Made("\n".join([NIAH_INTRO, _hidden(needles, fractions, n), question]),
                    answers, " " + ", ".join(stated) + ".")

    return make


def _variable_tracking(rng: np.random.Generator, depth: float | None, length: int) -> Maker:
    names: list[str] = []
    while len(names) < 5:
        if (name := "".join(rng.choice(CAPITALS, 5))) not in names:
            names.append(name)
    value = str(int(rng.integers(10000, 99999)))
    chain = [f"VAR {names[0]} = {value}.",
             *(f"VAR {names[i + 1]} = VAR {names[i]}." for i in range(4))]
    fractions = sorted(rng.uniform(size=5).tolist())
    intro = "Memorize and track the chain of variable assignments hidden in the following text."
    question = (f"Question: Find all variables that are assigned the value {value} in the "
                "text above. Answer: According to the chain of variable assignments in the "
                f"text above, 5 variables are assigned the value {value}, they are:")
    return lambda n: Made("\n".join([intro, "", _hidden(chain, fractions, n), question]),
                          tuple(names), " " + " ".join(names))


CWE_INTRO = ("Below is a numbered list of words. In these words, some appear more often than "
             "others. Memorize the ones that appear most often.")
CWE_QUESTION = ("Question: What are the 10 most common words in the above list? Answer: The "
                "top 10 words that appear most often in the list are:")


def _common_words(rng: np.random.Generator, depth: float | None, length: int) -> Maker:
    common_freq, other_freq = (6, 1) if length < 4096 else (30, 3)  # RULER's, by length
    seed = int(rng.integers(2**32))

    def make(n: int) -> Made:
        r = np.random.default_rng([seed, n])
        words = made_up_words(r, 10 + n)
        listed = words[:10] * common_freq + words[10:] * other_freq
        listed = [listed[i] for i in r.permutation(len(listed))]
        numbered = " ".join(f"{i + 1}. {w}" for i, w in enumerate(listed))
        common = list(dict.fromkeys(w for w in listed if w in words[:10]))  # as they stand
        return Made("\n".join([CWE_INTRO, numbered, CWE_QUESTION]), tuple(common),
                    " " + " ".join(f"{i + 1}. {w}" for i, w in enumerate(common)))

    return make


TASKS = {t.name: t for t in (
    PromptTask("niah_multikey", True, 128, lambda r, d, n: _niah(r, d, one_key=False)),
    PromptTask("niah_multivalue", True, 128, lambda r, d, n: _niah(r, d, one_key=True)),
    PromptTask("variable_tracking", False, 30, _variable_tracking),
    PromptTask("common_words", False, 120, _common_words),
)}


def fit(prompter: Prompter, make: Maker, length: int) -> tuple[Made, list[int]] | None:
    """The instance with the most filler whose prompt takes at most ``length`` tokens, and
    its tokens; None when not even no filler fits."""
    def fits(n: int) -> bool:
        try:
            return len(prompter.encode(make(n).text)) <= length
        except ValueError:  # more filler than the task has (common_words' words run out)
            return False

    if not fits(0):
        return None
    low, high = 0, 1
    while fits(high):  # the prompt grows with its filler
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return make(low), prompter.encode(make(low).text)


def instance(prompter: Prompter, made: Made, prompt: list[int]) -> Instance:
    """The instance's prompt and its written answer's tokens after it (passkey.Instance)."""
    full = prompter.encode(made.text + made.written)
    answer = full[len(prompt):] if full[:len(prompt)] == prompt and len(full) > len(prompt) \
        else list(prompter.tokenizer(made.written, add_special_tokens=False).input_ids)
    return Instance(made.written, prompt, answer)


def drawn(task: PromptTask, eval_seed: int, length: int, depth: float | None,
          count: int) -> list[Maker]:
    """The instances of one point: from the task, eval seed, length and depth alone, so every
    model, scaling and run gets the same ones."""
    rng = np.random.default_rng([eval_seed, TEMPLATE, sum(map(ord, task.name)), length,
                                 2_000_000 if depth is None else round(depth * 1_000_000)])
    return [task.draw(rng, depth, length) for _ in range(count)]


def point(name: str, length: int, depth: float | None, count: int, eval_seed: int,
          rope_scaling: dict | None) -> dict:
    """A RULER point as eval.json holds task points (posexp/runs/records.py), unscored."""
    return {"task": name, "length": length, "depth": depth, "count": count,
            "eval_seed": eval_seed, "tokens": length, "source": TASKS[name].source,
            "rope_scaling": rope_scaling, "applicable": True, "reason": None,
            "exact": None, "exact_low": None, "exact_high": None, "token_acc": None,
            "token_acc_low": None, "token_acc_high": None, "answer_loss": None,
            "chance_exact": None, "chance_token": None, "instances_sha256": None,
            "prompt_tokens": None, "seconds": None}


def chance(answers: list[tuple[str, ...]]) -> tuple[float, float]:
    """(exact, score) of the best constant output among the instances' own answers: the one
    that holds most of every instance's strings -- what an output that ignores the prompt
    gets (near 0 where numbers and words are drawn afresh)."""
    def scores(said: tuple[str, ...]) -> list[float]:
        return [float(np.mean([a in said for a in want])) for want in answers]

    each = [scores(said) for said in dict.fromkeys(answers)]
    return (max(float(np.mean([s == 1.0 for s in row])) for row in each),
            max(float(np.mean(row)) for row in each))


def score_point(model, prompter: Prompter, p: dict, max_positions: int | None) -> dict:
    """Score RULER point ``p`` in place (or mark it n/a with the reason)."""
    t0, task = time.perf_counter(), TASKS[p["task"]]
    if max_positions is not None and p["length"] + task.new_tokens > max_positions:
        p.update(applicable=False, reason=f"the model's positions stop at {max_positions}; "
                 f"a prompt of {p['length']} tokens and {task.new_tokens} answer tokens need "
                 "more")
        return p
    makers = drawn(task, p["eval_seed"], p["length"], p["depth"], p["count"])
    fitted = [fit(prompter, make, p["length"]) for make in makers]
    if any(f is None for f in fitted):  # one reason at every depth: the report groups them
        p.update(applicable=False, reason=f"{task.name}'s prompt without filler takes more "
                 f"than {p['length']} tokens")
        return p
    made = [instance(prompter, m, tokens) for m, tokens in fitted]
    shares, loss, n_answer = [], 0.0, 0
    for (m, _), x in zip(fitted, made, strict=True):
        generated, nll = greedy(model, x, task.new_tokens)
        said = prompter.tokenizer.decode(generated, skip_special_tokens=True).lower()
        shares.append(float(np.mean([a.lower() in said for a in m.answers])))
        loss, n_answer = loss + nll, n_answer + len(x.answer)
    exact = [s == 1.0 for s in shares]
    p["chance_exact"], p["chance_token"] = chance([m.answers for m, _ in fitted])
    p["exact_low"], p["exact_high"] = binomial_interval(int(sum(exact)), len(exact))
    p["token_acc_low"], p["token_acc_high"] = bootstrap_mean(np.asarray(shares))
    p.update(exact=float(np.mean(exact)), token_acc=float(np.mean(shares)),
             answer_loss=loss / n_answer, instances_sha256=instances_sha256(made),
             prompt_tokens=round(float(np.mean([len(x.prompt) for x in made])), 1),
             seconds=round(time.perf_counter() - t0, 3))
    return p
