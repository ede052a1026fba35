"""The domain-adaptation demonstration read back (``adapt/dvc.yaml``): a general model continued on a domain,
against the general model as it was and against a model pretrained from scratch on the domain for as many steps.

Each run folder holds ``eval/metrics.json`` and ``eval/predictions`` of one ``evaluate`` without its random
baseline, all fine-tuned with the same seeds, subsets and rate. The table compares the runs at every training
size of every task (median over seeds of the primary dev score; paired bootstrap interval over seeds and dev
examples, ``findings.downstream_interval``) and on held-out domain MLM accuracy (normal interval of a difference
of proportions, ``findings.proportion_interval``).

    python -m albert_lightning.ablations.adaptation --runs data/adapt/runs --output data/adapt/report
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from albert_lightning.ablations.findings import (
    Interval,
    TaskPredictions,
    downstream_interval,
    proportion_interval,
    score,
)
from albert_lightning.evaluation.report import read_predictions
from albert_lightning.evaluation.task_files import TaskSpec
from pipelines.commands import main as run_command
from pipelines.files import write_bytes_atomically, write_json_atomically
from pipelines.params import parse_config

__all__ = ["COMPARISONS", "RUNS", "AdaptationConfig", "main", "rows"]

RUNS = ("continued", "general", "scratch")
COMPARISONS = (("continued", "general"), ("continued", "scratch"))


@dataclasses.dataclass
class AdaptationConfig:
    """The report's knobs (params.yaml section ``adaptation``)."""

    resamples: int = dataclasses.field(default=2000, metadata={"help": "bootstrap resamples per interval"})
    seed: int = dataclasses.field(default=0, metadata={"help": "seeds the bootstrap: the same report every run"})


def _evaluation(runs: Path, run: str) -> dict[str, Any]:
    path = runs / run / "eval" / "metrics.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: missing; run `dvc repro adapt/dvc.yaml` first")
    return json.loads(path.read_text())


def _predictions(runs: Path, run: str, task: str, summary: dict[str, Any]) -> dict[str, TaskPredictions]:
    """The run's dev predictions of ``task``, per training size."""
    split = next(iter(summary["splits"]))
    dev = read_predictions(runs / run / "eval" / "predictions" / task / f"{split}.jsonl")
    spec = TaskSpec(task, summary["kind"], tuple(summary["labels"]), (summary["primary"],), summary["primary"], {})
    labels = np.asarray(dev.labels)
    return {size: TaskPredictions(spec, labels, np.asarray(seeds)) for size, seeds in dev.starts["pretrained"].items()}


def _mlm_counts(evaluation: dict[str, Any]) -> tuple[int, int]:
    scores = next(iter(evaluation["intrinsic"].values()))
    return scores["mlm_correct"], scores["mlm_predictions"]


def _cells(values: dict[str, float], intervals: dict[tuple[str, str], Interval]) -> dict[str, Any]:
    """Each run's value, then each comparison's interval under ``first-second``."""
    return values | {f"{first}-{second}": dataclasses.asdict(intervals[first, second]) for first, second in COMPARISONS}


def rows(runs: Path, resamples: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """One row for held-out domain MLM accuracy, then one per task and training size: each run's score and each
    comparison's difference with its 95 % interval."""
    evaluations = {run: _evaluation(runs, run) for run in RUNS}
    counts = {run: _mlm_counts(evaluations[run]) for run in RUNS}
    mlm = {run: c / n for run, (c, n) in counts.items()}
    intervals = {pair: proportion_interval(*counts[pair[0]], *counts[pair[1]]) for pair in COMPARISONS}
    table = [{"measure": "held-out domain MLM accuracy", "size": "", **_cells(mlm, intervals)}]
    for task, summary in evaluations["continued"]["tasks"].items():
        predictions = {run: _predictions(runs, run, task, evaluations[run]["tasks"][task]) for run in RUNS}
        for size in sorted(predictions["continued"], key=int):
            by_run = {run: predictions[run][size] for run in RUNS}
            scores = {run: score(p) for run, p in by_run.items()}
            intervals = {
                pair: downstream_interval([by_run[pair[0]]], [by_run[pair[1]]], resamples, seed) for pair in COMPARISONS
            }
            table.append({"measure": f"{task} dev {summary['primary']}", "size": size, **_cells(scores, intervals)})
    return table


def markdown(table: list[dict[str, Any]]) -> str:
    """The table as Markdown: scores, then each comparison as ``difference [low, high]``."""
    header = ["measure", "training examples", *RUNS, *(f"{a} − {b} (95 % interval)" for a, b in COMPARISONS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table:
        cells = [row["measure"], str(row["size"] or "")] + [f"{row[run]:.3f}" for run in RUNS]
        for first, second in COMPARISONS:
            i = row[f"{first}-{second}"]
            cells.append(f"{i['difference']:+.3f} [{i['low']:+.3f}, {i['high']:+.3f}]")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Reads the three runs and writes ``report.md`` and ``results.json`` into ``--output``."""
    parsed = parse_config(
        argv,
        AdaptationConfig,
        "adaptation",
        {"runs": "folder holding continued/, general/ and scratch/", "output": "folder for report.md, results.json"},
        __doc__.splitlines()[0],
        prog="python -m albert_lightning.ablations.adaptation",
    )
    config, runs, output = parsed.config, Path(parsed.paths["runs"]), Path(parsed.paths["output"])
    table = rows(runs, config.resamples, config.seed)
    output.mkdir(parents=True, exist_ok=True)
    write_json_atomically(str(output / "results.json"), table)
    title = "# Domain adaptation: continued vs general vs scratch\n\n"
    write_bytes_atomically(str(output / "report.md"), (title + markdown(table)).encode("utf-8"))
    return table


if __name__ == "__main__":
    run_command(main, "adaptation")
