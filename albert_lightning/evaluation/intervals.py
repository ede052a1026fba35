"""What pretraining gained on a task, with its noise: the median gain over seeds and a bootstrap interval (pure).

A gain is a dev score of the model fine-tuned from the pretrained checkpoint minus that of the same fine-tuning
(same seed, subset and order) from random weights. Two sources of noise make it move: the fine-tuning seed and
the particular dev examples. The interval resamples both, pairing the starts (each resample scores both on the
same examples), and is a percentile interval of the median gain over resampled seeds (Efron & Tibshirani 1993,
ch. 13). A fixed ``numpy`` generator makes it the same number on every run. numpy only; the metric comes in as a
function. Tests: ``python -m pytest tests/test_intervals.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["GainInterval", "median_gain_interval", "seed_scores"]

Metric = Callable[[np.ndarray, np.ndarray], float]  # (predictions [N], references [N]) → score


@dataclass(frozen=True)
class GainInterval:
    median: float  # median over seeds of (pretrained − random init) on the whole dev set
    low: float  # the interval's lower percentile
    high: float  # the interval's upper percentile


def _accuracy(predictions: np.ndarray, references: np.ndarray) -> float:
    return float(np.mean(predictions == references))


def seed_scores(predictions: np.ndarray, references: np.ndarray, metric: Metric | None = None) -> np.ndarray:
    """Returns the score of each seed's predictions: [S] from predictions [S, N] and references [N].

    ``metric`` None is accuracy (the mean of per-example correctness).
    """
    metric = metric or _accuracy
    return np.array([metric(row, references) for row in predictions], dtype=np.float64)


def _check_shapes(pretrained: np.ndarray, random_init: np.ndarray, references: np.ndarray) -> None:
    """Raises ValueError unless both predictions are [S, N] for the N references, with S and N above zero."""
    if pretrained.ndim != 2 or pretrained.shape != random_init.shape or pretrained.shape[1] != len(references):
        raise ValueError(
            f"predictions {pretrained.shape} and {random_init.shape} must be [S, N] for N={len(references)}"
        )
    seeds, examples = pretrained.shape
    if seeds == 0 or examples == 0:
        raise ValueError("a gain needs at least one seed and one dev example")


def _resampled_median_gains(
    pretrained: np.ndarray,
    random_init: np.ndarray,
    references: np.ndarray,
    metric: Metric | None,
    resamples: int,
    seed: int,
) -> np.ndarray:
    """The bootstrap statistics [B]: each resample's median gain over its drawn seeds, on its drawn examples."""
    seeds, examples = pretrained.shape
    rng = np.random.default_rng(seed)
    statistics = np.empty(resamples)
    for b in range(resamples):
        drawn = rng.integers(0, seeds, size=seeds)
        rows = rng.integers(0, examples, size=examples)
        needed = np.unique(drawn)  # score only the seeds drawn: a metric call can be slow
        p = seed_scores(pretrained[needed][:, rows], references[rows], metric)
        r = seed_scores(random_init[needed][:, rows], references[rows], metric)
        statistics[b] = np.median((p - r)[np.searchsorted(needed, drawn)])
    return statistics


def median_gain_interval(
    pretrained: np.ndarray,
    random_init: np.ndarray,
    references: np.ndarray,
    metric: Metric | None = None,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> GainInterval:
    """Returns the median gain over seeds and its percentile bootstrap interval.

    Resample b draws from ``np.random.default_rng(seed)``, in this order, S seed indices
    (``integers(0, S, size=S)``) and then N example indices (``integers(0, N, size=N)``), both with replacement.
    Each drawn seed's two models are scored on the drawn examples (the same ones for both starts: paired), and
    the resample's statistic is the median of the drawn seeds' gains. The interval is ``np.percentile`` (linear
    interpolation) of the statistics at (1 ± level) / 2. Metrics that are not per-example means (F1, Matthews,
    Pearson) are recomputed on each resample by ``metric``.

    Args:
        pretrained: Predictions [S, N] of the models fine-tuned from the checkpoint, one row per seed.
        random_init: Predictions [S, N] of the models fine-tuned from random weights, rows in the same seed order.
        references: The dev labels [N].
        metric: Scores (predictions, references); None is accuracy.
        resamples: B, the number of bootstrap resamples.
        seed: Seeds the generator, so the interval is the same on every run.
        level: The interval's coverage.

    Raises:
        ValueError: The arrays' shapes disagree, or there are no seeds or examples.
    """
    pretrained, random_init, references = map(np.asarray, (pretrained, random_init, references))
    _check_shapes(pretrained, random_init, references)
    gains = seed_scores(pretrained, references, metric) - seed_scores(random_init, references, metric)
    statistics = _resampled_median_gains(pretrained, random_init, references, metric, resamples, seed)
    low, high = np.percentile(statistics, [50 * (1 - level), 50 * (1 + level)])
    return GainInterval(float(np.median(gains)), float(low), float(high))
