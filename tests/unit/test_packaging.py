"""The wheel holds every package of posexp's source (a package left out of pyproject.toml
works in an editable install and breaks in a plain one)."""

from pathlib import Path

import tomllib

ROOT = Path(__file__).parents[2]


def test_every_package_is_in_the_wheel():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "posexp").rglob("__init__.py")}
    assert listed - {"posexp.configs"} == found
