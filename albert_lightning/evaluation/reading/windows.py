"""Span extraction's model inputs: ``[CLS] question [SEP] context [SEP]`` windows over a context's pieces.

``make_windows`` cuts them as the reference's ``run_squad`` (BERT/ALBERT): windows every ``doc_stride`` pieces,
each piece's score counted in the window where it has the most context, gold positions of the first answer or
``[CLS]`` when it is not inside the window. Each context position keeps its piece's original-text span
(``spans.tokenize_with_offsets``), which ``decoding`` turns back into text.

Usage::

    windows = make_windows(encoder, question, context, [(start, end)], max_seq_length=384)

Tests: ``python -m pytest tests/test_spans.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from albert_lightning.evaluation.reading.spans import Span, Tokenizer, tokenize_with_offsets, vocab_and_normalizer

__all__ = ["Window", "make_windows"]


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
        tokenizer: an ``Encoder`` or a ``(Vocabulary, Normalizer)`` pair.
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
    vocab, normalizer = vocab_and_normalizer(tokenizer)
    query = vocab.encode([normalizer(question)])[0].tolist()[:max_query_length]
    ids, offsets = tokenize_with_offsets(tokenizer, context)
    room = max_seq_length - len(query) - 3  # [CLS], [SEP], [SEP]
    if room < 1:
        raise ValueError(f"max_seq_length={max_seq_length} with {len(query)} query pieces leaves no room for context")
    if doc_stride < 1:
        raise ValueError(f"doc_stride={doc_stride}: must be positive")
    gold = _answer_pieces(offsets, answers[0], len(context)) if answers else None
    spans = _doc_spans(len(ids), room, doc_stride) or [(0, 0)]
    special = (vocab.special_ids["cls_token"], vocab.special_ids["sep_token"])
    return [_window(example_id, query, ids, offsets, spans, index, gold, special) for index in range(len(spans))]


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
    special: tuple[int, int],
) -> Window:
    cls_id, sep_id = special
    start, length = spans[index]
    head = [cls_id, *query, sep_id]
    pieces = range(start, start + length)
    positions = (0, 0)
    if gold is not None and start <= gold[0] and gold[1] < start + length:
        positions = (gold[0] - start + len(head), gold[1] - start + len(head))
    return Window(
        example_id=example_id,
        input_ids=[*head, *ids[start : start + length], sep_id],
        token_type_ids=[0] * len(head) + [1] * (length + 1),
        context_offsets=[None] * len(head) + [offsets[i] for i in pieces] + [None],
        max_context=[False] * len(head) + [_is_max_context(spans, index, i) for i in pieces] + [False],
        start_position=positions[0],
        end_position=positions[1],
        context_start=start,
    )
