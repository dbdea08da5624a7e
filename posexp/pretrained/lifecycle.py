"""A pretrained run end to end: its config and identity, the lock, create / continue /
refuse, and scoring what is missing.  ``posexp pretrained`` calls ``pretrained``;
``posexp eval`` and ``posexp resume`` of a pretrained run call ``evaluate_dir``.

| what the run directory holds      | posexp pretrained MODEL ...                          |
|-----------------------------------|------------------------------------------------------|
| nothing                           | creates the run and scores what the config asks for  |
| a run of the same identity        | scores the points eval.json lacks (none: says so)    |
| a run of another identity         | refuses (exit 2), naming the keys that differ        |

A run that has not finished scoring says ``running`` (``interrupted``, ``failed``) until it
has; running the same command again scores only what is missing.  It never trains.
"""

from __future__ import annotations

import contextlib
import re
import signal
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from posexp.config import RunSpec
from posexp.data import Corpus
from posexp.errors import PosexpError, Stopped, UsageError
from posexp.evaluate.rolling import scored_text
from posexp.evaluate.windows import Scoring
from posexp.pretrained import config as pcfg
from posexp.pretrained.model import (
    Described,
    PretrainedLM,
    describe,
    dtype_for,
    hf_config,
    load,
    transformers,
)
from posexp.pretrained.rope import check_scalings
from posexp.pretrained.scoring import PretrainedWorkload, load_text, score_all
from posexp.pretrained.source import Source, fingerprints, resolve
from posexp.run.evaluation import (
    points_to_score,
    raising_on_signals,
    requested_table,
    score_timed,
)
from posexp.run.lifecycle import ending, previous_of
from posexp.run.setup import pick_device
from posexp.run.workloads import wanted_text
from posexp.runs import CONFIG, Run, atomic_write_text, code_version, versions

KIND = "pretrained"  # run.json's "kind"


def data_group(overrides: list[str]) -> dict:
    """The data group of ``overrides`` (data=NAME, data.*), composed by posexp's configs and
    checked as posexp train checks it; the tokenizer is the model's (tokenizer: file)."""
    from posexp.config import compose_overrides, register
    from posexp.data.checks import check_data, check_paths, is_task_data

    register()  # the schemas in Hydra's ConfigStore (the CLI does it too; once is enough)
    data = compose_overrides(overrides, command="pretrained").data
    if is_task_data(data):
        raise UsageError("data=task is posexp's own task vocabulary; a pretrained model is "
                         "scored on text (data=stdlib, text, hf, ...) and on prompts with "
                         "task=passkey or a RULER task (task=niah_multikey, ...)")
    check_data(data)
    check_paths(data)
    data = OmegaConf.to_container(data, enum_to_str=True)
    data.update(tokenizer="file", tokenizer_path=None)
    return data


def build(model: str, revision: str | None, overrides: list[str]
          ) -> tuple[DictConfig, Source, Described]:
    """The config of ``posexp pretrained MODEL [overrides]``, checked: the settings first,
    then the model's files resolved and hashed."""
    data_args, rest = pcfg.split(overrides, pcfg.CREATE_KEYS, "pretrained")
    data = data_group(data_args)
    source = resolve(model, revision)
    config = hf_config(source.path)
    d = describe(config)
    cfg = pcfg.structured(OmegaConf.create({
        "pretrained": {"id": source.id, "revision": source.revision, **fingerprints(source),
                       "architecture": d.architecture, "positions": d.positions},
        "encoding": {"name": source.name, "max_positions": d.max_positions, "base": d.base},
        "model": {"d_model": d.d_model, "n_layer": d.n_layer, "n_head": d.n_head,
                  "d_ff": d.d_ff, "tie_weights": d.tie_weights},
        "train": {"seq_len": d.context}, "data": data,
        "run_name": re.sub(r"[^\w.,=+-]", "-", source.name)}))
    pcfg.apply(cfg, rest)
    pcfg.defaults(cfg)
    pcfg.check(cfg)
    check_scalings(config, d, source.name, pcfg.scalings(cfg))
    return cfg, source, d


def pretrained(model: str, revision: str | None, overrides: list[str],
               progress: bool = True) -> str:
    """``posexp pretrained``: "completed" (scored), or "skipped" (nothing missing)."""
    cfg, source, d = build(model, revision, overrides)
    spec = pcfg.spec_of(cfg)
    device, path = pick_device(spec, training=False), spec.path
    run = Run(path)
    with run.lock():
        info = previous_of(run, dict(spec.identity), "repair or remove it",
                           "choose another run_name= or experiment=")
        loaded = _load(spec, source, d, device)  # before the run directory changes
        if info is None:
            run = Run.create(path, cfg)
            info = run.info()
        else:
            atomic_write_text(path / CONFIG, OmegaConf.to_yaml(cfg, resolve=True))
        run.update(kind=KIND, name=cfg.run_name, experiment=cfg.experiment,
                   encoding=cfg.encoding.name, seq_len=cfg.train.seq_len,
                   model={k: cfg.model[k] for k in ("d_model", "n_layer", "n_head")},
                   pretrained={"id": source.id, "revision": source.revision,
                               "path": str(source.path), "architecture": d.architecture,
                               "positions": d.positions},
                   versions=_versions(), code_version=code_version())
        return _score(run, spec, source, loaded, d, device, info["status"], progress)


def evaluate_dir(path: Path, overrides: list[str], command: str = "eval",
                 progress: bool = True) -> str:
    """``posexp eval RUN`` (or ``posexp resume RUN``) of a pretrained run: score what its
    config, changed by ``overrides``, asks for that eval.json lacks."""
    run = Run(path)
    cfg = pcfg.structured(run.config())
    _, rest = pcfg.split(overrides, pcfg.EVAL_KEYS, command)
    pcfg.apply(cfg, rest)
    pcfg.defaults(cfg)
    pcfg.check(cfg)
    spec = pcfg.spec_of(cfg)
    device = pick_device(spec, training=False)
    with run.lock():
        info = run.info()
        source = source_of(cfg, info, path)
        config = hf_config(source.path)
        d = describe(config)
        check_scalings(config, d, spec.encoding.name, spec.scalings)
        loaded = _load(spec, source, d, device)
        return _score(run, spec, source, loaded, d, device, info.get("status"), progress)


def source_of(cfg: DictConfig, info: dict, path: Path) -> Source:
    """The files a run was made from -- where run.json says, else the hub cache -- checked
    to be the same files (weights, config, tokenizer)."""
    p = cfg.pretrained
    where = (info.get("pretrained") or {}).get("path")
    if where and Path(where).is_dir():
        source = Source(p.id, Path(where), p.revision)
    elif p.revision is not None:
        source = resolve(p.id, p.revision)
    else:
        raise PosexpError(f"the model directory {path} was made from ({where}) is gone; "
                          "posexp pretrained DIR with the model's new place continues the run")
    now_ = fingerprints(source)
    changed = [k for k, v in now_.items() if p[k] != v]
    if changed:
        raise PosexpError(f"the model's files have changed since {path} was made "
                          f"({', '.join(changed)} differs): this is another model, another run")
    return source


def stopped_by_signals() -> contextlib.AbstractContextManager[None]:
    """SIGINT and SIGTERM stop what runs inside at once (nothing half-scored is written):
    a Stopped that says the points scored so far are kept, exit 128 + the signal."""

    def error_of(signum: int) -> Stopped:
        error = Stopped(f"stopped by {signal.Signals(signum).name}; the points scored so far "
                        "are in eval.json; run the same command again to score the rest")
        error.exit_code = 128 + signum
        return error

    return raising_on_signals(error_of)


def _versions() -> dict:
    return {**versions(), "transformers": transformers().__version__}


def _load(spec: RunSpec, source: Source, d: Described, device) -> tuple[PretrainedLM, Corpus]:
    """The model and the corpus it is scored on, loaded and checked: what can fail on the
    model's files or the data does so before the run directory is made or changed."""
    lm = PretrainedLM(load(source, device, spec.attention), d, spec.encoding.name)
    return lm, load_text(spec, source, lm.model.get_input_embeddings().num_embeddings)


def _score(run: Run, spec: RunSpec, source: Source, loaded: tuple[PretrainedLM, Corpus],
           d: Described, device, status: str | None, progress: bool) -> str:
    """Score what eval.json lacks with the model and corpus ``loaded``; run.json ends
    completed (a completed run stays so if stopped, with the points scored so far)."""
    lm, corpus = loaded
    spans = scored_text(corpus, Scoring.of(spec.eval).mode, spec.eval.tokens)
    work, asked = PretrainedWorkload(spec, spans, str(run.path)), spec.scalings
    todo, held = points_to_score(run, work, asked)
    run.update(device=str(device), dtype=str(dtype_for(device)).removeprefix("torch."),
               n_params=lm.n_params(), corpus=corpus.describe())
    if not todo and not held:
        print(f"posexp: {run.path}: eval.json holds every point asked for; nothing to score",
              file=sys.stderr)
        print(requested_table(run, work, asked, None))
        return "skipped"
    # past the length it was trained at is allowed where it has no table of positions to
    # run out of (RoPE): scored as its positions extrapolate, and said so here
    past = ", scored past it as its positions extrapolate" if d.max_positions is None and \
        any(n > d.context for n in spec.eval_lengths) else ""
    print(f"posexp: {spec.encoding.name} ({d.architecture}, {lm.n_params() / 1e6:.2f}M "
          f"parameters, {d.positions} positions, trained at {d.context}{past}) on {device} -> "
          f"{run.path}: {wanted_text(todo, work.item_text)}", file=sys.stderr)
    tokenizer = transformers().AutoTokenizer.from_pretrained(source.path, local_files_only=True)
    done = status == "completed"
    if not done:
        run.update(status="running", reason=None)
    with ending(run, completed=done) as ended:
        ended["eval_seconds"] = score_timed(
            run, lambda: score_all(lm, tokenizer, run, spec, corpus, todo, held, device,
                                   progress), stopped_by_signals())
    print(requested_table(run, work, asked, None))
    return "completed"
