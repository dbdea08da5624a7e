"""Whole lines from jobs that run at once: each job's stdout and stderr written a line at a
time, with the job's run name in front, so that lines on one terminal or log never run
together."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator


class Lines(io.TextIOBase):
    """A text stream that writes only whole lines, each with its prefix and in one write
    call, so that the lines of jobs running at once on one terminal or log never run
    together (a pipe keeps a write of up to 4096 bytes in one piece).  What follows the last
    newline waits for the rest of its line, or for ``close``."""

    def __init__(self, fd: int, prefix: str) -> None:
        super().__init__()
        self.fd, self.prefix, self.pending = fd, prefix, ""

    @property
    def encoding(self) -> str:
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False  # progress bars stay off: their redrawn lines are not whole lines

    def fileno(self) -> int:
        return self.fd

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            self._write_all(f"{self.prefix + line if line else self.prefix.rstrip()}\n"
                            .encode())
        return len(text)

    def _write_all(self, data: bytes) -> None:
        while data:
            data = data[os.write(self.fd, data):]

    def close(self) -> None:
        if self.pending:
            self.write("\n")
        super().close()


@contextlib.contextmanager
def whole_lines(prefix: str) -> Iterator[None]:
    """stdout and stderr of this process as Lines with ``prefix``, until the block ends."""
    saved = sys.stdout, sys.stderr
    for stream in saved:
        stream.flush()
    out, err = Lines(saved[0].fileno(), prefix), Lines(saved[1].fileno(), prefix)
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        out.close()
        err.close()
