"""Sentence segmentation and the cut of over-long sentences (pure: imports neither Beam nor torch).

``split_sentences`` delegates to ``sentencex`` (Wikimedia's rule-based segmenter, written in Rust), which knows
abbreviations ("Dr.", "e.g.", "U.S.A."), decimals ("3.14") and CJK terminators (。！？) for many languages.
``split_long`` then cuts what the segmenter leaves too long (a log line, a table, a text without punctuation)
at a word budget, in time linear in the input, so one 5 MB line costs well under a second.
``document_sentences`` applies the segmenter or, for presegmented (BERT layout) documents, keeps the lines.

Run nothing here directly; ``python -m pipelines.segment`` uses it.
"""

from __future__ import annotations

import re

from sentencex import segment

__all__ = ["MAX_WORD_CHARS", "document_sentences", "split_long", "split_sentences"]

# Scripts written without spaces between words: each character counts as one word, as in BERT's tokenizer
# (_is_chinese_char), extended to kana and CJK punctuation so Japanese text is cut too.
_CJK = "\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef"
# A run without spaces longer than this (base64, a minified file) counts as one word per MAX_WORD_CHARS
# characters, so such a run is cut too instead of surviving as one giant "word".
MAX_WORD_CHARS = 100
_UNIT = re.compile(rf"[{_CJK}]|[^\s{_CJK}]{{1,{MAX_WORD_CHARS}}}")


def split_sentences(text: str, language: str = "en") -> list[str]:
    """Returns the sentences of ``text``, stripped, without empty ones.

    Args:
        text: raw text; blank lines are sentence boundaries, single newlines are not.
        language: an ISO 639 code; sentencex falls back to generic rules for languages it does not know.
    """
    return [s for s in (piece.strip() for piece in segment(language, text)) if s]


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
