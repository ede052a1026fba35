"""Tests for albert_lightning.evaluation.reading.metrics against values worked out by hand from the official
definitions."""

from __future__ import annotations

import pytest

from albert_lightning.evaluation.reading.metrics import (
    answer_tokens,
    apply_no_ans_threshold,
    exact_match,
    find_best_thresh,
    gold_answers,
    max_exact_match,
    max_token_f1,
    normalize_answer,
    race_accuracy,
    raw_scores,
    squad_scores,
    token_f1,
)

# --- normalisation -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Denver Broncos", "denver broncos"),  # case
        ("U.S.A.", "usa"),  # punctuation inside a word is dropped, not split on
        ("don't stop!", "dont stop"),
        ("The Theater", "theater"),  # "the" goes, "theater" is not a whole-word "the"
        ("another an apple", "another apple"),  # "an" goes, "another" stays
        ("A cat, a hat", "cat hat"),
        ("  many \t spaces\n here ", "many spaces here"),  # whitespace collapsed and stripped
        ("the", ""),
        ("", ""),
        # Order: punctuation goes before articles, so "an-apple" is the single word "anapple" and keeps its "an".
        # (Removing articles first would give " -apple" and then "apple".)
        ("an-apple", "anapple"),
        # Only string.punctuation (ASCII) is removed: curly quotes stay.
        ("“Hi”", "“hi”"),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_answer_tokens() -> None:
    assert answer_tokens("The quick, brown fox.") == ["quick", "brown", "fox"]
    assert answer_tokens("") == []
    assert answer_tokens("a the an") == []  # only articles: no tokens, i.e. a no-answer


# --- exact match and F1 per pair ------------------------------------------------------------------------------


def test_exact_match_is_on_normalised_strings() -> None:
    assert exact_match("the Denver Broncos.", "Denver  broncos") == 1.0
    assert exact_match("Denver", "Denver Broncos") == 0.0


def test_f1_partial_overlap() -> None:
    # pred tokens [quick, brown, fox] (3), gold [quick, brown, dog, jumps] (4), common {quick, brown} = 2:
    # precision 2/3, recall 2/4 = 1/2, F1 = 2·(2/3)(1/2) / (2/3 + 1/2) = (2/3) / (7/6) = 4/7.
    assert token_f1("The quick brown fox", "quick brown dog jumps") == pytest.approx(4 / 7)


def test_f1_repeated_tokens_use_the_multiset_intersection() -> None:
    # pred [paris, paris, paris], gold [paris, france, paris]: common = min(3, 2) = 2 paris.
    # precision 2/3, recall 2/3, F1 = 2/3. (A set intersection would give 1 common token: P 1/3, R 1/3.)
    assert token_f1("Paris Paris Paris", "Paris France Paris") == pytest.approx(2 / 3)


def test_f1_no_overlap_is_zero() -> None:
    assert token_f1("Denver", "Carolina Panthers") == 0.0


def test_max_over_several_gold_answers() -> None:
    golds = ["Denver Broncos", "Denver Broncos of NFL"]
    # vs "denver broncos": P 1/1, R 1/2 → F1 2·(1/2)/(3/2) = 2/3; vs "denver broncos of nfl": R 1/4 →
    # 2·(1/4)/(5/4) = 2/5. The max is 2/3; no gold equals "denver", so exact is 0.
    assert max_token_f1("Denver", golds) == pytest.approx(2 / 3)
    assert max_exact_match("Denver", golds) == 0.0
    # An exact match with the second gold answer is enough.
    assert max_exact_match("broncos", ["Denver Broncos", "The Broncos"]) == 1.0
    assert max_token_f1("broncos", ["Denver Broncos", "The Broncos"]) == 1.0


def test_unanswerable_and_answerable_empty_predictions() -> None:
    # No gold answer: the only gold is "", so an empty prediction is right and anything else wrong.
    assert max_exact_match("", []) == 1.0
    assert max_token_f1("", []) == 1.0
    assert max_exact_match("Denver", []) == 0.0
    assert max_token_f1("Denver", []) == 0.0
    # An empty prediction for an answerable question: empty pred tokens vs non-empty gold → 0.
    assert max_exact_match("", ["Denver"]) == 0.0
    assert max_token_f1("", ["Denver"]) == 0.0


def test_gold_answers_drop_those_that_normalise_to_empty() -> None:
    assert gold_answers(["The", "Denver", "..."]) == ["Denver"]
    assert gold_answers(["the"]) == [""]
    assert gold_answers([]) == [""]
    with pytest.raises(TypeError, match="sequence of strings"):
        gold_answers("Denver")


# --- dataset scores -------------------------------------------------------------------------------------------

# Five questions, three answerable and two not. Per question (raw, no threshold):
#   q1 answerable, "Denver Broncos" vs "Denver Broncos"          exact 1, f1 1
#   q2 unanswerable, "Paris" (non-empty)                            exact 0, f1 0
#   q3 answerable, "the Panthers" vs "Carolina Panthers":          [panthers] vs [carolina, panthers]:
#        P 1/1, R 1/2 → F1 2·(1/2)/(3/2) = 2/3                     exact 0, f1 2/3
#   q4 unanswerable, ""                                             exact 1, f1 1
#   q5 answerable, "Santa Clara, California" vs "Santa Clara":     [santa, clara, california] vs [santa, clara]:
#        P 2/3, R 1 → F1 2·(2/3)/(5/3) = 4/5                       exact 0, f1 4/5
GOLDS = {
    "q1": ["Denver Broncos", "Broncos"],
    "q2": [],
    "q3": ["Carolina Panthers"],
    "q4": [],
    "q5": ["Santa Clara"],
}
PREDICTIONS = {"q1": "Denver Broncos", "q2": "Paris", "q3": "the Panthers", "q4": "", "q5": "Santa Clara, California"}
PROBS = {"q1": 0.1, "q2": 0.3, "q3": 0.5, "q4": 0.7, "q5": 0.9}


def test_raw_scores_per_question() -> None:
    exact, f1 = raw_scores(GOLDS, PREDICTIONS)
    assert exact == {"q1": 1.0, "q2": 0.0, "q3": 0.0, "q4": 1.0, "q5": 0.0}
    assert f1 == pytest.approx({"q1": 1.0, "q2": 0.0, "q3": 2 / 3, "q4": 1.0, "q5": 4 / 5})


def test_squad_scores_with_has_ans_and_no_ans_split() -> None:
    scores = squad_scores(GOLDS, PREDICTIONS)
    # exact: (1 + 0 + 0 + 1 + 0) / 5 = 2/5; f1: (1 + 0 + 2/3 + 1 + 4/5) / 5 = (52/15) / 5 = 52/75.
    # HasAns (q1, q3, q5): exact 1/3, f1 (1 + 2/3 + 4/5) / 3 = (37/15) / 3 = 37/45.
    # NoAns (q2, q4): exact 1/2, f1 1/2.
    assert scores == pytest.approx(
        {
            "exact": 2 / 5,
            "f1": 52 / 75,
            "total": 5,
            "missing": 0,
            "HasAns_exact": 1 / 3,
            "HasAns_f1": 37 / 45,
            "HasAns_total": 3,
            "NoAns_exact": 1 / 2,
            "NoAns_f1": 1 / 2,
            "NoAns_total": 2,
        }
    )


def test_squad_1_1_style_dataset_has_no_split() -> None:
    golds = {"a": ["Denver Broncos"], "b": ["Santa Clara"]}
    # a: exact 1, f1 1; b: "Santa Clara, California" → exact 0, f1 4/5 (as q5 above).
    scores = squad_scores(golds, {"a": "denver broncos", "b": "Santa Clara, California"})
    assert scores == pytest.approx({"exact": 1 / 2, "f1": (1 + 4 / 5) / 2, "total": 2, "missing": 0})


def test_threshold_empties_questions_strictly_above_it() -> None:
    exact_raw, f1_raw = raw_scores(GOLDS, PREDICTIONS)
    has_answer = {qid: bool(answers) for qid, answers in GOLDS.items()}
    # At 0.5, q4 (0.7) and q5 (0.9) are predicted empty: q4 unanswerable → 1, q5 answerable → 0.
    # q3 sits exactly at 0.5 and keeps its prediction (strictly above empties).
    exact = apply_no_ans_threshold(exact_raw, PROBS, has_answer, 0.5)
    f1 = apply_no_ans_threshold(f1_raw, PROBS, has_answer, 0.5)
    assert exact == {"q1": 1.0, "q2": 0.0, "q3": 0.0, "q4": 1.0, "q5": 0.0}
    assert f1 == pytest.approx({"q1": 1.0, "q2": 0.0, "q3": 2 / 3, "q4": 1.0, "q5": 0.0})
    # Through squad_scores: exact 2/5, f1 (1 + 0 + 2/3 + 1 + 0) / 5 = (8/3) / 5 = 8/15.
    scores = squad_scores(GOLDS, PREDICTIONS, PROBS, threshold=0.5)
    assert scores["exact"] == pytest.approx(2 / 5)
    assert scores["f1"] == pytest.approx(8 / 15)
    assert scores["HasAns_f1"] == pytest.approx((1 + 2 / 3) / 3)


def test_best_threshold_worked_example() -> None:
    # Start: everything empty → the 2 unanswerable questions are right: 2. Walk by probability:
    #              exact: diff  total        f1: diff  total
    #   q1 (0.1)        +1       3 (best)        +1       3 (best)
    #   q2 (0.3)        -1       2               -1       2        (non-empty prediction, unanswerable)
    #   q3 (0.5)         0       2             +2/3       8/3
    #   q4 (0.7)         0       2                0       8/3      (empty prediction, unanswerable)
    #   q5 (0.9)         0       2             +4/5       52/15 = 3.47 (best)
    # best_exact = 3/5 at 0.1; best_f1 = (52/15)/5 = 52/75 at 0.9.
    scores = squad_scores(GOLDS, PREDICTIONS, PROBS)
    assert scores["best_exact"] == pytest.approx(3 / 5)
    assert scores["best_exact_thresh"] == 0.1
    assert scores["best_f1"] == pytest.approx(52 / 75)
    assert scores["best_f1_thresh"] == 0.9
    # The official default threshold 1.0 empties nothing: the plain scores.
    assert scores["exact"] == pytest.approx(2 / 5)
    # Thresholding at the chosen values gives the best scores.
    assert squad_scores(GOLDS, PREDICTIONS, PROBS, threshold=0.1)["exact"] == pytest.approx(3 / 5)
    assert squad_scores(GOLDS, PREDICTIONS, PROBS, threshold=0.9)["f1"] == pytest.approx(52 / 75)


def test_best_threshold_tie_keeps_the_lowest() -> None:
    golds = {"a": ["x"], "b": [], "c": ["y"]}
    predictions = {"a": "x", "b": "z", "c": "y"}
    probs = {"a": 0.2, "b": 0.4, "c": 0.6}
    # Start 1 (b empty is right). a (0.2): +1 → 2 (best, 0.2); b (0.4): -1 → 1; c (0.6): +1 → 2, a tie, which
    # does not move the threshold (strictly better only). best_exact 2/3 at 0.2.
    scores = squad_scores(golds, predictions, probs)
    assert scores["best_exact"] == pytest.approx(2 / 3)
    assert scores["best_exact_thresh"] == 0.2
    assert scores["best_f1_thresh"] == 0.2
    # Both tied thresholds do reach 2/3: at 0.2 (a right, b and c empty → b right) and at 0.6 (a, c right).
    assert squad_scores(golds, predictions, probs, threshold=0.2)["exact"] == pytest.approx(2 / 3)
    assert squad_scores(golds, predictions, probs, threshold=0.6)["exact"] == pytest.approx(2 / 3)


def test_best_threshold_start_wins_when_no_prediction_helps() -> None:
    golds = {"a": ["x"], "b": []}
    predictions = {"a": "w", "b": "z"}  # both wrong: raw exact a 0, b 0
    probs = {"a": 0.3, "b": 0.6}
    # Start 1 (b empty is right). a (0.3): wrong, +0 → 1; b (0.6): non-empty, -1 → 0. Nothing beats the start:
    # best_exact 1/2 at the initial threshold 0.0.
    has_answer = {"a": True, "b": False}
    assert find_best_thresh(predictions, {"a": 0.0, "b": 0.0}, probs, has_answer) == (pytest.approx(1 / 2), 0.0)
    scores = squad_scores(golds, predictions, probs)
    assert (scores["best_exact"], scores["best_exact_thresh"]) == (pytest.approx(1 / 2), 0.0)
    assert scores["exact"] == 0.0  # at the default threshold 1.0 both predictions are used, both wrong


def test_best_threshold_tests_the_raw_prediction_string_as_the_official_script() -> None:
    # q1 unanswerable, predicted "The": normalised to "" it scores 1. The official walk tests the raw string,
    # which is non-empty, so q1 counts -1. Start 1; q1 (0.2): -1 → 0; q2 (0.8) right: +1 → 1, not better than
    # the start. best_exact 1/2 at 0.0, although thresholding at 1.0 scores 2/2.
    golds = {"q1": [], "q2": ["Denver"]}
    scores = squad_scores(golds, {"q1": "The", "q2": "Denver"}, {"q1": 0.2, "q2": 0.8})
    assert scores["exact"] == 1.0
    assert scores["best_exact"] == pytest.approx(1 / 2)
    assert scores["best_exact_thresh"] == 0.0


# --- missing and unknown ids ----------------------------------------------------------------------------------


def test_missing_predictions_count_as_wrong() -> None:
    golds = {"a": ["Denver"], "b": [], "c": []}
    predictions = {"a": "Denver", "c": ""}  # b missing: would have been right with "", still scores 0
    # exact (1 + 0 + 1) / 3 = 2/3; NoAns (b, c) 1/2; HasAns (a) 1.
    scores = squad_scores(golds, predictions)
    assert scores["missing"] == 1
    assert scores["total"] == 3
    assert scores["exact"] == pytest.approx(2 / 3)
    assert scores["NoAns_exact"] == pytest.approx(1 / 2)
    assert scores["HasAns_exact"] == 1.0
    # Best threshold: the start counts only the predicted unanswerable c: 1. a (0.2): +1 → 2 (best, 0.2);
    # c (0.6): 0 → 2. best_exact 2/3 over all 3 questions. (The official script would start at 2, counting b,
    # and divide by the 2 predicted questions: 150%.) b's probability is allowed and ignored.
    scores = squad_scores(golds, predictions, {"a": 0.2, "b": 0.5, "c": 0.6})
    assert scores["best_exact"] == pytest.approx(2 / 3)
    assert scores["best_exact_thresh"] == 0.2


def test_unknown_ids_are_refused() -> None:
    golds = {"a": ["Denver"]}
    with pytest.raises(ValueError, match="'zzz'"):
        squad_scores(golds, {"a": "Denver", "zzz": "x"})
    with pytest.raises(ValueError, match="'yyy'"):
        squad_scores(golds, {"a": "Denver"}, {"a": 0.1, "yyy": 0.2})
    with pytest.raises(ValueError, match="'a' has a prediction but no no-answer probability"):
        squad_scores(golds, {"a": "Denver"}, {})
    with pytest.raises(ValueError, match="no gold questions"):
        squad_scores({}, {})


# --- RACE -----------------------------------------------------------------------------------------------------


def test_race_accuracy_per_level() -> None:
    golds = {
        "m1": (0, "middle"),
        "m2": (1, "middle"),
        "m3": (2, "middle"),
        "h1": (3, "high"),
        "h2": (0, "high"),
        "h3": (1, "high"),
        "h4": (2, "high"),
    }
    # right: m1, m2, h1, h4; wrong: m3 (0 ≠ 2), h2 (1 ≠ 0); missing: h3.
    predictions = {"m1": 0, "m2": 1, "m3": 0, "h1": 3, "h2": 1, "h4": 2}
    assert race_accuracy(predictions, golds) == pytest.approx(
        {
            "accuracy": 4 / 7,
            "middle_accuracy": 2 / 3,
            "high_accuracy": 2 / 4,
            "total": 7,
            "middle_total": 3,
            "high_total": 4,
            "missing": 1,
        }
    )


def test_race_level_without_questions_has_no_accuracy() -> None:
    # m1 right, m2 missing: 1/2; no high-school question, so no high_accuracy.
    result = race_accuracy({"m1": 2}, {"m1": (2, "middle"), "m2": (3, "middle")})
    assert result == pytest.approx(
        {"accuracy": 1 / 2, "middle_accuracy": 1 / 2, "total": 2, "middle_total": 2, "high_total": 0, "missing": 1}
    )


def test_race_refuses_unknown_ids_and_levels() -> None:
    with pytest.raises(ValueError, match="'x9'"):
        race_accuracy({"x9": 0}, {"m1": (0, "middle")})
    with pytest.raises(ValueError, match="'college'"):
        race_accuracy({}, {"m1": (0, "college")})
