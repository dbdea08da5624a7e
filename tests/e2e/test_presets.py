"""Model presets (configs/model/): each states its parameter count, and the count is right."""
import re

from tests.unit.test_presets import MODELS, PRESETS  # noqa: F401


def test_train_help_lists_the_presets(posexp):
    r = posexp("train", "-h")
    assert r.returncode == 0, r.stderr
    shown = ", ".join(f"[{p}]" if p == "tiny" else p for p in PRESETS)  # tiny: the default
    assert re.search(rf"model=\s+{re.escape(shown)}", r.stdout)
