"""Algorithmic tasks for length generalization, generated on the fly as causal language
modelling over one small vocabulary (``VOCAB_SIZE`` tokens): ``prompt SEP answer EOS``,
the loss scoring the answer and its EOS only.

The tasks are those of Kazemnejad et al. 2023 and Ruoss et al. 2023 (copy, reverse, sort,
parity, addition), associative recall, and passkey retrieval (Mohtashami & Jaggi 2023).
Each has a length parameter of its own (``Task`` subclasses document theirs); a length a
task cannot represent has a reason (``Task.why_not``), reported as n/a.

Training draws each row's length uniformly up to a maximum, from a generator the trainer
seeds with (run seed, step).  Evaluation uses ``heldout``: fixed instances per length,
seeded by (eval seed, task, length, depth) alone, so every run is scored on the same
instances, and a run is recorded by that seed and count.  The two streams differ, but they
are not disjoint sets: at small lengths the instance space is small (copy of length 1 has
26 instances, parity of length 3 has 8), so training sees every held-out instance there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# these register themselves, after the tasks of generators.py
from posexp.data.tasks import counting, formats, ruler  # noqa: F401
from posexp.data.tasks.generators import (
    AdditionTask,
    CopyTask,
    Instance,
    ParityTask,
    PasskeyTask,
    RecallTask,
    ReverseTask,
    SortTask,
    Task,
)
from posexp.data.tasks.metrics import (
    binomial_interval,
    constant_baseline,
    exact_match,
    token_accuracy,
)
from posexp.data.tasks.registry import TASKS, get_task, register_task
from posexp.data.tasks.vocab import PAD, VOCAB, VOCAB_SIZE, decode, encode

__all__ = [
    "PAD", "TASKS", "VOCAB", "VOCAB_SIZE", "AdditionTask", "CopyTask", "Instance", "ParityTask",
    "PasskeyTask", "RecallTask", "ReverseTask", "SortTask", "Task", "TaskData",
    "binomial_interval", "constant_baseline", "decode", "encode", "exact_match", "get_task",
    "heldout", "instances_sha256", "max_length_within", "padded", "register_task",
    "task_fingerprint", "token_accuracy", "training_batch",
]

# Raised whenever a task's instances change for the same seed: a run records its task's
# fingerprint (task_fingerprint), and an older run's checkpoint is then not evaluated as
# if trained on the task as it is now.
TASKS_VERSION = "1"

def _check(task: Task, length: int) -> None:
    if (reason := task.why_not(length)) is not None:
        raise ValueError(reason)


def max_length_within(task: Task, seq_len: int) -> int:
    """The longest representable length whose instances fit in ``seq_len`` tokens.  A
    task's lengths are a range and its tokens grow with the length, so this is a binary
    search: a train.seq_len of 2**30 is answered at once, not after a billion steps."""
    n = task.min_length
    if task.tokens_for(n) > seq_len:
        raise ValueError(f"{task.name}: even the shortest instance (length {n}) takes "
                         f"{task.tokens_for(n)} tokens, more than seq_len={seq_len}")

    def fits(length: int) -> bool:
        return task.why_not(length) is None and task.tokens_for(length) <= seq_len

    high = n + 1  # the first length that does not fit: every token count grows with length
    while fits(high):
        n, high = high, 2 * high
    while high - n > 1:
        middle = (n + high) // 2
        n, high = (middle, high) if fits(middle) else (n, middle)
    return n


def padded(instances: Sequence[Instance]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs, targets, loss_mask), each [batch, T] with T the longest instance's tokens
    minus one: inputs are tokens[:-1], targets tokens[1:], right-padded with PAD (a causal
    model never attends forward to the padding, so it needs no attention mask).
    ``loss_mask`` is True exactly where the target is an answer token or the final EOS."""
    width = max(len(instance.tokens) for instance in instances) - 1
    inputs = np.full((len(instances), width), PAD, dtype=np.int64)
    targets = np.full((len(instances), width), PAD, dtype=np.int64)
    loss_mask = np.zeros((len(instances), width), dtype=bool)
    for row, instance in enumerate(instances):
        n = len(instance.tokens) - 1
        inputs[row, :n] = instance.tokens[:-1]
        targets[row, :n] = instance.tokens[1:]
        loss_mask[row, instance.answer_start - 1 : n] = True
    return inputs, targets, loss_mask


def training_batch(task: Task, rng: np.random.Generator, batch_size: int,
                   max_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``batch_size`` fresh instances, each of a length drawn uniformly from
    [task.min_length, max_length], laid out by ``padded``.  Passkey depths are uniform."""
    for n in (task.min_length, max_length):  # every task's valid lengths are a range
        _check(task, n)
    lengths = rng.integers(task.min_length, max_length + 1, batch_size)
    return padded([task.sample(rng, int(n)) for n in lengths])


def heldout(task: Task, length: int, count: int, seed: int,
            depth: float | None = None) -> list[Instance]:
    """The fixed evaluation instances of ``task`` at ``length`` (and passkey ``depth``):
    the same in every process, and the first k of ``count`` are those of ``count=k``.

    The generator is seeded by (seed, task_id, length, depth code): task_id is fixed per
    task (Python's hash() of a name changes between processes), and the depth code is 0
    without a depth, else 1 + round(1000 * depth) (a seed holds no negative numbers).
    """
    _check(task, length)
    depth_code = 0 if depth is None else 1 + round(1000 * depth)
    rng = np.random.default_rng([seed, task.task_id, length, depth_code])
    return [task.sample(rng, length, depth) for _ in range(count)]


def task_fingerprint(task: Task) -> str:
    """SHA-256 of what defines ``task``'s instances: its name and id, its settings (addition's
    digit limit), the vocabulary and TASKS_VERSION."""
    definition = {"name": task.name, "task_id": task.task_id, "settings": vars(task),
                  "version": TASKS_VERSION, "vocab": VOCAB}
    return hashlib.sha256(json.dumps(definition, sort_keys=True).encode()).hexdigest()


def instances_sha256(instances: Sequence[Instance]) -> str:
    """SHA-256 of the instances' tokens and answer starts, in order: two points with the
    same hash were scored on the same instances."""
    digest = hashlib.sha256()
    for instance in instances:
        digest.update(np.int64(instance.answer_start).tobytes())
        digest.update(np.int64(len(instance.tokens)).tobytes())
        digest.update(np.ascontiguousarray(instance.tokens, dtype=np.int64).tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class TaskData:
    """A task run's data, where a corpus run has its Corpus: the task, the longest length
    trained on (n_max) and the fingerprint of its definition.  ``describe`` is run.json's
    corpus record, with the keys a corpus has (tokenizer: the task vocabulary)."""

    task: Task
    n_max: int
    tokenizer = "task"  # a class attribute, not a field

    @property
    def name(self) -> str:
        return f"task:{self.task.name}"

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE

    @property
    def fingerprint(self) -> str:
        return task_fingerprint(self.task)

    @property
    def tokenizer_fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(VOCAB).encode()).hexdigest()

    def describe(self) -> dict:
        return {"name": self.name, "fingerprint": self.fingerprint, "tokenizer": self.tokenizer,
                "tokenizer_fingerprint": self.tokenizer_fingerprint,
                "vocab_size": self.vocab_size, "task": self.task.name,
                "max_train_length": self.n_max, "version": TASKS_VERSION}
