"""Tests for the shared-passage rule (pipelines.algorithms.passages) on hand-made documents, without a pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.algorithms.passages import PassageRule, word_count

RULE = PassageRule(min_words=8, span=3, min_documents=3)
LONG = "this ebook is for the use of anyone anywhere at no cost."  # 12 words


def _occurrences(docs: dict[tuple[int, str], list[str]], rule: PassageRule) -> tuple[list[tuple], list[tuple]]:
    """Documents ((side, id) → sentences) → the (side, id, position, span) of each occurrence that goes, and of
    the copy that stays for it, through ``units`` and ``shared`` as the stage calls them."""
    rows = sorted(
        (key, side, doc_id, position, span)
        for (side, doc_id), sentences in docs.items()
        for key, position, span in rule.units(sentences)
    )
    if not rows:
        return [], []
    keys = np.frombuffer(b"".join(row[0] for row in rows), dtype=">u8").reshape(-1, 2)
    sides = np.array([row[1] for row in rows], dtype=np.int8)
    ids = np.array([row[2] for row in rows], dtype=object)
    gone, kept = rule.shared(keys[:, 0].copy(), keys[:, 1].copy(), sides, ids)
    return [rows[i][1:] for i in gone], [rows[i][1:3] for i in kept]


def test_word_count_splits_on_whitespace():
    assert word_count("romeo.") == 1 and word_count("  scene  ii. ") == 2 and word_count(LONG) == 12


def test_units_are_long_sentences_and_spans_long_enough_together():
    sentences = ["romeo.", "juliet.", "nurse.", LONG, "alas!"]
    units = [(position, span) for _, position, span in RULE.units(sentences)]
    # one long sentence; the windows from positions 1 and 2 hold it, the one from 0 has three words
    assert units == [(3, 1), (1, 3), (2, 3)]
    assert not list(RULE.units(["romeo.", "juliet.", "nurse.", "romeo."]))
    assert len({key for key, _, _ in RULE.units([LONG, LONG])}) == 1  # equal text, equal key


def test_a_passage_in_enough_documents_stays_in_the_best_one_only():
    docs = {(1, "a"): [LONG, LONG], (1, "b"): ["x.", LONG], (1, "c"): [LONG]}
    gone, kept = _occurrences(docs, RULE)
    assert sorted(gone) == [(1, "b", 1, 1), (1, "c", 0, 1)]  # both copies inside "a" stay
    assert kept == [(1, "a")] * 2


def test_two_training_documents_keep_their_passage_but_a_held_out_one_takes_it():
    assert _occurrences({(1, "a"): [LONG], (1, "b"): [LONG]}, RULE) == ([], [])
    gone, kept = _occurrences({(0, "z"): [LONG], (1, "a"): [LONG], (0, "y"): [LONG]}, RULE)
    assert gone == [(0, "z", 0, 1), (1, "a", 0, 1)] and kept == [(0, "y")] * 2  # three documents: boilerplate
    gone, kept = _occurrences({(0, "z"): [LONG], (1, "a"): [LONG]}, RULE)
    assert gone == [(1, "a", 0, 1)] and kept == [(0, "z")]


def test_short_sentences_are_never_passages_however_often_they_repeat():
    play = ["romeo.", "juliet.", "romeo.", "nurse.", "romeo."]
    docs = {(side, f"play{i}"): play for i, side in enumerate([0, 1, 1, 1, 1])}
    assert _occurrences(docs, RULE) == ([], [])


def test_thresholds_are_checked():
    for kwargs, name in (({"min_words": 0}, "passage_words"), ({"span": 0}, "passage_span"),
                         ({"min_documents": 1}, "passage_documents")):  # fmt: skip
        with pytest.raises(ValueError, match=name):
            PassageRule(**kwargs)
