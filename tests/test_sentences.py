"""Tests for pipelines.sentences: library segmentation and the linear-time cut of long sentences."""

from __future__ import annotations

import pytest

from pipelines.sentences import MAX_WORD_CHARS, document_sentences, split_long, split_sentences


def test_abbreviations_and_decimals_do_not_end_sentences():
    text = "Dr. Smith paid $3.50 for it, e.g. in cash. He left at 5 p.m. on Monday. Is pi 3.14? Yes!"
    assert split_sentences(text) == [
        "Dr. Smith paid $3.50 for it, e.g. in cash.",
        "He left at 5 p.m. on Monday.",
        "Is pi 3.14?",
        "Yes!",
    ]


@pytest.mark.parametrize("language", ["zh", "ja", "en"])
def test_cjk_terminators_end_sentences(language):
    assert split_sentences("你好。我很好！你呢？好的", language) == ["你好。", "我很好！", "你呢？", "好的"]


def test_blank_lines_are_boundaries_and_nothing_empty_is_returned():
    assert split_sentences("A title\n\nSome text here.\n\n\n") == ["A title", "Some text here."]
    assert split_sentences("  \n\n ") == []


def test_presegmented_documents_keep_their_lines():
    text = "First line without stop\nSecond line. Still second.\n  \nThird"
    assert document_sentences(text, presegmented=True) == [
        "First line without stop",
        "Second line. Still second.",
        "Third",
    ]
    assert document_sentences("one\ntwo", presegmented=False) == ["one\ntwo"]


def test_split_long_cuts_at_the_word_budget_and_keeps_the_text():
    assert split_long("a b  c d e", 2) == ["a b", "c d", "e"]
    assert split_long("short one", 5) == ["short one"]
    assert split_long("你好世界啊", 2) == ["你好", "世界", "啊"]
    assert split_long("see 你好 now", 2) == ["see 你", "好 now"]


def test_split_long_cuts_runs_without_spaces():
    pieces = split_long("x" * (MAX_WORD_CHARS * 5), 2)
    assert [len(p) for p in pieces] == [2 * MAX_WORD_CHARS, 2 * MAX_WORD_CHARS, MAX_WORD_CHARS]


def test_split_long_rejects_a_non_positive_budget():
    with pytest.raises(ValueError, match="max_words"):
        split_long("a b", 0)


def test_five_megabyte_line_without_punctuation_becomes_many_pieces():
    line = "lorem ipsum dolor sit amet " * 200_000  # ~5.4 MB, 1M words, no sentence end
    sentences = split_sentences(line)
    assert len(sentences) == 1
    pieces = split_long(sentences[0], 200)
    assert len(pieces) == 5000
    assert all(len(p.split()) == 200 for p in pieces)
    assert " ".join(pieces) == sentences[0]
