"""The domain-adaptation demonstration read back (``adapt/dvc.yaml``): a general model continued on a domain,
against the general model as it was and against a model pretrained from scratch on the domain for as many steps.

Each model was pretrained ``pretrain_seeds`` times (the continued run of a seed starts from the general run of
that seed); ``--runs`` holds per model one ``seed-<n>`` folder per run with ``metrics.json`` and ``predictions``
of one ``evaluate`` without its random baseline, all fine-tuned with the same seeds, subsets and rate. The table
compares the models at every training size of every task (mean over pretraining runs of the median over
fine-tuning seeds of the primary dev score, ± the between-run standard deviation) and on held-out domain MLM
accuracy, each difference with the hierarchical bootstrap interval of ``findings.downstream_interval`` and
``findings.proportion_interval`` (pretraining runs, fine-tuning seeds, dev examples).

    python -m albert_lightning.ablations.adaptation --runs data/adapt/eval --output data/adapt/report
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
    run_scores,
    score,
    spread,
)
from albert_lightning.ablations.replicates import seed_folders
from albert_lightning.evaluation.report import read_predictions
from albert_lightning.evaluation.task_specs import TaskSpec
from pipelines.runtime.commands import main as run_command
from pipelines.runtime.files import write_bytes_atomically, write_json_atomically
from pipelines.runtime.params import parse_config

__all__ = ["COMPARISONS", "RUNS", "AdaptationConfig", "main", "rows"]

RUNS = ("continued", "general", "scratch")
COMPARISONS = (("continued", "general"), ("continued", "scratch"))


@dataclasses.dataclass
class AdaptationConfig:
    """The report's knobs (params.yaml section ``adaptation``)."""

    resamples: int = dataclasses.field(default=2000, metadata={"help": "bootstrap resamples per interval"})
    seed: int = dataclasses.field(default=0, metadata={"help": "seeds the bootstrap: the same report every run"})


def _seeds(runs: Path, run: str) -> list[Path]:
    """The model's evaluated pretraining runs, ``seed-<n>`` folders by seed."""
    found = seed_folders(runs / run)
    if not found:
        raise FileNotFoundError(f"{runs / run}: no seed-<n>/metrics.json; run `dvc repro adapt/dvc.yaml` first")
    return found


def _predictions(folders: list[Path], task: str, summary: dict[str, Any]) -> dict[str, TaskPredictions]:
    """The model's dev predictions of ``task`` per training size, [R, S, N] over its pretraining runs."""
    split = next(iter(summary["splits"]))
    devs = [read_predictions(folder / "predictions" / task / f"{split}.jsonl") for folder in folders]
    spec = TaskSpec(task, summary["kind"], tuple(summary["labels"]), (summary["primary"],), summary["primary"], {})
    labels = np.asarray(devs[0].labels)
    return {
        size: TaskPredictions(spec, labels, np.stack([np.asarray(dev.starts["pretrained"][size]) for dev in devs]))
        for size in devs[0].starts["pretrained"]
    }


def _mlm_counts(evaluation: dict[str, Any]) -> tuple[int, int]:
    scores = next(iter(evaluation["intrinsic"].values()))
    return scores["mlm_correct"], scores["mlm_predictions"]


def _cells(
    values: dict[str, float], spreads: dict[str, float], intervals: dict[tuple[str, str], Interval]
) -> dict[str, Any]:
    """Each model's value and between-run spread (``<model>_sd``), then each comparison's interval."""
    cells: dict[str, Any] = values | {f"{run}_sd": spreads[run] for run in RUNS}
    return cells | {f"{first}-{second}": dataclasses.asdict(intervals[first, second]) for first, second in COMPARISONS}


def rows(runs: Path, resamples: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """One row for held-out domain MLM accuracy, then one per task and training size: each run's score and each
    comparison's difference with its 95 % interval."""
    return _rows({run: _seeds(runs, run) for run in RUNS}, resamples, seed)


def _rows(folders: dict[str, list[Path]], resamples: int, seed: int) -> list[dict[str, Any]]:
    evaluations = {run: [json.loads((f / "metrics.json").read_text()) for f in folders[run]] for run in RUNS}
    counts = {run: [_mlm_counts(e) for e in evaluations[run]] for run in RUNS}
    mlm = {run: float(np.mean([c / n for c, n in counts[run]])) for run in RUNS}
    mlm_spread = {run: spread([c / n for c, n in counts[run]]) for run in RUNS}
    intervals = {pair: proportion_interval(counts[pair[0]], counts[pair[1]], None, resamples, seed)
                 for pair in COMPARISONS}  # fmt: skip
    table = [{"measure": "held-out domain MLM accuracy", "size": "", **_cells(mlm, mlm_spread, intervals)}]
    for task, summary in evaluations["continued"][0]["tasks"].items():
        predictions = {run: _predictions(folders[run], task, summary) for run in RUNS}
        for size in sorted(predictions["continued"], key=int):
            by_run = {run: predictions[run][size] for run in RUNS}
            scores = {run: score(p) for run, p in by_run.items()}
            spreads = {run: spread(run_scores([p])) for run, p in by_run.items()}
            intervals = {
                pair: downstream_interval([by_run[pair[0]]], [by_run[pair[1]]], resamples, seed) for pair in COMPARISONS
            }
            measure = f"{task} dev {summary['primary']}"
            table.append({"measure": measure, "size": size, **_cells(scores, spreads, intervals)})
    return table


def markdown(table: list[dict[str, Any]]) -> str:
    """The table as Markdown: scores (mean ± between-run SD), then each comparison as ``difference [low, high]``."""
    header = ["measure", "training examples", *RUNS, *(f"{a} − {b} (95 % interval)" for a, b in COMPARISONS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table:
        cells = [row["measure"], str(row["size"] or "")] + [f"{row[run]:.3f} ± {row[f'{run}_sd']:.3f}" for run in RUNS]
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
        {
            "runs": "folder holding continued/, general/ and scratch/, each of seed-<n> evaluations",
            "output": "folder for report.md, results.json",
        },
        __doc__.splitlines()[0],
        prog="python -m albert_lightning.ablations.adaptation",
    )
    config, runs, output = parsed.config, Path(parsed.paths["runs"]), Path(parsed.paths["output"])
    folders = {run: _seeds(runs, run) for run in RUNS}
    table = _rows(folders, config.resamples, config.seed)
    output.mkdir(parents=True, exist_ok=True)
    write_json_atomically(str(output / "results.json"), table)
    count = len(folders[RUNS[0]])
    title = (
        f"# Domain adaptation: continued vs general vs scratch\n\nEach model pretrained {count} times (seeds); "
        "scores are means over its runs ± their standard deviation, intervals resample pretraining runs, "
        "fine-tuning seeds and dev examples.\n\n"
    )
    write_bytes_atomically(str(output / "report.md"), (title + markdown(table)).encode("utf-8"))
    return table


if __name__ == "__main__":
    run_command(main, "adaptation")
