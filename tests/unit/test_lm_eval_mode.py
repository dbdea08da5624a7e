"""eval.mode=lm_eval (posexp/evaluate/rolling.py) is the number lm-evaluation-harness gives:
its rolling windows, whole documents after a prefix token, its word and byte denominators --
checked against lm-eval 0.4.13 itself (the ``lmeval`` extra, in the dev extras) on a tiny
local Llama and local text, per document to 1e-5 nats per token."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from posexp.errors import UsageError
from posexp.evaluate.rolling import document_windows, prefix_token
from posexp.spans import count_text, whole_documents
from tests import pretrained_models as tiny

lm_eval_utils = pytest.importorskip("lm_eval.utils")


@pytest.mark.parametrize("length", [1, 2, 5, 16])
def test_the_windows_are_lm_evals_rolling_windows(length):
    """Each window's input and scored targets, in [prefix] + document, are those of
    get_rolling_token_windows(context_len=1) made disjoint, for documents of every size."""
    for n in range(1, 4 * length + 3):
        tokens = list(range(100, 100 + n))
        stream = [7, *tokens]
        ends, counts = document_windows(n, length)
        ours = [(stream[max(0, e - length) : e], stream[e - c + 1 : e + 1])
                for e, c in zip(ends.tolist(), counts.tolist(), strict=True)]
        theirs = [(ctx + cont[:-1], cont) for ctx, cont in map(
            lm_eval_utils.make_disjoint_window,
            lm_eval_utils.get_rolling_token_windows(tokens, 7, length, 1))]
        theirs = [(inp[-length:], cont) for inp, cont in theirs]
        assert ours == theirs, (n, length)


def test_whole_documents_are_whole_spread_and_just_enough():
    rng = np.random.default_rng(3)
    sizes = rng.integers(0, 300, 40)  # some documents empty
    starts = np.concatenate([[0], np.cumsum(sizes + 1)[:-1]])  # a separator after each
    val_tokens = int(starts[-1] + sizes[-1])
    spans = whole_documents(val_tokens, starts, 2000, lambda d: ([1] * len(d), [2] * len(d)))
    assert spans.tokens >= 2000 and (spans.length == sizes[spans.document]).all()
    assert (spans.first + 1 == starts[spans.document]).all() and (spans.length > 0).all()
    # the first documents of one fixed order, no more than reach 2000 tokens
    order = [d for d in np.random.default_rng(0).permutation(40) if sizes[d] > 0]
    taken = order[: len(spans.document)]
    assert sorted(taken) == list(spans.document) and spans.tokens - sizes[taken[-1]] < 2000
    assert list(spans.document) == sorted(spans.document)
    again = whole_documents(val_tokens, starts, 2000, lambda d: ([1] * len(d), [2] * len(d)))
    assert again.id == spans.id and spans.whole["asked"] == 2000
    with pytest.raises(ValueError, match="hold"):
        whole_documents(val_tokens, starts, int(sizes.sum()) + 1, lambda d: ([], []))


def test_words_and_bytes_are_counted_as_lm_eval_counts_them():
    from lm_eval.api.task import Task

    texts = ["a b  c\n\nd", "  lead", "trail  ", "x", "t\u00e9l\u00e9 \u2003 phone\t\n"]
    for size in (1, 2, 3, 7, 100):
        blocks = [[t.encode()[i : i + size] for i in range(0, len(t.encode()), size)]
                  for t in texts]
        words, n_bytes = count_text(blocks, np.arange(len(texts)))
        assert words == [Task.count_words(t) for t in texts], size
        assert n_bytes == [Task.count_bytes(t) for t in texts]


def test_the_prefix_is_bos_else_eos_else_the_separator():
    class Corpus:
        separator_id = 5

    class Tok:
        bos_token_id, eos_token_id = None, 2

    assert prefix_token(Corpus()) == 5 and prefix_token(Corpus(), Tok()) == 2
    Tok.bos_token_id = 0
    assert prefix_token(Corpus(), Tok()) == 0


def test_a_randomized_run_is_scored_so_only_at_consecutive_positions():
    from omegaconf import OmegaConf

    from posexp.config.check_eval import check_positions

    with pytest.raises(UsageError, match=r"add eval\.positions=consecutive$"):
        check_positions(OmegaConf.create({"mode": "lm_eval", "positions": None}), 512, "the run")


@pytest.mark.slow
def test_the_numbers_are_lm_evaluation_harness_s(tmp_path, monkeypatch, cache_dir):
    """posexp pretrained in lm_eval mode and lm-eval's HFLM.loglikelihood_rolling on the same
    documents (add_bos_token=False: the document's tokens without the BOS the tokenizer's
    template adds, as posexp's stream holds them) agree per document to 1e-5 nats a token at
    a window shorter than most documents and at the model's context; word perplexity and
    bits per byte are lm-eval's aggregations of them."""
    from lm_eval.api.instance import Instance
    from lm_eval.api.metrics import bits_per_byte, weighted_perplexity
    from lm_eval.api.task import Task
    from lm_eval.models.huggingface import HFLM

    from posexp.data import open_source
    from posexp.pretrained.lifecycle import build, pretrained

    monkeypatch.setenv("POSEXP_CACHE", str(cache_dir))
    model, text = tiny.llama(tmp_path / "tiny-llama"), tiny.corpus(tmp_path / "text", 12)
    args = ["data=text", f"data.path={text}", "data.val_fraction=0.4", "eval.tokens=1500",
            "eval.mode=lm_eval", "eval.lengths=[16,64]", f"results_dir={tmp_path}",
            "device=cpu"]
    pretrained(str(model), None, args, progress=False)
    data = json.loads((tmp_path / "default" / "tiny-llama" / "eval.json").read_text())
    cfg = build(str(model), None, args)[0]
    documents = [b"".join(d).decode() for d in open_source(cfg.data).splits["val"]()]
    for p in data["curve"]:
        chosen = data["spans"][p["spans"]]["document"]
        lm = HFLM(pretrained=str(model), backend="causal", device="cpu", dtype="float32",
                  batch_size=1, max_length=p["length"], add_bos_token=False)
        asked = [Instance("loglikelihood_rolling", {}, (documents[d],), i)
                 for i, d in enumerate(chosen)]
        theirs = lm.loglikelihood_rolling(asked, disable_tqdm=True)
        per_token = np.asarray(p["block_loss"]) / np.asarray(p["block_tokens"])
        expected = -np.asarray(theirs) / np.asarray(p["block_tokens"])
        assert np.abs(per_token - expected).max() < 1e-5, p["length"]
        counted = [documents[d] for d in chosen]
        words = [(ll, Task.count_words(t)) for ll, t in zip(theirs, counted, strict=True)]
        n_bytes = [(ll, Task.count_bytes(t)) for ll, t in zip(theirs, counted, strict=True)]
        assert math.isclose(p["word_perplexity"], weighted_perplexity(words), rel_tol=1e-5)
        assert math.isclose(p["bits_per_byte"], bits_per_byte(n_bytes), rel_tol=1e-5)
        assert p["prefix_token"] == lm.prefix_token_id == 0
        assert p["tokens"] == sum(len(lm.tok_encode(t)) for t in counted) >= 1500
        assert re.fullmatch(r"[0-9a-f]{12}", p["spans"])


def test_a_split_too_short_for_whole_documents_is_refused_before_training():
    """Three documents of 10 tokens: 30 tokens of text, 31 targets with the separators
    (the first token none) -- eval.tokens=31 fits the spans and not lm_eval mode."""
    from posexp.evaluate.windows import check_val_size

    starts = np.asarray([0, 11, 22])
    check_val_size(32, starts, 31)
    check_val_size(32, starts, 30, "lm_eval")
    with pytest.raises(UsageError, match="30 tokens of text"):
        check_val_size(32, starts, 31, "lm_eval")
