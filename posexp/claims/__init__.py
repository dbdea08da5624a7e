"""Published claims about length extrapolation, measured here with their uncertainty.

A claim set (registry.py) is a module of this package that registers itself -- press.py
(Press et al., NoPE, the fair baseline), encodings.py (the later encodings, randomized
positions), rope_scaling.py (RoPE context extension), tasks.py (length generalization on
tasks), modern.py (today's baselines) -- and every module of the package is imported here,
so adding a claim set is one module and its preset.  base.py judges a claim; preset.py
reads and checks a preset; suite.py runs one (posexp reproduce).
"""

import importlib
import pkgutil

from posexp.claims.base import Claim, CurveRef, Test, Verdict
from posexp.claims.registry import CLAIM_SETS, ClaimSet, register_claim_set
from posexp.claims.suite import reproduce, verdicts

PROGRAMS = ("digest",)  # run as programs (python -m), imported by their runs alone
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in PROGRAMS:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["CLAIM_SETS", "Claim", "ClaimSet", "CurveRef", "Test", "Verdict",
           "register_claim_set", "reproduce", "verdicts"]
