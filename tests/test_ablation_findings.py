"""The findings' intervals against hand-computed numbers and an independent loop, their verdicts and summary."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from albert_lightning.ablations import findings as af
from albert_lightning.evaluation.task_specs import TaskSpec

ACCURACY = TaskSpec("acc", "classification", ("a", "b"), ("accuracy",), "accuracy", {})
F1 = TaskSpec("f1", "classification", ("no", "yes"), ("f1",), "f1", {})


def test_proportion_interval_of_one_run_each_is_about_the_normal_interval() -> None:
    # 60/100 vs 45/100: d = 0.15, se = sqrt(0.6·0.4/100 + 0.45·0.55/100) = 0.069821, half-width 0.136847.
    interval = af.proportion_interval([(60, 100)], [(45, 100)], resamples=4000)
    assert interval.difference == pytest.approx(0.15)
    assert (interval.low, interval.high) == pytest.approx((0.013153, 0.286847), abs=0.01)
    # 52/100 against chance: half-width about 1.96·sqrt(0.52·0.48/100) = 0.097919; a constant has no variance.
    chance = af.proportion_interval([(52, 100)], None, constant=0.5, resamples=4000)
    assert chance.difference == pytest.approx(0.02)
    assert (chance.low, chance.high) == pytest.approx((-0.077919, 0.117919), abs=0.01)
    with pytest.raises(ValueError, match="at least one"):
        af.proportion_interval([(0, 0)], [(1, 2)])


def test_proportion_interval_over_runs_matches_an_independent_loop() -> None:
    """Runs drawn per group (a group of one is not drawn), then one binomial draw of the rows' noise per group,
    shared by its drawn runs (they were scored on the same rows)."""
    first, second = [(60, 100), (70, 100), (66, 100)], [(50, 200)]

    def loop(resamples: int, seed: int) -> tuple[float, float]:
        rng = np.random.default_rng(seed)
        differences = []
        for _ in range(resamples):
            picked = rng.integers(0, 3, size=3).tolist()
            mean = sum(first[i][0] / 100 for i in picked) / 3
            a = rng.binomial(100, mean) / 100
            b = rng.binomial(200, 0.25) / 200
            differences.append(a - b)
        cuts = statistics.quantiles(differences, n=40, method="inclusive")
        return cuts[0], cuts[-1]

    interval = af.proportion_interval(first, second, resamples=500, seed=3)
    assert interval.difference == pytest.approx((0.6 + 0.7 + 0.66) / 3 - 0.25)
    assert (interval.low, interval.high) == pytest.approx(loop(500, 3))


@pytest.mark.parametrize(
    ("kind", "low", "high", "expected"),
    [
        ("greater", 0.01, 0.2, "holds"),
        ("greater", -0.05, 0.1, "not resolved at this budget"),
        ("greater", -0.2, -0.01, "does not hold"),  # reversed: the other run is ahead
        ("matches", -0.05, 0.1, "holds"),
        ("matches", 0.01, 0.2, "does not hold"),
        ("none", 0.01, 0.2, "no claim"),
    ],
)
def test_verdicts(kind: str, low: float, high: float, expected: str) -> None:
    assert af.verdict(kind, af.Interval((low + high) / 2, low, high)) == expected


def _f1(predictions: list, references: list) -> float:
    tp = sum(p == r == "yes" for p, r in zip(predictions, references, strict=True))
    predicted, actual = predictions.count("yes"), references.count("yes")
    return 2 * tp / (predicted + actual) if predicted + actual else 0.0


def _accuracy(predictions: list, references: list) -> float:
    return sum(p == r for p, r in zip(predictions, references, strict=True)) / len(references)


def by_loop(first: list, second: list, scores: list, resamples: int, seed: int) -> tuple[float, float]:
    """The documented procedure, written out: S seed draws, then N_t example draws per task; percentiles."""
    rng = np.random.default_rng(seed)
    differences = []
    for _ in range(resamples):
        drawn = rng.integers(0, len(first[0][1]), size=len(first[0][1])).tolist()
        rows = [rng.integers(0, len(labels), size=len(labels)).tolist() for labels, _ in first]
        averages = []
        for run in (first, second):
            per_task = []
            for (labels, seeds), picked, score in zip(run, rows, scores, strict=True):
                refs = [labels[i] for i in picked]
                per_task.append(statistics.median(score([seeds[s][i] for i in picked], refs) for s in drawn))
            averages.append(sum(per_task) / len(per_task))
        differences.append(averages[0] - averages[1])
    cuts = statistics.quantiles(differences, n=40, method="inclusive")  # 2.5%, …, 97.5%
    return cuts[0], cuts[-1]


def test_downstream_interval_matches_an_independent_loop() -> None:
    acc_labels = ["a", "b", "a", "b", "a"]
    f1_labels = ["yes", "no", "yes", "yes"]
    first = [
        (acc_labels, [["a", "b", "a", "b", "b"], ["a", "b", "a", "a", "a"], ["a", "a", "a", "b", "a"]]),
        (f1_labels, [["yes", "no", "yes", "no"], ["yes", "yes", "yes", "yes"], ["no", "no", "yes", "yes"]]),
    ]
    second = [
        (acc_labels, [["b", "b", "a", "a", "b"], ["a", "a", "b", "a", "a"], ["b", "a", "a", "b", "b"]]),
        (f1_labels, [["no", "no", "yes", "no"], ["yes", "no", "no", "no"], ["no", "yes", "no", "yes"]]),
    ]

    def tasks(run: list) -> list[af.TaskPredictions]:
        specs = (ACCURACY, F1)
        return [
            af.TaskPredictions(s, np.asarray(labels), np.asarray(seeds)[None])
            for s, (labels, seeds) in zip(specs, run, strict=True)
        ]

    interval = af.downstream_interval(tasks(first), tasks(second), resamples=300, seed=7)
    # Point: accuracy medians 0.8 vs 0.4; F1 medians 0.8 (4/5, 6/7, 4/5) vs 0.5 (2/4, 2/4, 2/5): (0.4 + 0.3) / 2.
    assert interval.difference == pytest.approx(0.35)
    assert (interval.low, interval.high) == pytest.approx(by_loop(first, second, [_accuracy, _f1], 300, 7))
    assert interval.low < interval.difference < interval.high
    with pytest.raises(ValueError, match="cannot be paired"):
        af.downstream_interval(tasks(first)[:1], [tasks(second)[1]])


def test_check_skips_what_it_cannot_check_and_the_summary_counts_verdicts() -> None:
    runs = {
        "baseline": af.Evidence(counts={"mlm": [(300, 1000)], "sop": [(90, 100)], "nsp": [(40, 100)]}),
        "objective-nsp": af.Evidence(counts={"sop": [(52, 100)]}),
        "objective-none": af.Evidence(counts={"nsp": [(70, 100)]}),
        "dropout-0.1": af.Evidence(counts={"mlm": [(290, 1000)]}),
    }
    results = {r["key"]: r for r in af.check(runs, resamples=2000)}
    assert (results["SOP>NSP on SOP"]["verdict"], results["SOP>NSP on SOP"]["difference"]) == ("holds", 0.38)
    assert results["SOP>NSP on SOP"]["first_value"] == 0.9 and results["SOP>NSP on SOP"]["second_value"] == 0.52
    assert results["NSP near chance on SOP"]["verdict"] == "holds"  # 0.52 ± 0.098 contains chance
    # 0.40 vs 0.70: se = sqrt(0.0024 + 0.0021) = 0.067082, interval [-0.431, -0.169]: reversed
    reversed_ = results["SOP>none on NSP"]
    assert reversed_["verdict"] == "does not hold" and reversed_["high"] == pytest.approx(-0.168522, abs=0.01)
    # 0.300 vs 0.290 over 1000 tokens each: ±0.040 contains zero
    assert results["no dropout (MLM)"]["verdict"] == "not resolved at this budget"
    assert results["E>E/2"]["verdict"] == "skipped" and "embedding-half not in the grid" in results["E>E/2"]["note"]
    assert "share no task" in results["SOP>=NSP downstream"]["note"]
    assert len(results) == len(af.FINDINGS) == 13

    sentence = af.summary(list(results.values()))
    assert sentence.startswith(
        "Of 4 findings checked on 1 pretraining run per variant, 2 hold, 1 does not hold and 1 is not resolved at "
        "this budget (holds: SOP>NSP on "
        "SOP, NSP near chance on SOP; does not hold: SOP>none on NSP; not resolved at this budget: no dropout (MLM))"
        "; 9 skipped ("
    )
    text = af.markdown(list(results.values()))
    assert text.startswith("## Findings\n\n" + sentence + "\n\n- Table 5")
    # about 0.38 ± 1.96·sqrt(0.0009 + 0.002496) = [+0.266, +0.494]
    line = next(x for x in text.splitlines() if "SOP-trained beats NSP-trained" in x)
    low, high = (float(v) for v in line.split("difference +0.380 [")[1].split("]")[0].split(", "))
    assert (low, high) == pytest.approx((0.266, 0.494), abs=0.012) and line.endswith("**holds**.")
    assert "Ours (sop): objective-nsp 0.520 ± 0.000 vs chance 0.5; difference +0.020" in text


def test_summary_counts_no_claim_apart() -> None:
    results = [
        {"key": "a", "verdict": "holds"},
        {"key": "b", "verdict": "holds"},
        {"key": "c", "verdict": "not resolved at this budget"},
        {"key": "d", "verdict": "no claim"},
    ]
    assert af.summary(results) == (
        "Of 3 findings checked, 2 hold, 0 do not hold and 1 is not resolved at this budget (holds: a, b; "
        "not resolved at this budget: c); 1 reported without a claim (d)."
    )


def test_check_skips_runs_without_trials_or_pairable_predictions() -> None:
    runs = {
        "baseline": af.Evidence(counts={"sop": [(0, 0)]}, downstream={"acc": _predictions(["a", "b"], [["a", "b"]])}),
        "objective-nsp": af.Evidence(counts={"sop": [(52, 100)]}, downstream={"acc": _predictions(["a"], [["a"]])}),
    }
    results = {r["key"]: r for r in af.check(runs, af.FINDINGS[:4], resamples=10)}
    assert results["SOP>NSP on SOP"]["verdict"] == "skipped"
    assert results["SOP>NSP on SOP"]["note"] == "baseline has no scored sop trials in eval/metrics.json"
    assert results["SOP>=NSP downstream"]["verdict"] == "skipped"
    assert "task acc: the runs' seeds or dev examples differ" in results["SOP>=NSP downstream"]["note"]


@pytest.mark.parametrize("bug", [KeyError("exp_avg"), IndexError("index 3 is out of bounds"), ValueError("a bug")])
def test_check_lets_a_bug_propagate_instead_of_calling_the_finding_skipped(
    bug: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args, **kwargs):
        raise bug

    runs = {
        "baseline": af.Evidence(counts={"sop": [(90, 100)]}, downstream={"acc": _predictions(["a"], [["a"]])}),
        "objective-nsp": af.Evidence(counts={"sop": [(52, 100)]}, downstream={"acc": _predictions(["a"], [["b"]])}),
    }
    for target, finding in (("proportion_interval", af.FINDINGS[0]), ("group_score", af.FINDINGS[3])):
        with monkeypatch.context() as patched:
            patched.setattr(af, target, broken)
            with pytest.raises(type(bug)) as raised:
                af.check(runs, (finding,), resamples=10)
            assert raised.value is bug


def _predictions(labels: list[str], seeds: list[list[str]]) -> af.TaskPredictions:
    return af.TaskPredictions(ACCURACY, np.asarray(labels), np.asarray(seeds)[None])


def test_downstream_interval_over_pretraining_runs_matches_an_independent_loop() -> None:
    """Two runs per variant: per resample each variant's runs are drawn apart, then S seeds (shared by every
    run: they are the same subsets), then the examples; a variant's value is the mean over its drawn runs of the
    median over the drawn seeds."""
    rng = np.random.default_rng(0)
    labels = rng.choice(["a", "b"], size=30)
    first = rng.choice(["a", "b"], size=(2, 3, 30), p=[0.7, 0.3])  # [R, S, N]
    second = rng.choice(["a", "b"], size=(2, 3, 30))

    def loop(resamples: int, seed: int) -> tuple[float, float]:
        g = np.random.default_rng(seed)
        differences = []
        for _ in range(resamples):
            runs = [g.integers(0, 2, size=2).tolist(), g.integers(0, 2, size=2).tolist()]
            seeds = g.integers(0, 3, size=3).tolist()
            rows = g.integers(0, 30, size=30).tolist()
            values = []
            for predictions, drawn in zip((first, second), runs, strict=True):
                per_position = [
                    statistics.median(_accuracy([predictions[r][s][i] for i in rows], [labels[i] for i in rows])
                                      for s in seeds)
                    for r in drawn
                ]  # fmt: skip
                values.append(sum(per_position) / len(per_position))
            differences.append(values[0] - values[1])
        cuts = statistics.quantiles(differences, n=40, method="inclusive")
        return cuts[0], cuts[-1]

    a = [af.TaskPredictions(ACCURACY, labels, first)]
    b = [af.TaskPredictions(ACCURACY, labels, second)]
    interval = af.downstream_interval(a, b, resamples=200, seed=5)
    expected = np.mean([np.median((first[r] == labels).mean(axis=1)) for r in range(2)]) - np.mean(
        [np.median((second[r] == labels).mean(axis=1)) for r in range(2)]
    )
    assert interval.difference == pytest.approx(expected)
    assert (interval.low, interval.high) == pytest.approx(loop(200, 5))
    assert af.run_scores(a) == pytest.approx([np.median((first[r] == labels).mean(axis=1)) for r in range(2)])


def test_identical_runs_do_not_narrow_a_proportion_interval() -> None:
    """Three runs with the same count were scored on the same rows: no more evidence than one."""
    one = af.proportion_interval([(52, 100)], None, constant=0.5, resamples=3000)
    three = af.proportion_interval([(52, 100)] * 3, None, constant=0.5, resamples=3000)
    assert (three.high - three.low) == pytest.approx(one.high - one.low, rel=0.1)
