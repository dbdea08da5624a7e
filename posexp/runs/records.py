"""Reading run files back, checked: every key that report, reproduce, sweep, ls and the run
itself read is of its kind, or the file is "damaged" with a reason that names the file and
what is wrong.  eval.json has one reader, ``read_eval``, for whoever reads it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

from posexp import scaling
from posexp.errors import PosexpError
from posexp.runs.points import MODES, POINT_KEYS, TASK_POINT_KEYS

SPAN_ARRAYS = ("first", "length", "document")  # a layout in eval.json (spans.Spans.record)

INT, NUM, STR, BOOL, OBJ, LIST = (
    "an integer", "a number", "a string", "true or false", "an object", "a list")
_KINDS: dict[str, Callable[[object], bool]] = {
    # JSON true/false are Python bools, which are ints too: never a length or a count
    INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
    NUM: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    STR: lambda v: isinstance(v, str),
    BOOL: lambda v: isinstance(v, bool),
    OBJ: lambda v: isinstance(v, dict),
    LIST: lambda v: isinstance(v, list),
}

# The keys of each file that report, reproduce and sweep read, and their kinds.  A key may be
# absent or null unless required; present, it must be of its kind.
RUN_KINDS = {"status": STR, "reason": STR, "name": STR, "experiment": STR, "encoding": STR,
             "parent": STR, "seq_len": INT, "seed": INT, "n_params": INT, "steps": INT,
             "tokens_trained": INT, "device": STR, "model": OBJ, "corpus": OBJ, "versions": OBJ}
MODEL_KINDS = {"d_model": INT, "n_layer": INT, "n_head": INT}
CORPUS_KINDS = {"name": STR, "fingerprint": STR, "tokenizer": STR,
                "tokenizer_fingerprint": STR, "vocab_size": INT, "val_tokens": INT,
                "task": STR, "max_train_length": INT}
POINT_KINDS = {"mode": STR, "length": INT, "stride": INT, "first_token": INT, "spans": STR,
               "documents": INT, "tokens": INT,
               "applicable": BOOL, "reason": STR, "loss": NUM, "ppl": NUM,
               "bits_per_token": NUM, "bits_per_byte": NUM, "seconds": NUM,
               "ppl_low": NUM, "ppl_high": NUM, "block_loss": LIST, "block_tokens": LIST,
               "rope_scaling": OBJ}
SCALING_KINDS = {"method": STR, "factor": NUM, **{p.name: NUM for p in scaling.all_params()}}
POSITION_KINDS = {"mode": STR, "length": INT, "first_token": INT, "spans": STR, "tokens": INT,
                  "position": LIST, "position_end": LIST, "loss": LIST, "loss_se": LIST}
# A task point (data=task): accuracy on the held-out instances of one length (and depth, for
# passkey), scored as trained or with a RoPE scaling.  exact is the fraction of instances
# whose every answer token is the model's argmax (teacher forced, which is greedy decoding's
# exact match); token_acc the mean per-instance fraction of answer tokens right; *_low/_high
# their 95% intervals (Wilson for exact, a bootstrap over instances for token_acc);
# answer_loss nats per answer token; chance_* the best constant predictor's accuracy on the
# same instances; instances_sha256 the hash of those instances (data.tasks.instances_sha256),
# so that two runs' points are seen to score the same ones.  Identified by TASK_POINT_KEYS and
# rope_scaling (points.task_point_key).
TASK_POINT_KINDS = {"task": STR, "length": INT, "depth": NUM, "count": INT, "eval_seed": INT,
                    "tokens": INT, "applicable": BOOL, "reason": STR, "exact": NUM,
                    "exact_low": NUM, "exact_high": NUM, "token_acc": NUM, "token_acc_low": NUM,
                    "token_acc_high": NUM, "answer_loss": NUM, "chance_exact": NUM,
                    "chance_token": NUM, "seconds": NUM, "rope_scaling": OBJ,
                    "instances_sha256": STR}
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
        if value is not None and not _KINDS[kind](value):
            raise PosexpError(f"{file} is damaged: {where}{key!r} is {value!r:.40}, not {kind}")


def _check_blocks(file: Path, where: str, p: dict) -> None:
    """Block losses (for intervals, posexp/stats.py) are optional -- eval.json written before
    posexp recorded them has none -- but present, they must add up to the point's tokens."""
    loss, tokens = p.get("block_loss"), p.get("block_tokens")
    if loss is None and tokens is None:
        return
    if not (isinstance(loss, list) and isinstance(tokens, list) and len(loss) == len(tokens)
            and loss and all(_KINDS[NUM](x) for x in loss)
            and all(_KINDS[INT](n) and n > 0 for n in tokens) and sum(tokens) == p["tokens"]):
        raise PosexpError(f"{file} is damaged: {where}block_loss and block_tokens are not "
                          f"lists of one length whose token counts add up to {p['tokens']}")


def _check_task_points(file: Path, tasks: list) -> None:
    for i, p in enumerate(tasks, 1):
        where = f"task point {i}: "
        check_fields(file, where, p, TASK_POINT_KINDS,
                      (TASK_POINT_KEYS - {"depth"}) | {"applicable"})
        if p.get("rope_scaling") is not None:
            check_fields(file, f"{where}rope_scaling: ", p["rope_scaling"], SCALING_KINDS,
                          ("method", "factor"))
        if p["applicable"]:
            check_fields(file, where, p, {}, ("exact", "token_acc", "answer_loss"))


def read_eval(file: Path) -> dict:
    """eval.json: its curve points, per-position records and task points (empty when there
    is no file yet), every key checked; a PosexpError naming the file when it is damaged."""
    if not file.exists():
        return {"curve": [], "per_position": [], "tasks": [], "spans": {}}
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise PosexpError(f"{file} is unreadable: {e}") from None
    check_fields(file, "", data, {"curve": LIST, "per_position": LIST, "tasks": LIST,
                                  "spans": OBJ}, ("curve",))
    for key, empty in (("per_position", []), ("tasks", []), ("spans", {})):
        data[key] = data.get(key) or empty
    _check_task_points(file, data["tasks"])
    _check_spans(file, data["spans"])
    _check_curve(file, data["curve"], data["spans"])
    _check_per_position(file, data["per_position"])
    return data


def _check_spans(file: Path, layouts: dict) -> None:
    """eval.json's "spans": each layout its points name (posexp/spans.py), by id."""
    for name, record in layouts.items():
        where = f"spans {name}: "
        check_fields(file, where, record, {k: LIST for k in SPAN_ARRAYS}, SPAN_ARRAYS)
        arrays = [record[k] for k in SPAN_ARRAYS]
        if len({len(a) for a in arrays}) > 1 or not arrays[0] or not all(
                _KINDS[INT](x) and x >= 0 for a in arrays for x in a):
            raise PosexpError(f"{file} is damaged: {where}first, length and document are not "
                              "lists of one length of non-negative integers")
        check_fields(file, where, record, {"compression": OBJ})
        check_fields(file, f"{where}compression: ", record.get("compression") or {},
                     {"zlib": NUM, "xz": NUM})


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
        if p["applicable"]:
            check_fields(file, where, p, {}, ("loss", "ppl"))
            _check_blocks(file, where, p)


def _check_per_position(file: Path, records: list) -> None:
    for i, p in enumerate(records, 1):
        where = f"per_position record {i}: "
        check_fields(file, where, p, POSITION_KINDS, ("length", "position", "position_end",
                                                      "loss"))
        columns = (p["position"], p["position_end"], p["loss"])
        se = p.get("loss_se")
        if len({len(c) for c in columns}) > 1 or not all(_KINDS[NUM](x) for c in columns
                                                          for x in c) \
                or (se is not None and (len(se) != len(p["loss"])
                                        or not all(x is None or _KINDS[NUM](x) for x in se))):
            raise PosexpError(f"{file} is damaged: {where}position, position_end, loss and "
                              "loss_se are not lists of numbers of one length")
