"""Reading-comprehension metrics as the official scripts define them: SQuAD 1.1/2.0 (EM, F1), CMRC 2018 as CLUE
scores it (EM, F1 over characters) and RACE/C3 (accuracy).

The ALBERT paper reports SQuAD 1.1 and 2.0 dev F1/EM, scored by the official ``evaluate-v1.1.py`` /
``evaluate-v2.0.py`` (Rajpurkar et al.), and RACE accuracy (overall, and on its middle- and high-school parts).
The official SQuAD scripts define:

* ``normalize_answer``: lower case, then drop every character of ``string.punctuation``, then replace the whole
  words a/an/the (regex ``\\b(a|an|the)\\b``) by a space, then collapse whitespace, in that order;
* exact match: the normalised prediction equals the normalised gold answer;
* F1: over the whitespace tokens of the normalised strings, with the multiset (``Counter``) intersection as the
  overlap; in v2.0 an empty token list (no answer) scores 1 against an empty one and 0 against anything else;
* a question's score: the maximum over its gold answers (v2.0: golds that normalise to "" are dropped, and a
  question left with none is unanswerable, whose only gold answer is "");
* v2.0 with a no-answer probability file: ``apply_no_ans_threshold`` (a question whose no-answer probability is
  above the threshold is predicted empty) and ``find_best_thresh`` (the threshold that would have scored best).

This module reproduces those definitions (standard library only; no torch, nothing downloaded), with two
deliberate differences, both about missing predictions: a question with no prediction scores 0 and is counted in
``missing`` (as ``evaluate-v1.1.py`` does; v2.0 drops it from the denominator), and the best-threshold search
counts only questions that have a prediction (v2.0 counts a missing unanswerable question as correct in its
starting score yet leaves it out of the denominator). With every question predicted, both equal the official
numbers.

CMRC 2018 (``cmrc_scores``) is scored by CLUE's ``cmrc2018_evaluate.py``, which tokenises for Chinese:

* ``cmrc_segments``: lower case and strip; drop every character of its punctuation list (``CMRC_PUNCTUATION``,
  ASCII ``-:_*^/\\~`+=`` and the full-width marks), then each Chinese character (U+4E00–U+9FA5) is a segment of
  its own and each run of other characters is split into words by ``nltk.word_tokenize``. This module has no
  nltk: a run is split at whitespace into word-character runs (digits joined by ``.`` or ``,`` stay one, as nltk
  keeps "3.5" and "1,000") and every other character alone, which agrees with nltk on numbers, Latin words and
  the ASCII punctuation CLUE keeps (``,`` ``.`` ``(``…); nltk's English clitics ("'s", "n't") are not split;
* exact match: the strings equal once lower-cased, stripped and without that punctuation (inner spaces count);
* F1: from the longest common *contiguous* run of segments (not SQuAD's bag of tokens): precision = run length /
  prediction segments, recall = run length / answer segments;
* a question's score: the maximum over its reference answers (CLUE's dev set has several per question).

Every score is a fraction in [0, 1], not the scripts' percent, so the project's reports treat all
metrics alike; ``*_total`` and ``missing`` are counts. Tests: ``python -m pytest tests/test_reading_metrics.py``.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

__all__ = [
    "RACE_LEVELS",
    "answer_tokens",
    "apply_no_ans_threshold",
    "cmrc_exact_match",
    "cmrc_f1",
    "cmrc_raw_scores",
    "cmrc_scores",
    "cmrc_segments",
    "exact_match",
    "find_best_thresh",
    "gold_answers",
    "max_exact_match",
    "max_token_f1",
    "normalize_answer",
    "race_accuracy",
    "raw_scores",
    "squad_scores",
    "token_f1",
]

RACE_LEVELS = ("middle", "high")

_PUNCTUATION = frozenset(string.punctuation)  # ASCII only, as the official scripts: “curly quotes” stay
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """The official ``normalize_answer``: white_space_fix(remove_articles(remove_punc(lower(text)))).

    The order matters: punctuation goes before articles, so "an-apple" becomes "anapple" (no whole word "an" is
    left), and articles are replaced by a space that the last step collapses.
    """
    lowered = text.lower()
    no_punc = "".join(ch for ch in lowered if ch not in _PUNCTUATION)
    no_articles = _ARTICLES.sub(" ", no_punc)
    return " ".join(no_articles.split())


def answer_tokens(text: str) -> list[str]:
    """The official ``get_tokens``: the whitespace tokens of the normalised text ([] for "")."""
    if not text:
        return []
    return normalize_answer(text).split()


def exact_match(prediction: str, gold: str) -> float:
    """1.0 if the normalised prediction equals the normalised gold answer, else 0.0 (official ``compute_exact``)."""
    return float(normalize_answer(gold) == normalize_answer(prediction))


def token_f1(prediction: str, gold: str) -> float:
    """Token F1 of one (prediction, gold) pair, the official v2.0 ``compute_f1``.

    Overlap is the multiset intersection: a token repeated in the prediction counts at most as often as it occurs
    in the gold answer. An empty token list on either side (a no-answer, or a string of only punctuation and
    articles) scores 1.0 if both are empty and 0.0 otherwise, since precision or recall would be 0/0.
    """
    gold_toks = answer_tokens(gold)
    pred_toks = answer_tokens(prediction)
    if not gold_toks or not pred_toks:
        return float(gold_toks == pred_toks)
    num_same = sum((Counter(gold_toks) & Counter(pred_toks)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_toks)
    recall = num_same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def gold_answers(answers: Sequence[str]) -> list[str]:
    """The gold answers a prediction is scored against (official v2.0 ``get_raw_scores``).

    Answers that normalise to "" are dropped (they would match any article or punctuation); if none is left the
    question is unanswerable and the only correct answer is "".
    """
    if isinstance(answers, str):  # a bare string would be scored character by character
        raise TypeError(f"gold answers must be a sequence of strings, not the string {answers!r}")
    kept = [a for a in answers if normalize_answer(a)]
    return kept or [""]


def max_exact_match(prediction: str, answers: Sequence[str]) -> float:
    """Exact match of a prediction: the best over the question's gold answers (``gold_answers``)."""
    return max(exact_match(prediction, gold) for gold in gold_answers(answers))


def max_token_f1(prediction: str, answers: Sequence[str]) -> float:
    """Token F1 of a prediction: the best over the question's gold answers (``gold_answers``)."""
    return max(token_f1(prediction, gold) for gold in gold_answers(answers))


def _check_ids(golds: Mapping[str, object], ids: Mapping[str, object], what: str) -> None:
    # A score for a question the dataset does not have means predictions and dataset do not belong together
    # (wrong split, wrong version): an error, not something to skip.
    unknown = sorted(set(ids) - set(golds))
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise ValueError(f"{what} for question id {unknown[0]!r}{more}, which is not in the gold data")


def raw_scores(
    golds: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
) -> tuple[dict[str, float], dict[str, float]]:
    """(exact, f1) per predicted question id, before any no-answer threshold (official ``get_raw_scores``).

    Questions without a prediction have no entry here; ``squad_scores`` counts them as 0 and reports them.
    """
    _check_ids(golds, predictions, "a prediction")
    exact: dict[str, float] = {}
    f1: dict[str, float] = {}
    for qid, answers in golds.items():
        if qid in predictions:
            exact[qid] = max_exact_match(predictions[qid], answers)
            f1[qid] = max_token_f1(predictions[qid], answers)
    return exact, f1


def apply_no_ans_threshold(
    scores: Mapping[str, float],
    no_answer_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
    threshold: float,
) -> dict[str, float]:
    """Scores with every question whose no-answer probability is above ``threshold`` predicted empty.

    As the official script: an empty prediction scores 1 on an unanswerable question and 0 on an answerable one;
    a probability equal to the threshold keeps the prediction (strictly above).
    """
    return {
        qid: float(not has_answer[qid]) if no_answer_probs[qid] > threshold else score for qid, score in scores.items()
    }


def find_best_thresh(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    no_answer_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
) -> tuple[float, float]:
    """(best score as a fraction of all questions, its threshold): the official v2.0 ``find_best_thresh``.

    ``scores`` are raw (unthresholded) scores of the predicted questions, ``has_answer`` covers every question.
    A threshold t keeps the predictions of the questions with no-answer probability <= t and empties the rest,
    so sweeping t upwards through the sorted probabilities switches questions one at a time from "empty" to
    "own prediction"; the running total after each switch is the score of thresholding at that probability.
    Reproduced as the official script has it, quirks included:

    * the start is "empty everywhere" (1 per unanswerable question) at threshold 0.0; an answerable question
      switches from 0 (empty) to its raw score: diff = score;
    * an unanswerable question switches from 1 (empty, correct) to 0 if its prediction string is non-empty
      (diff = -1) or stays at 1 (diff = 0). The test is on the raw string, not the normalised one, so a
      prediction such as "the" counts as -1 here although it scores 1 once normalised;
    * only a strictly better total moves the threshold, so among equal scores the lowest threshold wins; with
      equal probabilities the order is that of ``no_answer_probs`` (a stable sort), and the returned threshold
      then keeps all of the tied questions.

    Unlike the official script with missing predictions: the start counts only predicted unanswerable ones.
    """
    current = float(sum(1 for qid in scores if not has_answer[qid]))
    best, best_thresh = current, 0.0
    for qid in sorted(no_answer_probs, key=lambda k: no_answer_probs[k]):
        if qid not in scores:  # no prediction: scores 0 whatever the threshold
            continue
        if has_answer[qid]:
            diff = scores[qid]
        elif predictions[qid]:
            diff = -1.0
        else:
            diff = 0.0
        current += diff
        if current > best:
            best, best_thresh = current, float(no_answer_probs[qid])
    return best / len(has_answer), best_thresh


def _mean(scores: Mapping[str, float], qids: Sequence[str]) -> float:
    # Missing predictions have no score and count as 0 in the mean over all of ``qids``.
    return sum(scores.get(qid, 0.0) for qid in qids) / len(qids)


def squad_scores(
    golds: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    no_answer_probs: Mapping[str, float] | None = None,
    threshold: float = 1.0,
    raw: tuple[dict[str, float], dict[str, float]] | None = None,
) -> dict[str, float]:
    """SQuAD 1.1/2.0 scores of ``predictions`` (question id → answer text) against ``golds`` (id → gold answers).

    Fractions in [0, 1] (the official scripts print percent) and counts: ``exact``, ``f1``, ``total`` and
    ``missing`` (questions without a prediction, each scored 0); when some question has no gold answer (2.0), the
    ``HasAns_*``/``NoAns_*`` scores and totals; with ``no_answer_probs`` (id → no-answer probability, for every
    predicted question) the scores after ``apply_no_ans_threshold`` at ``threshold`` (1.0, the official default)
    and ``best_exact``/``best_f1`` with their thresholds (``find_best_thresh`` on the raw scores). A question is
    answerable when its gold list is non-empty (official ``make_qid_to_has_ans``). Raises ValueError for an
    empty dataset, an id not in ``golds``, or a predicted question without a probability. ``raw``: the
    ``raw_scores`` of these predictions when the caller has them already.
    """
    if not golds:
        raise ValueError("no gold questions to score")
    exact_raw, f1_raw = raw if raw is not None else raw_scores(golds, predictions)
    has_answer = {qid: bool(answers) for qid, answers in golds.items()}
    exact, f1 = exact_raw, f1_raw
    if no_answer_probs is not None:
        _check_probs(golds, predictions, no_answer_probs)
        exact = apply_no_ans_threshold(exact_raw, no_answer_probs, has_answer, threshold)
        f1 = apply_no_ans_threshold(f1_raw, no_answer_probs, has_answer, threshold)
    all_qids = list(golds)
    result: dict[str, float] = {
        "exact": _mean(exact, all_qids),
        "f1": _mean(f1, all_qids),
        "total": len(all_qids),
        "missing": sum(1 for qid in all_qids if qid not in predictions),
    }
    result |= _split_by_answerability(exact, f1, has_answer)
    if no_answer_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = find_best_thresh(
            predictions, exact_raw, no_answer_probs, has_answer
        )
        result["best_f1"], result["best_f1_thresh"] = find_best_thresh(predictions, f1_raw, no_answer_probs, has_answer)
    return result


def _check_probs(golds: Mapping[str, object], predictions: Mapping[str, str], probs: Mapping[str, float]) -> None:
    _check_ids(golds, probs, "a no-answer probability")
    without = sorted(set(predictions) - set(probs))
    if without:
        raise ValueError(f"question id {without[0]!r} has a prediction but no no-answer probability")


def _split_by_answerability(
    exact: Mapping[str, float], f1: Mapping[str, float], has_answer: Mapping[str, bool]
) -> dict[str, float]:
    """HasAns/NoAns scores and totals, as the official v2.0 script prints them: only when some question is
    unanswerable."""
    no_ans_qids = [qid for qid, has in has_answer.items() if not has]
    if not no_ans_qids:
        return {}
    result = {}
    for prefix, qids in (("HasAns", [qid for qid, has in has_answer.items() if has]), ("NoAns", no_ans_qids)):
        if qids:
            result |= {
                f"{prefix}_exact": _mean(exact, qids),
                f"{prefix}_f1": _mean(f1, qids),
                f"{prefix}_total": len(qids),
            }
    return result


def race_accuracy(
    predictions: Mapping[str, int], golds: Mapping[str, tuple[int, str]], levels: Sequence[str] = RACE_LEVELS
) -> dict[str, float]:
    """RACE accuracy, a fraction in [0, 1], overall and per level ("middle": RACE-M, "high": RACE-H; C3 passes
    its ``levels``, "dialogue" and "mixed").

    ``predictions``: question id → chosen option index; ``golds``: question id → (correct option index, level).
    Returns ``accuracy``, ``middle_accuracy``, ``high_accuracy`` and the counts ``total``, ``middle_total``,
    ``high_total`` and ``missing`` (questions without a prediction, counted wrong). A level with no questions has
    its ``*_total`` = 0 and no accuracy key (there is nothing to be accurate on; 0.0 would read as a result).
    Raises ValueError for an empty dataset, a prediction for an id not in ``golds``, or an unknown level.
    """
    if not golds:
        raise ValueError("no gold questions to score")
    _check_ids(golds, predictions, "a prediction")
    correct = dict.fromkeys(levels, 0)
    total = dict.fromkeys(levels, 0)
    for qid, (label, level) in golds.items():
        if level not in total:
            raise ValueError(f"question id {qid!r}: level {level!r} is not one of {tuple(levels)}")
        total[level] += 1
        # A missing prediction (None) never equals a label: it counts as wrong.
        correct[level] += int(predictions.get(qid) == label)
    result: dict[str, float] = {
        "accuracy": sum(correct.values()) / len(golds),
        "total": len(golds),
        "missing": sum(1 for qid in golds if qid not in predictions),
    }
    for level in levels:
        if total[level]:
            result[f"{level}_accuracy"] = correct[level] / total[level]
        result[f"{level}_total"] = total[level]
    return result


# CLUE's ``sp_char`` list. It also lists "……", two characters, which a one-character test never matches: a single
# "…" is kept, as CLUE keeps it.
CMRC_PUNCTUATION = frozenset("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")
_CMRC_CHINESE = re.compile(r"[\u4e00-\u9fa5]")
_CMRC_WORDS = re.compile(r"\d+(?:[.,]\d+)+|\w+|\S")  # nltk.word_tokenize's split of numbers, words and marks


def cmrc_segments(text: str) -> list[str]:
    """CLUE's ``mixed_segmentation(text, rm_punc=True)``: each Chinese character alone, other runs as words.

    A dropped punctuation mark does not end a run, as in CLUE's loop: "a-b" is the one word "ab".
    """
    segments: list[str] = []
    run = ""
    for char in text.lower().strip():
        if char in CMRC_PUNCTUATION:
            continue
        if _CMRC_CHINESE.match(char):
            segments += _CMRC_WORDS.findall(run)
            run = ""
            segments.append(char)
        else:
            run += char
    return segments + _CMRC_WORDS.findall(run)


def _cmrc_clean(text: str) -> str:
    return "".join(char for char in text.lower().strip() if char not in CMRC_PUNCTUATION)


def cmrc_exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 if the prediction equals one of the answers without case, outer spaces and punctuation (CLUE's
    ``calc_em_score``), else 0.0."""
    if isinstance(answers, str):  # a bare string would be scored character by character
        raise TypeError(f"answers must be a sequence of strings, not the string {answers!r}")
    return float(any(_cmrc_clean(answer) == _cmrc_clean(prediction) for answer in answers))


def _longest_common_run(a: list[str], b: list[str]) -> int:
    """The length of the longest contiguous run of segments shared by ``a`` and ``b`` (CLUE's ``find_lcs``)."""
    best = 0
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                current[j + 1] = previous[j] + 1
                best = max(best, current[j + 1])
        previous = current
    return best


def cmrc_f1(prediction: str, answers: Sequence[str]) -> float:
    """CLUE's ``calc_f1_score``: the best over the answers of the F1 of their longest common run of segments."""
    if isinstance(answers, str):
        raise TypeError(f"answers must be a sequence of strings, not the string {answers!r}")
    predicted = cmrc_segments(prediction)
    scores = [0.0]
    for answer in answers:
        gold = cmrc_segments(answer)
        common = _longest_common_run(gold, predicted)
        if common:
            precision, recall = common / len(predicted), common / len(gold)
            scores.append(2 * precision * recall / (precision + recall))
    return max(scores)


def cmrc_raw_scores(
    golds: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
) -> tuple[dict[str, float], dict[str, float]]:
    """(exact, f1) per predicted question id (``cmrc_exact_match``, ``cmrc_f1``)."""
    _check_ids(golds, predictions, "a prediction")
    exact = {qid: cmrc_exact_match(predictions[qid], answers) for qid, answers in golds.items() if qid in predictions}
    f1 = {qid: cmrc_f1(predictions[qid], answers) for qid, answers in golds.items() if qid in predictions}
    return exact, f1


def cmrc_scores(
    golds: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    raw: tuple[dict[str, float], dict[str, float]] | None = None,
) -> dict[str, float]:
    """CMRC 2018 scores as CLUE's ``cmrc2018_evaluate.py`` gives them, as fractions: ``exact``, ``f1``, their
    mean ``average`` (CLUE's AVERAGE), and the counts ``total`` and ``missing`` (questions without a prediction,
    each scored 0, as CLUE's SKIP). ``raw``: the ``cmrc_raw_scores`` of these predictions when the caller has them.
    Raises ValueError for an empty dataset or a prediction for an id not in ``golds``."""
    if not golds:
        raise ValueError("no gold questions to score")
    exact, f1 = raw if raw is not None else cmrc_raw_scores(golds, predictions)
    qids = list(golds)
    result = {"exact": _mean(exact, qids), "f1": _mean(f1, qids)}
    return result | {
        "average": (result["exact"] + result["f1"]) / 2,
        "total": len(qids),
        "missing": sum(1 for qid in qids if qid not in predictions),
    }
