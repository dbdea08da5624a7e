"""Scoring a task: per-row exact match and token accuracy on the scored (answer) tokens,
a Wilson interval for a success count, and the chance level of a set of instances.

Each takes a teacher-forced pass: ``pred[b, t]`` is the model's argmax token at position
t, beside ``targets`` and ``loss_mask`` as ``padded`` lays them out.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from posexp.data.tasks.base import Instance
from posexp.data.tasks.vocab import given_away


def exact_match(pred: np.ndarray, targets: np.ndarray, loss_mask: np.ndarray) -> np.ndarray:
    """Per row: is every scored token predicted right?

    Teacher-forced and greedy exact match agree.  If every answer token is the argmax given
    the true prefix, greedy decoding reproduces the true prefix at each step, and so the
    whole answer; if not, greedy decoding has the true prefix up to the first wrong token,
    and there predicts it wrong too.
    """
    return ((pred == targets) | ~loss_mask).all(axis=1)


def token_accuracy(pred: np.ndarray, targets: np.ndarray, loss_mask: np.ndarray) -> np.ndarray:
    """Per row: the share of scored tokens predicted right, of those the format does not
    give away (vocab.given_away: index hints are left out)."""
    counted = loss_mask & ~given_away(targets)
    return ((pred == targets) & counted).sum(axis=1) / counted.sum(axis=1)


def binomial_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n``.

    Wilson rather than the normal approximation p ± z·sqrt(p(1-p)/n): that one collapses to
    [0, 0] at 0 successes and [1, 1] at n -- exactly the accuracies a length-extrapolation
    table is full of -- and strays outside [0, 1] near them; Wilson stays inside and keeps a
    sensible width there (Brown, Cai & DasGupta 2001).
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"binomial_interval: needs 0 <= successes <= n and n >= 1, "
                         f"got {successes} of {n}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def constant_baseline(instances: Sequence[Instance]) -> tuple[float, float]:
    """The chance level on ``instances``: (exact match, token accuracy) of the best
    predictors that ignore the prompt.

    For exact match that is always answering the most common answer; for token accuracy
    (over the answer tokens the format does not give away, as token_accuracy counts them),
    predicting at each of those positions the token most common there (votes weighted by
    1 / answer length, which makes it the best for the per-row mean).  A uniform guess
    would understate chance where answers are not uniform -- EOS is certain, a sum's first
    digit is 0 or 1 -- while a constant predictor gets exactly what can be had without
    reading the prompt.
    """
    exact = Counter(tuple(i.answer.tolist()) for i in instances).most_common(1)[0][1] / len(
        instances)
    # token accuracy's tokens: those the format does not give away (index hints are not)
    answers = [tuple(i.answer[~given_away(i.answer)].tolist()) for i in instances]
    votes: defaultdict[int, Counter] = defaultdict(Counter)
    for answer in answers:
        for j, token in enumerate(answer):
            votes[j][token] += 1 / len(answer)
    modes = {j: counter.most_common(1)[0][0] for j, counter in votes.items()}
    per_token = np.mean([np.mean([t == modes[j] for j, t in enumerate(a)]) for a in answers])
    return exact, float(per_token)
