"""The errors a user can cause or meet; the CLI (cli.fail) turns each into one line on stderr,
``posexp: error: <message>``, and its exit code.  A signal a user sends is met here too
(on_signals): training, scoring and sweeps each turn it into their own stop."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator


class PosexpError(Exception):
    """A failure with a message meant for the user; exit status 1."""

    exit_code = 1
    label = "error: "  # after "posexp: " on the line printed


class UsageError(PosexpError):
    """The command line or config asks for something that cannot run; exit status 2."""

    exit_code = 2


class InUse(PosexpError):
    """A run's lock is held by another process: a campaign skips that run ("running
    elsewhere") and goes on, where any other error of a run would count as its failure."""


class Stopped(PosexpError):
    """The user stopped the command (a signal): not an error, so the line reads
    ``posexp: stopped by SIGINT ...``; exit status 128 + the signal's number."""

    label = ""


@contextlib.contextmanager
def on_signals(handler: Callable[[int, object], None]) -> Iterator[None]:
    """SIGINT and SIGTERM go to ``handler`` inside; the handlers before are put back after.
    Outside the main thread signals are left alone."""
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, handler_before in previous.items():
            signal.signal(sig, handler_before)


def flat(text: str) -> str:
    """One line: the lines of a message joined, tabs and runs of blanks collapsed."""
    return " ".join(part.strip() for part in text.strip().splitlines() if part.strip()) \
        .replace("\t", " ")


def first_line(e: BaseException) -> str:
    """The first line of an error's message, or its type's name when it has none."""
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
