"""An encoding of the user's own: encoding.module, named in a config file under
--config-dir, is imported so that it registers encoding.name (docs: adding an encoding).

Importing a module runs its code, so it happens only on the way to training or scoring a
run of that encoding: never while posexp only shows a config (--cfg, --info, --help), which
runs inside ``no_imports()``.  Which modules may be named at all is decided at composition
(guards.check_module: only those a --config-dir file names)."""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import os
import re
import sys
from collections.abc import Iterator
from typing import NoReturn

from omegaconf import DictConfig

from posexp.errors import UsageError

MODULE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_IMPORTS = contextvars.ContextVar("posexp_encoding_imports", default=True)


@contextlib.contextmanager
def no_imports() -> Iterator[None]:
    """Within the block, no encoding module is imported: a command that only shows a config
    runs no code of the user's."""
    token = _IMPORTS.set(False)
    try:
        yield
    finally:
        _IMPORTS.reset(token)


def import_encoding(module: str, name: str) -> None:
    """Import ``module`` (encoding.module, from a config file), which registers encoding
    ``name``, from the working directory or the installed packages."""
    from posexp.encodings import ENCODINGS  # the registry imports torch: not for ls

    if not isinstance(module, str) or not MODULE_PATH.fullmatch(module):
        raise UsageError(f"encoding.module must be a dotted Python module path such as "
                         f"my_encodings.cope, got {module!r}")
    if name in ENCODINGS and ENCODINGS[name].module.__module__.startswith("posexp."):
        _replaces(name)  # refused before the module's code runs
    if os.getcwd() not in sys.path:  # as python -m does: a module beside your configs
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(module)
    except Exception as error:  # the module's own code failed: say where, in one line
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise UsageError(f"encoding.module {module}: {type(error).__name__}"
                         + (f": {first}" if first else "")) from None
    if name not in ENCODINGS:
        raise UsageError(f"encoding.module {module} registers no encoding {name!r} (it must "
                         "call posexp.encodings.registry.register with that name)")
    if ENCODINGS[name].module.__module__.startswith("posexp."):
        _replaces(name)


def _replaces(name: str) -> NoReturn:
    raise UsageError(f"{name} is posexp's own encoding: encoding.module adds encodings, it "
                     "does not replace one (give yours another name)")


def import_custom_encoding(cfg: DictConfig) -> bool:
    """Import encoding.module where a config names one; whether the encoding's code is there
    to check (False only for a module left unimported inside ``no_imports``)."""
    return import_custom(cfg.encoding.get("module"), cfg.encoding.name)


def import_custom(module: str | None, name: str) -> bool:
    """import_custom_encoding of an encoding's module and name (a RunSpec's encoding)."""
    if module is None:
        return True
    if not _IMPORTS.get():
        return False
    import_encoding(module, name)
    return True
