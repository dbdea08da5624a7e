"""A run's identity: the resolved values of every key that determines its weights.

Two runs of one identity are the same run (skip, resume, or score what is missing); two of
different identities never share a directory.  Evaluation settings, device, kernel, logging
and where a run is written are not identity; the numerics it trains in and the kind of device
(train.precision, train.device_kind: fp32 on a CPU, bf16 on CUDA) are.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from posexp import scaling
from posexp.config.derive import NUMERICS, resolve
from posexp.config.keys import flatten

# What a run's weights do not depend on: where it is written, how it is logged, how it is
# evaluated, on which device and kernel, how often it reports or checkpoints, whether it may
# continue an earlier attempt.  Everything else in the config is its identity.
# train.compile is identity: compiled kernels round otherwise (a tiny RoPE run's weights and
# loss differ from eager's), and a run record is restored by training it again bit for bit.
NOT_IDENTITY = ("results_dir", "experiment", "run_name", "device", "attention", "eval",
                "logger", "train.resume", "train.log_every",
                "train.val_every_tokens", "train.val_tokens", "train.checkpoint_every",
                "data.cache_dir", "parent.run", "task.eval_count", "task.eval_seed",
                "task.depths")
# Nodes that are off unless their first key is set: then none of their keys is identity, so a
# run without them has the identity it had before posexp knew them.
OPTIONAL_NODES = (("encoding.scaling", "method"), ("parent", "identity"))
# Keys that are off when null: then they are not identity either (as OPTIONAL_NODES).
OPTIONAL_KEYS = ("train.random_positions", "encoding.module", "task")
# Switches that are off at false: then neither they nor the keys only they read are identity
# (as OPTIONAL_NODES).
SWITCHES = {"model.ssmax": ("model.ssmax_init",)}
# Every key an identity holds only where it is set: a run without it is one that has it off.
OFF_UNLESS_SET = (*OPTIONAL_KEYS, *SWITCHES, *(k for reads in SWITCHES.values() for k in reads))
# Keys a config written before posexp had them lacks, with the value such a run trained with.
LEGACY = {"model.init": "gpt2"}
# Keys a config written before posexp had them lacks, whose value follows the device the run
# trained on (run.json's device, else config.yaml's; auto, unrecorded, was a CPU's): before
# posexp recorded them every CUDA run trained in bf16, every other in fp32.
LEGACY_BY_DEVICE = ("train.device_kind", "train.precision")
# Identity keys that follow the seed: a fine-tune's parent is another run at each seed.
SEED_KEYS = ("seed", "parent.identity", "parent.weights_sha256")


def in_identity(key: str) -> bool:
    """Whether a dotted config key (or config group) is part of a run's identity."""
    return not any(key == k or key.startswith(f"{k}.") for k in NOT_IDENTITY)


def identity(cfg: DictConfig, trained_on: str | None = None) -> dict:
    """A run's identity: the resolved values of every key that determines its weights
    (model, encoding, data and tokenizer, the training settings that change the weights and
    their numerics, seed, and a fine-tune's parent and RoPE scaling), as a flat
    {dotted key: value}.  ``trained_on``: the device run.json says an older run, whose
    config lacks train.precision, trained on (LEGACY_BY_DEVICE)."""
    flat = flatten(OmegaConf.to_container(resolve(cfg), resolve=True, enum_to_str=True))
    for key, value in LEGACY.items():
        flat.setdefault(key, value)
    if "train.precision" not in flat:
        device = str(trained_on or flat.get("device") or "cpu")
        kind = "cuda" if device.startswith("cuda") else "mps" if device == "mps" else "cpu"
        flat.update({"train.device_kind": kind, "train.precision": NUMERICS[kind]})
    for node, key in OPTIONAL_NODES:
        if flat.get(f"{node}.{key}") is None:
            flat = {k: v for k, v in flat.items() if not k.startswith(f"{node}.")}
    flat = {k: v for k, v in flat.items() if not (k in OPTIONAL_KEYS and v is None)}
    for switch, reads in SWITCHES.items():
        if not flat.get(switch):
            flat = {k: v for k, v in flat.items() if k != switch and k not in reads}
    return own_scaling_params({k: v for k, v in flat.items() if in_identity(k)})


SCALING = "encoding.scaling"


def own_scaling_params(ident: dict) -> dict:
    """An identity whose RoPE scaling (a fine-tune's encoding.scaling) holds only the
    parameters its method reads: a PI fine-tune trains the same weights whatever YaRN's betas
    or ReRoPE's window are, and a method added to posexp's table later adds no key to the
    identity of a run that does not use it.  An unknown method keeps every key."""
    method = scaling.METHODS.get(ident.get(f"{SCALING}.method"))
    if method is None:
        return ident
    own = {f"{SCALING}.{k}" for k in ("method", "factor", *(p.name for p in method.params))}
    return {k: v for k, v in ident.items() if not k.startswith(f"{SCALING}.") or k in own}


def identity_diff(a: dict, b: dict) -> list[str]:
    """'key: old -> new' for each key whose value differs between two identities."""
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]
