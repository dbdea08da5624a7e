"""Reading run files back, checked: every key that report, reproduce, sweep, ls and the run
itself read is of its kind, or the file is "damaged" with a reason that names the file and
what is wrong.  eval.json has one reader, ``read_eval``, for whoever reads it."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from posexp import scaling
from posexp.config.bounds import MAX_EVAL_TOKENS, MAX_LENGTH, MAX_SEED, MAX_TOKENS
from posexp.errors import PosexpError
from posexp.runs.files import non_finite, require_regular
from posexp.runs.points import MODES, POINT_KEYS, TASK_POINT_KEYS

SPAN_ARRAYS = ("first", "length", "document")  # a layout in eval.json (spans.Spans.record)

INT, NUM, STR, BOOL, OBJ, LIST = (
    "an integer", "a number", "a string", "true or false", "an object", "a list")
# Kinds with a range: a number must be one a run can hold, so that nothing downstream (ls,
# compare, report, the next write) meets a NaN, an infinity, a perplexity of 0 or a length
# of 10**30.  Bounds are the config's (posexp/config/bounds.py).
FINITE, NONNEG, POSITIVE, FRACTION = (
    "a finite number", "a finite number >= 0", "a finite number > 0", "a number in [0, 1]")
COUNT = "an integer >= 0"
LENGTH = f"an integer in [1, 2**{MAX_LENGTH.bit_length() - 1}]"
TOKENS = f"an integer in [1, 2**{MAX_EVAL_TOKENS.bit_length() - 1}]"
POSITIVE_INT = "an integer >= 1"
SEED = "an integer in [0, 2**63 - 1]"
# the kind a value of a ranged kind must be first: 'x' is "not a number", nan "not a finite
# number > 0"
_BASE = {**dict.fromkeys((FINITE, NONNEG, POSITIVE, FRACTION), NUM),
         **dict.fromkeys((COUNT, LENGTH, TOKENS, POSITIVE_INT, SEED), INT)}


def _is_int(v: object) -> bool:  # JSON true/false are Python bools, which are ints too
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v: object) -> bool:
    return _is_num(v) and math.isfinite(v)


_KINDS: dict[str, Callable[[object], bool]] = {
    INT: _is_int, NUM: _is_num,
    STR: lambda v: isinstance(v, str),
    BOOL: lambda v: isinstance(v, bool),
    OBJ: lambda v: isinstance(v, dict),
    LIST: lambda v: isinstance(v, list),
    FINITE: _finite,
    NONNEG: lambda v: _finite(v) and v >= 0,
    POSITIVE: lambda v: _finite(v) and v > 0,
    FRACTION: lambda v: _finite(v) and 0 <= v <= 1,
    COUNT: lambda v: _is_int(v) and 0 <= v <= MAX_TOKENS,
    LENGTH: lambda v: _is_int(v) and 1 <= v <= MAX_LENGTH,
    TOKENS: lambda v: _is_int(v) and 1 <= v <= MAX_EVAL_TOKENS,
    POSITIVE_INT: lambda v: _is_int(v) and 1 <= v <= MAX_TOKENS,
    SEED: lambda v: _is_int(v) and 0 <= v <= MAX_SEED,
}

# The keys of each file that report, reproduce and sweep read, and their kinds.  A key may be
# absent or null unless required; present, it must be of its kind.
RUN_KINDS = {"status": STR, "reason": STR, "name": STR, "experiment": STR, "encoding": STR,
             "parent": STR, "seq_len": LENGTH, "seed": SEED, "n_params": POSITIVE_INT,
             "steps": COUNT, "tokens_trained": COUNT, "device": STR, "model": OBJ,
             "corpus": OBJ, "versions": OBJ, "weights_sha256": STR, "identity": OBJ,
             "identity_sha256": STR, "code": OBJ, "protocol": COUNT}
MODEL_KINDS = {"d_model": POSITIVE_INT, "n_layer": POSITIVE_INT, "n_head": POSITIVE_INT}
CORPUS_KINDS = {"name": STR, "fingerprint": STR, "tokenizer": STR,
                "tokenizer_fingerprint": STR, "vocab_size": POSITIVE_INT, "val_tokens": COUNT,
                "task": STR, "max_train_length": POSITIVE_INT}
POINT_KINDS = {"mode": STR, "length": LENGTH, "stride": LENGTH, "first_token": COUNT,
               "spans": STR, "documents": POSITIVE_INT, "tokens": TOKENS,
               "applicable": BOOL, "reason": STR, "loss": NONNEG, "ppl": POSITIVE,
               "bits_per_token": NONNEG, "bits_per_byte": NONNEG, "seconds": NONNEG,
               "ppl_low": POSITIVE, "ppl_high": POSITIVE, "block_loss": LIST,
               "block_tokens": LIST, "rope_scaling": OBJ, "positions": STR,
               "positions_seed": SEED, "eval_tokens": TOKENS, "prefix_token": COUNT,
               "words": COUNT, "bytes": COUNT, "word_perplexity": POSITIVE,
               "byte_perplexity": POSITIVE}
SCALING_KINDS = {"method": STR, "factor": POSITIVE,
                 **{p.name: FINITE for p in scaling.all_params()}}
POSITION_KINDS = {"mode": STR, "length": LENGTH, "first_token": COUNT, "spans": STR,
                  "tokens": TOKENS, "position": LIST, "position_end": LIST, "loss": LIST,
                  "loss_se": LIST, "positions": STR, "positions_seed": SEED}
# A task point (data=task): accuracy on the held-out instances of one length (and depth, for
# passkey), scored as trained or with a RoPE scaling.  exact is the fraction of instances
# whose every answer token is the model's argmax (teacher forced, which is greedy decoding's
# exact match); token_acc the mean per-instance fraction of answer tokens right; *_low/_high
# their 95% intervals (Wilson for exact, a bootstrap over instances for token_acc);
# answer_loss nats per answer token; chance_* the best constant predictor's accuracy on the
# same instances; instances_sha256 the hash of those instances (data.tasks.instances_sha256),
# so that two runs' points are seen to score the same ones.  Identified by TASK_POINT_KEYS and
# rope_scaling (points.task_point_key).
TASK_POINT_KINDS = {"task": STR, "length": POSITIVE_INT, "depth": FRACTION,
                    "count": POSITIVE_INT, "eval_seed": SEED, "tokens": COUNT,
                    "applicable": BOOL, "reason": STR, "exact": FRACTION,
                    "exact_low": FRACTION, "exact_high": FRACTION, "token_acc": FRACTION,
                    "token_acc_low": FRACTION, "token_acc_high": FRACTION,
                    "answer_loss": NONNEG, "chance_exact": FRACTION, "chance_token": FRACTION,
                    "seconds": NONNEG, "rope_scaling": OBJ, "instances_sha256": STR,
                    "positions": STR, "positions_seed": SEED}
# identity keys the report reads (labels, table columns), beyond being compared
IDENTITY_KINDS = {"encoding.name": STR, "train.seq_len": INT, "seed": INT,
                  "model.d_model": INT, "model.n_layer": INT, "model.n_head": INT,
                  "task.name": STR}


def check_fields(file: Path, where: str, obj: object, kinds: dict[str, str],
                  required: Iterable[str] = ()) -> None:
    """Raise PosexpError naming ``file`` when ``obj`` is not a JSON object, lacks a required
    key, or holds a key of another kind; ``where`` says which part of the file it is."""
    if not isinstance(obj, dict):
        raise PosexpError(f"{file} is damaged: {where or 'the file '}is not a JSON object")
    for key in sorted(required):
        if obj.get(key) is None:
            raise PosexpError(f"{file} is damaged: {where}no {key!r}")
    for key, kind in kinds.items():
        value = obj.get(key)
        for must in (_BASE.get(kind, kind), kind):
            if value is not None and not _KINDS[must](value):
                raise PosexpError(f"{file} is damaged: {where}{key!r} is {value!r:.40}, "
                                  f"not {must}")


def _check_blocks(file: Path, where: str, p: dict) -> None:
    """Block losses (for intervals, posexp/stats.py) are optional -- eval.json written before
    posexp recorded them has none -- but present, they must add up to the point's tokens."""
    loss, tokens = p.get("block_loss"), p.get("block_tokens")
    if loss is None and tokens is None:
        return
    if not (isinstance(loss, list) and isinstance(tokens, list) and len(loss) == len(tokens)
            and loss and all(_KINDS[NONNEG](x) for x in loss)
            and all(_KINDS[INT](n) and n > 0 for n in tokens) and sum(tokens) == p["tokens"]):
        raise PosexpError(f"{file} is damaged: {where}block_loss and block_tokens are not "
                          f"lists of one length whose token counts add up to {p['tokens']} "
                          "(and losses finite, >= 0)")


def _check_order(file: Path, where: str, p: dict, low: str, high: str) -> None:
    """An interval's ends come in order, and both or neither are there."""
    a, b = p.get(low), p.get(high)
    if (a is None) != (b is None) or (a is not None and a > b):
        raise PosexpError(f"{file} is damaged: {where}{low!r} ({a!r:.20}) and {high!r} "
                          f"({b!r:.20}) are not an interval, low <= high")


def _check_positions(file: Path, where: str, p: dict) -> None:
    """A point's positions (a randomized run's) are sampled, with their seed, or
    consecutive (evaluate/positions.py)."""
    at = p.get("positions")
    if at not in (None, "sampled", "consecutive") or (at == "sampled") != (
            p.get("positions_seed") is not None):
        raise PosexpError(f"{file} is damaged: {where}'positions' is {at!r:.40} with "
                          f"positions_seed {p.get('positions_seed')!r:.20}: sampled with a "
                          "seed, or consecutive without one")


def _check_task_points(file: Path, tasks: list) -> None:
    for i, p in enumerate(tasks, 1):
        where = f"task point {i}: "
        check_fields(file, where, p, TASK_POINT_KINDS,
                      (TASK_POINT_KEYS - {"depth"}) | {"applicable"})
        if p.get("rope_scaling") is not None:
            check_fields(file, f"{where}rope_scaling: ", p["rope_scaling"], SCALING_KINDS,
                          ("method", "factor"))
        _check_positions(file, where, p)
        if p["applicable"]:
            check_fields(file, where, p, {}, ("exact", "token_acc", "answer_loss"))
            for name in ("exact", "token_acc"):
                _check_order(file, where, p, f"{name}_low", f"{name}_high")


def read_eval(file: Path) -> dict:
    """eval.json: its curve points, per-position records and task points (empty when there
    is no file yet), every key checked; a PosexpError naming the file when it is damaged."""
    if not os.path.lexists(file):
        return {"curve": [], "per_position": [], "tasks": [], "spans": {}}
    require_regular(file)  # a FIFO would block the read
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: nested past the stack
        raise PosexpError(f"{file} is unreadable: {e}") from None
    check_fields(file, "", data, {"curve": LIST, "per_position": LIST, "tasks": LIST,
                                  "spans": OBJ, "code": OBJ, "sha256": STR}, ("curve",))
    if "sha256" in data and data["sha256"] != contents_sha256(data):
        raise PosexpError(f"{file} was edited after posexp wrote it (its contents no longer "
                          "match the sha256 it records): restore it (git checkout for a "
                          "committed record), or score the run again")
    for key, empty in (("per_position", []), ("tasks", []), ("spans", {})):
        data[key] = data.get(key) or empty
    _check_task_points(file, data["tasks"])
    _check_spans(file, data["spans"])
    _check_curve(file, data["curve"], data["spans"])
    _check_per_position(file, data["per_position"])
    check_finite(file, data)
    return data


def contents_sha256(data: dict) -> str:
    """The sha256 eval.json records of its own contents (every key but ``sha256``, in
    canonical JSON): a number edited by hand -- in a committed record, nothing else would
    tell -- no longer matches it.  Files written before posexp recorded it have none."""
    body = {k: v for k, v in data.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def check_finite(file: Path, data: object) -> None:
    """No NaN or infinity anywhere in a file's JSON (json reads them; no JSON writer may
    write them back, so one would make every later write of the file fail)."""
    found = non_finite(data)
    if found:
        raise PosexpError(f"{file} is damaged: {found}, not a finite number")


def _check_spans(file: Path, layouts: dict) -> None:
    """eval.json's "spans": each layout its points name (posexp/spans.py), by id."""
    for name, record in layouts.items():
        where = f"spans {name}: "
        check_fields(file, where, record, {k: LIST for k in SPAN_ARRAYS}, SPAN_ARRAYS)
        arrays = [record[k] for k in SPAN_ARRAYS]
        # a whole document's span begins before its first token (spans.whole_documents)
        lowest = [-1 if k == "first" and "whole_documents" in record else 0
                  for k in SPAN_ARRAYS]
        if len({len(a) for a in arrays}) > 1 or not arrays[0] or not all(
                _KINDS[INT](x) and x >= low for a, low in zip(arrays, lowest, strict=True)
                for x in a):
            raise PosexpError(f"{file} is damaged: {where}first, length and document are not "
                              "lists of one length of non-negative integers")
        check_fields(file, where, record, {"compression": OBJ})
        check_fields(file, f"{where}compression: ", record.get("compression") or {},
                     {"zlib": NONNEG, "xz": NONNEG})


def _check_curve(file: Path, curve: list, layouts: dict) -> None:
    for i, p in enumerate(curve, 1):
        where = f"curve point {i}: "
        check_fields(file, where, p, POINT_KINDS, POINT_KEYS | {"applicable"})
        if p.get("spans") is None and p.get("first_token") is None:
            raise PosexpError(f"{file} is damaged: {where}it names neither its spans nor its "
                              "first_token")
        if p.get("spans") is not None and p["spans"] not in layouts:
            raise PosexpError(f"{file} is damaged: {where}its spans {p['spans']!r:.20} are "
                              "not among the file's spans")
        if p["mode"] not in MODES:  # it names the report's figure files
            raise PosexpError(f"{file} is damaged: {where}'mode' is {p['mode']!r:.40}, "
                              f"not {' or '.join(MODES)}")
        if p.get("rope_scaling") is not None:
            check_fields(file, f"{where}rope_scaling: ", p["rope_scaling"], SCALING_KINDS,
                         ("method", "factor"))
        _check_positions(file, where, p)
        if p["stride"] > p["length"]:
            raise PosexpError(f"{file} is damaged: {where}'stride' ({p['stride']}) is longer "
                              f"than its window ('length' {p['length']})")
        if p["applicable"]:
            check_fields(file, where, p, {}, ("loss", "ppl"))
            _check_order(file, where, p, "ppl_low", "ppl_high")
            _check_blocks(file, where, p)


def _check_per_position(file: Path, records: list) -> None:
    for i, p in enumerate(records, 1):
        where = f"per_position record {i}: "
        check_fields(file, where, p, POSITION_KINDS, ("length", "position", "position_end",
                                                      "loss"))
        _check_positions(file, where, p)
        columns = (p["position"], p["position_end"], p["loss"])
        se = p.get("loss_se")
        if len({len(c) for c in columns}) > 1 or not all(_KINDS[NONNEG](x) for c in columns
                                                          for x in c) \
                or (se is not None and (len(se) != len(p["loss"])
                                        or not all(x is None or _KINDS[NONNEG](x) for x in se))):
            raise PosexpError(f"{file} is damaged: {where}position, position_end, loss and "
                              "loss_se are not lists of numbers of one length (each finite "
                              "and >= 0)")
