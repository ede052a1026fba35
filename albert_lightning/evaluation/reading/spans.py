"""Pieces' spans in the original text: the character ``[start, end)`` each vocabulary piece came from.

Fine-tuning encodes text as pretraining did (``pipelines.algorithms.textnorm.Normalizer``, then the vocabulary:
SentencePiece or WordPiece), so
a predicted span is a range of pieces of the *normalised* text. To answer with the original text (its case, accents
and quotes) every piece carries the character span of the original text it came from:

- ``normalize_with_alignment`` repeats the normaliser's steps character by character and records, for every
  normalised character, the original ``[start, end)`` it came from; it checks its result against the normaliser
  itself, so the alignment cannot drift from what pretraining saw.
- ``tokenize_with_offsets`` gives the vocabulary's ids for the normalised text and each piece's original span.

``windows`` cuts these pieces into model inputs, and ``decoding`` maps predicted pieces back through their spans.

Spans of pieces (a WordPiece piece holds no whitespace, so only the first rule applies to it): a piece's span
excludes the whitespace SentencePiece folds into it (the ``▁`` of ``▁word``
starts at the word). A piece that is only ``▁`` (the dummy prefix, or the space before a piece that cannot take a
``▁``, such as an unknown character) gets the empty span at the start of the next character, so it never overlaps
an answer and adds nothing to a decoded text. Characters the normaliser expands (``ﬁ`` → ``fi``) map to the whole
original character; characters it drops (combining marks) extend the span of the character before them, so
``Cafe\u0301`` maps back with its accent.

Tests: ``python -m pytest tests/test_spans.py``.
"""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING, Union

# The normaliser's own whitespace pattern, so that both agree on what whitespace is.
from pipelines.algorithms.textnorm import _WHITESPACE, Normalizer

if TYPE_CHECKING:
    from albert_lightning.evaluation.finetuning import Encoder
    from pipelines.algorithms.vocabulary import Vocabulary

__all__ = [
    "Span",
    "Tokenizer",
    "normalize_with_alignment",
    "tokenize_with_offsets",
    "vocab_and_normalizer",
]

Span = tuple[int, int]
# An ``Encoder`` (its ``vocab`` and ``normalize``) or the pair itself.
Tokenizer = Union["Encoder", "tuple[Vocabulary, Normalizer]"]
_Char = tuple[str, int, int]  # a normalised character and the original [start, end) it came from


def normalize_with_alignment(normalizer: Normalizer, text: str) -> tuple[str, list[Span]]:
    """Returns ``normalizer(text)`` and, for each of its characters, the original ``[start, end)`` it came from.

    Raises:
        RuntimeError: when the character-by-character steps do not give ``normalizer(text)`` (the normaliser
            changed and this function was not changed with it).
    """
    chars = _merge_quotes(text)
    if normalizer.strip_accents:
        chars = _strip_accents(chars)
    if normalizer.lower_case:
        chars = _lower(chars)
    chars = _collapse_whitespace(chars)
    normalised = "".join(c for c, _, _ in chars)
    if normalised != normalizer(text):
        raise RuntimeError(f"alignment drifted from {normalizer!r} on {text!r}: {normalised!r}")
    return normalised, [(start, end) for _, start, end in chars]


def _merge_quotes(text: str) -> list[_Char]:
    # One left-to-right scan equals the normaliser's two str.replace passes: a merged `` leaves no ' behind, so
    # the runs of ' the second pass sees are the original ones.
    chars: list[_Char] = []
    i = 0
    while i < len(text):
        if text[i : i + 2] in ("``", "''"):
            chars.append(('"', i, i + 2))
            i += 2
        else:
            chars.append((text[i], i, i + 1))
            i += 1
    return chars


def _strip_accents(chars: list[_Char]) -> list[_Char]:
    # NFKD decomposes each character on its own; its only context effect, reordering combining marks, is
    # invisible here because every character with a non-zero combining class is a mark, and marks are dropped.
    out: list[_Char] = []
    for c, start, end in chars:
        for d in unicodedata.normalize("NFKD", c):
            if not unicodedata.category(d).startswith("M"):
                out.append((d, start, end))
            elif out:  # a dropped mark belongs to the character before it: keep it inside that one's span
                prev, prev_start, prev_end = out[-1]
                out[-1] = (prev, prev_start, max(prev_end, end))
    return out


def _lower(chars: list[_Char]) -> list[_Char]:
    # Lower-casing the whole string keeps str.lower's context rule (final sigma); each character's own lower()
    # gives how many characters it becomes ('İ' → 2), which the context rule never changes.
    lowered = "".join(c for c, _, _ in chars).lower()
    lengths = [len(c.lower()) for c, _, _ in chars]
    if sum(lengths) != len(lowered):
        raise RuntimeError("lower-casing changed length in context; the alignment cannot follow it")
    out: list[_Char] = []
    pos = 0
    for (_, start, end), n in zip(chars, lengths, strict=True):
        out.extend((d, start, end) for d in lowered[pos : pos + n])
        pos += n
    return out


def _collapse_whitespace(chars: list[_Char]) -> list[_Char]:
    # A run of whitespace becomes one space spanning the whole run; runs at either end disappear.
    text = "".join(c for c, _, _ in chars)
    out: list[_Char] = []
    pos = 0
    space: _Char | None = None
    for run in [*_WHITESPACE.finditer(text), None]:
        stop = run.start() if run is not None else len(text)
        if stop > pos:
            if space is not None and out:
                out.append(space)
            out.extend(chars[pos:stop])
        if run is not None:
            space = (" ", chars[run.start()][1], chars[run.end() - 1][2])
            pos = run.end()
    return out


def vocab_and_normalizer(tokenizer: Tokenizer) -> tuple[Vocabulary, Normalizer]:
    """The vocabulary and normaliser of ``tokenizer`` (an ``Encoder`` or the pair itself)."""
    if isinstance(tokenizer, tuple):
        return tokenizer
    return tokenizer.vocab, tokenizer.normalize


def tokenize_with_offsets(tokenizer: Tokenizer, text: str) -> tuple[list[int], list[Span]]:
    """Returns the pieces of ``normalize(text)`` and each one's ``[start, end)`` in the original ``text``.

    Args:
        tokenizer: an ``Encoder`` or a ``(Vocabulary, Normalizer)`` pair.
        text: the original text.

    A bare ``▁`` piece gets the empty span at the start of the next character (see the module's docstring).
    """
    vocab, normalizer = vocab_and_normalizer(tokenizer)
    normalised, spans = normalize_with_alignment(normalizer, text)
    ids, offsets = vocab.encode_with_offsets(normalised)
    return ids, [_piece_span(normalised, spans, begin, end) for begin, end in offsets]


def _piece_span(normalised: str, spans: list[Span], begin: int, end: int) -> Span:
    # The ▁ of a piece stands for the space before it (or for nothing, the dummy prefix): leave it out.
    while begin < end and normalised[begin] == " ":
        begin += 1
    while end > begin and normalised[end - 1] == " ":
        end -= 1
    if begin < end:
        return spans[begin][0], spans[end - 1][1]
    while begin < len(normalised) and normalised[begin] == " ":
        begin += 1
    at = spans[begin][0] if begin < len(normalised) else spans[-1][1]
    return at, at
