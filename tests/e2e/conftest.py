"""End-to-end tests: posexp's commands as a user runs them -- as processes of their own, or
through cli.main in this process -- training real (tiny) runs.  Every test here is marked
slow: ``pytest -m "not slow"`` runs the fast suite, tests/unit alone."""

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.slow)
