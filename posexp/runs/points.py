"""What identifies a point of eval.json: the keys by which a new point replaces an old one,
and the scored region it was measured on."""

from __future__ import annotations

from posexp import scaling

# A curve point is one (mode, length, stride) scored on one region of the validation
# stream: the targets first_token+1 .. first_token+tokens; and with one RoPE scaling, or as
# trained (rope_scaling null, or absent in eval.json written before posexp had scalings).
POINT_KEYS = frozenset({"mode", "length", "stride", "first_token", "tokens"})
# A task point is accuracy on the held-out instances of one length (and depth, for passkey):
# the same task, length, depth, instance count, eval seed and RoPE scaling replaces it.
TASK_POINT_KEYS = frozenset({"task", "length", "depth", "count", "eval_seed"})
MODES = ("nonoverlapping", "sliding")  # config.schema.EvalMode

# (first_token, tokens): a point scores the validation targets first_token+1 .. first_token+tokens
Region = tuple[int, int]


def point_scaling(p: dict) -> scaling.Key:
    return scaling.key(p.get("rope_scaling"))


def point_key(p: dict) -> tuple:
    return (p["mode"], p["length"], p["stride"], p["first_token"], p["tokens"],
            point_scaling(p))


def task_point_key(p: dict) -> tuple:
    depth = p.get("depth")
    return (p["task"], p["length"], None if depth is None else float(depth), p["count"],
            p["eval_seed"], point_scaling(p))


def region(p: dict) -> Region:
    return p["first_token"], p["tokens"]
