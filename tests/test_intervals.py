"""The median gain and its bootstrap interval against a worked example and an independent loop."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from albert_lightning.evaluation import intervals
from albert_lightning.evaluation.intervals import median_gain_interval, seed_scores
from albert_lightning.evaluation.metrics import compute_metrics
from albert_lightning.evaluation.task_specs import GLUE_TASKS

REFERENCES = [1, 0, 1, 1]
# 3 seeds × 4 dev examples. Accuracies: pretrained 1.0, 0.5, 0.75; random init 0.5, 0.5, 0.5.
PRETRAINED = [[1, 0, 1, 1], [1, 1, 1, 0], [0, 0, 1, 1]]
RANDOM_INIT = [[1, 1, 0, 1], [0, 0, 1, 0], [0, 1, 1, 1]]


def by_loop(pretrained, random_init, references, score, resamples: int, seed: int) -> tuple[float, float]:
    """The documented procedure, written out: seed draws, then example draws, per resample; percentiles."""
    rng = np.random.default_rng(seed)
    medians = []
    for _ in range(resamples):
        drawn = rng.integers(0, len(pretrained), size=len(pretrained)).tolist()
        rows = rng.integers(0, len(references), size=len(references)).tolist()
        refs = [references[i] for i in rows]
        gains = []
        for s in drawn:
            gains.append(score([pretrained[s][i] for i in rows], refs) - score([random_init[s][i] for i in rows], refs))
        medians.append(statistics.median(gains))
    cuts = statistics.quantiles(medians, n=40, method="inclusive")  # cut points at 2.5%, 5%, ..., 97.5%
    return cuts[0], cuts[-1]


def accuracy(predictions: list, references: list) -> float:
    return sum(p == r for p, r in zip(predictions, references, strict=True)) / len(references)


def test_worked_example_median_gain_and_interval() -> None:
    gain = median_gain_interval(
        np.array(PRETRAINED), np.array(RANDOM_INIT), np.array(REFERENCES), seed=7, resamples=300
    )
    assert gain.median == pytest.approx(0.25)  # gains 0.5, 0.0, 0.25 → median 0.25
    low, high = by_loop(PRETRAINED, RANDOM_INIT, REFERENCES, accuracy, resamples=300, seed=7)
    assert (gain.low, gain.high) == (pytest.approx(low), pytest.approx(high))
    assert low < 0.25 < high  # the example is noisy: the interval is not a point
    again = median_gain_interval(
        np.array(PRETRAINED), np.array(RANDOM_INIT), np.array(REFERENCES), seed=7, resamples=300
    )
    assert again == gain


def test_metric_that_is_not_a_mean_is_recomputed_per_resample() -> None:
    cola = GLUE_TASKS["CoLA"]

    def mcc(predictions, references) -> float:
        return compute_metrics(cola, list(predictions), list(references))["matthews_correlation"]

    references = [1, 0, 1, 1, 0, 0]
    pretrained = [[1, 0, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]]
    random_init = [[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 0, 1]]
    gain = median_gain_interval(np.array(pretrained), np.array(random_init), np.array(references), mcc, 200, seed=3)
    # MCC by hand: pretrained (tp 2, tn 3, fp 0, fn 1) → 6/sqrt(2·3·3·4) = 0.7071; (3, 2, 1, 0) → 0.7071;
    # random (3, 0, 3, 0) → 0 (constant); (2, 2, 1, 1) → 3/9 = 0.3333. Gains 0.7071, 0.3738 → median 0.5404.
    assert seed_scores(np.array(pretrained), np.array(references), mcc) == pytest.approx([0.70711, 0.70711], abs=1e-5)
    assert gain.median == pytest.approx((0.70711 + 0.70711 - 1 / 3) / 2, abs=1e-5)
    low, high = by_loop(pretrained, random_init, references, mcc, resamples=200, seed=3)
    assert (gain.low, gain.high) == (pytest.approx(low), pytest.approx(high))


def test_a_gain_on_every_example_has_no_spread() -> None:
    always, never = np.ones((3, 5), dtype=int), np.zeros((3, 5), dtype=int)
    gain = median_gain_interval(always, never, np.ones(5, dtype=int), resamples=50)
    assert (gain.median, gain.low, gain.high) == (1.0, 1.0, 1.0)


def test_shapes_must_agree() -> None:
    with pytest.raises(ValueError, match=r"must be \[S, N\]"):
        median_gain_interval(np.zeros((2, 3)), np.zeros((3, 3)), np.zeros(3))
    with pytest.raises(ValueError, match=r"must be \[S, N\]"):
        median_gain_interval(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros(4))


def test_gain_over_pretraining_runs_matches_an_independent_loop() -> None:
    """Runs drawn first, then seeds once (shared by every run: the same subsets), then examples; a resample's gain
    is the mean over drawn runs of the median over drawn seeds of (pretrained − random init)."""
    rng = np.random.default_rng(4)
    references = rng.integers(0, 2, size=40)
    pretrained = (rng.random((3, 4, 40)) < np.array([0.8, 0.6, 0.7])[:, None, None]).astype(int)  # [R, S, N]
    pretrained = np.where(pretrained == 1, references, 1 - references)
    random_init = rng.integers(0, 2, size=(4, 40))

    def accuracy(p: np.ndarray, rows: list[int]) -> float:
        return float(np.mean(p[rows] == references[rows]))

    g = np.random.default_rng(9)
    resampled = []
    for _ in range(300):
        runs = g.integers(0, 3, size=3)
        seeds = g.integers(0, 4, size=4)
        rows = g.integers(0, 40, size=40).tolist()
        per_run = [np.median([accuracy(pretrained[r, s], rows) - accuracy(random_init[s], rows) for s in seeds])
                   for r in runs]  # fmt: skip
        resampled.append(np.mean(per_run))
    gain = median_gain_interval(pretrained, random_init, references, resamples=300, seed=9)
    every = list(range(40))
    point = np.mean([np.median([accuracy(pretrained[r, s], every) - accuracy(random_init[s], every)
                                for s in range(4)]) for r in range(3)])  # fmt: skip
    assert gain.median == pytest.approx(point)
    assert (gain.low, gain.high) == pytest.approx(tuple(np.percentile(resampled, [2.5, 97.5])))


def test_identical_runs_do_not_narrow_the_interval() -> None:
    """Seeds are shared by the runs, so three copies of one run are no more evidence than the run: the interval
    stays that of one run (up to the generator's other draws), not a third as wide."""
    rng = np.random.default_rng(2)
    references = rng.integers(0, 3, size=60)
    pretrained, random_init = rng.integers(0, 3, size=(5, 60)), rng.integers(0, 3, size=(5, 60))
    one = median_gain_interval(pretrained, random_init, references, resamples=2000)
    three = median_gain_interval(np.stack([pretrained] * 3), random_init, references, resamples=2000)
    assert three.median == one.median
    assert (three.high - three.low) == pytest.approx(one.high - one.low, rel=0.15)


def test_the_gain_is_the_intervals_point_estimate_for_one_run_and_for_several() -> None:
    # One implementation of the point estimate: the across-runs report's per-run gains and the intervals' point.
    rng = np.random.default_rng(3)
    references = rng.integers(0, 2, 40)
    random_init = rng.integers(0, 2, (3, 40))
    runs = rng.integers(0, 2, (2, 3, 40))
    for pretrained in (runs[0], runs):
        assert intervals.gain(pretrained, random_init, references) == pytest.approx(
            intervals.median_gain_interval(pretrained, random_init, references, resamples=10).median
        )
    per_run = [intervals.gain(run, random_init, references) for run in runs]
    assert intervals.gain(runs, random_init, references) == pytest.approx(np.mean(per_run))
