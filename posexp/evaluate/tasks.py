"""Task accuracy at each length: the held-out instances of a task (data.tasks.heldout, the
same for every run with the same eval seed and count) scored by one teacher-forced pass.

At each answer position the prediction is the argmax of the logits given the true prefix.
An instance is an exact match when every answer token (and the final EOS) is predicted
right -- which is exactly when greedy decoding would write the whole answer
(data.tasks.metrics.exact_match) -- so one forward pass per instance scores it, with no
decoding loop.  Beside exact match: token accuracy (the per-instance share of answer tokens
right, averaged over instances), the loss per answer token, and the chance level of the
same instances (the best predictor that ignores the prompt).

Intervals: Wilson for the exact-match count; a percentile bootstrap over instances for
token accuracy, whose per-instance values are not 0/1 (seeded, so the same scores always
give the same interval).  A length the task cannot represent, or one whose instances need
positions past a learned table, is a point that says why (n/a), never an error.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from posexp import stats
from posexp.data.tasks import (
    Instance,
    Task,
    binomial_interval,
    constant_baseline,
    exact_match,
    heldout,
    instances_sha256,
    padded,
    token_accuracy,
)
from posexp.evaluate.positions import PLAIN, EvalPositions, task_keys
from posexp.evaluate.windows import autocast
from posexp.model import GPT

BATCH_TOKENS = 1 << 16  # input tokens per forward pass (at least one instance)


def row_scores(logits: torch.Tensor, targets: torch.Tensor,
               loss_mask: torch.Tensor) -> tuple[np.ndarray, np.ndarray, float, int]:
    """For a batch of logits [batch, T, vocab] with ``padded``'s targets and loss_mask:
    (exact match per row, token accuracy per row, summed loss of the answer tokens, their
    count).  Padding and prompt positions count for nothing."""
    logits = logits.float()
    pred = logits.argmax(-1).cpu().numpy()
    target_np, mask_np = targets.cpu().numpy(), loss_mask.cpu().numpy()
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return (exact_match(pred, target_np, mask_np), token_accuracy(pred, target_np, mask_np),
            float(losses[loss_mask].double().sum()), int(loss_mask.sum()))


@torch.no_grad()
def score_instances(model: GPT, instances: list[Instance], device: torch.device,
                    batch_tokens: int = BATCH_TOKENS, at: EvalPositions = PLAIN,
                    eval_seed: int = 0) -> tuple[np.ndarray, np.ndarray, float, int]:
    """row_scores over every instance, the model in eval mode at positions 0..T-1 (or at
    those ``at`` draws for each instance, by its index and ``eval_seed``), batches of at
    most ``batch_tokens`` input tokens (or one instance), each laid out by ``padded`` only
    when it is scored."""
    width = max(len(instance.tokens) for instance in instances) - 1
    rows = max(1, batch_tokens // width)
    exact, acc, loss, count = [], [], 0.0, 0
    for start in range(0, len(instances), rows):
        batch = instances[start:start + rows]
        inputs, targets, loss_mask = (torch.from_numpy(a).to(device) for a in padded(batch))
        positions = at.padded([len(i.tokens) - 1 for i in batch], inputs.shape[1],
                              task_keys(eval_seed, start, len(batch)), device)
        with autocast(device):
            logits = model.head(model.hidden(inputs, positions))
        e, a, s, n = row_scores(logits, targets, loss_mask)
        exact.append(e)
        acc.append(a)
        loss, count = loss + s, count + n
    return np.concatenate(exact), np.concatenate(acc), loss, count


def answer_loss(model: GPT, instances: list[Instance], device: torch.device,
                at: EvalPositions = PLAIN, eval_seed: int = 0) -> float:
    """Nats per answer token on ``instances`` of ``eval_seed`` (training's validation loss
    of a task run), at positions ``at``."""
    _, _, loss, count = score_instances(model, instances, device, at=at, eval_seed=eval_seed)
    return loss / count


def bootstrap_mean(values: np.ndarray, chunk: int = 250) -> tuple[float, float]:
    """The ``stats.LEVEL`` percentile bootstrap interval of the mean of ``values``
    (``stats.RESAMPLES`` resamples of the instances, seeded by ``stats.SEED``; drawn
    ``chunk`` resamples at a time so that memory stays bounded)."""
    rng = np.random.default_rng(stats.SEED)
    means = np.concatenate([
        values[rng.integers(0, len(values), (min(chunk, stats.RESAMPLES - done),
                                             len(values)))].mean(axis=1)
        for done in range(0, stats.RESAMPLES, chunk)])
    return stats.percentile_interval(means)


def summarize(instances: list[Instance], exact: np.ndarray, acc: np.ndarray, loss: float,
              count: int) -> dict:
    """A task point's measured values from the per-instance scores (score_instances)."""
    n = len(instances)
    exact_low, exact_high = binomial_interval(int(exact.sum()), n)
    acc_low, acc_high = bootstrap_mean(acc.astype(np.float64))
    chance_exact, chance_token = constant_baseline(instances)
    return {"exact": float(exact.mean()), "exact_low": exact_low, "exact_high": exact_high,
            "token_acc": float(acc.mean()), "token_acc_low": acc_low,
            "token_acc_high": acc_high, "answer_loss": loss / count,
            "chance_exact": chance_exact, "chance_token": chance_token,
            "instances_sha256": instances_sha256(instances)}


def task_point(task: Task, length: int, depth: float | None, count: int, eval_seed: int,
               rope_scaling: dict | None = None, at: EvalPositions = PLAIN) -> dict:
    """A task point as eval.json holds it (runs.TASK_POINT_KINDS), not yet scored."""
    return {"task": task.name, "length": length, "depth": depth, "count": count,
            "eval_seed": eval_seed, "tokens": task.tokens_for(length),
            "rope_scaling": rope_scaling, **at.record(), "applicable": True, "reason": None,
            "exact": None, "exact_low": None, "exact_high": None, "token_acc": None,
            "token_acc_low": None, "token_acc_high": None, "answer_loss": None,
            "chance_exact": None, "chance_token": None, "instances_sha256": None,
            "seconds": None}


def why_not(model: GPT, task: Task, length: int, at: EvalPositions = PLAIN) -> str | None:
    """Why ``model`` cannot be scored on ``task`` at ``length`` (None: it can): the task has
    no instances of that length, they need positions past the encoding's table, or more
    distinct positions than a randomized run draws from."""
    reason = task.why_not(length)
    limit, inputs = model.max_positions, task.tokens_for(length) - 1
    if reason is None and limit is not None and inputs > limit:
        reason = (f"{model.cfg.encoding} positions stop at {limit}; there is no position "
                  f"{limit} or beyond to read the {inputs} input tokens of length {length}")
    return reason or at.why_not(length, inputs)


def task_curve(model: GPT, task: Task, wanted: list[tuple[int, float | None]], count: int,
               eval_seed: int, device: torch.device, rope_scaling: dict | None = None,
               progress: Callable[[int], None] | None = None,
               at: EvalPositions = PLAIN) -> list[dict]:
    """One point per (length, depth) of ``wanted`` (depth None but for passkey), each on
    the ``count`` held-out instances of ``eval_seed`` at positions ``at``.  ``rope_scaling``
    is the record of the RoPE scaling the model scores with, written into each point;
    ``progress`` is called with 1 after each point."""
    model.eval()
    points = []
    for length, depth in wanted:
        p = task_point(task, length, depth, count, eval_seed, rope_scaling, at)
        reason = why_not(model, task, length, at)
        if reason is not None:
            p.update(applicable=False, reason=reason)
        else:
            t0 = time.perf_counter()
            instances = heldout(task, length, count, eval_seed, depth)
            p.update(summarize(instances, *score_instances(model, instances, device, at=at,
                                                           eval_seed=eval_seed)))
            p["seconds"] = round(time.perf_counter() - t0, 3)
        points.append(p)
        if progress is not None:
            progress(1)
    return points
