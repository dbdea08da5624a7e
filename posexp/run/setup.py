"""What a run needs before it trains or scores: its device, and its model built from the
spec (RoPE-scaled as a fine-tune with encoding.scaling trains and scores it)."""

from __future__ import annotations

import math

import torch

from posexp.config import RunSpec, check_device
from posexp.config.custom import import_custom
from posexp.config.derive import NUMERICS
from posexp.config.schema import Attention, Init
from posexp.errors import UsageError
from posexp.model import GPT, GPTConfig
from posexp.scaling import RopeScaling


def pick_device(cfg, training: bool = True) -> torch.device:
    """The device to run on (device=auto|cpu|cuda|cuda:N|mps, checked against what torch
    sees); on CUDA this also allows TF32 (allow_tf32).  ``cfg`` is a RunSpec, or a config
    not yet made one (a command line checked before anything runs)."""
    requested = str(cfg.device)
    mps = getattr(torch.backends, "mps", None)
    check_device(requested, torch.cuda.device_count() if torch.cuda.is_available() else 0,
                 bool(mps and mps.is_available()))
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    where = "the CPU" if requested == "cpu" else requested
    kernel = Attention(cfg.attention)
    if not requested.startswith("cuda") and kernel == Attention.flash:
        raise UsageError(f"attention=flash runs on CUDA only, and this run is on {where}; "
                         "use attention=auto")
    if not requested.startswith("cuda") and training and kernel == Attention.flex:
        raise UsageError(f"attention=flex cannot train on {where} (FlexAttention has no "
                         f"{'CPU' if requested == 'cpu' else 'MPS'} backward); use "
                         "attention=auto, or flex in posexp eval")
    device = torch.device(requested)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)  # device=cuda:N: kernels that use the current GPU too
    allow_tf32(device)
    return device


def check_numerics(spec: RunSpec, device: torch.device) -> None:
    """The run trains on the kind of device and in the numerics its identity says
    (train.device_kind, train.precision): a GPU preset's bf16 run is not trained in fp32 on
    a CPU under the GPU run's identity, nor the other way round.  One line when not."""
    t = spec.train
    kind, precision = str(t.device_kind), str(getattr(t.precision, "value", t.precision))
    if device.type != kind:
        raise UsageError(f"train.device_kind={kind}, but this run would train on {device}; "
                         f"use device={kind}, or train.device_kind=null for {device.type}'s")
    if precision != NUMERICS[kind]:
        raise UsageError(f"train.precision={precision}, but {kind} trains in "
                         f"{NUMERICS[kind]}; use train.precision=auto or "
                         f"{NUMERICS[kind]}, or a device that trains in {precision}")


def allow_tf32(device: torch.device) -> None:
    """TF32 for the fp32 matmuls left outside bf16 autocast on CUDA."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def build_model(spec: RunSpec, vocab_size: int) -> GPT:
    """The model of a run, RoPE scaled as a fine-tune with encoding.scaling trains and
    scores it."""
    m, e = spec.model, spec.encoding
    import_custom(e.module, e.name)  # an encoding from outside posexp's source
    model = GPT(GPTConfig(
        vocab_size=vocab_size, d_model=m.d_model, n_layer=m.n_layer, n_head=m.n_head,
        d_ff=m.d_ff, encoding=e.name, max_positions=e.max_positions, base=e.base,
        dropout=m.dropout, tie_weights=m.tie_weights, init=Init(m.init).value,
        attention=Attention(spec.attention).value,
        encoding_hparams=spec.encoding_hparams, ssmax_init=ssmax_init(spec)))
    if spec.train_scaling is not None:
        set_scaling(model, spec, spec.train_scaling)
    return model


def ssmax_init(spec: RunSpec) -> float | None:
    """SSMax's s_h at the start (model.ssmax_init), or None without SSMax.  By default 1 / ln
    L of the length the weights were first trained at, so that at the start a query that
    sees L keys has softmax's logits."""
    m = spec.model
    if not m.ssmax:
        return None
    if m.ssmax_init is not None:
        return float(m.ssmax_init)
    return 1.0 / math.log(spec.original_len or spec.train.seq_len)


def set_scaling(model: GPT, spec: RunSpec, record: dict | None) -> None:
    """Score ``model`` with the RoPE scaling ``record``; None puts it back as trained (for a
    fine-tune with encoding.scaling, its own scaling).  Only cos and sin change."""
    record = record if record is not None else spec.train_scaling
    model.set_rope_scaling(record and RopeScaling(**record), spec.original_len)
