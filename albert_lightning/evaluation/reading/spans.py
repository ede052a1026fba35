"""Span extraction (SQuAD-style) text handling: pieces that map back to the original text, windows, n-best decoding.

Fine-tuning encodes text as pretraining did (``pipelines.textnorm.Normalizer``, then SentencePiece), so a predicted
span is a range of pieces of the *normalised* text. To answer with the original text (its case, accents and
quotes) every piece carries the character span of the original text it came from:

- ``normalize_with_alignment`` repeats the normaliser's steps character by character and records, for every
  normalised character, the original ``[start, end)`` it came from; it checks its result against the normaliser
  itself, so the alignment cannot drift from what pretraining saw.
- ``tokenize_with_offsets`` gives SentencePiece's ids for the normalised text and each piece's original span.
- ``make_windows`` cuts ``[CLS] question [SEP] context [SEP]`` windows as the reference's ``run_squad``
  (BERT/ALBERT): windows every ``doc_stride`` pieces, each piece's score counted in the window where it has the
  most context, gold positions of the first answer or ``[CLS]`` when it is not inside the window.
- ``decode`` turns one question's start/end logits over its windows into the best original-text span, its n-best
  list and SQuAD 2.0's ``null_score_diff``.

Spans of pieces: a piece's span excludes the whitespace SentencePiece folds into it (the ``▁`` of ``▁word``
starts at the word). A piece that is only ``▁`` (the dummy prefix, or the space before a piece that cannot take a
``▁``, such as an unknown character) gets the empty span at the start of the next character, so it never overlaps
an answer and adds nothing to a decoded text. Characters the normaliser expands (``ﬁ`` → ``fi``) map to the whole
original character; characters it drops (combining marks) extend the span of the character before them, so
``Cafe\u0301`` maps back with its accent.

Usage::

    windows = make_windows(encoder, question, context, [(start, end)], max_seq_length=384)
    prediction = decode(windows, start_logits, end_logits, context)
    answer = prediction.answer(null_threshold)
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

import numpy as np

# The normaliser's own whitespace pattern, so that both agree on what whitespace is.
from pipelines.textnorm import _WHITESPACE, Normalizer
from pipelines.vocab_layout import CLS_ID, SEP_ID

if TYPE_CHECKING:
    import sentencepiece as spm

    from albert_lightning.evaluation.finetuning import Encoder

__all__ = [
    "Candidate",
    "Prediction",
    "Window",
    "decode",
    "make_windows",
    "normalize_with_alignment",
    "tokenize_with_offsets",
]

Span = tuple[int, int]
# An ``Encoder`` (its ``sp`` and ``normalize``) or the pair itself.
Tokenizer = Union["Encoder", "tuple[spm.SentencePieceProcessor, Normalizer]"]
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


def _sp_and_normalizer(tokenizer: Tokenizer) -> tuple[spm.SentencePieceProcessor, Normalizer]:
    if isinstance(tokenizer, tuple):
        return tokenizer
    return tokenizer.sp, tokenizer.normalize


def tokenize_with_offsets(tokenizer: Tokenizer, text: str) -> tuple[list[int], list[Span]]:
    """Returns ``sp.encode(normalize(text))`` and each piece's ``[start, end)`` in the original ``text``.

    Args:
        tokenizer: an ``Encoder`` or a ``(SentencePieceProcessor, Normalizer)`` pair.
        text: the original text.

    A bare ``▁`` piece gets the empty span at the start of the next character (see the module's docstring).
    """
    sp, normalizer = _sp_and_normalizer(tokenizer)
    normalised, spans = normalize_with_alignment(normalizer, text)
    # offset_mapping on a str gives character offsets into it (the proto output's begin/end are UTF-8 bytes).
    encoded = sp.encode(normalised, out_type="offset_mapping", return_bytes=False)
    offsets = [_piece_span(normalised, spans, begin, end) for begin, end in encoded["offsets"]]
    return list(encoded["ids"]), offsets


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


@dataclass(frozen=True)
class Window:
    """One ``[CLS] query [SEP] context-window [SEP]`` input of a question.

    Attributes:
        example_id: the question's id (or index), shared by all its windows.
        input_ids: the ids, unpadded.
        token_type_ids: 0 for ``[CLS] query [SEP]``, 1 for the context pieces and the final ``[SEP]``.
        context_offsets: per position, the original-context ``[start, end)`` of its piece; None off the context.
        max_context: per position, whether this window is where the piece has the most context (the only window
            whose score for it counts); False off the context.
        start_position, end_position: the first answer's first and last piece positions, or 0 (``[CLS]``) when
            there is no answer or it is not entirely inside this window.
        context_start: the index, among all the context's pieces, of this window's first context piece.
    """

    example_id: str | int
    input_ids: list[int]
    token_type_ids: list[int]
    context_offsets: list[Span | None]
    max_context: list[bool]
    start_position: int
    end_position: int
    context_start: int

    @property
    def context_positions(self) -> range:
        """The positions of the context pieces in ``input_ids``."""
        first = self.token_type_ids.index(1)
        return range(first, len(self.input_ids) - 1)


def make_windows(
    tokenizer: Tokenizer,
    question: str,
    context: str,
    answers: Sequence[Span] = (),
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    example_id: str | int = 0,
) -> list[Window]:
    """Cuts one question and its context into the reference's overlapping windows.

    Args:
        tokenizer: an ``Encoder`` or a ``(SentencePieceProcessor, Normalizer)`` pair.
        question: the question text; its pieces are cut to ``max_query_length``.
        context: the original context text.
        answers: ``(start, end)`` character spans in ``context``; the first gives the gold positions, none means
            no answer (SQuAD 2.0: every window points at ``[CLS]``).
        max_seq_length: the most ids in a window.
        doc_stride: pieces between the starts of consecutive windows.
        max_query_length: the most question pieces kept.
        example_id: copied into every window.

    Returns:
        The windows, in context order; one window without context pieces when the context has none.

    Raises ValueError when no context piece fits beside the question, ``doc_stride`` is not positive, or the first
    answer's span is outside the context or covers no piece.
    """
    sp, normalizer = _sp_and_normalizer(tokenizer)
    query = sp.encode(normalizer(question))[:max_query_length]
    ids, offsets = tokenize_with_offsets(tokenizer, context)
    room = max_seq_length - len(query) - 3  # [CLS], [SEP], [SEP]
    if room < 1:
        raise ValueError(f"max_seq_length={max_seq_length} with {len(query)} query pieces leaves no room for context")
    if doc_stride < 1:
        raise ValueError(f"doc_stride={doc_stride}: must be positive")
    gold = _answer_pieces(offsets, answers[0], len(context)) if answers else None
    spans = _doc_spans(len(ids), room, doc_stride) or [(0, 0)]
    return [_window(example_id, query, ids, offsets, spans, index, gold) for index in range(len(spans))]


def _doc_spans(num_pieces: int, room: int, doc_stride: int) -> list[tuple[int, int]]:
    # The reference's _DocSpan loop: (start, length) pairs, the last one ending at the context's end.
    spans = []
    start = 0
    while start < num_pieces:
        length = min(num_pieces - start, room)
        spans.append((start, length))
        if start + length == num_pieces:
            break
        start += min(length, doc_stride)
    return spans


def _is_max_context(spans: list[tuple[int, int]], index: int, piece: int) -> bool:
    # The reference's _check_is_max_context: the window where the piece has the most context on its shorter
    # side wins, longer windows break near-ties (0.01 * length), and the first window wins exact ties.
    best_score, best_index = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if not start <= piece <= end:
            continue
        score = min(piece - start, end - piece) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, i
    return best_index == index


def _answer_pieces(offsets: list[Span], answer: Span, context_length: int) -> tuple[int, int]:
    # The pieces overlapping the answer: when a boundary falls inside a piece, the whole piece is part of it.
    start, end = answer
    if not 0 <= start < end <= context_length:
        raise ValueError(f"answer span {answer} is not inside a context of {context_length} characters")
    covering = [i for i, (s, e) in enumerate(offsets) if s < end and e > start]
    if not covering:
        raise ValueError(f"answer span {answer} covers no piece of the normalised context")
    return covering[0], covering[-1]


def _window(
    example_id: str | int,
    query: list[int],
    ids: list[int],
    offsets: list[Span],
    spans: list[tuple[int, int]],
    index: int,
    gold: tuple[int, int] | None,
) -> Window:
    start, length = spans[index]
    head = [CLS_ID, *query, SEP_ID]
    pieces = range(start, start + length)
    positions = (0, 0)
    if gold is not None and start <= gold[0] and gold[1] < start + length:
        positions = (gold[0] - start + len(head), gold[1] - start + len(head))
    return Window(
        example_id=example_id,
        input_ids=[*head, *ids[start : start + length], SEP_ID],
        token_type_ids=[0] * len(head) + [1] * (length + 1),
        context_offsets=[None] * len(head) + [offsets[i] for i in pieces] + [None],
        max_context=[False] * len(head) + [_is_max_context(spans, index, i) for i in pieces] + [False],
        start_position=positions[0],
        end_position=positions[1],
        context_start=start,
    )


@dataclass(frozen=True)
class Candidate:
    """One n-best answer: its original text, score (start + end logit) and where it came from."""

    text: str
    score: float
    start_logit: float
    end_logit: float
    window: int  # index into the windows given to ``decode``
    start: int  # position in that window
    end: int
    char_span: Span  # [start, end) in the original context


@dataclass(frozen=True)
class Prediction:
    """One question's decoded answer.

    Attributes:
        text: the best non-null answer, a substring of the original context ("" when no span was valid).
        score: its start + end logit (-inf when no span was valid).
        null_score: the least ``[CLS]`` start + end logit over the windows.
        null_score_diff: ``null_score - score`` (SQuAD 2.0): answer "" when it exceeds the chosen threshold.
        nbest: the best distinct-text candidates, best first.
    """

    text: str
    score: float
    null_score: float
    null_score_diff: float
    nbest: list[Candidate]

    def answer(self, null_threshold: float | None = None) -> str:
        """Returns ``text``, or "" when ``null_threshold`` is given and ``null_score_diff`` exceeds it."""
        if null_threshold is not None and self.null_score_diff > null_threshold:
            return ""
        return self.text


def _distinct_best(candidates: list[Candidate], count: int) -> list[Candidate]:
    """The ``count`` best candidates of distinct texts, best first (ties keep window and position order)."""
    nbest: list[Candidate] = []
    seen: set[str] = set()
    for candidate in sorted(candidates, key=lambda c: c.score, reverse=True):  # stable sort
        if len(nbest) == count:
            break
        if candidate.text not in seen:
            seen.add(candidate.text)
            nbest.append(candidate)
    return nbest


def decode(
    windows: Sequence[Window],
    start_logits: Sequence[np.ndarray],
    end_logits: Sequence[np.ndarray],
    context: str,
    n_best_size: int = 20,
    max_answer_length: int = 30,
) -> Prediction:
    """Returns the best original-context answer of one question from its windows' logits (reference n-best).

    In each window the ``n_best_size`` best starts and ends (over its unpadded positions: logits may be longer,
    padded) pair into candidates that lie in the context, end at or after their start, span at most
    ``max_answer_length`` pieces, and start at a piece this window has the most context for. Candidates are
    ranked by start + end logit; the n-best keeps the first of each distinct text.

    Args:
        windows: all windows of one question, from ``make_windows``.
        start_logits, end_logits: per window, a logit per position.
        context: the original context the windows were made from.
        n_best_size: starts and ends tried per window, and the length of the n-best list.
        max_answer_length: the most pieces in an answer.

    Raises:
        ValueError: when there are no windows, or the logits do not match them.
    """
    if not windows or len(start_logits) != len(windows) or len(end_logits) != len(windows):
        raise ValueError(f"{len(windows)} windows need as many start and end logits")
    candidates: list[Candidate] = []
    null_score = math.inf
    for index, window in enumerate(windows):
        starts, ends = (_unpadded(logits, window) for logits in (start_logits[index], end_logits[index]))
        null_score = min(null_score, float(starts[0] + ends[0]))
        candidates += _window_candidates(window, index, starts, ends, context, n_best_size, max_answer_length)
    nbest = _distinct_best(candidates, n_best_size)
    if not nbest:
        return Prediction(text="", score=-math.inf, null_score=null_score, null_score_diff=math.inf, nbest=[])
    best = nbest[0]
    return Prediction(best.text, best.score, null_score, null_score - best.score, nbest)


def _unpadded(logits: np.ndarray, window: Window) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    if logits.ndim != 1 or len(logits) < len(window.input_ids):
        raise ValueError(f"logits of shape {logits.shape} for a window of {len(window.input_ids)} positions")
    return logits[: len(window.input_ids)]


def _window_candidates(
    window: Window,
    index: int,
    starts: np.ndarray,
    ends: np.ndarray,
    context: str,
    n_best_size: int,
    max_answer_length: int,
) -> list[Candidate]:
    offsets = window.context_offsets
    candidates = []
    # Stable sorts: equal logits keep the earlier position first, as the reference's sorted() does.
    for start in np.argsort(-starts, kind="stable")[:n_best_size].tolist():
        if offsets[start] is None or not window.max_context[start]:
            continue
        for end in np.argsort(-ends, kind="stable")[:n_best_size].tolist():
            if offsets[end] is None or not start <= end < start + max_answer_length:
                continue
            span = _char_span(offsets, start, end)
            if span is None:  # only bare ▁ pieces: no text, which would read as the null answer
                continue
            score = float(starts[start] + ends[end])
            text = context[span[0] : span[1]]
            candidates.append(Candidate(text, score, float(starts[start]), float(ends[end]), index, start, end, span))
    return candidates


def _char_span(offsets: list[Span | None], start: int, end: int) -> Span | None:
    # From the first to the last piece with text: a bare ▁ at either end (an empty span) adds nothing.
    spans = [offsets[i] for i in range(start, end + 1) if offsets[i][0] < offsets[i][1]]
    return (spans[0][0], spans[-1][1]) if spans else None
