"""The checks of RoPE scaling: eval.rope_scaling (scorings of a trained run) and
encoding.scaling (a fine-tune's), against the table of methods (posexp/scaling.py) and the
encoding, which must rotate queries and keys by RoPE's frequencies."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from posexp import scaling
from posexp.config.derive import as_list, encoding_hparams, eval_scalings, train_scaling
from posexp.errors import UsageError
from posexp.values import in_range, listed_once


def scalable(cfg: DictConfig) -> bool:
    """Whether the run's encoding takes RoPE scaling (its module, or for a hybrid its
    pattern, says so)."""
    from posexp.encodings import ENCODINGS  # the registry imports torch
    from posexp.encodings.registry import capability

    name = cfg.encoding.name
    return name in ENCODINGS and bool(capability(name, encoding_hparams(cfg), "rope_scalable"))


def _numbers(key: str, node: DictConfig, factors: list) -> None:
    for factor in factors:
        in_range(f"{key}.factor", factor, 1.0, 1e6)
    for param in scaling.all_params():
        in_range(f"{key}.{param.name}", node[param.name], 0.0, 1e6, low_open=not param.zero)


def _computable(key: str, records: list[dict]) -> None:
    """Each record is a scaling its method can compute."""
    for rec in records:
        try:
            scaling.RopeScaling(**rec)
        except ValueError as e:
            raise UsageError(f"{key}: {e}") from None


def _needs_rope(key: str, what: str, cfg: DictConfig) -> None:
    if not scalable(cfg):
        raise UsageError(f"{key}{what} needs encoding=rope (it rescales RoPE's frequencies); "
                         f"this run is encoding={cfg.encoding.name}")


def unread_scaling_key(cfg: DictConfig, key: str) -> str | None:
    """Why a method parameter given a value (eval.rope_scaling.beta_fast, encoding.scaling.
    low_freq_factor, ...) is read by none of the node's methods -- none chosen, or only
    methods without it (the table says which reads what); None when one reads it."""
    node_key, _, name = key.rpartition(".")
    if node_key not in ("eval.rope_scaling", "encoding.scaling") or \
            name not in {p.name for p in scaling.all_params()}:
        return None
    node = OmegaConf.select(cfg, node_key, default=None)
    chosen = [str(m) for m in as_list(node.method)] if node is not None \
        and node.method is not None else []
    if any(name in {p.name for p in scaling.METHODS[m].params} for m in chosen
           if m in scaling.METHODS):
        return None
    readers = [m.name for m in scaling.METHODS.values() if name in {p.name for p in m.params}]
    which = f"{node_key}={','.join(chosen)} does not read it" if chosen else \
        f"{node_key} has no method"
    return (f"{key} is set, but {which}: it is a parameter of {' and '.join(readers)}; add "
            f"{node_key}={readers[0]}, or leave {key} out")


def check_train_scaling(cfg: DictConfig, fine_tune: bool) -> None:
    """encoding.scaling: off, or one method at one factor for a fine-tune of a RoPE run."""
    node = OmegaConf.select(cfg, "encoding.scaling", default=None)
    if node is None:
        return
    tunable = ", ".join(scaling.fine_tunable())
    if node.method is None:
        if node.factor != 1.0:
            raise UsageError("encoding.scaling.factor is set but encoding.scaling.method is "
                             f"not; add encoding.scaling=METHOD ({tunable})")
        return
    if isinstance(node.method, str) and node.method in scaling.computed() and \
            scaling.METHODS[node.method].eval_only:
        raise UsageError(f"encoding.scaling={node.method} is applied at evaluation only, "
                         "without training; score the run with "
                         f"posexp eval RUN eval.rope_scaling={node.method}")
    if not isinstance(node.method, str) or node.method not in scaling.fine_tunable():
        raise UsageError(f"encoding.scaling.method must be one of {tunable}, "
                         f"got {node.method!r}")
    _needs_rope("encoding.scaling", "", cfg)
    if not fine_tune:
        raise UsageError("encoding.scaling is for fine-tuning a trained run at a longer "
                         "length: posexp finetune PARENT_RUN encoding.scaling=METHOD "
                         "encoding.scaling.factor=S")
    _numbers("encoding.scaling", node, [node.factor])
    _computable("encoding.scaling", [train_scaling(cfg)])


def check_eval_scaling(cfg: DictConfig) -> None:
    """eval.rope_scaling: methods (plain among them) and factors, each listed once, every
    scaling computable, and a RoPE run to apply them to."""
    key = "eval.rope_scaling"
    node = OmegaConf.select(cfg, key, default=None)
    if node is None:
        return
    if node.method is None:
        if as_list(node.factor) != [1.0]:
            raise UsageError(f"{key}.factor is set but {key}.method is not; add "
                             f"{key}=METHOD ({scaling.names()})")
        return
    methods, factors = as_list(node.method), as_list(node.factor)
    known = (scaling.PLAIN, *scaling.computed())
    for name, values in (("method", methods), ("factor", factors)):
        if not values:
            raise UsageError(f"{key}.{name} is an empty list")
        listed_once(f"{key}.{name}", list(values))
    for method in methods:
        if not isinstance(method, str) or method not in known:
            raise UsageError(f"{key}.method must be one of {', '.join(known)} or a list of "
                             f"them (e.g. {key}=linear,yarn), got {method!r}")
    _numbers(key, node, factors)
    if set(methods) == {scaling.PLAIN} and factors != [1.0]:
        raise UsageError(f"{key}.factor is set but the only method is {scaling.PLAIN}, which "
                         "has none")
    scaled = [m for m in methods if m != scaling.PLAIN]
    rope = [m for m in scaled if scaling.METHODS[m].needs_rope]
    if scaled and factors != [1.0] and not any(scaling.METHODS[m].reads_factor for m in scaled):
        raise UsageError(f"{key}.factor is set but {', '.join(scaled)} takes no factor")
    if rope:
        _needs_rope(key, f"={','.join(rope)}", cfg)
    _computable(key, [r for r in eval_scalings(cfg) if r is not None])
