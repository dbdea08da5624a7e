"""The NUL between documents is one token for every tokenizer (#48 item 1), built here in each
style a researcher meets: Llama 2's (a prepended \u2581 and byte fallback), SentencePiece's
Unigram behind a Metaspace pre-tokenizer, BERT's WordPiece (its normaliser drops control
characters) and GPT-2's byte-level BPE.  Each document's targets are then its own text and
one separator of one byte, as posexp/spans.py counts them."""
import hashlib

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from posexp.data import SEPARATOR, in_validation, load_corpus
from posexp.data.tokenizer import JsonTokenizer, train_bpe
from posexp.spans import document_targets
from tests.corpora import data_cfg, word_files

BYTES = {f"<0x{b:02X}>": 3 + b for b in range(256)}


def _pieces(text: str) -> list[str]:
    """Words with Metaspace's \u2581 before each: the tokens a test vocabulary holds."""
    return sorted({"\u2581" + w for w in text.split()} | set(text.replace(" ", "")))


def llama2(text: str) -> str:
    """Llama 2's layout: BPE with byte fallback, \u2581 prepended and for spaces by the
    normaliser, no pre-tokenizer."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **BYTES, "\u2581": 259}
    for piece in _pieces(text):
        vocab.setdefault(piece, len(vocab))
    t = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True, unk_token="<unk>",
                             fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                         normalizers.Replace(" ", "\u2581")])
    t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                   decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return t.to_str()


def unigram(text: str) -> str:
    """SentencePiece's Unigram behind a Metaspace pre-tokenizer (prepend always)."""
    pieces = [("<unk>", 0.0), ("</s>", 0.0), *((b, -10.0) for b in BYTES), ("\u2581", -2.0),
              *((p, -3.0) for p in _pieces(text))]
    t = Tokenizer(models.Unigram(pieces, unk_id=0, byte_fallback=True))
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    t.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    return t.to_str()


def wordpiece(text: str) -> str:
    """BERT's: a WordPiece whose normaliser strips control characters, NUL among them."""
    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2}
    for w in sorted(set(text.split()) | set(text.replace(" ", ""))):
        vocab.setdefault(w, len(vocab))
    t = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=False)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.decoder = decoders.WordPiece()
    return t.to_str()


def byte_level(text: str) -> str:
    return train_bpe([text], 300)


@pytest.fixture(scope="module")
def words(tmp_path_factory):
    return word_files(tmp_path_factory.mktemp("sep-words"), 8, 600)


@pytest.mark.parametrize("style", [llama2, unigram, wordpiece, byte_level])
def test_the_separator_is_one_token_of_one_byte_in_every_style(style, words, tmp_path):
    text = " ".join(f.read_text() for f in sorted(words.iterdir()))
    definition = style(text)
    naive = Tokenizer.from_str(definition).encode("\0", add_special_tokens=False).ids
    tokenizer = JsonTokenizer("file", definition)
    token = tokenizer.tokenizer.id_to_token(tokenizer.separator_id)
    if style in (llama2, unigram):
        assert len(naive) == 2 and token == "<0x00>"  # not the prepended ▁ too
    elif style is wordpiece:
        assert naive == [] and token == "[SEP]"
    else:
        assert naive == [tokenizer.separator_id]  # byte-level: NUL's own token, as before
    assert tokenizer.token_bytes[tokenizer.separator_id] == 1
    # a stream that changed is another fingerprint, so no cache or record of it is read;
    # a byte-level tokenizer's streams and fingerprint are what they were
    same = tokenizer.fingerprint == hashlib.sha256(definition.encode()).hexdigest()
    assert same is (style is byte_level)
    (tmp_path / "tokenizer.json").write_text(definition)
    corpus = load_corpus(data_cfg(name="words", source="text", path=str(words),
                                  tokenizer="file", tokenizer_path=str(tmp_path / "tokenizer.json"),
                                  val_fraction=0.5, cache_dir=str(tmp_path)))
    starts = corpus.val_documents
    val = [f.read_bytes() for f in sorted(words.iterdir()) if in_validation(f.name, 0.5)]
    assert len(starts) == len(val) > 1
    assert (corpus.val[starts[1:] - 1] == tokenizer.separator_id).all()  # one token each
    # each document's tokens between its separators are its own text encoded alone
    ends = np.append(starts[1:] - 1, len(corpus.val))
    for doc, start, end in zip(val, starts, ends, strict=True):
        assert corpus.val[start:end].tolist() == tokenizer.encode_batch([doc])[0].tolist()
    # and spans count its targets as its text and one separator of one byte
    count = document_targets(len(corpus.val), starts)[1]
    assert count[0] == ends[0] - 1 + 1 and count[1] == ends[1] - starts[1] + 1
    if style is byte_level:  # exact bytes (the others' pieces decoded alone lose spaces)
        assert int(corpus.token_bytes[corpus.val].sum()) == len(SEPARATOR.join(val))


def test_a_tokenizer_with_no_token_for_a_separator_is_refused():
    from posexp.errors import UsageError

    t = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(UsageError, match=r"posexp needs one token between documents$"):
        JsonTokenizer("file", t.to_str())
