import json

import numpy as np
import pytest

from posexp.errors import UsageError
from posexp.evaluate.windows import scored_spans
from posexp.spans import EFFECTIVE_DOCUMENTS, SPAN_TOKENS, Spans, document_targets, layout

# A validation split of 20,000 tokens: every document but the last ends with its one-token
# separator.  Document 1 has no text (only its separator), document 2 one token of text,
# document 6 is much longer than a span.
STARTS = np.array([0, 3000, 3001, 3003, 3500, 9000, 9100, 19000], dtype=np.int64)
VAL = 20_000
TEXT = [0, 2, 3, 4, 5, 6, 7]  # the documents with text
# each document's targets: its text and separator (the stream's first token is none)
SIZES = np.array([2999, 0, 2, 497, 5500, 100, 9900, 1000])
HELD = int(SIZES.sum())  # every target the split holds


def documents_of(targets: np.ndarray, starts: np.ndarray = STARTS) -> np.ndarray:
    """The document each stream position lies in (the last that starts at or before it)."""
    return np.searchsorted(starts, targets, side="right") - 1


def shares(spans: Spans, documents: int = len(STARTS)) -> np.ndarray:
    return np.bincount(spans.document, weights=spans.length, minlength=documents)


def water_filled(sizes: np.ndarray, n: int, cap: int) -> np.ndarray:
    """The real shares the layout rounds: one target for every document with targets, the
    rest in proportion to what is left of each, none above min(size, cap) -- found here by
    bisection on the common level, not as the layout finds it."""
    held = sizes > 0
    rest, limit = np.maximum(sizes - 1, 0), np.minimum(sizes, cap) - held
    low, high = 0.0, 1.0
    for _ in range(100):
        level = (low + high) / 2
        low, high = (level, high) if np.minimum(limit, level * rest).sum() < n - held.sum() \
            else (low, level)
    return held + np.minimum(limit, high * rest)


def test_document_targets_are_their_text_and_separator_and_none_without_text():
    lows, sizes = document_targets(VAL, STARTS)
    assert sizes.tolist() == SIZES.tolist()
    assert lows[0] == 1 and (lows[1:] == STARTS[1:]).all()


@pytest.mark.parametrize("n_tokens", [7, 100, 2_345, 12_000, HELD])
def test_spans_cover_every_document_with_text_with_unique_targets(n_tokens):
    spans = layout(VAL, STARTS, n_tokens)
    targets = spans.targets()
    assert spans.tokens == len(targets) == n_tokens
    assert len(np.unique(targets)) == n_tokens and targets.min() >= 1 and targets.max() < VAL
    # each span lies in its own document, with a token of it before the span unless the
    # whole document is scored
    ends = np.append(STARTS[1:], VAL)
    share = shares(spans)
    for f, n, d in zip(spans.first, spans.length, spans.document, strict=True):
        assert STARTS[d] <= f or share[d] == SIZES[d]
        assert f + n < ends[d] and 0 < n <= SPAN_TOKENS
    assert (documents_of(targets) == np.repeat(spans.document, spans.length)).all()
    # every document with text holds a target; the one without holds none
    assert sorted(set(spans.document.tolist())) == TEXT
    assert spans.documents == spans.text_documents == len(TEXT)
    assert (share <= SIZES).all()
    # a share longer than SPAN_TOKENS is cut into several spans, spread over the document
    if n_tokens == HELD:
        assert (share == SIZES).all()
        assert (spans.document == 7).sum() == 1 and (spans.document == 6).sum() == 3


@pytest.mark.parametrize("n_tokens", [100, 2_345, 12_000])
def test_shares_are_proportional_under_a_cap_water_filled(n_tokens):
    """No document holds more than n/25 targets where the documents can hold them so, else
    more than the smallest cap at which they can; below it, shares are proportional (one
    target each, the rest in proportion to what is left), whole by largest remainder."""
    cap = n_tokens // EFFECTIVE_DOCUMENTS
    while np.minimum(SIZES, cap).sum() < n_tokens:  # 7 documents: 1/25 is out of reach
        cap += 1
    assert np.minimum(SIZES, cap - 1).sum() < n_tokens
    share = shares(layout(VAL, STARTS, n_tokens))
    assert share.max() <= cap
    assert np.abs(share - water_filled(SIZES, n_tokens, cap)).max() < 1


def test_no_document_holds_more_than_a_25th_where_the_others_can_hold_it():
    """Forty documents, one of them 90% of the text: proportional shares would count as one
    document and a half; capped, the largest holds a 25th and they count as 25 or more."""
    sizes = np.array([360_000] + [1_000] * 39)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    spans = layout(int(sizes.sum()), starts, 20_000)
    share = shares(spans, 40)
    assert share.max() == 20_000 // 25 and share[0] == share.max()
    assert spans.effective_documents >= EFFECTIVE_DOCUMENTS
    assert spans.effective_documents == pytest.approx(1 / np.square(share / 20_000).sum())
    # what the cap took from the largest is shared by the rest, alike (they are alike)
    assert share[1:].max() - share[1:].min() <= 1
    # the effective count is what eval.json records beside the layout
    record = spans.record()
    assert record["effective_documents"] == pytest.approx(spans.effective_documents, abs=1e-3)
    assert record["text_documents"] == 40


def test_fewer_than_25_documents_share_alike_where_they_can():
    """Ten documents cannot give 25 effective ones: the cap is the smallest that holds the
    targets, so each holds a tenth (the largest effective count ten documents have) unless
    it is shorter than that, and then it is scored whole."""
    sizes = np.array([50_000, 9_000, 9_000, 300, 2_000, 2_000, 40_000, 700, 5_000, 5_000])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    share = shares(layout(int(sizes.sum()), starts, 10_000), 10)
    short = sizes - (np.arange(10) < 9) < 1_000  # fewer targets than a tenth
    assert (share[short] >= sizes[short] - 2).all()  # whole, within the rounding
    rest = share[~short]
    assert rest.max() - rest.min() <= 1 and rest.max() > 1_000


def test_empty_documents_get_no_span_first_middle_or_last():
    """A document with no text -- at the stream's start, between two others or at its end
    -- holds no target: its separator would be predicted right after another."""
    starts = np.array([0, 1, 500, 501, 1000, 1500], dtype=np.int64)  # 0, 2 and 5 empty
    spans = layout(1500, starts, 300)
    assert sorted(set(spans.document.tolist())) == [1, 3, 4]
    assert spans.text_documents == spans.documents == 3
    targets = spans.targets()
    assert 500 not in targets  # the empty document 2: its separator, after 1's


def test_fewer_targets_than_documents_and_a_split_too_short():
    spans = layout(VAL, STARTS, 3)
    assert spans.tokens == 3 and len(np.unique(spans.targets())) == 3
    with pytest.raises(ValueError, match="cannot score 20000 targets"):
        layout(VAL, STARTS, VAL)
    # the empty document's separator is no target: the split holds one fewer than VAL - 1
    with pytest.raises(ValueError, match=f"documents with text hold {HELD}"):
        layout(VAL, STARTS, HELD + 1)
    with pytest.raises(UsageError, match=r"cannot score 101 targets of a validation split of "
                                         r"100 tokens: lower eval\.tokens"):
        scored_spans(100, np.array([0]), 101)


def test_one_document_is_scored_on_its_last_targets():
    spans = layout(2000, np.array([0]), 256)
    assert (spans.first.tolist(), spans.length.tolist()) == ([2000 - 1 - 256], [256])


def test_a_layout_is_named_by_what_it_scores_and_reads_back_from_its_record():
    spans = layout(VAL, STARTS, 2_345)
    again = layout(VAL, STARTS, 2_345)
    assert spans.id == again.id and len(spans.id) == 12 and int(spans.id, 16) >= 0
    assert layout(VAL, STARTS, 2_346).id != spans.id
    assert layout(VAL, STARTS[[0, 1, 3, 4, 5, 6, 7]], 2_345).id != spans.id
    back = Spans.from_record(json.loads(json.dumps(spans.record())))
    assert back.id == spans.id and (back.targets() == spans.targets()).all()
    assert back.record() == spans.record()
    # a layout eval.json recorded before posexp counted documents still reads
    old = {k: v for k, v in spans.record().items() if k in ("first", "length", "document")}
    assert Spans.from_record(old).id == spans.id
    assert Spans.from_record(old).text_documents is None


def test_what_precedes_a_span_is_its_documents_text_unless_the_document_is_scored_whole():
    """A span's targets lie in its document: its text and its own separator.  A span that
    does not begin at its document's first target has text of that document before it; one
    that does (a document scored whole, or its first block) predicts the document's first
    token from the stream before it: the previous document's separator and text."""
    spans = layout(VAL, STARTS, 4_000)
    for first, length, doc in zip(spans.first, spans.length, spans.document, strict=True):
        targets = np.arange(first + 1, first + length + 1)
        assert (documents_of(targets) == doc).all()  # never the previous separator
        if targets[0] == max(STARTS[doc], 1):
            assert doc == 0 or documents_of(np.array([first]))[0] == doc - 1
        else:
            assert documents_of(np.array([first]))[0] == doc  # own text before it
    whole = [d for d in set(spans.document.tolist())
             if shares(spans)[d] == SIZES[d] and d > 0]
    assert whole  # the layout scores some documents whole
    for d in whole:
        (k,) = np.flatnonzero(spans.document == d)
        assert spans.first[k] == STARTS[d] - 1  # the previous document's separator
