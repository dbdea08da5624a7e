"""What identifies a point of eval.json: the keys by which a new point replaces an old one,
and the scored region it was measured on."""

from __future__ import annotations

from posexp import scaling

# A curve point is one (mode, length, stride) scored on one region of the validation
# stream -- the spans ``spans`` names (posexp/spans.py; eval.json's "spans" holds them), or in
# eval.json written before posexp spread them, the targets first_token+1 ..
# first_token+tokens -- and with one RoPE scaling, or as trained (rope_scaling null, or
# absent in eval.json written before posexp had scalings); a randomized run's points say
# at which positions they were scored ("positions": sampled, as trained, or consecutive).
POINT_KEYS = frozenset({"mode", "length", "stride", "tokens"})
# A task point is accuracy on the held-out instances of one length (and depth, for passkey):
# the same task, length, depth, instance count, eval seed and RoPE scaling replaces it.
TASK_POINT_KEYS = frozenset({"task", "length", "depth", "count", "eval_seed"})
MODES = ("nonoverlapping", "sliding", "lm_eval")  # config.schema.EvalMode

# (what was scored, tokens): "spans <id>", or "tail <first_token>" for the targets
# first_token+1 .. first_token+tokens of a point written before posexp spread them
Region = tuple[str, int]
SPANS, TAIL = "spans", "tail"


def point_scaling(p: dict) -> scaling.Key:
    """How ``p`` was scored: its RoPE scaling, and whether a randomized run was scored at
    consecutive positions (evaluate/positions.py); None as trained."""
    return scaling.key(p.get("rope_scaling"), p.get("positions"))


def point_key(p: dict) -> tuple:
    return (p["mode"], p["length"], p["stride"], region(p), point_scaling(p))


def task_point_key(p: dict) -> tuple:
    depth = p.get("depth")
    return (p["task"], p["length"], None if depth is None else float(depth), p["count"],
            p["eval_seed"], point_scaling(p))


def region(p: dict) -> Region:
    """The scored text of a curve point or per-position record."""
    if p.get("spans") is not None:
        return f"{SPANS} {p['spans']}", p["tokens"]
    return f"{TAIL} {p.get('first_token')}", p["tokens"]


def is_spread(region: Region) -> bool:
    """Whether ``region`` is spans over the whole validation split (not one stretch at its
    end, as posexp scored before)."""
    return region[0].startswith(SPANS)


def region_text(region: Region) -> str:
    """How tables and titles name a region."""
    what, n = region
    kind, name = what.split(" ", 1)
    if kind == SPANS:
        return f"{n:,} validation tokens in spans {name}"
    first = int(name)
    return f"the {n:,} validation targets {first + 1:,}-{first + n:,} (one stretch)"
