"""RoPE context extension: new inverse frequencies (and YaRN's temperature) for a trained RoPE.

Plain RoPE turns pair i by pos * theta_i, theta_i = base^(-2i/d), d = the rotary (head)
dimension.  Each method below changes only theta (and YaRN also scales cos and sin).  s is
the factor, L the original context (the run's training length, train.seq_len), T the length
of the window being scored.  The formulas are those of transformers'
``modeling_rope_utils.ROPE_INIT_FUNCTIONS`` and the papers they cite:

- ``linear`` (Position Interpolation, Chen et al. 2023, arXiv:2306.15595: f'(x, m) =
  f(x, m/s)): theta_i / s, the same as dividing every position by s.
- ``ntk`` (NTK-aware, bloc97 2023): base' = base * s^(d/(d-2)), so the highest frequency
  (i = 0) is unchanged and the lowest (i = d/2 - 1) is divided by exactly s.
- ``dynamic`` (dynamic NTK, emozilla 2023; ``_compute_dynamic_ntk_parameters``): NTK with
  base' = base * (s*T/L - (s-1))^(d/(d-2)) for T > L, plain RoPE for T <= L.  The frequencies
  follow the window's length, so s = 1 is *not* plain RoPE above L: it is NTK with scale T/L.
- ``yarn`` (Peng et al., ICLR 2024, arXiv:2309.00071, sec. 3.2 "NTK-by-parts" and 3.4;
  ``_compute_yarn_parameters``):
  pairs that turn more than beta_fast times over L keep theta_i, pairs that turn fewer than
  beta_slow times get theta_i / s, and a linear ramp over the pair index joins the two
  (``posexp.scaling.yarn_ramp``, which the report's band shares read too).  cos and sin are
  multiplied by mscale = 0.1 ln s + 1 (the paper's sqrt(1/t)), so every score q.k is
  multiplied by mscale^2.
- ``llama3`` (Llama 3.1, Meta's ``apply_scaling``; ``_compute_llama3_parameters``): wavelengths
  2 pi / theta_i shorter than L / high_freq_factor keep theta_i, longer than L / low_freq_factor
  get theta_i / s, and in between the blend is linear in L / wavelength.

Factor 1 gives plain RoPE exactly for every method but ``dynamic`` above L (see above).

Self-Extend and ReRoPE (the table's ``attention`` kind) keep theta.  Each key at least a window
W back (i - j >= W) is scored with the query and the key rotated at other positions, which
``FarPositions`` gives (float64, one per position); keys nearer keep i and j
(posexp/attention.py merges the two scores before the softmax).  W is a fraction of L, in
tokens (``scaling.window_tokens``).

- ``self_extend`` (Jin et al., ICML 2024; datamllab/LongLM, ``self_extend_patch/Llama.py``):
  the group size G is the factor; queries at floor(i / G) + W - W / G and keys at
  floor(j / G), so the distance is floor-divided by G beyond the window and continues from W
  at its edge.  (The reference code's W / G is a true division where it prefills, as here.)
- ``rerope`` (Su 2023; bojone/rerope, ``rerope_patch.py``): queries at W, keys at 0 -- every
  distance beyond the window is W.
- ``leaky_rerope`` (``leaky_rerope_patch.py``): the leak k is the factor; queries at
  i / k + W - W / k and keys at j / k, so distances beyond W grow by 1 / k a token.  k = 1 is
  plain RoPE; ReRoPE is its limit k -> infinity.
- ReRoPE's code (both patches) also multiplies each query i by max(1, log(i + 1) / log L):
  ``logn`` = 1, the default; 0 leaves the queries as they are.

A ``temperature`` keeps RoPE as it is (or the run's encoding, whatever it is) and multiplies
each query i of every layer by a factor, so that every score q_i . k_j is multiplied by it:

- ``llama4_temperature`` (transformers' ``Llama4TextAttention``): 1 + attn_scale ln(1 +
  floor((i + 1) / F)), F = floor_scale x L; Llama 4 applies it in its NoPE layers only.
- ``yarn_temperature`` (Peng et al. sec. 3.4): (0.1 ln s + 1)^2 with s = max(1, T / L), the
  square because YaRN multiplies both q and k by 0.1 ln s + 1 (its sqrt(1/t)).
- ``logn_temperature`` (Chiang & Cholak 2022; Su 2021): max(1, log(i + 1) / log L), ReRoPE's
  log n on its own.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import NamedTuple

import torch

from posexp.scaling import (
    ATTENTION,
    FREQUENCIES,
    METHODS,
    TEMPERATURE,
    RopeScaling,
    window_tokens,
    yarn_ramp,
)


def plain_inv_freq(d: int, base: float) -> torch.Tensor:
    """theta_i = base^(-2i/d) for i = 0 .. d/2 - 1, in float64 (Su et al., RoFormer)."""
    return base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)


def _blend(inv_freq: torch.Tensor, factor: float, keep: torch.Tensor) -> torch.Tensor:
    """keep * theta + (1 - keep) * theta / s: keep = 1 extrapolates a pair, 0 interpolates it."""
    return (1 - keep) * inv_freq / factor + keep * inv_freq


def _ntk_exponent(d: int) -> float:
    if d <= 2:
        raise ValueError(f"NTK-aware scaling needs a rotary dimension above 2, got {d}")
    return d / (d - 2)


def linear(s: RopeScaling, d: int, base: float, L: int, T: int) -> tuple[torch.Tensor, float]:
    return plain_inv_freq(d, base) / s.factor, 1.0


def ntk(s: RopeScaling, d: int, base: float, L: int, T: int) -> tuple[torch.Tensor, float]:
    return plain_inv_freq(d, base * s.factor ** _ntk_exponent(d)), 1.0


def dynamic(s: RopeScaling, d: int, base: float, L: int, T: int) -> tuple[torch.Tensor, float]:
    if T <= L:
        return plain_inv_freq(d, base), 1.0
    return plain_inv_freq(d, base * (s.factor * T / L - (s.factor - 1)) ** _ntk_exponent(d)), 1.0


def yarn(s: RopeScaling, d: int, base: float, L: int, T: int) -> tuple[torch.Tensor, float]:
    interpolate = torch.tensor(yarn_ramp(d, base, L, s.params["beta_fast"],
                                         s.params["beta_slow"]), dtype=torch.float64)
    return _blend(plain_inv_freq(d, base), s.factor, 1 - interpolate), 0.1 * math.log(s.factor) + 1


def llama3(s: RopeScaling, d: int, base: float, L: int, T: int) -> tuple[torch.Tensor, float]:
    inv_freq = plain_inv_freq(d, base)
    rotations = L * inv_freq / (2 * math.pi)  # L / wavelength
    low, high = s.params["low_freq_factor"], s.params["high_freq_factor"]
    keep = (rotations - low) / (high - low)
    return _blend(inv_freq, s.factor, keep.clamp(0, 1)), 1.0


class FarPositions(NamedTuple):
    """What an ``attention`` method changes over a window of T positions: keys at least
    ``window`` back are scored with the queries at ``q`` and the keys at ``k`` (float64 [T]);
    ``q_scale`` (float64 [T], or None) multiplies every query."""

    window: int
    q: torch.Tensor
    k: torch.Tensor
    q_scale: torch.Tensor | None = None


def _logn(s: RopeScaling, L: int, i: torch.Tensor) -> torch.Tensor | None:
    """ReRoPE's query scale max(1, log(i + 1) / log L), when its logn is on."""
    if not s.params["logn"] or L < 2:
        return None
    return (torch.log(i + 1) / math.log(L)).clamp(min=1.0)


def llama4_temperature(s: RopeScaling, L: int, T: int) -> torch.Tensor:
    floor = window_tokens(s.params["floor_scale"], L)
    i = torch.arange(T, dtype=torch.float64)
    return 1 + s.params["attn_scale"] * torch.log1p(torch.floor((i + 1) / floor))


def yarn_temperature(s: RopeScaling, L: int, T: int) -> torch.Tensor:
    return torch.full((T,), (0.1 * math.log(max(1.0, T / L)) + 1) ** 2, dtype=torch.float64)


def logn_temperature(s: RopeScaling, L: int, T: int) -> torch.Tensor:
    i = torch.arange(T, dtype=torch.float64)
    return (torch.log(i + 1) / math.log(L)).clamp(min=1.0) if L > 1 else torch.ones_like(i)


def self_extend(s: RopeScaling, L: int, T: int) -> FarPositions:
    W, G = window_tokens(s.params["neighbor_window"], L), s.factor
    i = torch.arange(T, dtype=torch.float64)
    return FarPositions(W, torch.floor(i / G) + W - W / G, torch.floor(i / G))


def rerope(s: RopeScaling, L: int, T: int) -> FarPositions:
    W = window_tokens(s.params["window"], L)
    i = torch.arange(T, dtype=torch.float64)
    return FarPositions(W, torch.full_like(i, W), torch.zeros_like(i), _logn(s, L, i))


def leaky_rerope(s: RopeScaling, L: int, T: int) -> FarPositions:
    W, k = window_tokens(s.params["window"], L), s.factor
    i = torch.arange(T, dtype=torch.float64)
    return FarPositions(W, i / k + W - W / k, i / k, _logn(s, L, i))


Formula = Callable[..., tuple[torch.Tensor, float] | FarPositions | torch.Tensor]


def formula(method: str) -> Formula:
    """The function the method's entry in posexp/scaling.py names ("module:function")."""
    entry = METHODS.get(method)
    if entry is None or entry.formula is None:
        raise ValueError(f"RoPE scaling {method!r} has no formula of posexp's to compute")
    module, _, name = entry.formula.partition(":")
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as e:
        raise ValueError(f"RoPE scaling {method!r}: its formula {entry.formula!r} cannot be "
                         f"imported ({e})") from None
    if not callable(found):
        raise ValueError(f"RoPE scaling {method!r}: its formula {entry.formula!r} is not a "
                         "function")
    return found


def rope_frequencies(
    d: int,
    base: float,
    scaling: RopeScaling | None = None,
    original_len: int | None = None,
    window_len: int | None = None,
) -> tuple[torch.Tensor, float]:
    """(inv_freq float64 [d/2], attention_scale) of RoPE over d rotary dimensions.

    original_len is the training length L (needed by every scaling), window_len the length T
    of the window about to be scored (read by ``dynamic`` only).  attention_scale multiplies
    cos and sin, hence every attention score by its square.
    """
    if scaling is None or scaling.kind != FREQUENCIES:  # Self-Extend, ReRoPE keep theta
        return plain_inv_freq(d, base), 1.0
    if original_len is None or original_len < 1:
        raise ValueError(f"RoPE scaling needs the training length, got {original_len}")
    if scaling.factor == 1.0 and not scaling.follows_window:
        return plain_inv_freq(d, base), 1.0  # what the formulas reduce to, without rounding
    if scaling.follows_window and window_len is None:
        raise ValueError("dynamic RoPE scaling needs the window length")
    return formula(scaling.method)(scaling, d, base, original_len, window_len)


def far_positions(scaling: RopeScaling | None, original_len: int | None,
                  window_len: int) -> FarPositions | None:
    """The far positions of an ``attention`` method over a window of ``window_len``
    positions (None for any other scaling, or none)."""
    if scaling is None or scaling.kind != ATTENTION:
        return None
    if original_len is None or original_len < 1:
        raise ValueError(f"RoPE scaling needs the training length, got {original_len}")
    return formula(scaling.method)(scaling, original_len, window_len)


def query_scale(scaling: RopeScaling | None, original_len: int | None,
                window_len: int) -> torch.Tensor | None:
    """A ``temperature``'s factor on each of ``window_len`` queries, float64 (None for any
    other scaling, or none)."""
    if scaling is None or scaling.kind != TEMPERATURE:
        return None
    if original_len is None or original_len < 1:
        raise ValueError(f"RoPE scaling needs the training length, got {original_len}")
    return formula(scaling.method)(scaling, original_len, window_len)
