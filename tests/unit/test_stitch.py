"""A document longer than a block tokenizes as its tokenizer tokenizes the whole document
(#48 item 2): on line-shifted copies of a long, indented document, the stream posexp writes
equals the document's own encoding for byte-level BPE and for Llama 2's layout (Metaspace
with a prepended \u2581 and byte fallback), where encoding block by block did not."""
import random

import pytest
from tokenizers import Tokenizer

from posexp.data import Long, encoded, joined
from posexp.data.source import cut_blocks
from posexp.data.stitch import stitched
from posexp.data.tokenizer import JsonTokenizer, train_bpe
from tests.unit.test_separator import llama2


def _document(seed: int = 0, lines: int = 3000) -> str:
    """Python-like text: indented lines, blank lines, words -- where block cuts change BPE."""
    rng = random.Random(seed)
    words = ["def", "return", "self", "value", "index", "    ", "for", "in", "range", "x",
             "if", "else", "None", "True", "(", ")", ":", "=", "+", "1", "0", "name"]
    out = []
    for _ in range(lines):
        indent = "    " * rng.randrange(4)
        out.append(indent + " ".join(rng.choice(words) for _ in range(rng.randrange(12))))
        if rng.random() < 0.1:
            out.append("")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def text() -> str:
    return _document()


@pytest.fixture(scope="module", params=["byte_level", "llama2"])
def tokenizer(request, text) -> JsonTokenizer:
    definition = train_bpe([text], 400) if request.param == "byte_level" else llama2(text)
    return JsonTokenizer(request.param, definition)


def _encode(tokenizer: JsonTokenizer):
    def encode(t: str):
        e = tokenizer.tokenizer.encode(t, add_special_tokens=False)
        return e.ids, e.offsets
    return encode


def test_a_stitched_document_is_its_whole_encoding_on_shifted_copies(text, tokenizer):
    lines = text.splitlines(keepends=True)
    differ_by_blocks = 0
    for shift in range(0, 40 * 37, 37):  # 40 copies, each starting 37 lines further on
        doc = "".join(lines[shift % len(lines):] + lines[:shift % len(lines)])
        whole = tokenizer.tokenizer.encode(doc, add_special_tokens=False).ids
        blocks = [b.decode() for b in cut_blocks([doc.encode()], 4096)]
        # small windows, so that each copy is cut many times (the defaults cut at 256 K)
        got = [i for ids in stitched(_encode(tokenizer), blocks, chunk=2048, probe=512,
                                     whole=8192) for i in ids]
        assert got == whole, shift
        by_block = [i for b in blocks
                    for i in tokenizer.tokenizer.encode(b, add_special_tokens=False).ids]
        differ_by_blocks += by_block != whole
    assert differ_by_blocks > 0  # what the stitching is for: cut blocks change the stream


def test_the_corpus_writer_streams_a_long_document_whole(text, tokenizer):
    """joined() hands a document of several blocks over as a Long, and encoded() writes its
    tokens as the whole document's, with every byte it read counted once."""
    doc = (text * 3).encode()
    blocks = list(cut_blocks([doc], 4096))
    [long] = list(joined([iter(blocks)]))
    assert isinstance(long, Long)
    pieces = list(encoded(long, tokenizer))
    ids = [int(i) for _, piece, _ in pieces for i in piece]
    assert ids == Tokenizer.from_str(tokenizer.definition).encode(
        doc.decode(), add_special_tokens=False).ids
    assert sum(size for _, _, size in pieces) == len(doc)
    # a document of one block is that block, as before
    assert list(joined([iter([b"short"])])) == [b"short"]


def test_a_run_of_another_stream_of_the_same_text_is_refused(tmp_path):
    """A run trained before the stitching read another stream of the same text and
    tokenizer: its record says how long, and posexp refuses to score or resume it on this
    one rather than mixing the two."""
    from types import SimpleNamespace

    from posexp.errors import PosexpError
    from posexp.run.evaluation import check_data_unchanged

    now = {"train_tokens": 1000, "val_tokens": 200}
    data = SimpleNamespace(fingerprint="f" * 64, tokenizer_fingerprint="t" * 64,
                           describe=lambda: now)
    run = SimpleNamespace(path=tmp_path / "bpe-run")
    same = {"corpus": {"fingerprint": "f" * 64, "tokenizer_fingerprint": "t" * 64, **now}}
    check_data_unchanged(run, same, data, tasks=False)
    check_data_unchanged(run, {"corpus": {"fingerprint": "f" * 64}}, data, tasks=False)  # old
    other = {"corpus": {**same["corpus"], "val_tokens": 201}}
    with pytest.raises(PosexpError, match=r"was trained on another token stream .* \(val: "
                                          r"200 tokens now, 201 then"):
        check_data_unchanged(run, other, data, tasks=False)
