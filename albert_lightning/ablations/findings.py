"""The paper's ablation findings, each checked on the grid's runs with a 95% interval and a verdict (no torch).

A finding compares two variants (or a variant and chance) on one measure: an intrinsic accuracy on held-out
shards, from the counts ``evaluation/cli.py`` records, or the downstream average (the mean over tasks of each
task's primary dev metric, median over fine-tuning seeds, at the largest training set both have), from the
predictions files. Each variant was pretrained several times (seeds: initialisation and data order); a variant's
value is the mean over its runs, and every interval is ``intervals.draws``' hierarchical bootstrap: pretraining
runs, then fine-tuning seeds, then dev examples (for counts, a binomial draw of each drawn run's held-out
tokens or pairs). A finding holds only when that interval, which includes a second pretraining run's difference,
excludes zero. ``ablations/report.py`` reads the runs, writes the result; tests: ``tests/test_ablation_findings.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from albert_lightning.evaluation.intervals import draws, group_score, percentile_interval
from albert_lightning.evaluation.metrics import compute_metrics
from albert_lightning.evaluation.task_specs import TaskSpec

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
    "run_scores",
    "score",
    "spread",
    "summary",
    "verdict",
]

HOLDS, FAILS, OPEN, NO_CLAIM = "holds", "does not hold", "not resolved at this budget", "no claim"

Counts = tuple[int, int]  # (correct, total) of one pretraining run


@dataclass(frozen=True)
class Interval:
    difference: float  # first − second (or first − the constant)
    low: float
    high: float


def spread(values: list[float]) -> float:
    """The between-run standard deviation (n − 1 in the denominator; 0 for a single run)."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def proportion_interval(
    first: list[Counts],
    second: list[Counts] | None,
    constant: float | None = None,
    resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """The difference of the mean proportions of two groups of runs (or of one and ``constant``) and its 95%
    interval: per resample, each group's runs drawn with replacement, then its held-out rows' noise, one
    Binomial(total, the drawn runs' mean proportion) draw (the counts hold no per-example record to resample).

    The rows are the same for every run of a group, so their noise is drawn once and shared by its runs, as
    ``draws`` shares dev examples: drawing it per run would average it down as if more rows had been scored. Two
    groups' noises are drawn apart although they were scored on the same rows, which makes the interval if
    anything too wide; masked tokens of one sequence are not independent, which makes an MLM interval somewhat
    too narrow. Both are small next to the differences the paper reports.

    Raises:
        ValueError: A group is empty or a count has no trials.
    """
    groups = [first] if second is None else [first, second]
    if any(not g or min(n for _, n in g) < 1 for g in groups):
        raise ValueError(f"proportions need at least one run with at least one trial; got {groups}")
    totals = [np.array([n for _, n in g]) for g in groups]
    rates = [np.array([c / n for c, n in g]) for g in groups]

    def difference(values: list[float]) -> float:
        return values[0] - (values[1] if second is not None else float(constant or 0.0))

    point = difference([float(np.mean(r)) for r in rates])
    statistics = []
    for d in draws([len(g) for g in groups], 0, [], resamples, seed):
        values = []
        for total, rate, drawn in zip(totals, rates, d.runs, strict=True):
            mean, rows = float(np.mean(rate[drawn])), round(float(np.mean(total[drawn])))
            values.append(d.generator.binomial(rows, mean) / rows)  # the drawn runs' mean, with the rows' noise
        statistics.append(difference(values))
    return Interval(point, *percentile_interval(statistics))


@dataclass(frozen=True)
class TaskPredictions:
    """One task's dev predictions of one variant's pretraining runs at one training-set size."""

    spec: TaskSpec  # kind, labels and primary metric: enough for compute_metrics
    labels: np.ndarray  # [N] gold labels (strings) or scores
    runs: np.ndarray  # [R, S, N] predictions: per pretraining run, one row per fine-tuning seed

    def metric(self) -> Callable[[np.ndarray, np.ndarray], float] | None:
        """None (accuracy, computed vectorised by ``seed_scores``) or the task's primary metric."""
        if self.spec.primary == "accuracy":
            return None
        return lambda p, r: compute_metrics(self.spec, p.tolist(), r.tolist())[self.spec.primary]


def _every(task: TaskPredictions) -> tuple[np.ndarray, np.ndarray]:
    """Every run at its own position, with all of its seeds."""
    count, seeds = task.runs.shape[:2]
    return np.arange(count), np.arange(seeds)


def score(task: TaskPredictions) -> float:
    """The mean over pretraining runs of the median over fine-tuning seeds of the primary score on all dev."""
    return group_score(task.runs, task.labels, task.metric(), *_every(task), np.arange(len(task.labels)))


def run_scores(tasks: list[TaskPredictions]) -> list[float]:
    """Per pretraining run, the mean over tasks of its median over seeds: the values the spread is taken of."""
    every = [np.arange(len(t.labels)) for t in tasks]
    count, seeds = tasks[0].runs.shape[:2]
    return [
        float(np.mean([group_score(t.runs, t.labels, t.metric(), np.array([r]), np.arange(seeds), rows)
                       for t, rows in zip(tasks, every, strict=True)]))
        for r in range(count)
    ]  # fmt: skip


def downstream_interval(
    first: list[TaskPredictions], second: list[TaskPredictions], resamples: int = 2000, seed: int = 0
) -> Interval:
    """The difference of two variants' downstream averages and its 95% hierarchical bootstrap interval.

    Per resample (``intervals.draws``): each variant's pretraining runs drawn apart, then the fine-tuning seeds
    (shared by every run of both variants: the same subsets and orders), then each task's dev examples (shared:
    the same examples), all with replacement; the statistic is the difference of the two variants' averages on
    them. With one run each, this is the paired bootstrap over seeds and examples of before.

    Args:
        first: Per task (same order in both lists) the first variant's predictions [R1, S, N].
        second: The second variant's predictions [R2, S, N] of the same tasks, seeds and dev examples.
        resamples: Bootstrap resamples.
        seed: Seeds the generator: the same interval on every run.

    Raises:
        ValueError: The variants' tasks, seeds or dev examples differ.
    """
    unpaired = _unpaired(first, second)
    if unpaired is not None:
        raise ValueError(unpaired)
    counts = [first[0].runs.shape[0], second[0].runs.shape[0]]
    seeds = first[0].runs.shape[1]

    def average(tasks: list[TaskPredictions], runs: np.ndarray, drawn: np.ndarray, rows: tuple) -> float:
        per_task = [group_score(t.runs, t.labels, t.metric(), runs, drawn, r)
                    for t, r in zip(tasks, rows, strict=True)]  # fmt: skip
        return float(np.mean(per_task))

    point = float(np.mean([score(t) for t in first]) - np.mean([score(t) for t in second]))
    statistics = [
        average(first, d.runs[0], d.seeds, d.rows) - average(second, d.runs[1], d.seeds, d.rows)
        for d in draws(counts, seeds, [len(t.labels) for t in first], resamples, seed)
    ]
    return Interval(point, *percentile_interval(statistics))


def _unpaired(first: list[TaskPredictions], second: list[TaskPredictions]) -> str | None:
    """Why the two variants' predictions cannot be paired task by task, or None if they can."""
    for a, b in zip(first, second, strict=True):
        if a.runs.shape[1:] != b.runs.shape[1:] or not np.array_equal(a.labels, b.labels):
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
    """What one variant's pretraining runs offer the findings, run by run."""

    counts: dict[str, list[Counts]] = field(default_factory=dict)  # "mlm"/"sop"/"nsp" → (correct, total) per run
    downstream: dict[str, TaskPredictions] = field(default_factory=dict)  # task → [R, S, N] at the largest size

    @classmethod
    def of_runs(cls, runs: list[Evidence]) -> Evidence:
        """One variant's evidence from each of its runs' (each holding one run): the measures and tasks every run
        has, a task only where all runs' predictions have one shape and the same labels."""
        counts = {m: [c for r in runs for c in r.counts[m]] for m in runs[0].counts if all(m in r.counts for r in runs)}
        downstream = {}
        for task, first in runs[0].downstream.items():
            others = [r.downstream.get(task) for r in runs]
            if all(o is not None and o.runs.shape[1:] == first.runs.shape[1:] and np.array_equal(o.labels, first.labels)
                   for o in others):  # fmt: skip
                stacked = np.concatenate([o.runs for o in others])  # type: ignore[union-attr]
                downstream[task] = TaskPredictions(first.spec, first.labels, stacked)
        return cls(counts, downstream)


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


def _values(finding: Finding, runs: dict[str, Evidence], resamples: int, seed: int) -> dict:
    """The finding's two values with their per-run values, and its interval."""
    first = runs[finding.first]
    second = runs[finding.second] if finding.second else None
    if finding.measure != "downstream":
        for run, name in ((first, finding.first), (second, finding.second)):
            if run is not None and finding.measure not in run.counts:
                raise _MissingEvidence(f"{name} has no {finding.measure} counts in eval/metrics.json")
            if run is not None and min(n for _, n in run.counts[finding.measure]) < 1:
                raise _MissingEvidence(f"{name} has no scored {finding.measure} trials in eval/metrics.json")
        per_run = [[c / n for c, n in run.counts[finding.measure]] for run in (first, second) if run is not None]
        other = second.counts[finding.measure] if second else None
        interval = proportion_interval(first.counts[finding.measure], other, finding.constant, resamples, seed)
    else:
        assert second is not None, "a downstream finding compares two variants"
        tasks = sorted(set(first.downstream) & set(second.downstream))
        if not tasks:
            raise _MissingEvidence(f"{finding.first} and {finding.second} share no task with a predictions file")
        a, b = [first.downstream[t] for t in tasks], [second.downstream[t] for t in tasks]
        unpaired = _unpaired(a, b)
        if unpaired is not None:
            raise _MissingEvidence(unpaired)
        interval = downstream_interval(a, b, resamples, seed)
        per_run = [run_scores(a), run_scores(b)]
    values = [float(np.mean(v)) for v in per_run] + ([] if second else [float(finding.constant or 0.0)])
    return {
        "first_value": values[0], "second_value": values[1], "first_runs": per_run[0],
        "second_runs": per_run[1] if second else [], "first_spread": spread(per_run[0]),
        "second_spread": spread(per_run[1]) if second else 0.0, "difference": interval.difference,
        "low": interval.low, "high": interval.high,
    }  # fmt: skip


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
            result.update(_values(finding, runs, resamples, seed))
        except _MissingEvidence as e:  # only that: a KeyError or ValueError elsewhere is a bug, and must show
            results.append({**result, "verdict": "skipped", "note": str(e)})
            continue
        interval = Interval(result["difference"], result["low"], result["high"])
        results.append({**result, "verdict": verdict(finding.kind, interval)})
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
    counts = sorted({len(r["first_runs"]) for r in results if r.get("first_runs")})
    runs = ""
    if counts:
        runs = f" on {counts[0]}" if len(counts) == 1 else f" on {counts[0]}–{counts[-1]}"
        runs += " pretraining run per variant" if counts == [1] else " pretraining runs per variant"
    text = f"Of {judged} findings checked{runs}, {', '.join(parts[:2])} and {parts[2]}"
    text += f" ({named})" if named else ""
    if by[NO_CLAIM]:
        text += f"; {len(by[NO_CLAIM])} reported without a claim ({', '.join(by[NO_CLAIM])})"
    if by["skipped"]:
        text += f"; {len(by['skipped'])} skipped ({', '.join(by['skipped'])})"
    return text + "."


def markdown(results: list[dict]) -> str:
    """The "## Findings" section: the summary sentence, then one line per finding (values: mean ± between-run SD)."""
    lines = ["## Findings", "", summary(results), ""]
    for r in results:
        if r["verdict"] == "skipped":
            lines.append(f"- {r['claim']}: skipped ({r['note']}).")
            continue
        # mean over the variant's runs ± their standard deviation: what a second run of it might give
        ours = f"{r['first']} {r['first_value']:.3f} ± {r['first_spread']:.3f} vs {r['second']}"
        ours += f" {r['second_value']:.3f} ± {r['second_spread']:.3f}" if r["second_runs"] else ""
        difference = f"{r['difference']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]"
        lines.append(f"- {r['claim']}. Ours ({r['measure']}): {ours}; difference {difference}: **{r['verdict']}**.")
    return "\n".join(lines) + "\n"
