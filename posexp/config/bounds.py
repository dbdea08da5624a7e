"""Bounds of the values that size memory or time: far above any sensible run, and small
enough that nothing downstream overflows an int64 or allocates without end."""

MAX_SEED = 2**63 - 1
MAX_TOKENS = 2**50  # train.tokens and the other budgets in tokens
MAX_LENGTH = 2**30  # train.seq_len, each of eval.lengths, eval.stride
MAX_RANDOM_POSITIONS = 2**16  # train.random_positions: its tables are built for M positions
MAX_EVAL_TOKENS = 2**40
MAX_BATCH_TOKENS = 2**26  # tokens in one training or evaluation batch
MAX_BUCKETS = 64  # eval.per_position_buckets, per doubling of position
MAX_PARAMS = 10**10  # the model, counted from its shape
MAX_TASK_LENGTH = 2**20  # each of eval.task_lengths (a task's own length, not tokens)
MAX_TASK_COUNT = 2**16  # task.eval_count, held-out instances per length
MAX_TASK_TOKENS = 2**28  # the held-out instances of one length, all in memory (int64)
# Jobs of one sweep: each is composed and checked before the first starts (about 0.2 s a job,
# so 1,000 take minutes); past it the sweep is split, or POSEXP_SWEEP_MAX_JOBS raises it.
MAX_SWEEP_JOBS = 1000
