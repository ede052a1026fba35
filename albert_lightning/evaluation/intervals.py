"""What pretraining gained, with its noise: one hierarchical bootstrap behind every interval in the reports (pure).

Three things make a dev score move besides the model's design: the pretraining run (its seed: initialisation
and data order), the fine-tuning seed (subset and order), and the particular dev examples. ``draws`` resamples
all three, in that order, with replacement at every level: per resample, each group's R pretraining runs, then S
fine-tuning seeds, then each task's N dev examples. Seeds and examples are crossed with the runs, not nested in
them: every run was fine-tuned with the same seeds (the same subsets and orders) and scored on the same examples.
So each is drawn once per resample and shared by every run and every group, as a bootstrap of a crossed design
draws each factor once (Owen 2007, "The pigeonhole bootstrap"); drawing seeds anew per run would average the
subsets' effect away as if more subsets had been tried. The pretraining runs of two groups are drawn apart
(different pretraining runs are independent). A group of one run draws nothing at the top level, so one run
gives exactly the two-level intervals (seeds, then examples) of before.

A run's score is the median over its fine-tuning seeds; a group's is the mean over its runs of that. A gain is a
score of the model fine-tuned from a checkpoint minus that of the same fine-tuning (same seed, subset and order)
from random weights. Intervals are percentile intervals of the resampled statistic (Efron & Tibshirani 1993,
ch. 13); a fixed ``numpy`` generator makes them the same number on every run. numpy only; a metric comes in as a
function. Users: ``evaluation/report.py`` and ``reading/runner.py`` (one run), ``ablations/findings.py`` and
``ablations/across_runs.py`` (several). Tests: ``python -m pytest tests/test_intervals.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Draw",
    "GainInterval",
    "draws",
    "gain",
    "group_score",
    "median_gain_interval",
    "percentile_interval",
    "seed_scores",
]

Metric = Callable[[np.ndarray, np.ndarray], float]  # (predictions [N], references [N]) → score


@dataclass(frozen=True)
class GainInterval:
    median: float  # mean over pretraining runs of the median over seeds of (pretrained − random init), all dev
    low: float  # the interval's lower percentile
    high: float  # the interval's upper percentile


@dataclass(frozen=True)
class Draw:
    """One resample's indices, level by level."""

    runs: tuple[np.ndarray, ...]  # per group: the pretraining runs drawn [R_g] (position i → run index)
    seeds: np.ndarray  # [S]: the fine-tuning seeds drawn, shared by every run of every group
    rows: tuple[np.ndarray, ...]  # per task: the dev examples drawn [N_t], shared by every group
    generator: np.random.Generator  # for a statistic that draws its examples itself (counts, no per-example data)


def draws(runs: Sequence[int], seeds: int, examples: Sequence[int], resamples: int, seed: int) -> Iterator[Draw]:
    """Yields ``resamples`` hierarchical draws from ``np.random.default_rng(seed)``.

    Per resample, in this order, all with replacement: for each group of ``r`` runs, ``integers(0, r, size=r)``
    (nothing when ``r`` is 1: its one run); ``integers(0, seeds, size=seeds)`` (nothing when ``seeds`` is 0);
    for each task of ``n`` examples, ``integers(0, n, size=n)``.

    Args:
        runs: Per group (a variant, a start), its number of pretraining runs.
        seeds: Fine-tuning seeds per run (the same for every run); 0 when there is no fine-tuning level.
        examples: Per task, its number of dev examples; empty when the statistic draws its own.
        resamples: B, the number of draws.
        seed: Seeds the generator.
    """
    if not runs or min(runs) < 1:
        raise ValueError(f"every group needs at least one pretraining run; got {list(runs)}")
    rng = np.random.default_rng(seed)
    one = np.zeros(1, dtype=np.int64)
    for _ in range(resamples):
        drawn = tuple(rng.integers(0, r, size=r) if r > 1 else one for r in runs)
        seed_draw = rng.integers(0, seeds, size=seeds) if seeds else np.zeros(0, dtype=np.int64)
        yield Draw(drawn, seed_draw, tuple(rng.integers(0, n, size=n) for n in examples), rng)


def percentile_interval(statistics: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The percentile interval (``np.percentile``, linear interpolation) at (1 ± level) / 2."""
    low, high = np.percentile(np.asarray(statistics), [50 * (1 - level), 50 * (1 + level)])
    return float(low), float(high)


def _accuracy(predictions: np.ndarray, references: np.ndarray) -> float:
    return float(np.mean(predictions == references))


def seed_scores(predictions: np.ndarray, references: np.ndarray, metric: Metric | None = None) -> np.ndarray:
    """Returns the score of each seed's predictions: [S] from predictions [S, N] and references [N].

    ``metric`` None is accuracy (the mean of per-example correctness).
    """
    metric = metric or _accuracy
    return np.array([metric(row, references) for row in predictions], dtype=np.float64)


def group_score(
    predictions: np.ndarray,
    references: np.ndarray,
    metric: Metric | None,
    runs: np.ndarray,
    seeds: np.ndarray,
    rows: np.ndarray,
    baseline: np.ndarray | None = None,
) -> float:
    """The mean over ``runs`` of the median over ``seeds`` of each run's score on ``rows``.

    Args:
        predictions: [R, S, N], one [S, N] block per pretraining run.
        references: [N].
        metric: None is accuracy.
        runs: the runs drawn (a run drawn twice counts twice).
        seeds: the fine-tuning seeds drawn, the same for every run.
        rows: the examples to score on.
        baseline: [S, N] predictions whose per-seed score is subtracted first (random init: a gain).
    """
    offset = 0.0 if baseline is None else seed_scores(baseline[:, rows], references[rows], metric)
    by_run: dict[int, np.ndarray] = {}
    values = []
    for run in runs.tolist():
        if run not in by_run:  # score each drawn run once: a metric call can be slow
            by_run[run] = seed_scores(predictions[run][:, rows], references[rows], metric) - offset
        values.append(np.median(by_run[run][seeds]))
    return float(np.mean(values))


def _as_runs(pretrained: np.ndarray, random_init: np.ndarray, references: np.ndarray) -> np.ndarray:
    """Pretrained predictions as [R, S, N]; raises ValueError unless the shapes pair up with at least one each."""
    runs = pretrained[None] if pretrained.ndim == 2 else pretrained
    if runs.ndim != 3 or runs.shape[1:] != random_init.shape or runs.shape[2] != len(references):
        raise ValueError(
            f"predictions {pretrained.shape} and {random_init.shape} must be [S, N] (or [R, S, N] and [S, N]) "
            f"for N={len(references)}"
        )
    if 0 in runs.shape:
        raise ValueError("a gain needs at least one pretraining run, one seed and one dev example")
    return runs


def gain(
    pretrained: np.ndarray, random_init: np.ndarray, references: np.ndarray, metric: Metric | None = None
) -> float:
    """The gain of pretraining on every seed and dev example: the mean over runs of the median over seeds of
    (pretrained − random init), ``median_gain_interval``'s point estimate. Shapes as there."""
    pretrained, random_init, references = map(np.asarray, (pretrained, random_init, references))
    runs = _as_runs(pretrained, random_init, references)
    count, seeds, examples = runs.shape
    return group_score(runs, references, metric, np.arange(count), np.arange(seeds), np.arange(examples), random_init)


def median_gain_interval(
    pretrained: np.ndarray,
    random_init: np.ndarray,
    references: np.ndarray,
    metric: Metric | None = None,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> GainInterval:
    """Returns the gain of pretraining (mean over runs of the median over seeds) and its bootstrap interval.

    Each resample is a ``draws`` draw of runs, seeds and examples; the random-init model of a drawn seed is
    scored on the same drawn examples as the pretrained ones (paired). Metrics that are not per-example means
    (F1, Matthews, Pearson) are recomputed on each resample by ``metric``.

    Args:
        pretrained: Predictions [S, N] of the models fine-tuned from one checkpoint, one row per seed, or
            [R, S, N] from R pretraining runs' checkpoints.
        random_init: Predictions [S, N] of the models fine-tuned from random weights, rows in the same seed order.
        references: The dev labels [N].
        metric: Scores (predictions, references); None is accuracy.
        resamples: B, the number of bootstrap resamples.
        seed: Seeds the generator, so the interval is the same on every run.
        level: The interval's coverage.

    Raises:
        ValueError: The arrays' shapes disagree, or a level is empty.
    """
    pretrained, random_init, references = map(np.asarray, (pretrained, random_init, references))
    runs = _as_runs(pretrained, random_init, references)
    count, seeds, examples = runs.shape
    point = gain(runs, random_init, references, metric)
    statistics = [
        group_score(runs, references, metric, d.runs[0], d.seeds, d.rows[0], random_init)
        for d in draws([count], seeds, [examples], resamples, seed)
    ]
    return GainInterval(point, *percentile_interval(statistics, level))
