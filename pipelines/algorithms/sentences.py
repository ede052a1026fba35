"""Sentence segmentation and the cut of over-long sentences (pure: imports neither Beam nor torch).

``split_sentences`` delegates to ``sentencex`` (Wikimedia's rule-based segmenter, written in Rust), which knows
abbreviations ("Dr.", "e.g.", "U.S.A."), decimals ("3.14") and CJK terminators (。！？) for many languages.
Before that, the text is cut where a reader sees a boundary that sentencex does not: at whitespace-only lines
(paragraph breaks) and around heading lines; and a long paragraph is given to sentencex in chunks, because its
cost grows with the square of a paragraph's length, so segmentation stays linear in the document's length.
``split_long`` then cuts what the segmenter leaves too long (a log line, a table, a text without punctuation)
at a word budget, in time linear in the input, so one 5 MB line costs well under a second.
``document_sentences`` applies the segmenter or, for presegmented (BERT layout) documents, keeps the lines.

Run nothing here directly; ``python -m pipelines.segment`` uses it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from sentencex import segment

__all__ = [
    "HEADING_MAX_CHARS",
    "MAX_SEGMENT_CHARS",
    "MAX_WORD_CHARS",
    "document_sentences",
    "split_long",
    "split_sentences",
]

# Scripts written without spaces between words: each character counts as one word, as in BERT's tokenizer
# (_is_chinese_char), extended to kana and CJK punctuation so Japanese text is cut too.
_CJK = "\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef"
# A run without spaces longer than this (base64, a minified file) counts as one word per MAX_WORD_CHARS
# characters, so such a run is cut too instead of surviving as one giant "word".
MAX_WORD_CHARS = 100
_UNIT = re.compile(rf"[{_CJK}]|[^\s{_CJK}]{{1,{MAX_WORD_CHARS}}}")
# sentencex ends paragraphs only at "\n\n"; a line of spaces or tabs is just as blank to a reader.
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# A line at most this long that starts a sentence and ends without punctuation is a heading (see _units).
HEADING_MAX_CHARS = 50
# sentencex gets a paragraph longer than this in chunks of about this size (see _bounded).
MAX_SEGMENT_CHARS = 20_000
_CLOSERS = "\"'”’)\\]」』）"
_SENTENCE_END_AT_LINE_END = re.compile(rf"[.!?。！？…][{_CLOSERS}]*$")
_SENTENCE_END = re.compile(rf"[.!?]+[{_CLOSERS}]*\s+|[。！？]+[{_CLOSERS}]*")


def split_sentences(text: str, language: str = "en") -> list[str]:
    """Returns the sentences of ``text``, stripped, without empty ones.

    Args:
        text: raw text; blank (or whitespace-only) lines and heading lines are sentence boundaries, other
            single newlines are not.
        language: an ISO 639 code; sentencex falls back to generic rules for languages it does not know.
    """
    pieces = (
        piece.strip()
        for paragraph in _PARAGRAPH_BREAK.split(text)
        for unit in _units(paragraph)
        for chunk in _bounded(unit)
        for piece in segment(language, chunk)
    )
    return [piece for piece in pieces if piece]


def _units(paragraph: str) -> Iterator[str]:
    """Yields the parts of a paragraph to segment apart: each heading line alone, and the text between them.

    The rule: a line is a heading when it starts a sentence (it opens the paragraph, or the line before it ended
    with sentence punctuation or was a heading), is at most ``HEADING_MAX_CHARS`` long with its indent, ends
    with a letter or digit, and the next line starts with a digit or a letter that is not lower-case.
    Hard-wrapped prose does not match: a line that starts a sentence and is followed by more of the paragraph is
    nearly the full wrap width, and the wrapped rest of a sentence usually goes on in lower case.
    """
    lines = paragraph.split("\n")
    start, at_sentence_start = 0, True
    for i, line in enumerate(lines[:-1]):
        if at_sentence_start and _is_heading(line, lines[i + 1]):
            if start < i:
                yield "\n".join(lines[start:i])
            yield line
            start = i + 1
        else:
            at_sentence_start = _SENTENCE_END_AT_LINE_END.search(line.rstrip()) is not None
    yield "\n".join(lines[start:])


def _is_heading(line: str, next_line: str) -> bool:
    line = line.rstrip()  # its indent counts: an indented line is no shorter a part of the wrap width
    first = next_line.lstrip()[:1]
    return len(line) <= HEADING_MAX_CHARS and line[-1:].isalnum() and first.isalnum() and not first.islower()


def _bounded(unit: str) -> Iterator[str]:
    """Yields ``unit`` in consecutive chunks, each ending at the first sentence end past ``MAX_SEGMENT_CHARS``.

    sentencex compares every candidate boundary of a paragraph with every quote or bracket pair in it, so its
    cost grows with the square of a paragraph's length; bounded chunks keep a document's cost linear. A
    sentence end followed by whitespace is where sentencex splits too (but for an abbreviation there, once in
    20 k characters of a paragraph without a blank line). Text with no sentence end stays whole: without
    candidate boundaries sentencex's cost is linear in it.
    """
    start = 0
    while len(unit) - start > MAX_SEGMENT_CHARS and (end := _SENTENCE_END.search(unit, start + MAX_SEGMENT_CHARS)):
        yield unit[start : end.end()]
        start = end.end()
    yield unit[start:]


def split_long(sentence: str, max_words: int) -> list[str]:
    """Returns ``sentence`` cut into consecutive pieces of at most ``max_words`` words.

    A word is a run of non-space characters (at most ``MAX_WORD_CHARS`` long) or one CJK character. The text
    between the words of a piece is kept as it was, so CJK pieces stay unspaced.

    Raises:
        ValueError: when ``max_words`` is not positive.
    """
    if max_words < 1:
        raise ValueError(f"max_words must be positive, got {max_words}")
    if len(sentence) <= max_words:  # every word has at least one character: cannot be over budget
        return [sentence]
    pieces: list[str] = []
    start = end = count = 0
    for match in _UNIT.finditer(sentence):
        if count == max_words:
            pieces.append(sentence[start:end])
            count = 0
        if count == 0:
            start = match.start()
        end = match.end()
        count += 1
    if count:
        pieces.append(sentence[start:end])
    return pieces


def document_sentences(text: str, presegmented: bool, language: str = "en") -> list[str]:
    """Returns the raw sentences of one document, stripped, without empty ones, before any cut.

    Args:
        text: the raw document text.
        presegmented: True when ``text`` already has one sentence per line (BERT layout): its lines are kept.
        language: passed to ``split_sentences`` when the text is not presegmented.
    """
    if not presegmented:
        return split_sentences(text, language)
    return [line for line in (raw.strip() for raw in text.split("\n")) if line]
