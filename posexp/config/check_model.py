"""The checks of what is trained: the model's shape and the encoding (one posexp has, its
hyperparameters, a kernel that can apply its score bias, positions to randomize)."""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig, OmegaConf

from posexp.config.bounds import MAX_LENGTH, MAX_PARAMS
from posexp.config.check_scaling import check_train_scaling
from posexp.config.custom import import_custom_encoding
from posexp.config.derive import encoding_hparams, is_task_run, positions_trained
from posexp.config.schema import Attention, TokenizerKind
from posexp.errors import UsageError
from posexp.values import in_range, positive


def check_encoding(cfg: DictConfig) -> None:
    """The encoding is one posexp has, its hyperparameters are its own and in range, and an
    attention kernel asked for can apply its score bias."""
    from posexp.encodings import ENCODINGS, encoding_config  # the registry imports torch
    from posexp.encodings.registry import capability

    e = cfg.encoding
    if not import_custom_encoding(cfg):
        return  # an encoding of the user's own, not imported to show a config (config/custom.py)
    if e.name not in ENCODINGS:
        raise UsageError(f"encoding.name {e.name!r} is not an encoding posexp has; known: "
                         f"{', '.join(sorted(ENCODINGS))} (to add one, a config file under "
                         "--config-dir names its module in encoding.module)")
    if e.max_positions is not None:
        positive("encoding.max_positions", e.max_positions, MAX_LENGTH)
    in_range("encoding.base", e.base, 1.0, 1e12, low_open=True)
    try:
        encoding_config(e.name, encoding_hparams(cfg), e.base,
                        e.max_positions or cfg.train.seq_len)
    except ValueError as error:
        raise UsageError(str(error)) from None
    spec = ENCODINGS[e.name]
    kernels = capability(e.name, encoding_hparams(cfg), "bias_kernels")
    kernel = Attention(cfg.attention)
    if kernels and kernel != Attention.auto and kernel.value not in kernels:
        raise UsageError(f"attention={kernel.value} cannot apply {e.name}'s score bias; it runs "
                         f"on {', '.join(kernels)} (attention=auto picks the fastest)")
    fine_tune = OmegaConf.select(cfg, "parent.identity", default=None) is not None
    table = "max_positions" in {f.name for f in dataclasses.fields(spec.config)}
    random = cfg.train.get("random_positions")
    if random is not None and not spec.reads_positions:
        raise UsageError(f"train.random_positions has nothing to randomize: {e.name} reads no "
                         "positions")
    if table and e.max_positions is not None and e.max_positions < positions_trained(cfg):
        raise UsageError(
            f"encoding.max_positions ({e.max_positions}) is less than "
            + (f"train.random_positions ({random})" if random else
               f"train.seq_len ({cfg.train.seq_len})")
            + f": {e.name} has no position past its table"
            + (", and a fine-tune keeps its parent's table (rows past it would start "
               "untrained)" if fine_tune else ""))
    check_train_scaling(cfg, fine_tune)


def encoding_reads(name: str) -> tuple[str, ...]:
    """The top-level keys of the encoding group (encoding.base, encoding.max_positions) that
    encoding ``name`` reads: those its config dataclass declares as fields (the registry's
    TOP_LEVEL), so that a new encoding says what it reads in one place."""
    from posexp.encodings import ENCODINGS
    from posexp.encodings.registry import TOP_LEVEL

    fields = {f.name for f in dataclasses.fields(ENCODINGS[name].config)}
    return tuple(key for key in TOP_LEVEL if key in fields)


def unread_encoding_key(cfg: DictConfig, key: str) -> str | None:
    """Why ``key`` (encoding.base, encoding.max_positions), given a value, is not read by this
    run's encoding; None when it is read, or is not such a key."""
    if not key.startswith("encoding."):
        return None  # before the imports below: they build every encoding, torch with them
    from posexp.encodings import ENCODINGS
    from posexp.encodings.registry import TOP_LEVEL

    part = key.removeprefix("encoding.")
    if part not in TOP_LEVEL:
        return None

    name = cfg.encoding.name
    if name not in ENCODINGS:
        return None
    if part in encoding_reads(name):
        return None
    readers = [n for n in sorted(ENCODINGS) if part in encoding_reads(n)]
    who = " and ".join([", ".join(readers[:-1]), readers[-1]] if len(readers) > 1 else readers)
    return (f"{key} is set, but encoding={name} does not read it (only {who} "
            f"{'does' if len(readers) == 1 else 'do'}); leave {key} out, or choose an "
            "encoding that reads it")


def check_positions(cfg: DictConfig, encoding: object) -> None:
    """An encoding whose positions stop somewhere (xPos's scale leaves float32 past its
    max_positions) reaches every position training reads: train.seq_len, or M of
    train.random_positions.  ``encoding`` is the module built for this model."""
    from posexp.encodings import ENCODINGS

    limit = getattr(encoding, "max_positions", None)
    needed = positions_trained(cfg)
    spec = ENCODINGS.get(cfg.encoding.name)
    if (spec is not None and spec.position_table) or limit is None or limit >= needed:
        return  # a table's rows are encoding.max_positions, checked in check_encoding
    hparams = encoding_hparams(cfg)
    settings = ", ".join(f"encoding.hparams.{k}={v}" for k, v in hparams.items()) or \
        "its defaults"
    what = (f"train.random_positions ({needed})" if cfg.train.get("random_positions")
            else f"train.seq_len ({needed})")
    raise UsageError(f"encoding={cfg.encoding.name} with {settings} reaches only {limit:,} "
                     f"positions, fewer than {what}: training would fail at its first step; "
                     "change those settings or lower the length")


def encoding_params(cfg: DictConfig) -> int:
    """The parameters of the encoding built for this model's shape.  It is built on the meta
    device, which allocates nothing, so every check its constructor makes (rope and xpos need
    an even head dimension) runs here."""
    import torch

    from posexp.encodings import ModelShape, build_encoding

    e, m = cfg.encoding, cfg.model
    if not import_custom_encoding(cfg):
        return 0  # an encoding of the user's own, not imported to show a config
    try:
        with torch.device("meta"):
            encoding = build_encoding(e.name, ModelShape(m.d_model, m.n_head, m.n_layer),
                                      encoding_hparams(cfg), e.base,
                                      e.max_positions or cfg.train.seq_len)
    except ValueError as error:
        raise UsageError(str(error)) from None
    check_positions(cfg, encoding)
    return sum(p.numel() for p in encoding.parameters())


def check_model(cfg: DictConfig) -> None:
    m = cfg.model
    positive("model.d_model", m.d_model, 2**16)
    positive("model.n_layer", m.n_layer, 2**10)
    positive("model.n_head", m.n_head, 2**12)
    if m.d_ff is not None:
        positive("model.d_ff", m.d_ff, 2**18)
    if m.d_model % m.n_head:
        raise UsageError(
            f"model.d_model ({m.d_model}) must be divisible by model.n_head ({m.n_head})"
        )
    in_range("model.dropout", m.dropout, 0.0, 1.0, high_open=True)
    if m.get("ssmax_init") is not None:
        if not m.ssmax:
            raise UsageError("model.ssmax_init is set, but model.ssmax is false: add "
                             "model.ssmax=true, or leave model.ssmax_init out")
        in_range("model.ssmax_init", m.ssmax_init, 0.0, 100.0, low_open=True)
    # parameters counted from the shape: attention 4 d^2, MLP 2 d d_ff, embeddings, encoding
    d, d_ff = m.d_model, m.d_ff or 4 * m.d_model
    vocab = cfg.data.vocab_size if TokenizerKind(cfg.data.tokenizer) != TokenizerKind.byte \
        or is_task_run(cfg) else 256
    params = m.n_layer * (4 * d * d + 2 * d * d_ff) + 2 * vocab * d + encoding_params(cfg)
    if params > MAX_PARAMS:
        raise UsageError(f"this model would have about {params:.2g} parameters, more than "
                         f"posexp trains ({MAX_PARAMS:.0e}); lower model.d_model, model.n_layer "
                         "or model.d_ff")
