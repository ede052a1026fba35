"""The paper's ablation findings, each checked on the grid's runs with a 95% interval and a verdict (no torch).

A finding compares two runs (or a run and chance) on one measure: an intrinsic accuracy on held-out shards, whose
interval is the normal interval of a difference of proportions from the counts ``evaluation/cli.py`` records, or the
downstream average (the mean over tasks of each task's primary dev metric, median over fine-tuning seeds, at the
largest training set both runs have), whose interval is a paired bootstrap over seeds and dev examples of the
predictions files. ``ablations/report.py`` reads the runs, writes the result; tests:
``tests/test_ablation_findings.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from albert_lightning.evaluation.intervals import seed_scores
from albert_lightning.evaluation.metrics import compute_metrics
from albert_lightning.evaluation.task_files import TaskSpec

__all__ = [
    "FINDINGS",
    "Evidence",
    "Finding",
    "Interval",
    "TaskPredictions",
    "check",
    "downstream_interval",
    "markdown",
    "proportion_interval",
    "score",
    "summary",
    "verdict",
]

HOLDS, FAILS, OPEN, NO_CLAIM = "holds", "does not hold", "not resolved at this budget", "no claim"


@dataclass(frozen=True)
class Interval:
    difference: float  # first − second (or first − the constant)
    low: float
    high: float


def proportion_interval(
    correct: int, total: int, other_correct: int | None, other_total: int | None, constant: float | None = None
) -> Interval:
    """The normal (Wald) 95% interval of ``correct/total − other_correct/other_total``, or of ``correct/total −
    constant`` when ``other_total`` is None (a constant has no variance).

    The two proportions are treated as independent. Runs scored on the same held-out rows are positively
    correlated, so the interval is if anything too wide; masked tokens of one sequence are not independent,
    which makes an MLM interval somewhat too narrow. Both are small next to the differences the paper reports.

    Raises:
        ValueError: A count is empty.
    """
    if total < 1 or (other_total is not None and other_total < 1):
        raise ValueError(f"proportions need at least one trial; got {total} and {other_total}")
    p = correct / total
    variance = p * (1 - p) / total
    if other_total is None:
        q = float(constant if constant is not None else 0.0)
    else:
        q = (other_correct or 0) / other_total
        variance += q * (1 - q) / other_total
    half = NormalDist().inv_cdf(0.975) * variance**0.5
    return Interval(p - q, p - q - half, p - q + half)


@dataclass(frozen=True)
class TaskPredictions:
    """One task's dev predictions of one run at one training-set size."""

    spec: TaskSpec  # kind, labels and primary metric: enough for compute_metrics
    labels: np.ndarray  # [N] gold labels (strings) or scores
    seeds: np.ndarray  # [S, N] predictions, one row per fine-tuning seed

    def metric(self) -> Callable[[np.ndarray, np.ndarray], float] | None:
        """None (accuracy, computed vectorised by ``seed_scores``) or the task's primary metric."""
        if self.spec.primary == "accuracy":
            return None
        return lambda p, r: compute_metrics(self.spec, p.tolist(), r.tolist())[self.spec.primary]


def _average(tasks: list[TaskPredictions], seeds: np.ndarray, rows: list[np.ndarray]) -> float:
    """Mean over tasks of the median over ``seeds`` of the primary score on ``rows`` of each task."""
    scores = []
    for task, picked in zip(tasks, rows, strict=True):
        needed = np.unique(seeds)  # score each drawn seed once: a metric call can be slow
        by_seed = seed_scores(task.seeds[needed][:, picked], task.labels[picked], task.metric())
        scores.append(float(np.median(by_seed[np.searchsorted(needed, seeds)])))
    return float(np.mean(scores))


def score(task: TaskPredictions) -> float:
    """The median over fine-tuning seeds of the task's primary score on every dev example."""
    return _average([task], np.arange(task.seeds.shape[0]), [np.arange(len(task.labels))])


def downstream_interval(
    first: list[TaskPredictions], second: list[TaskPredictions], resamples: int = 2000, seed: int = 0
) -> Interval:
    """The difference of two runs' downstream averages and its 95% paired percentile bootstrap interval.

    Both runs were fine-tuned with the same seeds (the same subsets and orders) and scored on the same dev
    examples, so each resample draws, from ``np.random.default_rng(seed)``, S seed indices once (used by both
    runs and every task), then N_t example indices per task in the lists' order, all with replacement, and
    takes the difference of the two runs' averages on them (as ``intervals.median_gain_interval`` pairs starts).

    Args:
        first: Per task (same order in both lists) the first run's predictions.
        second: The second run's predictions of the same tasks, seeds and dev examples.
        resamples: Bootstrap resamples.
        seed: Seeds the generator: the same interval on every run.

    Raises:
        ValueError: The runs' tasks, seeds or dev examples differ.
    """
    unpaired = _unpaired(first, second)
    if unpaired is not None:
        raise ValueError(unpaired)
    seeds = first[0].seeds.shape[0]
    everything = [np.arange(len(t.labels)) for t in first]
    point = _average(first, np.arange(seeds), everything) - _average(second, np.arange(seeds), everything)
    rng = np.random.default_rng(seed)
    statistics = np.empty(resamples)
    for b in range(resamples):
        drawn = rng.integers(0, seeds, size=seeds)
        rows = [rng.integers(0, len(t.labels), size=len(t.labels)) for t in first]
        statistics[b] = _average(first, drawn, rows) - _average(second, drawn, rows)
    low, high = np.percentile(statistics, [2.5, 97.5])
    return Interval(point, float(low), float(high))


def _unpaired(first: list[TaskPredictions], second: list[TaskPredictions]) -> str | None:
    """Why the two runs' predictions cannot be paired task by task, or None if they can."""
    for a, b in zip(first, second, strict=True):
        if a.seeds.shape != b.seeds.shape or not np.array_equal(a.labels, b.labels):
            return f"task {a.spec.name}: the runs' seeds or dev examples differ; they cannot be paired"
    return None


@dataclass(frozen=True)
class Finding:
    key: str  # a short name for the summary sentence
    claim: str  # the paper's finding, with its numbers
    measure: str  # "mlm", "sop" or "nsp" accuracy on held-out shards, or "downstream"
    first: str  # the run the paper says is ahead (for "matches", the changed one)
    second: str | None  # the run it is compared with; None: against ``constant``
    constant: float | None = None  # e.g. chance, 0.5
    kind: str = "greater"  # "greater": first > second; "matches": no difference; "none": report only


FINDINGS: tuple[Finding, ...] = (
    Finding("SOP>NSP on SOP", "Table 5: SOP-trained beats NSP-trained on SOP accuracy (86.5 vs 52.0)",
            "sop", "baseline", "objective-nsp"),
    Finding("NSP near chance on SOP", "Table 5: NSP-trained stays near chance on SOP (52.0); an interval "
            "containing chance counts as holds", "sop", "objective-nsp", None, 0.5, "matches"),
    Finding("SOP>none on NSP", "Table 5: SOP-trained does better than no inter-sentence loss on NSP (78.9 vs 52.4)",
            "nsp", "baseline", "objective-none"),
    Finding("SOP>=NSP downstream", "Table 5: downstream average SOP ≥ NSP (80.1 vs 79.2)",
            "downstream", "baseline", "objective-nsp"),
    Finding("SOP>=none downstream", "Table 5: downstream average SOP ≥ none (80.1 vs 79.0)",
            "downstream", "baseline", "objective-none"),
    Finding("not-shared>all-shared", "Table 4 (E=128): not-shared beats all-shared downstream (81.6 vs 80.1)",
            "downstream", "sharing-none", "baseline"),
    Finding("attention<FFN sharing cost", "Table 4 (E=128): sharing only attention costs less than sharing only "
            "the FFN (81.7 vs 80.2)", "downstream", "sharing-attention", "sharing-ffn"),
    Finding("E>E/2", "Table 3 (all-shared): the default E beats half of it (E=128 vs 64: 80.1 vs 79.0)",
            "downstream", "baseline", "embedding-half"),
    Finding("E>2E", "Table 3 (all-shared): the default E beats twice it (E=128 vs 256: 80.1 vs 79.6)",
            "downstream", "baseline", "embedding-double"),
    Finding("no dropout (MLM)", "Table 8 (xxlarge): removing dropout does not hurt (90.7 without vs 90.4 with); "
            "here on MLM accuracy", "mlm", "baseline", "dropout-0.1"),
    Finding("no dropout (downstream)", "Table 8 (xxlarge): removing dropout does not hurt (90.7 without vs 90.4 "
            "with); here downstream", "downstream", "baseline", "dropout-0.1"),
    Finding("dynamic=static masking", "RoBERTa Table 1: dynamic masking matches static (SQuAD 2.0 78.7 vs 78.3, "
            "MNLI-m 84.0 vs 84.3, SST-2 92.9 vs 92.5); an interval containing zero counts as holds",
            "downstream", "masking-dynamic", "baseline", kind="matches"),
    Finding("n-gram vs unigram", "n-gram masking (n ≤ 3, which ALBERT uses) vs unigram downstream: the paper "
            "gives no table, so the difference is reported without a verdict", "downstream", "baseline", "ngram-1",
            kind="none"),
)  # fmt: skip


@dataclass
class Evidence:
    """What one run offers the findings."""

    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # "mlm"/"sop"/"nsp" → (correct, total)
    downstream: dict[str, TaskPredictions] = field(default_factory=dict)  # task → predictions at the largest size


def verdict(kind: str, interval: Interval) -> str:
    """Returns the verdict on a claim of ``kind`` ("greater", "matches", "none") given its interval.

    "greater": "holds" if the interval is above zero, "does not hold" if below, else "not resolved at this
    budget". "matches": "holds" if it contains zero (no difference seen at this budget, which is weaker than
    equality), else "does not hold". "none": "no claim".
    """
    if kind == "none":
        return NO_CLAIM
    contains_zero = interval.low <= 0 <= interval.high
    if kind == "matches":
        return HOLDS if contains_zero else FAILS
    return OPEN if contains_zero else HOLDS if interval.low > 0 else FAILS


class _MissingEvidence(Exception):
    """The runs lack what a finding compares: a measure's counts, a shared task, pairable predictions."""


def _values(finding: Finding, runs: dict[str, Evidence], resamples: int, seed: int) -> tuple[float, float, Interval]:
    first = runs[finding.first]
    second = runs[finding.second] if finding.second else None
    if finding.measure != "downstream":
        for run, name in ((first, finding.first), (second, finding.second)):
            if run is not None and finding.measure not in run.counts:
                raise _MissingEvidence(f"{name} has no {finding.measure} counts in eval/metrics.json")
            if run is not None and run.counts[finding.measure][1] < 1:
                raise _MissingEvidence(f"{name} has no scored {finding.measure} trials in eval/metrics.json")
        c, n = first.counts[finding.measure]
        other = second.counts[finding.measure] if second else (None, None)
        interval = proportion_interval(c, n, *other, constant=finding.constant)
        return c / n, c / n - interval.difference, interval  # the second: the other run's, or the constant
    assert second is not None, "a downstream finding compares two runs"
    tasks = sorted(set(first.downstream) & set(second.downstream))
    if not tasks:
        raise _MissingEvidence(f"{finding.first} and {finding.second} share no task with a predictions file")
    a, b = [first.downstream[t] for t in tasks], [second.downstream[t] for t in tasks]
    unpaired = _unpaired(a, b)
    if unpaired is not None:
        raise _MissingEvidence(unpaired)
    interval = downstream_interval(a, b, resamples, seed)
    everything = [np.arange(len(t.labels)) for t in a]
    every_seed = np.arange(a[0].seeds.shape[0])
    return _average(a, every_seed, everything), _average(b, every_seed, everything), interval


def check(
    runs: dict[str, Evidence], findings: tuple[Finding, ...] = FINDINGS, resamples: int = 2000, seed: int = 0
) -> list[dict]:
    """Checks every finding on ``runs`` (run name → evidence); a finding it cannot check gets a ``note``."""
    results = []
    for finding in findings:
        result: dict = {"key": finding.key, "claim": finding.claim, "measure": finding.measure}
        result.update(first=finding.first, second=finding.second if finding.second else f"chance {finding.constant}")
        missing = [r for r in (finding.first, finding.second) if r is not None and r not in runs]
        if missing:
            results.append({**result, "verdict": "skipped", "note": f"run {', '.join(missing)} not in the grid"})
            continue
        try:
            first, second, interval = _values(finding, runs, resamples, seed)
        except _MissingEvidence as e:  # only that: a KeyError or ValueError elsewhere is a bug, and must show
            results.append({**result, "verdict": "skipped", "note": str(e)})
            continue
        result.update(first_value=first, second_value=second, difference=interval.difference)
        result.update(low=interval.low, high=interval.high, verdict=verdict(finding.kind, interval))
        results.append(result)
    return results


def summary(results: list[dict]) -> str:
    """One sentence counting the verdicts, naming the findings behind each count."""
    by = {v: [r["key"] for r in results if r["verdict"] == v] for v in (HOLDS, FAILS, OPEN, NO_CLAIM, "skipped")}
    judged = len(by[HOLDS]) + len(by[FAILS]) + len(by[OPEN])
    parts = [
        f"{len(by[HOLDS])} hold{'s' if len(by[HOLDS]) == 1 else ''}",
        f"{len(by[FAILS])} {'does' if len(by[FAILS]) == 1 else 'do'} not hold",
        f"{len(by[OPEN])} {'is' if len(by[OPEN]) == 1 else 'are'} not resolved at this budget",
    ]
    named = "; ".join(f"{v}: {', '.join(by[v])}" for v in (HOLDS, FAILS, OPEN) if by[v])
    text = f"Of {judged} findings checked, {', '.join(parts[:2])} and {parts[2]}"
    text += f" ({named})" if named else ""
    if by[NO_CLAIM]:
        text += f"; {len(by[NO_CLAIM])} reported without a claim ({', '.join(by[NO_CLAIM])})"
    if by["skipped"]:
        text += f"; {len(by['skipped'])} skipped ({', '.join(by['skipped'])})"
    return text + "."


def markdown(results: list[dict]) -> str:
    """The "## Findings" section: the summary sentence, then one line per finding."""
    lines = ["## Findings", "", summary(results), ""]
    for r in results:
        if r["verdict"] == "skipped":
            lines.append(f"- {r['claim']}: skipped ({r['note']}).")
            continue
        ours = f"{r['first']} {r['first_value']:.3f} vs {r['second']}"
        ours += f" {r['second_value']:.3f}" if not r["second"].startswith("chance") else ""
        difference = f"{r['difference']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]"
        lines.append(f"- {r['claim']}. Ours ({r['measure']}): {ours}; difference {difference}: **{r['verdict']}**.")
    return "\n".join(lines) + "\n"
