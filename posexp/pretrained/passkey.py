"""Passkey retrieval in a pretrained model's own tokenizer (Mohtashami & Jaggi 2023).

An instance is the paper's prompt: an instruction, filler sentences ("The grass is green.
The sky is blue. ..."), the key line "The pass key is 71432. Remember it. 71432 is the pass
key." after the first round(depth x n) of the n filler sentences, more filler, and "What is
the pass key? The pass key is".  n is the most sentences whose prompt, tokenized by the
model's tokenizer with its own special tokens, fits in the context length asked for, so a
point at length 4096 scores prompts of at most 4096 tokens (a few under, where a sentence
would not fit).  Keys are ``digits`` random digits (the first not 0), drawn from the eval
seed, the length and the depth only: every model, scaling and run gets the same keys, and
each point records the SHA-256 of its instances' tokens.

The model answers by greedy decoding (argmax, no sampling) of digits + 4 tokens; the first
run of digits it writes is its answer.  Exact match: that answer is the key (with a Wilson
interval); token_acc: the share of the key's digits it has right, place by place (with a
bootstrap interval over instances); answer_loss: nats per token of " KEY" after the prompt,
teacher forced.  One forward pass over prompt and key gives both the loss and the greedy
tokens as long as they agree with the key; decoding goes on from the cache after that.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from posexp.data.tasks import PasskeyTask, binomial_interval
from posexp.evaluate.tasks import bootstrap_mean

PASSKEY = PasskeyTask.name  # the task points' name, the registry's: its figures draw them
SOURCE = "Mohtashami & Jaggi 2023 (landmark attention), passkey retrieval"
INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and "
         "memorize them. I will quiz you about the important information there.")
FILLER = ("The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.",
          "There and back again.")
KEY_LINE = "The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = "What is the pass key? The pass key is"
TEMPLATE = 1  # part of every instance's seed: a new template draws new keys
EXTRA_TOKENS = 4  # greedy tokens beyond the key's digits: a leading space, a period, ...


@dataclass(frozen=True)
class Instance:
    key: str
    prompt: list[int]  # the model's tokens, its special tokens (BOS) included
    answer: list[int]  # the tokens of " KEY" after the prompt


def prompt_text(sentences: int, depth: float, key: str) -> str:
    filler = [FILLER[i % len(FILLER)] for i in range(sentences)]
    at = round(depth * sentences)
    return "\n".join([INTRO, " ".join(filler[:at]), KEY_LINE.format(key=key),
                      " ".join(filler[at:]), QUESTION])


def keys(eval_seed: int, length: int, depth: float, count: int, digits: int) -> list[str]:
    """The keys of one point: from the eval seed, the length and the depth alone."""
    rng = np.random.default_rng([eval_seed, TEMPLATE, length, round(depth * 1_000_000), digits])
    return ["".join(map(str, [rng.integers(1, 10), *rng.integers(0, 10, digits - 1)]))
            for _ in range(count)]


class Prompter:
    """Builds instances in a tokenizer (a transformers tokenizer of the model)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.per_sentence: dict[int, float] = {}

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text).input_ids)

    def bare(self, digits: int) -> int:
        """Tokens of a prompt without filler (a key of nines): no shorter context holds it."""
        return len(self.encode(prompt_text(0, 0.0, "9" * digits)))

    def instance(self, length: int, depth: float, key: str) -> Instance | None:
        """The prompt of ``key`` with the most filler sentences that fit in ``length``
        tokens; None when not even the bare prompt fits."""
        def count(n: int) -> int:
            return len(self.encode(prompt_text(n, depth, key)))

        base = count(0)
        if base > length:
            return None
        if length not in self.per_sentence:
            self.per_sentence[length] = max((count(50) - base) / 50, 1e-3)
        n = max(0, int((length - base) / self.per_sentence[length]))
        while n > 0 and count(n) > length:
            n -= 1
        while count(n + 1) <= length:
            n += 1
        prompt = self.encode(prompt_text(n, depth, key))
        full = self.encode(prompt_text(n, depth, key) + " " + key)
        answer = full[len(prompt):] if full[:len(prompt)] == prompt else \
            list(self.tokenizer(" " + key, add_special_tokens=False).input_ids)
        return Instance(key, prompt, answer)

    def answer_digits(self, generated: list[int]) -> str:
        """The first run of digits of the decoded answer ('' if it starts with none)."""
        text = self.tokenizer.decode(generated, skip_special_tokens=True)
        found = re.match(r"\s*(\d+)", text)
        return found.group(1) if found else ""


def instances_sha256(instances: list[Instance]) -> str:
    digest = hashlib.sha256()
    for x in instances:
        for part in (x.prompt, x.answer):
            digest.update(np.asarray(part, dtype=np.int64).tobytes() + b"|")
    return digest.hexdigest()


def _cache_key(model) -> str:
    """The keyword of the KV cache in this transformers' forward (renamed within 5.x)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters \
        else "past_key_values"


def eos_ids(model) -> set[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    return set(eos) if isinstance(eos, list) else {eos} if eos is not None else set()


@torch.no_grad()
def greedy(model, instance: Instance, new_tokens: int) -> tuple[list[int], float]:
    """Greedy decoding of ``new_tokens`` tokens (fewer at EOS) after the prompt, and the
    summed loss (nats) of the instance's answer tokens, teacher forced -- from one forward
    pass over prompt and answer, then the KV cache cut back to where the greedy tokens leave
    the answer."""
    device = next(model.parameters()).device
    key, stop = _cache_key(model), eos_ids(model)
    answer = torch.tensor(instance.answer, device=device)
    ids = torch.tensor([instance.prompt + instance.answer], device=device)
    out = model(input_ids=ids, use_cache=True, logits_to_keep=len(instance.answer) + 1)
    logits = out.logits[0].float()
    loss = float(F.cross_entropy(logits[:-1], answer, reduction="sum"))
    pred = logits.argmax(-1).tolist()
    k = 0
    while k < len(instance.answer) and pred[k] == instance.answer[k]:
        k += 1
    generated, cache = [*instance.answer[:k], pred[k]], out[key]
    if k < len(instance.answer):
        cache.crop(-(len(instance.answer) - k))  # back to prompt + the k right tokens
    while len(generated) < new_tokens and generated[-1] not in stop:
        out = model(input_ids=torch.tensor([[generated[-1]]], device=device),
                    **{key: cache}, use_cache=True)
        cache = out[key]
        generated.append(int(out.logits[0, -1].argmax()))
    return generated[:new_tokens], loss


def chance(keys_: list[str]) -> tuple[float, float]:
    """(exact, digit accuracy) of the best answer that ignores the prompt: the commonest key,
    and the commonest digit at each place."""
    exact = Counter(keys_).most_common(1)[0][1] / len(keys_)
    places = zip(*keys_, strict=True)
    return exact, float(np.mean([Counter(p).most_common(1)[0][1] / len(keys_) for p in places]))


def point(length: int, depth: float, count: int, eval_seed: int, digits: int,
          rope_scaling: dict | None) -> dict:
    """A passkey point as eval.json holds task points (posexp/runs/records.py), unscored."""
    return {"task": PASSKEY, "length": length, "depth": float(depth), "count": count,
            "eval_seed": eval_seed, "tokens": length, "digits": digits, "source": SOURCE,
            "rope_scaling": rope_scaling, "applicable": True, "reason": None,
            "exact": None, "exact_low": None, "exact_high": None, "token_acc": None,
            "token_acc_low": None, "token_acc_high": None, "answer_loss": None,
            "chance_exact": None, "chance_token": None, "instances_sha256": None,
            "prompt_tokens": None, "seconds": None}


def score_point(model, prompter: Prompter, p: dict, max_positions: int | None) -> dict:
    """Score passkey point ``p`` in place (or mark it n/a with the reason)."""
    t0 = time.perf_counter()
    new = p["digits"] + EXTRA_TOKENS
    if max_positions is not None and p["length"] + new > max_positions:
        p.update(applicable=False, reason=f"the model's positions stop at {max_positions}; "
                 f"a prompt of {p['length']} tokens and {new} answer tokens need more")
        return p
    made = [prompter.instance(p["length"], p["depth"], k)
            for k in keys(p["eval_seed"], p["length"], p["depth"], p["count"], p["digits"])]
    if any(x is None for x in made):
        p.update(applicable=False, reason=f"the passkey prompt takes "
                 f"{prompter.bare(p['digits'])} tokens without filler, more than {p['length']}")
        return p
    exact, acc, loss, n_answer = [], [], 0.0, 0
    for x in made:
        generated, nll = greedy(model, x, new)
        said = prompter.answer_digits(generated)
        exact.append(said == x.key)
        acc.append(sum(a == b for a, b in zip(said, x.key, strict=False)) / len(x.key))
        loss, n_answer = loss + nll, n_answer + len(x.answer)
    p["exact_low"], p["exact_high"] = binomial_interval(int(sum(exact)), len(exact))
    p["token_acc_low"], p["token_acc_high"] = bootstrap_mean(np.asarray(acc, dtype=np.float64))
    p["chance_exact"], p["chance_token"] = chance([x.key for x in made])
    p.update(exact=float(np.mean(exact)), token_acc=float(np.mean(acc)),
             answer_loss=loss / n_answer, instances_sha256=instances_sha256(made),
             prompt_tokens=round(float(np.mean([len(x.prompt) for x in made])), 1),
             seconds=round(time.perf_counter() - t0, 3))
    return p
