"""A sweep stopped as one: SIGINT/SIGTERM in its parent (or in a worker between jobs)
writes a stop file every job reads, wherever the launcher runs it, so that every job stops
at its next step, checkpointed, and none starts after."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from posexp.errors import on_signals

STOP_FILE = "POSEXP_STOP_FILE"  # posexp.run.training.STOP_FILE, without importing torch


def request_stop(signum: int, frame: object = None) -> None:
    """SIGINT/SIGTERM in a sweep's parent, or in one of its job processes outside training
    and evaluation (which have handlers of their own): the stop file says so to every job,
    which stops at its next step or batch, checkpointed; jobs not started yet do not start.
    A second signal counts too (the file keeps the first signal's number)."""
    path = os.environ.get(STOP_FILE)
    if not path:
        return
    with contextlib.suppress(OSError):
        # its folder made again if it went (a tidy-up of /tmp): else no job would ever stop
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        first = Path(path).read_text().split()[0] if os.path.exists(path) else str(signum)
        Path(f"{path}.tmp{os.getpid()}").write_text(f"{first}\n")
        os.replace(f"{path}.tmp{os.getpid()}", path)


# The stop a sweep ended with, taken by the command that ran it (take_stop): the signal's
# number, once one came, and why the launcher broke off (a worker ended by it), if it did.
STOPPED: dict[str, int | str | None] = {"signum": None, "broke": None}


def take_stop() -> tuple[int | None, str | None]:
    """(signal number, launcher error) of the stopping() block that just ended, cleared so
    that a later sweep or summary in the same process (the API's, a test's) is not read as
    stopped by it."""
    signum, broke = STOPPED["signum"], STOPPED["broke"]
    STOPPED["signum"] = STOPPED["broke"] = None
    return (None if signum is None else int(signum)), (None if broke is None else str(broke))


@contextlib.contextmanager
def stopping() -> Iterator[None]:
    """Around the launch of a sweep's jobs in its parent: SIGINT/SIGTERM (a user, timeout,
    Slurm) write the stop file every job reads, wherever the launcher runs it (this
    process, joblib's workers, submitit's), instead of ending the parent alone and leaving
    the workers to train on, orphaned.  The parent waits for them to checkpoint, and
    summarize ends the command with one line and 128 + the signal's number."""
    folder = tempfile.mkdtemp(prefix="posexp-sweep-")
    path = os.path.join(folder, "stop")
    saved = os.environ.get(STOP_FILE)
    os.environ[STOP_FILE] = path  # jobs in this process and in workers started from it
    STOPPED["signum"] = None
    STOPPED["broke"] = None
    try:
        with on_signals(request_stop):
            yield
    except Exception as e:  # the launcher gave up: if a signal came, that was the stop
        if not os.path.exists(path):
            raise
        STOPPED["broke"] = type(e).__name__  # a worker the signal reached before its handler
    finally:
        with contextlib.suppress(OSError, ValueError, IndexError):
            STOPPED["signum"] = int(Path(path).read_text().split()[0])
        if saved is None:
            os.environ.pop(STOP_FILE, None)
        else:
            os.environ[STOP_FILE] = saved
        shutil.rmtree(folder, ignore_errors=True)


def stop_overrides() -> list[str]:
    """The override that gives every job the stop file (Hydra sets it in each job's
    environment, also in a pool of workers started before this sweep)."""
    path = os.environ.get(STOP_FILE)
    return [f"+hydra.job.env_set.{STOP_FILE}={path}"] if path else []
