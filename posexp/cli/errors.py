"""The one place that turns an error into one line on stderr and an exit code: 2 for usage,
1 at run time, 128 + n for a signal.  ``POSEXP_DEBUG=1`` adds the traceback."""

from __future__ import annotations

import os
import traceback
from typing import NoReturn

import typer

from posexp.errors import PosexpError, flat

DEBUG = "POSEXP_DEBUG"


def fail(error: BaseException) -> NoReturn:
    """Print one line for ``error`` and exit with its code; POSEXP_DEBUG=1 adds the
    traceback.  Every command ends here when something goes wrong."""
    if isinstance(error, SystemExit):
        raise error
    if os.environ.get(DEBUG):
        traceback.print_exception(error)
    if isinstance(error, PosexpError):
        typer.echo(f"posexp: {error.label}{flat(str(error))}", err=True)
        raise SystemExit(error.exit_code)
    if isinstance(error, KeyboardInterrupt):
        typer.echo("posexp: stopped by SIGINT (Ctrl-C)", err=True)
        raise SystemExit(130)
    if isinstance(error, OSError) and error.strerror:
        where = f"{error.filename}: " if error.filename else ""
        typer.echo(f"posexp: error: {where}{error.strerror}", err=True)
        raise SystemExit(1)
    if isinstance(error, MemoryError):
        typer.echo("posexp: error: out of memory; lower the batch (train.batch_tokens, "
                   "eval.batch_tokens), the model or the lengths", err=True)
        raise SystemExit(1)
    detail = flat(str(error))
    typer.echo(f"posexp: error: {type(error).__name__}: {detail} "
               f"({DEBUG}=1 shows the traceback)", err=True)
    raise SystemExit(1)
