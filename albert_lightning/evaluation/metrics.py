"""Task metrics: GLUE's scores from predictions and references, and the majority-class baseline.

Matthews correlation (CoLA), Pearson/Spearman and their mean (STS-B), F1 of class 1 with accuracy and their mean
(MRPC, QQP) and accuracy (the rest), computed with scikit-learn and scipy. Which metrics a task reports, and which
one ranks models, is ``TaskSpec.metrics`` / ``TaskSpec.primary`` (task_specs.py). No torch: the evaluation loop hands
in plain lists. Tests: ``python -m pytest tests/test_metrics.py``.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from albert_lightning.evaluation.task_specs import TaskSpec

__all__ = ["compute_metrics", "majority_baseline"]


def _correlation(fn: Callable, predictions: np.ndarray, references: np.ndarray) -> float:
    # A constant vector has no correlation: scipy warns and returns NaN. 0.0 keeps reports and "best model"
    # comparisons numeric, and is what a constant predictor deserves (no better than chance).
    if len(predictions) < 2:
        return 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = float(fn(predictions, references).statistic)
    return 0.0 if math.isnan(value) else value


def _f1(predictions: np.ndarray, references: np.ndarray) -> float:
    # Class 1 ("equivalent", "duplicate") is positive, as in GLUE. zero_division=0: no positive predictions
    # (or no positives at all) scores 0.0 rather than warning.
    return float(f1_score(references, predictions, pos_label=1, average="binary", zero_division=0))


def _accuracy(predictions: np.ndarray, references: np.ndarray) -> float:
    return float(accuracy_score(references, predictions))


def _pearson(predictions: np.ndarray, references: np.ndarray) -> float:
    return _correlation(pearsonr, predictions, references)


def _spearman(predictions: np.ndarray, references: np.ndarray) -> float:
    return _correlation(spearmanr, predictions, references)


_METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "accuracy": _accuracy,
    "f1": _f1,
    "f1_accuracy_mean": lambda p, r: (_f1(p, r) + _accuracy(p, r)) / 2,
    "matthews_correlation": lambda p, r: float(matthews_corrcoef(r, p)),
    "pearson": _pearson,
    "spearman": _spearman,
    "pearson_spearman_mean": lambda p, r: (_pearson(p, r) + _spearman(p, r)) / 2,
}


def _as_array(spec: TaskSpec, values: Sequence) -> np.ndarray:
    """Label ids (ints) or label strings for classification; numbers for regression."""
    if spec.kind == "regression":
        return np.asarray(values, dtype=np.float64)
    index = {label: i for i, label in enumerate(spec.labels)}
    ids = [index[v] if isinstance(v, str) and v in index else v for v in values]
    bad = [v for v in ids if not isinstance(v, (int, np.integer)) or not 0 <= v < len(spec.labels)]
    if bad:
        raise ValueError(f"task {spec.name}: {bad[0]!r} is neither a label of {spec.labels} nor a label id")
    return np.asarray(ids, dtype=np.int64)


def compute_metrics(spec: TaskSpec, predictions: Sequence, references: Sequence) -> dict[str, float]:
    """Scores predictions against references with each of ``spec.metrics``.

    Edge cases are defined, not NaN: constant predictions give Matthews correlation 0.0 (scikit-learn) and Pearson
    and Spearman 0.0 (scipy's NaN for a constant input, and fewer than two examples, are mapped to 0.0); F1 with
    no predicted or true positives is 0.0 (``zero_division=0``).

    Args:
        spec: The task; its ``kind``, ``labels`` and ``metrics`` decide what is computed.
        predictions: Label ids or label strings (classification) or scores (regression), one per example.
        references: The gold labels, in the same form, e.g. ``tasks.label_ids(spec, examples)``.

    Returns:
        ``{metric name: value}`` in ``spec.metrics`` order, as Python floats.

    Raises:
        ValueError: Empty or different-length inputs, a value that is not a label, or F1 asked of a task that
            does not have exactly two labels.
    """
    if len(predictions) != len(references) or len(references) == 0:
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references; expected equal, > 0")
    if any(m in ("f1", "f1_accuracy_mean") for m in spec.metrics) and len(spec.labels) != 2:
        raise ValueError(f"task {spec.name}: F1 needs exactly two labels (class 1 positive), not {spec.labels}")
    p, r = _as_array(spec, predictions), _as_array(spec, references)
    return {name: float(_METRICS[name](p, r)) for name in spec.metrics}


def majority_baseline(spec: TaskSpec, train_labels: Sequence, dev_labels: Sequence) -> dict[str, float]:
    """Scores the trivial predictor on dev: the most frequent train label, or the train mean for regression.

    A tie between equally frequent labels goes to the lowest label id, so the baseline is deterministic. The
    constant prediction makes Matthews, Pearson and Spearman 0.0 (see ``compute_metrics``).

    Args:
        spec: The task.
        train_labels: Training labels (ids, label strings or scores), e.g. ``label_ids(spec, train_examples)``.
        dev_labels: The dev references to score against.

    Returns:
        ``compute_metrics`` of the constant prediction.

    Raises:
        ValueError: No training labels, or the errors of ``compute_metrics``.
    """
    if len(train_labels) == 0:
        raise ValueError(f"task {spec.name}: no training labels for the majority baseline")
    train = _as_array(spec, train_labels)
    if spec.kind == "regression":
        guess: int | float = float(train.mean())
    else:
        counts = Counter(train.tolist())
        guess = min(counts, key=lambda label: (-counts[label], label))
    return compute_metrics(spec, [guess] * len(dev_labels), dev_labels)
