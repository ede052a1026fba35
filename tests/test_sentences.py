"""Tests for pipelines.algorithms.sentences: library segmentation and the linear-time cut of long sentences."""

from __future__ import annotations

import pytest

from pipelines.algorithms import sentences
from pipelines.algorithms.sentences import MAX_WORD_CHARS, document_sentences, split_long, split_sentences


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


def test_whitespace_only_lines_are_paragraph_breaks():
    text = "a paragraph that ends without a stop\n \t \nthe next one starts in lower case."
    assert split_sentences(text) == ["a paragraph that ends without a stop", "the next one starts in lower case."]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Introduction\nThe model is small. It trains fast.",
            ["Introduction", "The model is small.", "It trains fast."],
        ),
        ("Chapter 1\nMethods\nWe train it.", ["Chapter 1", "Methods", "We train it."]),
        ("Done here.\nResults\nIt works.", ["Done here.", "Results", "It works."]),
        ("第一章 引言\n模型很小。", ["第一章 引言", "模型很小。"]),
    ],
)
def test_a_heading_on_its_own_line_is_its_own_sentence(text: str, expected: list[str]):
    assert split_sentences(text) == expected


def test_hard_wrapped_prose_is_not_split_at_its_line_breaks():
    prose = (
        "ALBERT shares its parameters across all layers and factorises the embedding\n"
        "matrix, which makes the model much smaller than BERT at the same depth. Its\n"
        "Sentence Order Prediction task replaces next sentence prediction, and the\n"
        "model learns\nfrom pairs of consecutive segments.\n"
    )
    assert [" ".join(s.split()) for s in split_sentences(prose)] == [
        "ALBERT shares its parameters across all layers and factorises the embedding matrix, which makes the model "
        "much smaller than BERT at the same depth.",
        "Its Sentence Order Prediction task replaces next sentence prediction, and the model learns from pairs of "
        "consecutive segments.",
    ]


def _big_document() -> tuple[str, list[str]]:
    # Paragraphs with quotes, brackets and terminators: what makes the segmenter's cost grow with paragraph size.
    paragraphs = [
        f'Use x = f(a, {i}) here. He said "stop {i}" (twice).\n    for i in range({i}): print("x")\nIt ends.'
        for i in range(20_000)
    ]
    return "\n \n".join(paragraphs), paragraphs


def test_a_big_document_segments_as_its_paragraphs_do():
    text, paragraphs = _big_document()
    assert len(text) > 2_000_000
    assert split_sentences(text) == [s for p in paragraphs for s in split_sentences(p)]


def test_the_segmenter_never_gets_more_than_a_bounded_piece(monkeypatch: pytest.MonkeyPatch):
    # Its cost grows faster than the length of what it is given; bounded pieces keep a document's cost linear.
    given: list[int] = []

    def counting(language: str, text: str) -> list[str]:
        given.append(len(text))
        return original(language, text)

    original = sentences.segment
    monkeypatch.setattr(sentences, "segment", counting)
    text = _big_document()[0].replace("\n \n", "\n")  # one paragraph of 2 MB
    split_sentences(text)
    assert given and max(given) <= 2 * sentences.MAX_SEGMENT_CHARS
    assert sum(given) <= len(text)
