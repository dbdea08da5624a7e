"""A shipped claim-suite preset as one mapping, its margins file's thresholds inline: the shape
a test changes and writes to a file of its own (a preset may hold its thresholds itself)."""

from pathlib import Path

import yaml

from posexp.config import CONFIG_DIR

PRESETS = Path(CONFIG_DIR) / "reproduce"


def shipped_preset(name: str) -> dict:
    tree = yaml.safe_load((PRESETS / f"{name}.yaml").read_text())
    margins = tree.pop("margins")
    tree["thresholds"] = yaml.safe_load((PRESETS / "margins" / f"{margins}.yaml").read_text())
    return tree
