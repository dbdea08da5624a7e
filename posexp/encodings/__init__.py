"""Positional encodings by name: ``encoding=<name>`` resolves through ``ENCODINGS``."""

from collections.abc import Callable

from posexp.encodings.alibi import ALiBi
from posexp.encodings.base import PositionalEncoding
from posexp.encodings.learned import LearnedPositions
from posexp.encodings.nope import NoPE
from posexp.encodings.rope import RotaryPositions
from posexp.encodings.sinusoidal import SinusoidalPositions

# Each builder takes (d_model, n_head, max_positions, base).
ENCODINGS: dict[str, Callable[[int, int, int, float], PositionalEncoding]] = {
    "nope": lambda d, h, n, base: NoPE(),
    "learned": lambda d, h, n, base: LearnedPositions(n, d),
    "sinusoidal": lambda d, h, n, base: SinusoidalPositions(d),
    "rope": lambda d, h, n, base: RotaryPositions(d // h, base),
    "alibi": lambda d, h, n, base: ALiBi(h),
}


def build_encoding(
    name: str, d_model: int, n_head: int, max_positions: int, base: float = 10000.0
) -> PositionalEncoding:
    if name not in ENCODINGS:
        raise KeyError(f"unknown encoding {name!r}; available: {', '.join(sorted(ENCODINGS))}")
    return ENCODINGS[name](d_model, n_head, max_positions, base)


__all__ = ["ENCODINGS", "PositionalEncoding", "build_encoding"]
