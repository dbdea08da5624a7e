"""lm-evaluation-harness's perplexity protocol as an evaluation mode (eval.mode=lm_eval): the
number ``lm_eval --tasks wikitext``-style tasks give (``loglikelihood_rolling``), on posexp's
validation documents.

Each document is scored alone, whole (spans.whole_documents): its text tokens after one
prefix token -- the tokenizer's BOS, else its EOS, else posexp's document separator (a
from-scratch run's models see it before every document) -- with no context from another
document, in lm-eval's rolling windows of the evaluation length L: the first window reads
the prefix and the first L-1 tokens and scores L targets; each later one scores the next L
(the last the rest) and reads the L tokens before each, so a document's last window may
overlap the one before it (utils.get_rolling_token_windows with context_len=1, then
make_disjoint_window).  The targets are the document's text only: no separator, no EOS.

The denominators are lm-eval's (Task.count_words, count_bytes): word perplexity is
exp(summed loss / words), a document's words ``len(re.split(r"\\s+", text))``; byte
perplexity and bits per byte divide by the documents' UTF-8 bytes.  docs/evaluation.md sets
this protocol beside posexp's default, difference by difference.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from posexp.data import Corpus
from posexp.errors import UsageError
from posexp.evaluate.windows import Windows, score_windows, scored_spans, window_context
from posexp.model import GPT
from posexp.spans import Spans, count_text, whole_documents

LM_EVAL = "lm_eval"  # config.schema.EvalMode


def scored_text(corpus: Corpus, mode: str, n_tokens: int) -> Spans:
    """What a curve of ``mode`` scores of eval.tokens=``n_tokens``: whole documents in
    lm_eval mode, else the spans of posexp/spans.py."""
    if mode != LM_EVAL:
        return scored_spans(len(corpus.val), corpus.val_documents, n_tokens)
    try:
        return whole_documents(len(corpus.val), corpus.val_documents, n_tokens,
                               lambda chosen: count_text(corpus.val_texts(), chosen))
    except ValueError as e:
        raise UsageError(f"{e}: lower eval.tokens, or raise data.val_fraction") from None


def prefix_token(corpus: Corpus, tokenizer=None) -> int:
    """The token lm_eval mode puts before each document: as lm-eval's HFLM.prefix_token_id,
    the tokenizer's BOS, else its EOS (a transformers tokenizer's, for a pretrained model);
    else the separator posexp's own runs see before every document."""
    for name in ("bos_token_id", "eos_token_id"):
        if (token := getattr(tokenizer, name, None)) is not None:
            return int(token)
    return corpus.separator_id


def document_windows(n: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """lm-eval's rolling windows over a document of ``n`` tokens after its prefix token: where
    each ends in ``[prefix] + document`` (a window ending at e reads the min(e, L) tokens
    before e and predicts up to e) and how many trailing predictions it scores."""
    first = min(length, n)
    ends, counts = [first], [first]
    while ends[-1] < n:
        counts.append(min(n - ends[-1], length))
        ends.append(ends[-1] + counts[-1])
    return np.asarray(ends, dtype=np.int64), np.asarray(counts, dtype=np.int64)


def windows_of(spans: Spans, length: int) -> list[Windows]:
    """Each document's windows, their targets indexed among all the documents' targets."""
    out = []
    for n, offset in zip(spans.length, spans.offset, strict=True):
        ends, counts = document_windows(int(n), length)
        out.append(Windows(ends, counts, offset + ends - counts))
    return out


def count_document_windows(spans: Spans, length: int) -> int:
    return sum(len(w.ends) for w in windows_of(spans, length))


def score_documents(model: GPT, val: np.ndarray, spans: Spans, length: int, prefix: int,
                    batch_tokens: int, device: torch.device,
                    progress: Callable[[int], None] | None = None
                    ) -> tuple[np.ndarray, dict]:
    """The loss of every target of the whole-document ``spans`` in lm-eval's rolling windows
    of ``length`` after token ``prefix``, and where the windows put them (window_context)."""
    losses = np.zeros(spans.tokens)
    every = windows_of(spans, length)
    for first, n, w in zip(spans.first, spans.length, every, strict=True):
        text = np.asarray(val[first + 1 : first + 1 + n], dtype=np.int64)
        stream = np.concatenate([[prefix], text])
        # score_windows reads a stream from 0: targets are indexed within the document here
        local = Windows(w.ends, w.counts, w.ends - w.counts)
        scored, _, _ = score_windows(model, stream, length, local, int(n), batch_tokens,
                                     device, progress=progress)
        losses[w.target[0] : w.target[0] + n] = scored
    joined = Windows(*(np.concatenate([getattr(w, k) for w in every])
                       for k in ("ends", "counts", "target")))
    return losses, window_context(joined, length, length)


def lm_eval_numbers(total: float, spans: Spans) -> dict:
    """What lm-eval reports of summed loss ``total`` (nats) over whole documents ``spans``:
    word and byte perplexity and bits per byte, with the words and bytes it divides by."""
    words, n_bytes = sum(spans.whole["words"]), sum(spans.whole["bytes"])
    return {"words": words, "bytes": n_bytes, "word_perplexity": math.exp(total / words),
            "byte_perplexity": math.exp(total / n_bytes),
            "bits_per_byte": total / n_bytes / math.log(2)}
