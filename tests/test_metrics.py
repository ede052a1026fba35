"""Tests for albert_lightning.evaluation.metrics against values computed by hand, and its defined edge cases."""

from __future__ import annotations

import math
import warnings

import pytest

from albert_lightning.evaluation.metrics import _METRICS, compute_metrics, majority_baseline
from albert_lightning.evaluation.task_specs import GLUE_TASKS, METRIC_NAMES, TaskSpec

COLA, SST2, MRPC, STSB, MNLI = (GLUE_TASKS[t] for t in ("CoLA", "SST-2", "MRPC", "STS-B", "MNLI"))


def confusion(tp: int, tn: int, fp: int, fn: int) -> tuple[list[int], list[int]]:
    """(predictions, references) with the given 2×2 table, class 1 positive."""
    predictions = [1] * tp + [0] * tn + [1] * fp + [0] * fn
    references = [1] * tp + [0] * tn + [0] * fp + [1] * fn
    return predictions, references


def test_every_metric_name_is_implemented() -> None:
    assert set(_METRICS) == set(METRIC_NAMES)


def test_matthews_correlation_by_hand() -> None:
    predictions, references = confusion(tp=3, tn=2, fp=1, fn=1)
    # (tp·tn − fp·fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)) = (6 − 1) / sqrt(4·4·3·3) = 5/12
    assert compute_metrics(COLA, predictions, references) == {"matthews_correlation": pytest.approx(5 / 12)}


def test_f1_and_accuracy_by_hand() -> None:
    predictions, references = confusion(tp=2, tn=4, fp=1, fn=3)
    precision, recall = 2 / (2 + 1), 2 / (2 + 3)
    f1 = 2 * precision * recall / (precision + recall)  # = 0.5
    accuracy = (2 + 4) / 10
    assert compute_metrics(MRPC, predictions, references) == pytest.approx(
        {"f1": f1, "accuracy": accuracy, "f1_accuracy_mean": (f1 + accuracy) / 2}
    )
    assert f1 == pytest.approx(0.5)


def test_accuracy_takes_label_strings_or_ids() -> None:
    references = ["entailment", "neutral", "contradiction", "neutral"]
    assert compute_metrics(MNLI, ["entailment", "neutral", "neutral", "neutral"], references) == {"accuracy": 0.75}
    assert compute_metrics(MNLI, [1, 2, 2, 2], [1, 2, 0, 2]) == {"accuracy": 0.75}


def test_pearson_by_formula() -> None:
    x, y = [1.0, 2.0, 4.0, 5.0], [1.5, 1.0, 4.5, 3.0]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    r = cov / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))
    assert compute_metrics(STSB, x, y)["pearson"] == pytest.approx(r)


def test_spearman_with_ties_uses_average_ranks() -> None:
    predictions, references = [1.0, 2.0, 2.0, 3.0], [0.1, 0.2, 0.3, 0.4]
    # Ranks: predictions [1, 2.5, 2.5, 4] (the tie shares ranks 2 and 3), references [1, 2, 3, 4]; both mean 2.5.
    # Deviations [-1.5, 0, 0, 1.5] and [-1.5, -0.5, 0.5, 1.5]: covariance sum 4.5, squared sums 4.5 and 5.
    rho = 4.5 / math.sqrt(4.5 * 5.0)
    scores = compute_metrics(STSB, predictions, references)
    assert scores["spearman"] == pytest.approx(rho)
    assert scores["pearson_spearman_mean"] == pytest.approx((scores["pearson"] + rho) / 2)


def test_constant_predictions_score_zero_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's ConstantInputWarning must not escape
        assert compute_metrics(COLA, [1, 1, 1, 1], [1, 0, 1, 0]) == {"matthews_correlation": 0.0}
        assert compute_metrics(STSB, [2.5, 2.5, 2.5], [1.0, 3.0, 5.0]) == {
            "pearson": 0.0,
            "spearman": 0.0,
            "pearson_spearman_mean": 0.0,
        }
        assert compute_metrics(STSB, [2.0], [1.0])["pearson"] == 0.0  # fewer than two points
        # All-negative predictions: no true positives, precision undefined → F1 0.0 (zero_division=0).
        assert compute_metrics(MRPC, [0, 0, 0, 0], [1, 0, 1, 0]) == {
            "f1": 0.0,
            "accuracy": 0.5,
            "f1_accuracy_mean": 0.25,
        }
        assert compute_metrics(MRPC, [0, 0], [0, 0])["f1"] == 0.0  # no positives at all


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="2 predictions for 3 references"):
        compute_metrics(SST2, [0, 1], [0, 1, 1])
    with pytest.raises(ValueError, match="0 predictions for 0 references"):
        compute_metrics(SST2, [], [])
    with pytest.raises(ValueError, match="'2' is neither a label"):
        compute_metrics(SST2, ["2"], [1])
    with pytest.raises(ValueError, match="neither a label"):
        compute_metrics(SST2, [5], [1])
    three_way_f1 = TaskSpec("3way", "classification", ("a", "b", "c"), ("f1",), "f1", {})
    with pytest.raises(ValueError, match="F1 needs exactly two labels"):
        compute_metrics(three_way_f1, [0], [1])


def test_majority_baseline() -> None:
    assert majority_baseline(SST2, [1, 1, 0], [1, 0, 0, 1]) == {"accuracy": 0.5}
    assert majority_baseline(MNLI, ["neutral", "entailment", "neutral"], [2, 2, 0]) == {
        "accuracy": pytest.approx(2 / 3)
    }
    assert majority_baseline(COLA, [1, 1, 0], [1, 0, 1]) == {"matthews_correlation": 0.0}
    assert majority_baseline(SST2, [1, 0], [0, 0, 1]) == {"accuracy": pytest.approx(2 / 3)}  # tie → lowest id, 0
    # Predicting the majority class 1 on MRPC: tp=2, fp=1, fn=0 → precision 2/3, recall 1, F1 0.8; accuracy 2/3.
    assert majority_baseline(MRPC, [1, 1, 0], [1, 1, 0]) == pytest.approx(
        {"f1": 0.8, "accuracy": 2 / 3, "f1_accuracy_mean": (0.8 + 2 / 3) / 2}
    )
    # Regression predicts the train mean (2.0): correlations of a constant are 0.0.
    assert majority_baseline(STSB, [1.0, 2.0, 3.0], [0.5, 4.0]) == {
        "pearson": 0.0,
        "spearman": 0.0,
        "pearson_spearman_mean": 0.0,
    }
    with pytest.raises(ValueError, match="no training labels"):
        majority_baseline(SST2, [], [1])
