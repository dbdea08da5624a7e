"""RoPE context-extension methods: the one table of their names, parameters and defaults.

A method is of one of three kinds.  Most change only RoPE's inverse frequencies (and YaRN its
attention temperature): ``frequencies``.  Self-Extend and ReRoPE (``attention``) keep the
frequencies and score each key at least a window back with the query and key rotated at
other positions, the two scores merged by distance before the softmax; ReRoPE also scales
its queries by log n.  A ``temperature`` (Llama 4's, YaRN's, log n) only multiplies each
query by a factor of its position or of the window's length, in every layer of a run of any
encoding.  The last two are applied at evaluation by posexp's own attention, so neither a
fine-tune nor a pretrained model takes them.  Each entry names its formula, a function
("module:function", imported when a run is scored; posexp's own are in
``posexp/encodings/rope_scaling.py``).  LongRoPE, whose factors a pretrained model supplies,
has none.  Everything else -- the config
schema's parameter keys, the checks of ``eval.rope_scaling`` and ``encoding.scaling``, the
records eval.json holds, labels in tables and figures, help text, how a pretrained model
gets it from transformers -- reads this table.  It imports neither torch nor numpy, so
``posexp ls`` and ``report`` stay fast.  Adding a method is an entry here and its function.

A scaling is written down as a *record* (eval.json's ``rope_scaling``, a fine-tune's
``encoding.scaling``): its method, its factor, and the parameters that method reads, in the
table's order.  ``key`` makes a record hashable; None stands for RoPE as trained.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

PLAIN = "plain"  # in a list of eval.rope_scaling methods: RoPE as trained, unscaled


# the kinds of method (Method.kind)
FREQUENCIES, ATTENTION, TEMPERATURE = "frequencies", "attention", "temperature"


@dataclass(frozen=True)
class Param:
    name: str
    default: float  # the paper's (or its reference code's)
    what: str
    zero: bool = False  # 0 is a value it takes (a switch: 0 off, 1 on); else it is above 0


@dataclass(frozen=True)
class Method:
    name: str  # eval.rope_scaling=<name>, encoding.scaling=<name>
    label: str  # how tables and figures name it
    source: str  # the paper (or post) the formula follows
    params: tuple[Param, ...] = ()
    # why a set of parameter values cannot be used (None: they can), given {name: value}
    rule: Callable[[Mapping[str, float]], str | None] | None = None
    follows_window: bool = False  # the frequencies depend on the window length (dynamic NTK)
    # a pretrained model gets it from transformers as this rope_type (None: as a larger
    # rope_theta, NTK-aware's formula), which reads L as original_max_position_embeddings
    # where hf_original_len
    hf_rope_type: str | None = None
    hf_original_len: bool = False
    # its formula, "module:function".  frequencies: (scaling, d, base, L, T) -> (inv_freq
    # float64 [d/2], factor on cos and sin); attention: (scaling, L, T) -> FarPositions;
    # temperature: (scaling, L, T) -> the factor on each query, float64 [T].
    # None: the model supplies its per-pair factors (LongRoPE, as Phi-3 does), so only a
    # pretrained model that has them takes it (not among computed())
    formula: str | None = None
    kind: str = FREQUENCIES
    reads_factor: bool = True  # False: it has no factor (ReRoPE), and its records hold 1

    @property
    def eval_only(self) -> bool:
        """Applied by posexp's attention at evaluation: no fine-tune, no pretrained model."""
        return self.kind != FREQUENCIES

    @property
    def needs_rope(self) -> bool:
        """Whether it changes RoPE (a temperature applies to a run of any encoding)."""
        return self.kind != TEMPERATURE

    @property
    def model_factors(self) -> bool:
        return self.formula is None

    def defaults(self) -> dict[str, float]:
        """The method's parameters at the paper's values."""
        return {p.name: p.default for p in self.params}


def _yarn_rule(p: Mapping[str, float]) -> str | None:
    if p["beta_fast"] > p["beta_slow"] > 0:
        return None
    return f"yarn needs beta_fast > beta_slow > 0, got {p['beta_fast']}, {p['beta_slow']}"


def yarn_ramp(d: int, base: float, L: int, beta_fast: float, beta_slow: float) -> list[float]:
    """YaRN's ramp over RoPE's d/2 frequency pairs (Peng et al., sec. 3.2, "NTK-by-parts"):
    0 keeps a pair's theta, 1 divides it by the factor, in between blends the two.  Pairs
    that turn more than ``beta_fast`` times over L are kept, fewer than ``beta_slow`` times
    interpolated, and the ramp between is linear in the pair index, its ends rounded outwards
    (floor, ceil) as transformers' ``find_correction_range`` and the paper's code do."""

    def pair_turning(rotations: float) -> float:  # the pair that turns `rotations` times over L
        return d * math.log(L / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(pair_turning(beta_fast)), 0)
    high = min(math.ceil(pair_turning(beta_slow)), d - 1)
    if high == low:
        high += 0.001  # as transformers: no division by zero
    return [min(max((i - low) / (high - low), 0.0), 1.0) for i in range(d // 2)]


def yarn_bands(d: int, base: float, L: int, beta_fast: float | None = None,
               beta_slow: float | None = None) -> tuple[int, int, int]:
    """(kept, blended, interpolated): how many of RoPE's d/2 frequency pairs YaRN leaves as
    they are, blends, and divides by the factor at training length L (yarn_ramp), at the
    paper's betas where not given.  Llama 2 (L 4,096, head size 128): 21, 25, 18 of 64 --
    33%, 39%, 28%."""
    paper = METHODS["yarn"].defaults()
    ramp = yarn_ramp(d, base, L, paper["beta_fast"] if beta_fast is None else beta_fast,
                     paper["beta_slow"] if beta_slow is None else beta_slow)
    kept, interpolated = ramp.count(0.0), ramp.count(1.0)
    return kept, len(ramp) - kept - interpolated, interpolated


def _llama3_rule(p: Mapping[str, float]) -> str | None:
    if p["high_freq_factor"] > p["low_freq_factor"] > 0:
        return None
    return ("llama3 needs high_freq_factor > low_freq_factor > 0, got "
            f"{p['high_freq_factor']}, {p['low_freq_factor']}")


def _window_rule(name: str, logn: bool = False) -> Callable[[Mapping[str, float]], str | None]:
    """A window (a fraction of L) below 1, and where the method has it, logn a switch."""

    def rule(p: Mapping[str, float]) -> str | None:
        if not 0 < p[name] < 1:
            return f"{name} is a fraction of the training length L, above 0 and below 1; " \
                   f"got {p[name]:g}"
        if logn and p["logn"] not in (0.0, 1.0):
            return f"logn is 1 (queries scaled by log n, as ReRoPE's code) or 0, got {p['logn']:g}"
        return None

    return rule


def window_tokens(fraction: float, L: int) -> int:
    """A window given as a fraction of the training length L, in tokens (at least 1)."""
    return max(1, round(fraction * L))


_LOGN = Param("logn", 1.0, "1: queries x max(1, log(i + 1) / log L) (ReRoPE's code); 0: off",
              zero=True)
_WINDOW = Param("window", 0.125, "keys nearer than this fraction of L keep their positions "
                "(ReRoPE's code: 512 of Llama 2's 4,096)")

OURS = "posexp.encodings.rope_scaling"  # the module of posexp's own formulas

METHODS: dict[str, Method] = {m.name: m for m in (
    Method("linear", "PI", "Chen et al. 2023, Position Interpolation (arXiv:2306.15595)",
           hf_rope_type="linear", formula=f"{OURS}:linear"),
    Method("ntk", "NTK-aware", "bloc97 2023, NTK-aware scaled RoPE", formula=f"{OURS}:ntk"),
    Method("dynamic", "dynamic NTK", "emozilla 2023, dynamically scaled RoPE",
           follows_window=True, hf_rope_type="dynamic", formula=f"{OURS}:dynamic"),
    Method("yarn", "YaRN", "Peng et al., ICLR 2024 (arXiv:2309.00071)",
           (Param("beta_fast", 32.0, "pairs turning more often than this over L keep theta"),
            Param("beta_slow", 1.0, "pairs turning less often than this over L get theta / s")),
           _yarn_rule, hf_rope_type="yarn", hf_original_len=True, formula=f"{OURS}:yarn"),
    Method("llama3", "Llama 3", "Meta, Llama 3.1 apply_scaling",
           (Param("low_freq_factor", 1.0, "wavelengths above L / this are interpolated"),
            Param("high_freq_factor", 4.0, "wavelengths below L / this are kept")),
           _llama3_rule, hf_rope_type="llama3", hf_original_len=True,
           formula=f"{OURS}:llama3"),
    Method("self_extend", "Self-Extend", "Jin et al., ICML 2024 (arXiv:2401.01325), "
           "the group size G as the factor",
           (Param("neighbor_window", 0.25, "keys nearer than this fraction of L keep their "
                  "positions (the reference code's 1,024 of Llama 2's 4,096)"),),
           _window_rule("neighbor_window"), formula=f"{OURS}:self_extend", kind=ATTENTION),
    Method("rerope", "ReRoPE", "Su 2023, Rectified Rotary Position Embeddings "
           "(github.com/bojone/rerope)", (_WINDOW, _LOGN), _window_rule("window", True),
           formula=f"{OURS}:rerope", kind=ATTENTION, reads_factor=False),
    Method("leaky_rerope", "Leaky ReRoPE", "Su 2023, Rectified Rotary Position Embeddings "
           "(github.com/bojone/rerope), the leak k as the factor", (_WINDOW, _LOGN),
           _window_rule("window", True), formula=f"{OURS}:leaky_rerope", kind=ATTENTION),
    Method("llama4_temperature", "Llama 4 temperature", "Meta, Llama 4 "
           "attn_temperature_tuning (transformers' Llama4TextAttention)",
           (Param("attn_scale", 0.1, "query i x (1 + attn_scale ln(1 + floor((i + 1) / "
                  "floor_scale)))"),
            Param("floor_scale", 1.0, "in multiples of L (Llama 4's 8,192 is its attention "
                  "chunk size)")),
           formula=f"{OURS}:llama4_temperature", kind=TEMPERATURE, reads_factor=False),
    Method("yarn_temperature", "YaRN temperature", "Peng et al., ICLR 2024 "
           "(arXiv:2309.00071), sec. 3.4, with s the window's length over L",
           formula=f"{OURS}:yarn_temperature", kind=TEMPERATURE, reads_factor=False),
    Method("logn_temperature", "log-n temperature", "Chiang & Cholak, ACL 2022 "
           "(arXiv:2202.12172); Su 2021, the log n of ReRoPE's code",
           formula=f"{OURS}:logn_temperature", kind=TEMPERATURE, reads_factor=False),
    Method("longrope", "LongRoPE", "Ding et al., ICML 2024 (arXiv:2402.13753), with the "
           "model's own factors", hf_rope_type="longrope", hf_original_len=True),
)}


def all_params() -> list[Param]:
    """Every method's parameters, each once, in the table's order (the config schema's keys)."""
    return list({p.name: p for m in METHODS.values() for p in m.params}.values())


def computed() -> dict[str, Method]:
    """The methods posexp computes itself: what a model trained here can be scored or
    fine-tuned with (read from the table each time: an entry added later counts)."""
    return {n: m for n, m in METHODS.items() if not m.model_factors}


def names() -> str:
    """The methods a model trained here takes (computed())."""
    return ", ".join(computed())


def fine_tunable() -> dict[str, Method]:
    """The methods a fine-tune trains with: those of RoPE's frequencies."""
    return {n: m for n, m in computed().items() if not m.eval_only}


def record(method: str, factor: float, params: Mapping) -> dict:
    """A scaling as posexp writes it down: the method, its factor (1 for a method that has
    none), and the parameters that method reads (from ``params``)."""
    spec = METHODS.get(method)
    factor = factor if spec is None or spec.reads_factor else 1.0
    return {"method": method, "factor": float(factor),
            **{p.name: float(params[p.name]) for p in METHODS[method].params}}


# key() of a record; None: as trained.  A randomized run scored at consecutive positions
# (evaluate/positions.py) is a variant of how it is scored as a scaling is: its key holds
# ("positions", "consecutive"), beside the scaling's entries if it has one.
Key = tuple | None
POSITIONS, CONSECUTIVE = "positions", "consecutive"


def key(rec: Mapping | None, positions: str | None = None) -> Key:
    """A record (and a point's positions) as a hashable key; None as trained."""
    entries = [(k, v if isinstance(v, str) else float(v)) for k, v in (rec or {}).items()]
    if positions == CONSECUTIVE:
        entries.append((POSITIONS, CONSECUTIVE))
    return tuple(sorted(entries)) if entries else None


def overrides(k: Key) -> str:
    """The eval.* overrides that score a run as ``k`` says ("" as trained)."""
    rec = dict(k or ())
    out = [f"eval.rope_scaling={rec['method']} eval.rope_scaling.factor={rec['factor']:g}"
           ] if "method" in rec else []
    if rec.get(POSITIONS) == CONSECUTIVE:
        out.append(f"eval.positions={CONSECUTIVE}")
    return "".join(f" {o}" for o in out)


def order(k: Key) -> tuple:
    """A sort key: as trained first, then consecutive positions, then by method (the table's
    order) and factor."""
    if k is None:
        return (0, 0, 0.0, "")
    rec = dict(k)
    if "method" not in rec:
        return (1, -1, 0.0, str(k))
    known = list(METHODS)
    rank = known.index(rec["method"]) if rec["method"] in known else len(known)
    return (1, rank, rec["factor"], str(k))


def text(k: Key) -> str:
    """A scaling in words: its method's label, the multiplication sign and its factor, and the
    parameters that differ from the papers' defaults; "consecutive positions" for that
    variant."""
    if k is None:
        return "as trained"
    rec = dict(k)
    at = "consecutive positions" if rec.pop(POSITIONS, None) == CONSECUTIVE else None
    if "method" not in rec:
        return at
    return _method_text(rec) + (f" at {at}" if at else "")


def _method_text(rec: dict) -> str:
    method = METHODS.get(rec["method"])
    defaults = {p.name: p.default for m in METHODS.values() for p in m.params}
    params = [f"{n} {v:g}" for n, v in rec.items()
              if n not in ("method", "factor") and v != defaults.get(n)]
    label = method.label if method else rec["method"]
    if method is None or method.reads_factor:
        label += f" \u00d7{rec['factor']:g}"
    return label + (f" ({', '.join(params)})" if params else "")


class RopeScaling:
    """A validated scaling: a method of the table, its factor s >= 1 and its parameters (the
    papers' defaults where not given).  ``RopeScaling(**record)`` reads a record back."""

    __slots__ = ("factor", "method", "params")

    def __init__(self, method: str, factor: float, **params: float) -> None:
        if method not in computed():
            raise ValueError(f"unknown RoPE scaling {method!r}; available: {names()}"
                             + (f" ({method} uses factors only a pretrained model supplies)"
                                if method in METHODS else ""))
        if not factor >= 1.0:
            raise ValueError(f"RoPE scaling factor must be at least 1, got {factor}")
        spec = METHODS[method]
        factor = factor if spec.reads_factor else 1.0
        values = {p.name: p.default for p in all_params()} | params
        unknown = set(values) - {p.name for p in all_params()}
        if unknown:
            raise ValueError(f"RoPE scaling has no parameter {', '.join(sorted(unknown))}")
        problem = spec.rule(values) if spec.rule else None
        if problem:
            raise ValueError(problem)
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "factor", float(factor))
        object.__setattr__(self, "params", {p.name: float(values[p.name]) for p in spec.params})

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a RopeScaling is frozen")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RopeScaling) and self.record() == other.record()

    def __hash__(self) -> int:
        return hash(key(self.record()))

    def __repr__(self) -> str:
        return f"RopeScaling({self.record()})"

    @property
    def kind(self) -> str:
        """frequencies, attention or temperature (the table's kinds)."""
        return METHODS[self.method].kind

    @property
    def follows_window(self) -> bool:
        """Whether the frequencies depend on the window length T (dynamic NTK)."""
        return METHODS[self.method].follows_window

    def record(self) -> dict:
        return record(self.method, self.factor, self.params)
