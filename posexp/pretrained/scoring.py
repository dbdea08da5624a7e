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
from collections.abc import Iterable
from dataclasses import replace

import numpy as np
import torch
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from posexp.config import RunSpec
from posexp.data import Corpus, load_corpus
from posexp.errors import UsageError
from posexp.evaluate.rolling import prefix_token, scored_text
from posexp.evaluate.windows import Scoring, check_val_size, curve_windows, score_curves
from posexp.pretrained import config as pcfg
from posexp.pretrained import passkey, ruler
from posexp.pretrained.model import PretrainedLM
from posexp.pretrained.rope import Rescaler
from posexp.pretrained.source import TOKENIZER, Source
from posexp.run.protocols import Held, Want, Wanted
from posexp.run.tables import format_curve, format_tasks
from posexp.run.workloads import curve_again, curve_wants, gather, group
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


def load_text(spec: RunSpec, source: Source, vocab_size: int) -> Corpus:
    """The data group's corpus in the model's tokens, its validation split checked."""
    data = OmegaConf.to_container(spec.cfg.data)
    data.update(tokenizer="file", tokenizer_path=str(source.path / TOKENIZER))
    corpus = load_corpus(OmegaConf.create(data))
    if corpus.vocab_size > vocab_size:
        raise UsageError(f"{source.id}'s tokenizer has {corpus.vocab_size} tokens, more than "
                         f"the {vocab_size} rows of its embeddings")
    check_val_size(len(corpus.val), corpus.val_documents, spec.eval.tokens,
                   Scoring.of(spec.eval).mode)
    corpus.token_bytes = token_bytes((source.path / TOKENIZER).read_text(), corpus.vocab_size)
    corpus.tokenizer = f"{source.name} tokenizer"
    return corpus


class PretrainedWorkload:
    """What a pretrained model is scored on, in the shape of a trained run's workload
    (run/workloads.py) so that the points it lacks, the line that names them and the tables
    come from the same code (run.evaluation.missing_points, workloads.wanted_text,
    requested_points): the perplexity curve on the scored spans (an item: a length) and,
    with eval.task, passkey cells (an item: (length, depth)), with each scaling."""

    what = "point"

    def __init__(self, spec: RunSpec, spans: Spans, title: str) -> None:
        self.spec, self.spans, self.title = spec, spans, title  # title: the tables' (run dir)

    def requested(self, scalings: Iterable[dict | None],
                  scored: dict | None = None) -> dict[tuple, Want]:
        """eval.json key -> want of each point asked for with each scaling."""
        e, task, scalings = self.spec.eval, self.spec.task_settings, list(scalings)
        wants = curve_wants(e.mode, e.stride, self.spec.eval_lengths, self.spans.id,
                            self.spans.tokens, scalings)
        if task is not None:
            depths = [float(d) for d in task.depths] if takes_depth(task.name) else [None]
            wants |= {task_point_key({
                "task": task.name, "length": n, "depth": d,
                "count": task.eval_count, "eval_seed": task.eval_seed,
                "rope_scaling": record}): (record, (n, d))
                for record in scalings for n in task.lengths for d in depths}
        return wants

    def every(self, scalings: Iterable[dict | None]) -> Wanted:
        return group(self.requested(scalings).values())

    @staticmethod
    def points(data: dict) -> list[dict]:
        return data["curve"] + data["tasks"]

    @staticmethod
    def key(p: dict) -> tuple:
        return task_point_key(p) if "task" in p else point_key(p)

    def item_text(self, item: int | tuple[int, float | None]) -> str:
        if isinstance(item, int):
            return str(item)
        name = self.spec.task_settings.name
        return f"{name} {item[0]}" + ("" if item[1] is None else f" at depth {item[1]:g}")

    def table(self, points: list[dict], corpus_tokenizer: str | None = None) -> str:
        """The curve's table (bits per byte: the model's tokens are not bytes) and
        passkey's, as posexp train prints them."""
        curve = [p for p in points if "task" not in p]
        tasks = [p for p in points if "task" in p]
        L, title = self.spec.original_len, self.title
        return "\n".join(([format_curve(curve, L, title, per_byte=True)] if curve else [])
                         + ([format_tasks(tasks, L, title)] if tasks else []))

    @staticmethod
    def held(points: list[dict]) -> tuple[Held, list[dict]]:
        """The curve and passkey points ``points`` as this code scores them again: a curve
        point by its eval.* (curve_again), a passkey point by the eval.task.* of a pretrained
        run (its instance count, eval seed and key's digits)."""
        def again(p: dict) -> tuple[dict, Want] | None:
            if "task" not in p:
                return curve_again(p, None)
            depth = None if p.get("depth") is None else float(p["depth"])
            task = {"name": p["task"], "eval_count": p["count"], "eval_seed": p["eval_seed"]}
            if p["task"] == passkey.PASSKEY:
                task["digits"] = p["digits"]
            return {"eval": {"task": task}}, (p.get("rope_scaling"), (p["length"], depth))

        return gather(points, again)


def takes_depth(name: str) -> bool:
    """Whether task ``name`` places what it hides at depths (passkey, the needles)."""
    return name == passkey.PASSKEY or ruler.TASKS[name].takes_depth


def task_point(task, length: int, depth: float | None, record: dict | None) -> dict:
    """An unscored point of the prompt task eval.task names (passkey or RULER's)."""
    if task.name == passkey.PASSKEY:
        return passkey.point(length, depth, task.eval_count, task.eval_seed, task.digits,
                             record)
    return ruler.point(task.name, length, depth, task.eval_count, task.eval_seed, record)


def score(lm: PretrainedLM, tokenizer, run: Run, spec: RunSpec, corpus: Corpus,
          spans: Spans, wanted: Wanted, device: torch.device, progress: bool = True) -> None:
    """Score ``wanted`` (missing_points'), writing each scaling's curve and each passkey
    point to eval.json as they come; the model is put back as published at the end."""
    scoring = replace(Scoring.of(spec.eval), prefix=prefix_token(corpus, tokenizer))
    rescaler = Rescaler(lm)
    task, name = spec.task_settings, spec.encoding.name
    todo = [(record, [i for i in items if isinstance(i, int)],
             [i for i in items if not isinstance(i, int)]) for record, items in wanted]
    total = curve_windows([(record, lengths) for record, lengths, _ in todo], scoring, spans,
                          lm.max_positions) + sum(len(cells) for _, _, cells in todo)
    fields = {"train_seq_len": spec.original_len, "encoding": name}
    prompter = passkey.Prompter(tokenizer) if task is not None else None

    def write(record: dict | None, points: list[dict], per_position: dict | None) -> None:
        run.write_eval(points, per_position, spans=(spans.id, spans.record()),
                       corpus=corpus.fingerprint, **fields)

    with tqdm(total=total, unit="step", desc=f"scoring {name}", leave=False,
              dynamic_ncols=True, disable=None if progress else True, file=sys.stderr) as bar:
        try:
            for record, lengths, cells in todo:  # the curve, then passkey: one rescaling each
                score_curves(lm, corpus.val, [(record, lengths)], scoring, spans, device,
                             corpus.token_bytes, rescaler.set, write, progress=bar.update)
                for n, d in cells:  # each written as it comes: the slow part on a GPU
                    p = task_point(task, n, d, record)
                    scorer = passkey if task.name == passkey.PASSKEY else ruler
                    scorer.score_point(lm.model, prompter, p, lm.max_positions)
                    run.write_eval([], None, tasks=[p], **fields)
                    bar.update(1)
        finally:
            rescaler.set(None)


def score_all(lm: PretrainedLM, tokenizer, run: Run, spec: RunSpec, corpus: Corpus,
              wanted: Wanted, held: Held, device: torch.device, progress: bool = True) -> None:
    """Score ``wanted``, then the points ``held`` of an eval.json of other code set aside,
    each group under the overrides that score it again (run.evaluation.points_to_score)."""
    for each, todo in [(spec, wanted),
                       *((pcfg.spec_of(OmegaConf.merge(spec.config(), o)), w) for o, w in held)]:
        if todo:
            spans = scored_text(corpus, Scoring.of(each.eval).mode, each.eval.tokens)
            score(lm, tokenizer, run, each, corpus, spans, todo, device, progress)
