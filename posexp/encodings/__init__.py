"""Positional encodings by name: ``encoding=<name>`` resolves through ``ENCODINGS``.

Every module of this package is imported here, and each encoding module registers itself
(registry.py), so adding an encoding is one module in this package and one YAML file under
``configs/encoding/``.
"""

import importlib
import pkgutil

from posexp.encodings.base import PositionalEncoding
from posexp.encodings.registry import (
    ENCODINGS,
    EncodingSpec,
    ModelShape,
    build_encoding,
    encoding_config,
    in_order,
    spec_of,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ENCODINGS", "EncodingSpec", "ModelShape", "PositionalEncoding", "build_encoding",
           "encoding_config", "in_order", "spec_of"]
