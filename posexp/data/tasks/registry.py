"""The registry of tasks: ``task=<name>`` resolves through ``TASKS``.

A task is a ``Task`` subclass (generators.py) registered here under its name, plus one YAML
file under ``configs/task/``; config checks, evaluation, the report and the claims find it
from here.  Its order in TASKS is the order tables and figures show tasks in.
"""

from __future__ import annotations

from posexp.data.tasks.base import Task

TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    """Add ``task`` under its name; its name and its task_id (part of every held-out seed)
    are its own."""
    if task.name in TASKS:
        raise ValueError(f"two tasks are called {task.name!r}")
    taken = {t.task_id: t.name for t in TASKS.values()}
    if task.task_id in taken:
        raise ValueError(f"{task.name} and {taken[task.task_id]} have the same task_id "
                         f"{task.task_id}")
    TASKS[task.name] = task
    return task


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; the tasks are {', '.join(TASKS)}")
    return TASKS[name]
