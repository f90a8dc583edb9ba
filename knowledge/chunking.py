"""Splitting a document into overlapping chunks at sentence boundaries (the rules: `chunk_spans`)."""

from __future__ import annotations

import re
from bisect import bisect_right

CHUNK_SIZE = 500
CHUNK_OVERLAP = 50

_SENTENCE_END = re.compile(r"[.!?。！？\n][.!?。！？\s]*")


def sentence_ends(text: str) -> list[int]:
    """Offsets just past each sentence, ascending; the last one is len(text)."""
    ends = [match.end() for match in _SENTENCE_END.finditer(text)]
    if not ends or ends[-1] != len(text):
        ends.append(len(text))
    return ends


def chunk_spans(text: str, *, size: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP) -> list[tuple[int, int]]:
    """(start, end) offsets of the chunks of text, in order. The rules, exactly:

    - A sentence ends after a terminator `.` `!` `?` `。` `！` `？` or a newline, together with any whitespace
      and further terminators that follow it (so "Hi!  \n\nNext" splits just before "Next").
    - A chunk holds at most CHUNK_SIZE (500) characters. The first chunk starts at the start of the text;
      every later chunk starts with the last CHUNK_OVERLAP (50) characters before it, then takes as many whole
      sentences as fit.
    - A sentence longer than 500 characters is cut hard: it fills the chunk it starts in up to 500 characters
      and goes on in the next chunks, each again the 50-character overlap plus up to 450 new characters.
    - A sentence of at most 500 characters that does not fit after the overlap is kept whole: the overlap
      shrinks to 500 minus the sentence's length.
    - Chunks are exact slices of the text: nothing is trimmed or rewritten, so every character of the text is
      in some chunk, and no chunk is empty. The empty text has no chunks.
    """
    if not 0 <= overlap < size:
        raise ValueError("overlap must be at least 0 and smaller than size")
    if not text:
        return []
    ends = sentence_ends(text)
    spans: list[tuple[int, int]] = []
    start = position = 0  # the chunk starts at `start`; its new text (after the overlap) at `position`
    while position < len(text):
        start, end = _next_span(ends, start, position, size)
        spans.append((start, end))
        position = end
        start = max(end - overlap, 0)
    return spans


def _next_span(ends: list[int], start: int, position: int, size: int) -> tuple[int, int]:
    limit = start + size
    fitting = bisect_right(ends, limit)  # how many sentences end within reach of this chunk
    last_fit = ends[fitting - 1] if fitting else 0
    if last_fit > position:
        following_is_long = fitting < len(ends) and ends[fitting] - last_fit > size
        return start, limit if following_is_long else last_fit  # a long sentence starts filling this chunk
    following = bisect_right(ends, position)  # the sentence that does not fit after the overlap
    sentence_start = ends[following - 1] if following else 0  # before `position` when it was cut hard
    sentence_end = ends[following]
    if sentence_end - sentence_start <= size:
        return sentence_end - size, sentence_end  # keep it whole; the overlap shrinks
    return start, min(limit, sentence_end)  # longer than a chunk: cut hard


def chunk_text(text: str, *, size: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP) -> list[str]:
    """The chunks of text (the rules: chunk_spans)."""
    return [text[start:end] for start, end in chunk_spans(text, size=size, overlap=overlap)]
