"""Scoring a pretrained model: the points its config asks for that eval.json lacks -- the
perplexity curve on posexp's scored spans (posexp/evaluate/windows.py, the protocol every run is
scored by) and passkey retrieval -- for the model as published and each RoPE scaling, each
scaling's curve and each passkey point written as soon as scored.

The corpus is the data group's, tokenized by the model's tokenizer.json through posexp's
token cache (posexp/data); its validation split is the one a from-scratch run on the same
data group is scored on.  Bits per byte count the bytes each token stands for
(``token_bytes``), so runs with different tokenizers compare per byte of the same documents.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from posexp import scaling
from posexp.data import Corpus, load_corpus
from posexp.errors import UsageError
from posexp.evaluate.windows import (
    Scoring,
    check_val_size,
    curve_windows,
    score_curves,
)
from posexp.pretrained import passkey
from posexp.pretrained.config import scalings
from posexp.pretrained.model import PretrainedLM
from posexp.pretrained.rope import Rescaler
from posexp.pretrained.source import TOKENIZER, Source
from posexp.run.tables import format_curve, format_tasks
from posexp.run.workloads import curve_wants
from posexp.runs import Run, point_key, task_point_key
from posexp.spans import Spans

BYTE_FALLBACK = "<0x"  # a sentencepiece byte token, <0x0A>: one byte


def token_bytes(definition: str, vocab_size: int) -> np.ndarray:
    """The bytes of text each token id stands for: a byte-level token's characters are one
    byte each; a byte-fallback token <0xNN> is one byte; otherwise the token's text with
    sentencepiece's '\u2581' read as the space it stands for (decoding a token alone drops
    that space).  Special tokens stand for no text."""
    tree = json.loads(definition)
    byte_level = ((tree.get("decoder") or {}).get("type") == "ByteLevel")
    vocab = dict((tree.get("model") or {}).get("vocab") or {})
    special = {t["content"] for t in tree.get("added_tokens", []) if t.get("special")}
    vocab.update({t["content"]: t["id"] for t in tree.get("added_tokens", [])})
    out = np.zeros(vocab_size, dtype=np.int64)
    for token, i in vocab.items():
        if token in special or i >= vocab_size:
            continue
        if byte_level:
            out[i] = len(token)
        elif token.startswith(BYTE_FALLBACK) and len(token) == 6 and token.endswith(">"):
            out[i] = 1
        else:
            out[i] = len(token.replace("\u2581", " ").encode())
    return out


def load_text(cfg: DictConfig, source: Source, vocab_size: int) -> Corpus:
    """The data group's corpus in the model's tokens, its validation split checked."""
    data = OmegaConf.to_container(cfg.data)
    data.update(tokenizer="file", tokenizer_path=str(source.path / TOKENIZER))
    corpus = load_corpus(OmegaConf.create(data))
    if corpus.vocab_size > vocab_size:
        raise UsageError(f"{source.id}'s tokenizer has {corpus.vocab_size} tokens, more than "
                         f"the {vocab_size} rows of its embeddings")
    check_val_size(len(corpus.val), corpus.val_documents, cfg.eval.tokens)
    corpus.token_bytes = token_bytes((source.path / TOKENIZER).read_text(), corpus.vocab_size)
    corpus.tokenizer = f"{source.name} tokenizer"
    return corpus


@dataclass
class Missing:
    """What one scaling still needs: curve lengths and passkey (length, depth) pairs."""

    record: dict | None
    lengths: list[int]
    cells: list[tuple[int, float]]


def missing(cfg: DictConfig, scored: dict, spans: Spans) -> list[Missing]:
    """For each scaling asked for, the points eval.json (``scored``) lacks."""
    e, task = cfg.eval, cfg.eval.task
    mode = str(getattr(e.mode, "value", e.mode))
    have = {point_key(p) for p in scored["curve"]} | {task_point_key(p) for p in scored["tasks"]}
    out = []
    for record in scalings(cfg):
        lengths = [L for key, (_, L) in curve_wants(mode, e.stride, e.lengths, spans.id,
                                                   spans.tokens, [record]).items()
                   if key not in have]
        cells = [] if task is None else [
            (n, float(d)) for n in task.lengths for d in task.depths if task_point_key({
                "task": passkey.PASSKEY, "length": n, "depth": float(d),
                "count": task.eval_count, "eval_seed": task.eval_seed,
                "rope_scaling": record}) not in have]
        if lengths or cells:
            out.append(Missing(record, lengths, cells))
    return out


def wanted_text(todo: list[Missing]) -> str:
    parts = []
    for m in todo:
        what = [f"length {', '.join(map(str, m.lengths))}"] * bool(m.lengths) + \
            [f"{len(m.cells)} passkey cells"] * bool(m.cells)
        parts.append(f"{scaling.text(scaling.key(m.record))}: {' and '.join(what)}")
    return "; ".join(parts)


def score(lm: PretrainedLM, tokenizer, run: Run, cfg: DictConfig, corpus: Corpus,
          spans: Spans, todo: list[Missing], device: torch.device,
          progress: bool = True) -> None:
    """Score ``todo`` (missing's), writing each scaling's curve and each passkey point to
    eval.json as they come; the model is put back as published at the end."""
    scoring, rescaler = Scoring.of(cfg.eval), Rescaler(lm)
    task = cfg.eval.task
    total = curve_windows([(m.record, m.lengths) for m in todo], scoring, spans,
                          lm.max_positions) + sum(len(m.cells) for m in todo)
    fields = {"train_seq_len": cfg.train.seq_len, "encoding": cfg.encoding.name}
    prompter = passkey.Prompter(tokenizer) if task is not None else None

    def write(record: dict | None, points: list[dict], per_position: dict | None) -> None:
        run.write_eval(points, per_position, spans=(spans.id, spans.record()),
                       corpus=corpus.fingerprint, **fields)

    with tqdm(total=total, unit="step", desc=f"scoring {cfg.encoding.name}", leave=False,
              dynamic_ncols=True, disable=None if progress else True, file=sys.stderr) as bar:
        try:
            for m in todo:  # the curve, then passkey, of each scaling: one rescaling each
                score_curves(lm, corpus.val, [(m.record, m.lengths)], scoring, spans, device,
                             corpus.token_bytes, rescaler.set, write, progress=bar.update)
                for n, d in m.cells:  # each written as it comes: the slow part on a GPU
                    p = passkey.point(n, d, task.eval_count, task.eval_seed, task.digits,
                                      m.record)
                    passkey.score_point(lm.model, prompter, p, lm.max_positions)
                    run.write_eval([], None, tasks=[p], **fields)
                    bar.update(1)
        finally:
            rescaler.set(None)


def tables(run: Run, cfg: DictConfig, spans: Spans) -> str:
    """The tables of the points the config asks for (as posexp train prints them)."""
    scored, asked = run.read_eval(), {scaling.key(r) for r in scalings(cfg)}
    title, L = str(run.path), cfg.train.seq_len
    mode = str(getattr(cfg.eval.mode, "value", cfg.eval.mode))
    curve = [p for p in scored["curve"] if p.get("spans") == spans.id
             and p["mode"] == mode and p["length"] in cfg.eval.lengths
             and scaling.key(p.get("rope_scaling")) in asked]
    task = cfg.eval.task
    tasks = [] if task is None else [
        p for p in scored["tasks"] if p["task"] == passkey.PASSKEY and p["count"] ==
        task.eval_count and p["eval_seed"] == task.eval_seed and p["length"] in task.lengths
        and scaling.key(p.get("rope_scaling")) in asked]
    return "\n".join(([format_curve(curve, L, title, per_byte=True)] if curve else [])
                     + ([format_tasks(tasks, L, title)] if tasks else []))
