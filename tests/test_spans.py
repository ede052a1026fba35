"""Span extraction's text handling (``albert_lightning.evaluation.reading``'s ``spans``, ``windows`` and
``decoding``): the alignment reproduces the normaliser exactly, pieces map back to the original text, windows follow
the reference's ``run_squad``, and decoding the gold positions gives back the gold answer, in the original text's case
and accents.

The SentencePiece model is trained by the vocab stage's own trainer (identity rule, ALBERT's ids) on the texts
below under every normalisation, so their characters are pieces rather than ``<unk>``.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from albert_lightning.evaluation.finetuning import Encoder
from albert_lightning.evaluation.reading.decoding import decode
from albert_lightning.evaluation.reading.spans import normalize_with_alignment, tokenize_with_offsets
from albert_lightning.evaluation.reading.windows import Window, make_windows
from pipelines.algorithms.textnorm import Normalizer
from pipelines.algorithms.vocab_layout import CLS_ID, SEP_ID
from pipelines.vocab import VocabConfig, train_vocab

NORMALIZERS = [Normalizer(lower_case, strip_accents) for lower_case in (True, False) for strip_accents in (True, False)]
IDS = [f"lower_case={n.lower_case}-strip_accents={n.strip_accents}" for n in NORMALIZERS]

# Long contexts (many windows at max_seq_length 24), with Unicode the normaliser changes: accents precomposed and
# not (Cafe + U+0301), ß, İ (two characters when lower-cased alone), the ligature ﬁ, ``quotes'', Hangul (NFKD
# splits syllables into jamo), CJK without spaces, and runs of whitespace.
CONTEXTS = [
    "The  ``Zürich Straße'' report was written in İstanbul by Anna Müller and her friend Zoë.\n\n"
    "Its ﬁnal chapter describes friendship between the Cafe\u0301 owners of Köln and the bakers of Nîmes, "
    "who met every Sunday   near the river Rhône to share bread ,   cheese and news about the old harbour . "
    "In 1999 the ÉCOLE NORMALE published the whole report again with a new preface by Søren Ødegård ;"
    "\tthe preface explains why the Fjord Œuvre prize went to a small town in Ísland that year .",
    "東京タワー は 日本 の 電波塔 です 。 大阪城 は 豊臣秀吉 が 建てました 。 北京 和 上海 是 中国 的 城市 。 "
    "서울은 한국의 수도입니다 . 東京タワーは高い。 The tower in Tokyo is tall and the castle in Osaka is old . "
    "上海 的 东方明珠 塔 很 高 , and Seoul has many mountains around it .",
]
QUESTION = "Who wrote the ``Zürich Straße'' report, and where did the owners of the small Café meet every week?"
# Texts for the alignment alone: what each step of the normaliser does, at the ends and in the middle.
ALIGNMENT_TEXTS = [
    *CONTEXTS,
    QUESTION,
    "  ``Ça'' ﬁ\tİ  ",
    "```triple''' and '' alone `` ' ` ",
    "ΟΔΟΣ ΣΟΦΙΑΣ Σ σ ΑΣΒ",  # final sigma: str.lower depends on the neighbours
    "e\u0301\u0327 \u0301start \u00a8 diaeresis ½ ﬃ Ǆ K Å \u00a0nbsp\u3000ideographic\u2003em",
    "ᾈ ẞ İİ i̇ Straße",
    "\n\t  ",
    "",
]
SMALL = {"max_seq_length": 24, "doc_stride": 8, "max_query_length": 6}


@pytest.fixture(scope="module")
def spiece(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("vocab")
    texts = [*CONTEXTS, QUESTION, *ALIGNMENT_TEXTS[2:7]]
    lines = [line for n in NORMALIZERS for text in texts for _ in range(25) if (line := n(text))]
    (folder / "sentences.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    train_vocab(str(folder / "sentences.txt"), str(folder / "spiece"), VocabConfig(vocab_size=400, num_threads=1))
    return str(folder / "spiece.model")


@pytest.fixture(scope="module")
def encoders(spiece: str) -> dict[Normalizer, Encoder]:
    return {n: Encoder(spiece, 512, n) for n in NORMALIZERS}


def words(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"\S+", text)]


# --- the alignment -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("normalizer", NORMALIZERS, ids=IDS)
def test_alignment_gives_the_normalisers_text_and_ordered_spans(normalizer: Normalizer) -> None:
    for text in ALIGNMENT_TEXTS:
        normalised, spans = normalize_with_alignment(normalizer, text)
        assert normalised == normalizer(text), text
        assert len(spans) == len(normalised)
        assert all(0 <= s < e <= len(text) for s, e in spans), text
        assert spans == sorted(spans), text  # never goes back in the original


def test_alignment_maps_each_normalised_character_to_its_source() -> None:
    text = "  ``Ça'' ﬁ\tİ  Cafe\u0301"
    normalised, spans = normalize_with_alignment(Normalizer(lower_case=True, strip_accents=True), text)
    assert normalised == '"ca" fi i cafe'
    # `` and '' are one quote each; the ligature's two letters share it; the tab and the two spaces become one
    # space each (the leading ones none); the dropped accent joins its e.
    expected = [(2, 4), (4, 5), (5, 6), (6, 8), (8, 9), (9, 10), (9, 10), (10, 11), (11, 12), (12, 14)]
    assert spans == [*expected, (14, 15), (15, 16), (16, 17), (17, 19)]
    normalised, spans = normalize_with_alignment(Normalizer(lower_case=True, strip_accents=False), "İx")
    assert normalised == "i\u0307x" and spans == [(0, 1), (0, 1), (1, 2)]


@pytest.mark.parametrize("normalizer", NORMALIZERS, ids=IDS)
def test_ids_are_the_encoders(encoders: dict[Normalizer, Encoder], normalizer: Normalizer) -> None:
    encoder = encoders[normalizer]
    for text in ALIGNMENT_TEXTS:
        ids, offsets = tokenize_with_offsets(encoder, text)
        assert ids == encoder.vocab.sp.encode(normalizer(text)), text
        assert len(offsets) == len(ids)
        assert tokenize_with_offsets((encoder.vocab, normalizer), text) == (ids, offsets)


def test_the_vocabulary_has_the_texts_pieces(encoders: dict[Normalizer, Encoder]) -> None:
    # <unk> everywhere would make every other test here weaker.
    for normalizer, encoder in encoders.items():
        ids = [i for text in CONTEXTS for i in encoder.vocab.sp.encode(normalizer(text))]
        assert ids.count(encoder.vocab.sp.unk_id()) <= len(ids) // 50, normalizer


@pytest.mark.parametrize("normalizer", NORMALIZERS, ids=IDS)
def test_the_pieces_of_a_word_cover_exactly_that_word(encoders: dict[Normalizer, Encoder], normalizer) -> None:
    for text in CONTEXTS:
        _, offsets = tokenize_with_offsets(encoders[normalizer], text)
        for start, end in words(text):
            inside = [(s, e) for s, e in offsets if start <= s < e <= end]
            assert (inside[0][0], inside[-1][1]) == (start, end), text[start:end]
        covered = {i for s, e in offsets for i in range(s, e)}
        assert covered == {i for s, e in words(text) for i in range(s, e)}  # no whitespace, no gap


@pytest.mark.parametrize("normalizer", NORMALIZERS, ids=IDS)
def test_bare_space_pieces_are_empty_at_the_next_piece(encoders: dict[Normalizer, Encoder], normalizer) -> None:
    encoder = encoders[normalizer]
    bare = 0
    for text in ALIGNMENT_TEXTS:
        ids, offsets = tokenize_with_offsets(encoder, text)
        for i, piece_id in enumerate(ids):
            if encoder.vocab.sp.id_to_piece(piece_id) == "▁":
                bare += 1
                assert offsets[i][0] == offsets[i][1] == offsets[i + 1][0], text
            else:
                assert offsets[i][0] < offsets[i][1], text
    assert bare > 0  # the texts do have some (the dummy prefix before CJK, unknown characters)


def test_offsets_agree_with_sentencepieces_byte_offsets(encoders: dict[Normalizer, Encoder]) -> None:
    # The proto output's begin/end are UTF-8 byte offsets; the offsets used are characters: the same pieces.
    pytest.importorskip("google.protobuf")
    sp = encoders[NORMALIZERS[0]].vocab.sp
    for normalizer in NORMALIZERS:
        for text in CONTEXTS:
            normalised = normalizer(text)
            chars = sp.encode(normalised, out_type="offset_mapping", return_bytes=False)["offsets"]
            char_at = {len(normalised[:i].encode("utf-8")): i for i in range(len(normalised) + 1)}
            proto = sp.encode(normalised, out_type="proto").pieces
            assert [(char_at[p.begin], char_at[p.end]) for p in proto] == list(chars)
            assert any(p.end - p.begin > e - b for p, (b, e) in zip(proto, chars, strict=True))  # bytes differ


# --- windows -----------------------------------------------------------------------------------------------------


def room(encoder: Encoder, normalizer: Normalizer) -> int:
    query = encoder.vocab.sp.encode(normalizer(QUESTION))[: SMALL["max_query_length"]]
    return SMALL["max_seq_length"] - len(query) - 3


@pytest.mark.parametrize("normalizer", NORMALIZERS, ids=IDS)
def test_windows_are_laid_out_as_the_reference(encoders: dict[Normalizer, Encoder], normalizer) -> None:
    encoder = encoders[normalizer]
    query = encoder.vocab.sp.encode(normalizer(QUESTION))
    assert len(query) > SMALL["max_query_length"]  # so truncation shows
    query = query[: SMALL["max_query_length"]]
    for context in CONTEXTS:
        ids, offsets = tokenize_with_offsets(encoder, context)
        windows = make_windows(encoder, QUESTION, context, example_id="q1", **SMALL)
        assert len(windows) > 5
        starts = [w.context_start for w in windows]
        assert starts == list(range(0, 8 * len(windows), 8))  # every doc_stride pieces
        for w in windows:
            n = len(w.input_ids) - len(query) - 3
            assert w.example_id == "q1" and len(w.input_ids) <= SMALL["max_seq_length"]
            assert w.input_ids == [CLS_ID, *query, SEP_ID, *ids[w.context_start : w.context_start + n], SEP_ID]
            assert w.token_type_ids == [0] * (len(query) + 2) + [1] * (n + 1)
            assert w.context_offsets == [None] * (len(query) + 2) + offsets[w.context_start : w.context_start + n] + [
                None
            ]
            assert list(w.context_positions) == list(range(len(query) + 2, len(w.input_ids) - 1))
            assert w.start_position == w.end_position == 0  # no answer given
        assert all(len(w.input_ids) == SMALL["max_seq_length"] for w in windows[:-1])
        last = windows[-1]
        assert last.context_start + len(last.context_positions) == len(ids)  # the end is covered...
        assert windows[-2].context_start + len(windows[-2].context_positions) < len(ids)  # ...by the last alone


def max_context_windows(windows: list[Window], piece: int) -> list[int]:
    return [
        i
        for i, w in enumerate(windows)
        for p in w.context_positions
        if w.context_start + p - w.context_positions[0] == piece and w.max_context[p]
    ]


def score(window: Window, piece: int) -> float:
    first, length = window.context_start, len(window.context_positions)
    return min(piece - first, first + length - 1 - piece) + 0.01 * length


@pytest.mark.parametrize("normalizer", NORMALIZERS, ids=IDS)
def test_each_piece_has_exactly_one_max_context_window(encoders: dict[Normalizer, Encoder], normalizer) -> None:
    for context in CONTEXTS:
        windows = make_windows(encoders[normalizer], QUESTION, context, **SMALL)
        num_pieces = len(tokenize_with_offsets(encoders[normalizer], context)[0])
        for piece in range(num_pieces):
            (best,) = max_context_windows(windows, piece)  # in at least one window, the best in exactly one
            holding = [i for i, w in enumerate(windows) if 0 <= piece - w.context_start < len(w.context_positions)]
            # the best score of min(left, right) + 0.01 * length; the first such window on a tie
            assert all(score(windows[best], piece) > score(windows[i], piece) for i in holding if i < best)
            assert all(score(windows[best], piece) >= score(windows[i], piece) for i in holding)
        for w in windows:
            assert not any(w.max_context[: w.context_positions[0]]) and not w.max_context[-1]


def test_windows_reject_what_does_not_fit(encoders: dict[Normalizer, Encoder]) -> None:
    encoder = encoders[NORMALIZERS[0]]
    with pytest.raises(ValueError, match="no room"):
        make_windows(encoder, QUESTION, CONTEXTS[0], max_seq_length=9, max_query_length=6)
    with pytest.raises(ValueError, match="must be positive"):
        make_windows(encoder, QUESTION, CONTEXTS[0], doc_stride=0)
    with pytest.raises(ValueError, match="not inside"):
        make_windows(encoder, QUESTION, CONTEXTS[0], [(5, len(CONTEXTS[0]) + 1)])
    with pytest.raises(ValueError, match="covers no piece"):
        make_windows(encoder, QUESTION, CONTEXTS[0], [(3, 5)])  # the two spaces after "The"


def test_an_empty_context_gives_one_window_without_context(encoders: dict[Normalizer, Encoder]) -> None:
    (window,) = make_windows(encoders[NORMALIZERS[0]], QUESTION, " \n ", **SMALL)
    assert window.input_ids[-2:] == [SEP_ID, SEP_ID] and not window.context_positions
    prediction = decode([window], [np.zeros(24)], [np.zeros(24)], " \n ")
    assert prediction.text == "" and prediction.answer() == ""


# --- gold positions back to the answer ---------------------------------------------------------------------------


def answer_text(window: Window, context: str) -> str:
    return context[window.context_offsets[window.start_position][0] : window.context_offsets[window.end_position][1]]


@pytest.mark.parametrize("normalizer", NORMALIZERS, ids=IDS)
def test_gold_positions_decode_to_every_whole_word_answer(encoders: dict[Normalizer, Encoder], normalizer) -> None:
    """Every word (and pair of words) of the long contexts as an answer: each window that holds it entirely gives
    it back exactly from its gold positions; the others point at [CLS]. Some answers sit at window edges."""
    encoder, fits = encoders[normalizer], room(encoders[normalizer], normalizer)
    holding = at_first = at_last = 0
    for context in CONTEXTS:
        _, offsets = tokenize_with_offsets(encoder, context)
        spans = words(context)
        for start, end in [*spans, *((a[0], b[1]) for a, b in itertools.pairwise(spans))]:
            windows = make_windows(encoder, QUESTION, context, [(start, end), (0, 1)], **SMALL)
            pieces = [i for i, (s, e) in enumerate(offsets) if s < end and e > start]
            for w in windows:
                inside = w.context_start <= pieces[0] and pieces[-1] < w.context_start + len(w.context_positions)
                assert (w.start_position > 0) == inside
                if inside:
                    holding += 1
                    assert answer_text(w, context) == context[start:end]
                    at_first += w.start_position == w.context_positions[0]
                    at_last += w.end_position == w.context_positions[-1]
                else:
                    assert w.start_position == w.end_position == 0
            if len(pieces) <= fits - SMALL["doc_stride"] + 1:  # short enough that the stride guarantees a window
                assert any(w.start_position for w in windows), context[start:end]
    assert holding > 200 and at_first > 10 and at_last > 10


@pytest.mark.parametrize("normalizer", NORMALIZERS, ids=IDS)
def test_answers_inside_a_piece_get_the_covering_pieces(encoders: dict[Normalizer, Encoder], normalizer) -> None:
    encoder = encoders[normalizer]
    cases = [
        (CONTEXTS[0], "ship"),
        (CONTEXTS[0], "rich"),
        (CONTEXTS[1], "タワ"),
        (CONTEXTS[1], "국의"),
        (CONTEXTS[1], "京"),
    ]
    for context, answer in cases:
        start = context.index(answer)
        end = start + len(answer)
        _, offsets = tokenize_with_offsets(encoder, context)
        expected = (max(s for s, e in offsets if s <= start < e), min(e for s, e in offsets if s < end <= e))
        windows = make_windows(encoder, QUESTION, context, [(start, end)], **SMALL)
        held = [w for w in windows if w.start_position]
        assert held, answer
        for w in held:
            text = answer_text(w, context)
            assert answer in text and text == context[expected[0] : expected[1]], answer


# --- decoding ----------------------------------------------------------------------------------------------------


def gold_setup(encoder: Encoder, answer: str, context: str = CONTEXTS[0]) -> tuple[list[Window], Window, int]:
    start = context.index(answer)
    windows = make_windows(encoder, QUESTION, context, [(start, start + len(answer))], **SMALL)
    index = next(i for i, w in enumerate(windows) if w.start_position and w.max_context[w.start_position])
    return windows, windows[index], index


def zeros(windows: list[Window], pad: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.zeros(len(w.input_ids) + pad, np.float32) for w in windows], [
        np.zeros(len(w.input_ids) + pad, np.float32) for w in windows
    ]


@pytest.mark.parametrize("answer", ["Zürich Straße", "İstanbul", "Cafe\u0301", "ÉCOLE", "ﬁnal", "Nîmes"])
@pytest.mark.parametrize("normalizer", NORMALIZERS, ids=IDS)
def test_decode_returns_the_original_text(encoders: dict[Normalizer, Encoder], normalizer, answer: str) -> None:
    windows, gold, index = gold_setup(encoders[normalizer], answer)
    starts, ends = zeros(windows)
    starts[index][gold.start_position] = 7.0
    ends[index][gold.end_position] = 5.0
    prediction = decode(windows, starts, ends, CONTEXTS[0])
    assert prediction.text == answer and prediction.score == 12.0
    assert prediction.null_score == 0.0 and prediction.null_score_diff == -12.0
    assert prediction.answer(0.0) == answer


def test_a_higher_null_score_gives_a_positive_diff(encoders: dict[Normalizer, Encoder]) -> None:
    windows, gold, index = gold_setup(encoders[NORMALIZERS[0]], "Köln")
    starts, ends = zeros(windows)
    starts[index][gold.start_position] = ends[index][gold.end_position] = 3.0
    for s, e in zip(starts, ends, strict=True):
        s[0], e[0] = 4.0, 5.0
    starts[-1][0] = 2.0  # the null score is the least over the windows: 7
    prediction = decode(windows, starts, ends, CONTEXTS[0])
    assert prediction.null_score == 7.0 and prediction.null_score_diff == 1.0 > 0
    assert prediction.text == "Köln" and prediction.answer(0.0) == "" and prediction.answer(1.0) == "Köln"


def test_max_answer_length_is_respected(encoders: dict[Normalizer, Encoder]) -> None:
    windows = make_windows(encoders[NORMALIZERS[0]], QUESTION, CONTEXTS[0], **SMALL)
    index, window = 1, windows[1]
    start = next(p for p in window.context_positions if window.max_context[p])
    assert start + 5 in window.context_positions
    starts, ends = zeros(windows)
    starts[index][start] = 10.0
    ends[index][start + 5] = 10.0
    ends[index][start + 1] = 5.0
    long = decode(windows, starts, ends, CONTEXTS[0], max_answer_length=6).nbest[0]
    short = decode(windows, starts, ends, CONTEXTS[0], max_answer_length=5)
    assert (long.window, long.start, long.end, long.score) == (index, start, start + 5, 20.0)
    assert (short.nbest[0].window, short.nbest[0].start, short.nbest[0].end) == (index, start, start + 1)
    assert all(c.end - c.start < 5 for c in short.nbest)


def test_a_start_counts_only_in_its_max_context_window(encoders: dict[Normalizer, Encoder]) -> None:
    windows = make_windows(encoders[NORMALIZERS[0]], QUESTION, CONTEXTS[0], **SMALL)
    index, w = next((i, w) for i, w in enumerate(windows) if not w.max_context[w.context_positions[0] + 1])
    position = w.context_positions[0] + 1
    starts, ends = zeros(windows)
    starts[index][position] = ends[index][position] = 10.0
    prediction = decode(windows, starts, ends, CONTEXTS[0])
    assert (prediction.nbest[0].window, prediction.nbest[0].start) != (index, position)
    assert prediction.score < 20.0
    assert all(windows[c.window].max_context[c.start] for c in prediction.nbest)


def brute_force(windows: list[Window], starts, ends, context: str, n_best: int, max_length: int) -> list[float]:
    """The scores of the reference's n-best, enumerated directly: every valid pair of each window's top starts and
    ends, best first, the first of each text kept."""
    found = []
    for w, s_logits, e_logits in zip(windows, starts, ends, strict=True):
        top_s = np.argsort(-s_logits[: len(w.input_ids)], kind="stable")[:n_best]
        top_e = np.argsort(-e_logits[: len(w.input_ids)], kind="stable")[:n_best]
        for s in top_s:
            for e in top_e:
                if not (w.max_context[s] and w.context_offsets[e] is not None and s <= e < s + max_length):
                    continue
                texts = [
                    w.context_offsets[i] for i in range(s, e + 1) if w.context_offsets[i][0] < w.context_offsets[i][1]
                ]
                if texts:
                    found.append((float(s_logits[s]) + float(e_logits[e]), context[texts[0][0] : texts[-1][1]]))
    found.sort(key=lambda x: x[0], reverse=True)
    best: dict[str, float] = {}
    for value, text in found:
        best.setdefault(text, value)
    return list(best.values())[:n_best]


@pytest.mark.parametrize("n_best", [1, 3, 20, 100])
def test_nbest_is_the_best_distinct_candidates(encoders: dict[Normalizer, Encoder], n_best: int) -> None:
    windows = make_windows(encoders[NORMALIZERS[0]], QUESTION, CONTEXTS[1], **SMALL)
    rng = np.random.default_rng(n_best)
    starts = [rng.normal(size=len(w.input_ids) + 3).astype(np.float32) for w in windows]  # + padding
    ends = [rng.normal(size=len(w.input_ids) + 3).astype(np.float32) for w in windows]
    prediction = decode(windows, starts, ends, CONTEXTS[1], n_best_size=n_best, max_answer_length=4)
    expected = brute_force(windows, starts, ends, CONTEXTS[1], n_best, 4)
    assert [c.score for c in prediction.nbest] == expected and prediction.score == expected[0]
    assert len({c.text for c in prediction.nbest}) == len(prediction.nbest)
    assert len(prediction.nbest) == n_best or n_best == 100
    for c in prediction.nbest:
        assert c.text == CONTEXTS[1][c.char_span[0] : c.char_span[1]] and c.score == c.start_logit + c.end_logit
        assert c.text == c.text.strip() and c.text


def test_decode_ignores_padding_and_checks_shapes(encoders: dict[Normalizer, Encoder]) -> None:
    windows, gold, index = gold_setup(encoders[NORMALIZERS[0]], "Nîmes")
    starts, ends = zeros(windows, pad=4)
    starts[index][gold.start_position] = ends[index][gold.end_position] = 1.0
    for s, e in zip(starts, ends, strict=True):
        s[-4:], e[-4:] = 100.0, 100.0  # padded positions: not part of any window
    assert decode(windows, starts, ends, CONTEXTS[0]).text == "Nîmes"
    with pytest.raises(ValueError, match="logits of shape"):
        decode(windows, [s[:5] for s in starts], ends, CONTEXTS[0])
    with pytest.raises(ValueError, match="windows need"):
        decode(windows, starts[:-1], ends, CONTEXTS[0])


def test_no_valid_candidate_gives_the_empty_answer(encoders: dict[Normalizer, Encoder]) -> None:
    windows = make_windows(encoders[NORMALIZERS[0]], QUESTION, CONTEXTS[0], **SMALL)
    starts, ends = zeros(windows)
    for s in starts:
        s[1] = 9.0  # a query position: the only start tried with n_best_size 1
    prediction = decode(windows, starts, ends, CONTEXTS[0], n_best_size=1)
    assert prediction.text == "" and prediction.nbest == []
    assert prediction.score == -np.inf and prediction.null_score_diff == np.inf and prediction.answer(1e9) == ""
