"""Span extraction's answers: one question's start/end logits over its windows → the best original-text span.

``decode`` keeps the reference's n-best rules (BERT/ALBERT ``run_squad``) and gives SQuAD 2.0's
``null_score_diff``; the text comes from the original context through each piece's span (``spans``), so an answer
keeps the context's case, accents and quotes.

Usage::

    windows = make_windows(encoder, question, context, [(start, end)], max_seq_length=384)
    prediction = decode(windows, start_logits, end_logits, context)
    answer = prediction.answer(null_threshold)

Tests: ``python -m pytest tests/test_spans.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from albert_lightning.evaluation.reading.spans import Span
from albert_lightning.evaluation.reading.windows import Window

__all__ = ["Candidate", "Prediction", "decode"]


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
