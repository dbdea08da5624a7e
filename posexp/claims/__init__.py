"""Published claims about length extrapolation, measured here with their uncertainty.

A claim set (registry.py) is a module that registers itself: press.py (Press et al., NoPE,
the fair baseline), encodings.py (the later encodings, randomized positions),
rope_scaling.py (RoPE context extension), tasks.py (length generalization on tasks),
modern.py (today's baselines).  base.py
judges a claim; preset.py reads and checks a preset; suite.py runs one (posexp reproduce).
"""

# the claim sets register themselves, in this order
from posexp.claims import press, rope_scaling, encodings, tasks, modern  # noqa: F401, I001
from posexp.claims.base import Claim, CurveRef, Test, Verdict
from posexp.claims.registry import CLAIM_SETS, ClaimSet, register_claim_set
from posexp.claims.suite import reproduce, verdicts

__all__ = ["CLAIM_SETS", "Claim", "ClaimSet", "CurveRef", "Test", "Verdict",
           "register_claim_set", "reproduce", "verdicts"]
