"""The checks of what a run is scored at: eval.* of a corpus run (lengths, mode, stride,
tokens), and of a task run its task, task lengths and held-out instances."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from posexp import scaling
from posexp.config.bounds import (
    MAX_BATCH_TOKENS,
    MAX_BUCKETS,
    MAX_EVAL_TOKENS,
    MAX_LENGTH,
    MAX_SEED,
    MAX_TASK_COUNT,
    MAX_TASK_LENGTH,
    MAX_TASK_TOKENS,
)
from posexp.config.check_scaling import check_eval_scaling
from posexp.config.derive import (
    TASK_MULTIPLES_TEXT,
    as_list,
    eval_lengths,
    is_task_run,
    task_lengths,
)
from posexp.config.schema import EvalMode
from posexp.data.tasks import TASKS, max_length_within
from posexp.errors import UsageError
from posexp.values import in_range, listed_once, positive, power

# eval keys that say how a corpus run's windows are scored; a task run has none of them
CORPUS_EVAL_KEYS = ("eval.lengths", "eval.mode", "eval.stride", "eval.tokens",
                    "eval.per_position_buckets")


def check_eval(cfg: DictConfig) -> None:
    """Every evaluation setting: the corpus run's windows, a task run's lengths and
    instances, the RoPE scalings to score with."""
    check_windows(cfg.eval, eval_lengths(cfg))
    check_task_eval(cfg)
    check_eval_scaling(cfg)
    check_positions(cfg.eval, cfg.train.get("random_positions"), "the run")


def check_positions(e: DictConfig, random_positions: int | None, what: str) -> None:
    """eval.positions: null (as trained) or consecutive, the variant of a run trained on
    random positions below train.random_positions -- one that is scored with a RoPE
    scaling, whose frequencies and windows are those of consecutive positions."""
    at = e.get("positions")
    if at is None and random_positions is None:
        return
    if at not in (None, scaling.CONSECUTIVE):
        raise UsageError(f"eval.positions must be null (the positions {what} was trained at) "
                         f"or {scaling.CONSECUTIVE}, got {at!r:.40}")
    if random_positions is None:
        raise UsageError(f"eval.positions={scaling.CONSECUTIVE} is a variant of a run trained on "
                         f"random positions (train.random_positions); {what} was trained at "
                         "consecutive positions, so drop it")
    scaled = [m for m in as_list(OmegaConf.select(e, "rope_scaling.method", default=None))
              if m not in (None, scaling.PLAIN)]
    if at is None and scaled:
        raise UsageError(f"{what} was trained on random positions below {random_positions}: "
                         f"a RoPE scaling ({', '.join(scaled)}) scores it at consecutive "
                         f"positions only; add eval.positions={scaling.CONSECUTIVE}")
    if at is None and EvalMode(e.mode) == EvalMode.lm_eval:
        raise UsageError(f"{what} was trained on random positions below {random_positions}: "
                         "eval.mode=lm_eval scores each document from position 0, at "
                         f"consecutive positions only; add eval.positions={scaling.CONSECUTIVE}")


def check_windows(e: DictConfig, lengths: list[int]) -> None:
    """The windows a corpus is scored in, at ``lengths`` (eval.lengths, given or derived):
    trained and pretrained runs alike."""
    if not lengths:
        raise UsageError("eval.lengths is empty")
    for length in lengths:
        positive("each of eval.lengths", length, MAX_LENGTH)
    listed_once("eval.lengths", list(lengths), "length")
    positive("eval.tokens", e.tokens, MAX_EVAL_TOKENS)
    positive("eval.batch_tokens", e.batch_tokens, MAX_BATCH_TOKENS)
    positive("eval.per_position_buckets", e.per_position_buckets, MAX_BUCKETS)
    mode = EvalMode(e.mode)
    if e.stride is not None:
        positive("eval.stride", e.stride, MAX_LENGTH)
        if mode == EvalMode.sliding and e.stride >= min(lengths):
            raise UsageError(
                f"eval.stride ({e.stride}) must be smaller than every window; "
                f"the shortest of eval.lengths is {min(lengths)}"
            )
    if mode == EvalMode.sliding and e.stride is None and min(lengths) < 2:
        raise UsageError("sliding evaluation needs windows of at least 2 tokens")


def check_task(cfg: DictConfig) -> None:
    """data=task and a task (task=NAME) come together; the task is one posexp has, and its
    shortest instance fits in train.seq_len."""
    node = cfg.get("task")
    if not is_task_run(cfg):
        if node is not None:
            raise UsageError(f"task={node.name} is set, but this run trains on "
                             f"data={cfg.data.name}; add data=task to train on the task")
        return
    if node is None:
        raise UsageError(f"data=task needs a task: add task=NAME, one of {', '.join(TASKS)}")
    if node.name not in TASKS:
        raise UsageError(f"task.name {node.name!r} is not a task posexp has; known: "
                         f"{', '.join(TASKS)}")
    try:
        max_length_within(TASKS[node.name], cfg.train.seq_len)
    except ValueError as e:
        raise UsageError(f"train.seq_len is too short for the task: {e}") from None


def check_task_eval_key(cfg: DictConfig, key: str) -> None:
    """A key set on the command line that a task run would ignore is refused, not dropped."""
    if key in CORPUS_EVAL_KEYS and is_task_run(cfg):
        raise UsageError(f"{key} sets how a corpus run's windows are scored; this run trains "
                         "on a task (data=task): its lengths are eval.task_lengths")


def unread_eval_key(cfg: DictConfig, key: str) -> str | None:
    """Why ``key``, given a value, is not read by this run's evaluation: eval.stride outside
    sliding mode, task.depths of a task without depths (the task says: Task.takes_depth);
    None when it is read, or is not such a key."""
    if key == "eval.stride" and not is_task_run(cfg) \
            and EvalMode(cfg.eval.mode) != EvalMode.sliding:
        return (f"eval.stride is set, but eval.mode={EvalMode(cfg.eval.mode).value} does not "
                "read it (each window there scores all its tokens; the stride is sliding "
                "mode's): add eval.mode=sliding, or leave eval.stride out")
    node = cfg.get("task")
    if key == "task.depths" and node is not None and node.name in TASKS \
            and not TASKS[node.name].takes_depth:
        takes = [name for name, task in TASKS.items() if task.takes_depth]
        return (f"task.depths is set, but task={node.name} has no depth (only "
                f"{' and '.join(f'task={t}' for t in takes)} places its key at depths); "
                "leave task.depths out")
    return None


def check_task_eval(cfg: DictConfig) -> None:
    """eval.task_lengths and the task's evaluation settings (count, seed, passkey depths)."""
    lengths = cfg.eval.get("task_lengths")
    if lengths is not None and not is_task_run(cfg):
        raise UsageError("eval.task_lengths is set, but this run is not a task run "
                         "(data=task task=NAME); its lengths are eval.lengths")
    if lengths is not None:
        if not lengths:
            raise UsageError("eval.task_lengths is empty")
        for length in lengths:
            positive("each of eval.task_lengths", length, MAX_TASK_LENGTH)
        listed_once("eval.task_lengths", list(lengths), "length")
    node = cfg.get("task")
    if node is None:
        return
    if not is_task_run(cfg):
        raise UsageError(f"task.* is set, but this run trains on data={cfg.data.name}, not "
                         "on a task (data=task)")
    check_task_settings(node)
    if lengths is None and node.name in TASKS:
        lengths = _derived_task_lengths(cfg)
    if lengths and node.name in TASKS:
        tokens = node.eval_count * TASKS[node.name].tokens_for(max(lengths))
        if tokens > MAX_TASK_TOKENS:
            raise UsageError(f"task.eval_count x the tokens of an instance at the longest of "
                             f"eval.task_lengths{_by_default(cfg)} ({tokens:,}) must be at most "
                             f"{MAX_TASK_TOKENS:,} ({power(MAX_TASK_TOKENS)}): the instances "
                             "of a length are held in memory")


def check_task_settings(node: DictConfig) -> None:
    """How a task is scored (the task group: TaskConfig): instances per length, their seed,
    passkey's depths -- a task run's and a pretrained model's passkey alike."""
    positive("task.eval_count", node.eval_count, MAX_TASK_COUNT)
    if isinstance(node.eval_seed, bool) or not isinstance(node.eval_seed, int) or not (
            0 <= node.eval_seed <= MAX_SEED):
        raise UsageError(f"task.eval_seed must be an integer in [0, 2**63 - 1], "
                         f"got {node.eval_seed}")
    depths = list(node.depths)
    if not depths:
        raise UsageError("task.depths is empty (where passkey's key sits, each in [0, 1])")
    for depth in depths:
        in_range("each of task.depths", depth, 0.0, 1.0)
    listed_once("task.depths", depths, "depth", shown=lambda d: f"{d:g}")


def _by_default(cfg: DictConfig) -> str:
    """' (by default ...: 1, 1.25, ... x n_max)' where eval.task_lengths is derived, not
    given."""
    if cfg.eval.get("task_lengths") is not None:
        return ""
    return f" (by default {', '.join(f'{n:,}' for n in task_lengths(cfg))}: {TASK_MULTIPLES_TEXT})"


def _derived_task_lengths(cfg: DictConfig) -> list[int]:
    """The task lengths a run would be scored at by default (1-4 x n_max), held to the bound
    a length given in eval.task_lengths is held to: a long train.seq_len makes them long."""
    lengths = task_lengths(cfg)
    if max(lengths) > MAX_TASK_LENGTH:
        raise UsageError(f"eval.task_lengths by default are {TASK_MULTIPLES_TEXT}, the "
                         f"longest length that fits in train.seq_len ({cfg.train.seq_len:,}): "
                         f"{', '.join(f'{n:,}' for n in lengths)}, past the longest task "
                         f"length posexp scores, {MAX_TASK_LENGTH:,} ({power(MAX_TASK_LENGTH)}); "
                         "set eval.task_lengths=[...], or lower train.seq_len")
    return lengths
