"""A long document's tokens as its tokenizer gives the whole document, in bounded memory.

Sources hand documents over in blocks of at most 128 KiB, cut at line ends.  Encoded block
by block, a stream differs from the document's own encoding at every cut: a byte-level BPE
splits ``ĊĊĠ|ĠW`` as ``ĊĊ|Ġ|ĠW`` where a block starts on an indented line, and a Metaspace
tokenizer (Llama 2's, SentencePiece's) prepends a spurious ``▁`` to every block.

So a document up to ``WHOLE`` characters is encoded whole (a tokenizers Encoding costs about
70 bytes a character: 70 MB at 1 MiB), and a longer one in windows of ``CHUNK`` characters
stitched where two encodings agree.  Window A is encoded; at a token boundary b of A near its
end, the text from b (or from b + 1 where b is a space that a Metaspace tokenizer folds into
its ``▁``) is encoded again as the next window would start; when that encoding's first
``AGREE`` tokens are A's tokens from b on, over the same characters, A's tokens before b
are kept and the next window starts there.  tests/unit/test_stitch.py compares the stitched
stream with the whole document's encoding on line-shifted copies of a long document, for
byte-level BPE and Llama 2's layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

WHOLE = 1 << 20  # characters: a document up to this long is encoded whole
CHUNK = 1 << 18  # characters a window keeps at most, past a verified boundary
PROBE = 1 << 12  # characters encoded again to check a boundary
AGREE = 16  # tokens the two encodings must share from the boundary on
MAX_TRIES = 64  # boundaries tried before the window grows

# (text) -> (ids, character offsets (start, end) of each token)
Encode = Callable[[str], tuple[list[int], list[tuple[int, int]]]]


def _cut(encode: Encode, text: str, chunk: int, probe: int, agree: int) -> tuple[list, int]:
    """(the ids of ``text`` before a verified boundary, where the rest starts), or ([], 0)
    when no boundary of the window's end agrees."""
    ids, offsets = encode(text[:chunk + probe])
    tried = 0
    for k in range(len(ids) - 1, 0, -1):
        start = offsets[k][0]
        if start > chunk or start == offsets[k - 1][0]:
            continue  # past the window kept, or inside one character's tokens
        for at in (start, start + 1) if text[start].isspace() else (start,):
            again, where = encode(text[at:at + probe])
            n = sum(1 for s, _ in offsets[k:] if s < start + probe // 2)
            n = min(n, agree, len(again))
            # the same tokens over the same characters: a run of identical tokens shifted
            # by one (a spurious prefix in indentation) agrees in ids, not in place
            if n >= min(agree, len(ids) - k) and again[:n] == ids[k:k + n] and all(
                    (a + at, b + at) == offsets[k + j] for j, (a, b) in enumerate(where[1:n], 1)):
                return ids[:k], at
        tried += 1
        if tried == MAX_TRIES:
            break
    return [], 0


def stitched(encode: Encode, blocks: Iterable[str], chunk: int = CHUNK,
             probe: int = PROBE, agree: int = AGREE, whole: int = WHOLE) -> Iterator[list[int]]:
    """The ids of the document made of ``blocks`` (decoded text), as ``encode`` gives the
    whole of it, in pieces, holding about ``whole`` characters' encoding at most (where no
    boundary agrees the window grows: exact still, at more memory)."""
    pending = ""
    window = chunk
    for block in blocks:
        pending += block
        while len(pending) > max(whole, window + probe):
            ids, at = _cut(encode, pending, window, probe, agree)
            if not at:  # no boundary agreed: take more text into the window
                window *= 2
                continue
            yield ids
            pending, window = pending[at:], chunk
    if pending:
        yield encode(pending)[0]
