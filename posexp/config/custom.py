"""An encoding of the user's own: encoding.module, named in a config file under
--config-dir, is imported so that it registers encoding.name (docs: adding an encoding)."""

from __future__ import annotations

import importlib
import os
import re
import sys

from omegaconf import DictConfig

from posexp.errors import UsageError

MODULE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def import_encoding(module: str, name: str) -> None:
    """Import ``module`` (encoding.module, from a config file), which registers encoding
    ``name``, from the working directory or the installed packages."""
    from posexp.encodings import ENCODINGS  # the registry imports torch: not for ls

    if not isinstance(module, str) or not MODULE_PATH.fullmatch(module):
        raise UsageError(f"encoding.module must be a dotted Python module path such as "
                         f"my_encodings.cope, got {module!r}")
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
        raise UsageError(f"{name} is posexp's own encoding: encoding.module adds encodings, "
                         f"it does not replace one (give yours another name)")


def import_custom_encoding(cfg: DictConfig) -> None:
    """Import encoding.module where a config names one."""
    if cfg.encoding.get("module") is not None:
        import_encoding(cfg.encoding.module, cfg.encoding.name)
