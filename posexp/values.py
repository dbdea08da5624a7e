"""Checks of single values, shared by every part that checks its own settings (config, data,
tasks): each raises a UsageError that names the key as a user writes it."""

from __future__ import annotations

import errno
import math
import os
import stat

from posexp.errors import UsageError


def positive(name: str, value: object, high: int | None = None) -> None:
    """A positive integer (not a bool), at most ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UsageError(f"{name} must be a positive integer, got {value!r}")
    if high is not None and value > high:
        raise UsageError(f"{name} must be at most {high:,} ({power(high)}), got {value:,}")


def power(n: int) -> str:
    """2**k for a power of two, else the number in e-notation: how a bound is written."""
    return f"2**{n.bit_length() - 1}" if n & (n - 1) == 0 else f"{n:.0e}".replace("e+", "e")


def in_range(name: str, value: float, low: float, high: float, *, low_open: bool = False,
             high_open: bool = False) -> None:
    """A finite value within [low, high] (an open end excludes its bound)."""
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
          and (value > low if low_open else value >= low)
          and (value < high if high_open else value <= high))
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise UsageError(f"{name} must be a finite number in {interval}, got {value}")


def listed_once(name: str, values: list, each: str = "", shown=str) -> None:
    """No value of a list twice: 'NAME lists 64 more than once; list each EACH once'
    (``shown`` writes a value)."""
    twice = {v for v in values if values.count(v) > 1}
    try:
        twice = sorted(twice)
    except TypeError:  # values of several types
        twice = sorted(twice, key=str)
    if twice:
        raise UsageError(f"{name} lists {', '.join(map(shown, twice))} more than once; list "
                         f"each {each + ' ' if each else ''}once")


def check_path(key: str, value: str) -> None:
    """``value`` names an existing regular file or directory (not a FIFO, a device, a
    dangling link or a loop of links): what a corpus or tokenizer file can be."""
    path = os.path.expanduser(value)
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"{key} {value!r} is a loop of symbolic links") from None
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            what = "is a broken symbolic link" if os.path.islink(path) else "does not exist"
            raise UsageError(f"{key} {value!r} {what}") from None
        raise UsageError(f"{key}: cannot read {value!r}: {e.strerror}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise UsageError(f"{key} {value!r} is not a regular file or directory")
