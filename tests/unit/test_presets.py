"""Model presets (configs/model/): each states its parameter count, and the count is right."""
import re
from importlib.resources import files
from pathlib import Path

import pytest
import torch
import yaml

from posexp import config as C
from posexp.data.tokenizer import ByteTokenizer
from tests.conftest import build_model
from tests.conftest import compose_args as compose

MODELS = Path(str(files("posexp.configs"))) / "model"


PRESETS = sorted(p.stem for p in MODELS.glob("*.yaml"))


def count_on_meta(cfg, vocab: int) -> int:
    """The model's parameter count, built on the meta device: shapes without memory or
    initialisation (GPT-2 base built for real took 15 s of the suite)."""
    with torch.device("meta"):
        return build_model(cfg, vocab).n_params()


@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_states_its_parameter_count(name):
    stated = re.search(r"# ([\d,]+) parameters with byte tokens \(vocabulary (\d+)\)",
                       (MODELS / f"{name}.yaml").read_text())
    assert stated, f"configs/model/{name}.yaml states no parameter count"
    count, vocab = int(stated.group(1).replace(",", "")), int(stated.group(2))
    assert vocab == ByteTokenizer.vocab_size  # the default corpus's tokens
    C.register()
    tied = compose([f"model={name}"]).model.tie_weights
    for encoding in ("rope", "alibi", "nope", "sinusoidal"):  # none of them adds parameters
        cfg = C.resolve(compose([f"model={name}", f"encoding={encoding}"]))
        assert count_on_meta(cfg, vocab) == count
        # one head policy for every encoding: the other one moves every count alike
        other = C.resolve(compose([f"model={name}", f"encoding={encoding}",
                                   f"model.tie_weights={str(not tied).lower()}"]))
        head = vocab * cfg.model.d_model
        assert count_on_meta(other, vocab) == count + (head if tied else -head)
    cfg = C.resolve(compose([f"model={name}", "encoding=learned"]))
    assert count_on_meta(cfg, vocab) == count + cfg.train.seq_len * cfg.model.d_model


def test_the_gpu_claim_suite_uses_the_gpu_preset():
    preset = yaml.safe_load((MODELS.parent / "reproduce" / "gpu.yaml").read_text())
    assert "model=gpu" in preset["overrides"]
    assert not [o for o in preset["overrides"] if o.startswith("model.")]
    C.register()
    cfg = compose(preset["overrides"])
    assert (cfg.model.d_model, cfg.model.n_layer, cfg.model.n_head) == (512, 8, 8)
