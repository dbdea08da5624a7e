"""Precision and device kind in a run's identity: a GPU's bf16 run and a CPU's fp32 run of
one config are two runs, never resumed or compared as one; older runs keep theirs."""
import json

import pytest
from omegaconf import OmegaConf

from posexp import config as C
from posexp.errors import UsageError
from posexp.run.lifecycle import existing, run
from posexp.runs import Run, identity_sha256
from tests.conftest import TINY
from tests.conftest import compose_args as compose


def spec(tmp_path, *overrides: str):
    C.register()
    return C.RunSpec.of(compose([*TINY, f"results_dir={tmp_path}", *overrides]))


def test_precision_and_device_kind_are_identity(tmp_path):
    cpu = spec(tmp_path).identity
    assert (cpu["train.precision"], cpu["train.device_kind"]) == ("fp32", "cpu")
    assert spec(tmp_path, "train.precision=fp32").identity == cpu  # auto is the CPU's fp32
    bf16 = spec(tmp_path, "train.precision=bf16").identity
    assert C.identity_diff(cpu, bf16) == ["train.precision: 'fp32' -> 'bf16'"]
    gpu = spec(tmp_path, "train.device_kind=cuda").identity  # auto on CUDA: bf16
    assert C.identity_diff(cpu, gpu) == ["train.device_kind: 'cpu' -> 'cuda'",
                                         "train.precision: 'fp32' -> 'bf16'"]


def test_a_run_trained_in_fp32_refuses_to_continue_in_bf16(tmp_path):
    fp32 = spec(tmp_path)
    Run.create(fp32.path, fp32.cfg)  # an unfinished fp32 attempt
    with pytest.raises(UsageError) as e:
        existing(Run(fp32.path), spec(tmp_path, "train.precision=bf16",
                                      "train.device_kind=cuda"))
    message = str(e.value)
    assert "\n" not in message and "another identity" in message
    assert "train.precision: 'fp32' -> 'bf16'" in message
    with pytest.raises(UsageError, match=r"^train.precision=bf16, but cpu trains in fp32"):
        run(spec(tmp_path, "train.precision=bf16"), progress=False)  # refused before training
    assert json.loads((fp32.path / "run.json").read_text())["status"] == "running"


@pytest.mark.parametrize(("device", "kind", "precision"), [
    ("cuda:0", "cuda", "bf16"), ("cpu", "cpu", "fp32"), (None, "cpu", "fp32")])
def test_a_run_from_before_precision_keeps_the_identity_it_trained_with(tmp_path, device, kind,
                                                                         precision):
    """config.yaml and run.json of a run trained before posexp recorded its numerics: it
    trained in its device's (bf16 on CUDA), and its record without them is no edit."""
    old = spec(tmp_path)
    config = OmegaConf.to_container(old.cfg, resolve=True, enum_to_str=True)
    del config["train"]["precision"], config["train"]["device_kind"]
    Run.create(old.path, OmegaConf.create(config))
    info = json.loads((old.path / "run.json").read_text())
    for key in ("train.precision", "train.device_kind"):  # as such a run recorded it
        del info["identity"][key]
    info.update(identity_sha256=identity_sha256(info["identity"]), device=device)
    (old.path / "run.json").write_text(json.dumps(info))
    ident = Run(old.path).check_identity(info)
    assert (ident["train.device_kind"], ident["train.precision"]) == (kind, precision)
    if kind == "cpu":  # the same run as this CPU's: continued, not refused
        assert existing(Run(old.path), old)["status"] == "running"
    else:
        with pytest.raises(UsageError, match=r"train.device_kind: 'cuda' -> 'cpu'"):
            existing(Run(old.path), old)


def test_every_gpu_preset_declares_its_precision():
    from posexp.claims.preset import load_preset

    for name in ("gpu", "encodings-gpu", "rope-scaling-gpu", "tasks-gpu"):
        assert "train.precision=bf16" in list(load_preset(name)[0].overrides), name
