"""The default's downstream verdicts across pretraining runs: ``python -m albert_lightning.ablations.across_runs``.

The main pipeline's report gives each task × training size a gain (pretrained − random init) whose interval
resamples fine-tuning seeds and dev examples of its one pretraining run. ``replicates/dvc.yaml`` pretrains the
default again with other seeds and evaluates each run as the main pipeline does (without random-init runs: those
do not depend on the checkpoint, and the main evaluation has them). This report puts the runs together: per task
and size the gain of each run, and the gain over all runs with ``intervals.median_gain_interval``'s three-level
bootstrap (pretraining runs, fine-tuning seeds, dev examples), each with its verdict: "pays" (interval above
zero), "hurts" (below) or "not resolved". Beside it, the main run's own interval and verdict, and the spread of
held-out MLM and SOP accuracy between runs.

    python -m albert_lightning.ablations.across_runs --main data/eval --runs data/replicates/eval \\
        --output data/replicates/report
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from albert_lightning.ablations.findings import spread
from albert_lightning.ablations.replicates import seed_folders
from albert_lightning.evaluation.intervals import gain, median_gain_interval
from albert_lightning.evaluation.metrics import compute_metrics
from albert_lightning.evaluation.report import read_predictions, read_question_scores
from albert_lightning.evaluation.task_specs import TaskSpec
from pipelines.runtime.commands import main as run_command
from pipelines.runtime.files import write_bytes_atomically, write_json_atomically
from pipelines.runtime.params import parse_config

__all__ = ["AcrossRunsConfig", "main", "rows", "verdict"]

PAYS, HURTS, OPEN = "pays", "hurts", "not resolved"


@dataclasses.dataclass
class AcrossRunsConfig:
    """The report's knobs (replicates/params.yaml section ``report``)."""

    bootstrap_resamples: int = dataclasses.field(default=2000, metadata={"help": "resamples per interval"})
    seed: int = dataclasses.field(default=0, metadata={"help": "seeds the bootstrap: the same report every run"})


def verdict(low: float, high: float) -> str:
    """ "pays" when the interval is above zero, "hurts" when below, else "not resolved"."""
    return PAYS if low > 0 else HURTS if high < 0 else OPEN


def _evaluation(folder: Path) -> dict[str, Any]:
    path = folder / "metrics.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: missing; run `dvc repro` and `dvc repro replicates/dvc.yaml` first")
    return json.loads(path.read_text())


def _runs(main: Path, runs: Path) -> dict[str, Path]:
    """Run name → evaluation folder: the main run first, then ``seed-<n>`` folders by seed."""
    return {"main": main, **{p.name: p for p in seed_folders(runs)}}


def _arrays(starts: dict[str, dict[str, list[list]]]) -> dict[str, dict[str, np.ndarray]]:
    return {start: {size: np.asarray(rows) for size, rows in sizes.items()} for start, sizes in starts.items()}


def _task_arrays(folder: Path, task: str, summary: dict[str, Any], split: str) -> tuple[Any, dict, np.ndarray]:
    """(metric, start → size → [S, N] array, references) of one run's dev file of ``task``."""
    path = folder / "predictions" / task / f"{split}.jsonl"
    if "labels" in summary:  # classification or regression: per-seed predictions
        spec = TaskSpec(task, summary["kind"], tuple(summary["labels"]), (summary["primary"],), summary["primary"], {})
        dev = read_predictions(path)
        metric = None if spec.primary == "accuracy" else (
            lambda p, r: compute_metrics(spec, p.tolist(), r.tolist())[spec.primary]
        )  # fmt: skip
        starts = {
            start: {size: np.asarray(rows) for size, rows in sizes.items()} for start, sizes in dev.starts.items()
        }
        return metric, starts, np.asarray(dev.labels)
    scores = read_question_scores(path)  # a reading task: each question's primary score per seed
    starts = _arrays(scores)
    first = next(iter(next(iter(starts.values())).values()))
    return (lambda p, r: float(np.mean(p))), starts, np.zeros(first.shape[1])


def _intrinsic(evaluations: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per held-out measure, each run's accuracy, their mean and between-run standard deviation."""
    table = []
    first = next(iter(evaluations.values()))["intrinsic"]
    for shards, scores in first.items():
        for measure, key in (("MLM", "mlm_accuracy"), (scores["kind"].upper(), f"{scores['kind']}_accuracy")):
            values = {run: e["intrinsic"][shards][key] for run, e in evaluations.items()}
            numbers = list(values.values())
            name = f"held-out {measure} accuracy ({shards} shards)"
            table.append({"measure": name, "runs": values, "mean": float(np.mean(numbers)), "sd": spread(numbers)})
    return table


def rows(main: Path, runs: Path, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The report's content: the runs, the intrinsic spread, and per task, split and size the gains."""
    folders = _runs(main, runs)
    evaluations = {run: _evaluation(folder) for run, folder in folders.items()}
    gains = []
    for task, summary in evaluations["main"]["tasks"].items():
        for split, scores in summary["splits"].items():
            arrays = {run: _task_arrays(folder, task, summary, split) for run, folder in folders.items()}
            metric, main_starts, references = arrays["main"]
            for size, random_init in main_starts["random_init"].items():
                pretrained = np.stack([arrays[run][1]["pretrained"][size] for run in folders])  # [R, S, N]
                per_run = [gain(p, random_init, references, metric) for p in pretrained]
                across = median_gain_interval(pretrained, random_init, references, metric, resamples, seed)
                alone = scores["sizes"][size]["gain"]  # the main report's: one run, its seeds and examples
                gains.append({
                    "task": task, "split": split, "metric": summary["primary"], "train_examples": int(size),
                    "gain_per_run": dict(zip(folders, per_run, strict=True)), "gain_sd": spread(per_run),
                    "gain": across.median, "low": across.low, "high": across.high,
                    "verdict": verdict(across.low, across.high),
                    "main_run": alone, "main_run_verdict": verdict(alone["low"], alone["high"]),
                })  # fmt: skip
    return {"runs": list(folders), "intrinsic": _intrinsic(evaluations), "gains": gains}


def markdown(result: dict[str, Any]) -> str:
    """The report: the intrinsic spread, then the gains, then which verdicts one run got right."""
    runs = result["runs"]
    lines = [
        "# The default across pretraining runs",
        "",
        f"{len(runs)} pretraining runs of configs/pretrain.yaml ({', '.join(runs)}; `main` is the main pipeline's),"
        " each evaluated as the main pipeline evaluates. A gain is pretrained − random init (the main run's random-"
        "init models: they do not depend on the checkpoint). Across runs: the mean over runs of the median over "
        "fine-tuning seeds, with a 95 % interval resampling pretraining runs, then fine-tuning seeds, then dev "
        "examples. Main run: the main report's interval, which resamples its seeds and examples alone.",
        "",
        "| held-out measure | " + " | ".join(runs) + " | mean ± SD |",
        "|---|" + "---|" * (len(runs) + 1),
    ]
    for row in result["intrinsic"]:
        cells = [f"{row['runs'][r]:.3f}" for r in runs]
        lines.append(f"| {row['measure']} | {' | '.join(cells)} | {row['mean']:.3f} ± {row['sd']:.3f} |")
    lines += [
        "",
        "| task | metric | train examples | gain per run | across runs [95 % CI] | verdict | main run alone "
        "[95 % CI] | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in result["gains"]:
        per_run = ", ".join(f"{v:+.3f}" for v in g["gain_per_run"].values())
        alone = g["main_run"]
        lines.append(
            f"| {g['task']} | {g['metric']} | {g['train_examples']} | {per_run} | {g['gain']:+.3f} "
            f"[{g['low']:+.3f}, {g['high']:+.3f}] | {g['verdict']} | {alone['median']:+.3f} "
            f"[{alone['low']:+.3f}, {alone['high']:+.3f}] | {g['main_run_verdict']} |"
        )
    same = sum(g["verdict"] == g["main_run_verdict"] for g in result["gains"])
    changed = [
        f"{g['task']} at {g['train_examples']}" for g in result["gains"] if g["verdict"] != g["main_run_verdict"]
    ]
    lines += ["", f"Of {len(result['gains'])} verdicts of the main report, {same} survive across pretraining runs"
              + (f"; {len(changed)} change ({', '.join(changed)})." if changed else ".")]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Reads the runs and writes ``report.md`` and ``results.json`` into ``--output``."""
    parsed = parse_config(
        argv,
        AcrossRunsConfig,
        "report",
        {
            "main": "the main pipeline's evaluation folder (data/eval)",
            "runs": "folder of seed-<n> evaluations",
            "output": "folder for report.md and results.json",
        },
        __doc__.splitlines()[0],
        prog="python -m albert_lightning.ablations.across_runs",
    )
    config, paths = parsed.config, {k: Path(v) for k, v in parsed.paths.items()}
    result = rows(paths["main"], paths["runs"], config.bootstrap_resamples, config.seed)
    paths["output"].mkdir(parents=True, exist_ok=True)
    write_json_atomically(str(paths["output"] / "results.json"), result)
    write_bytes_atomically(str(paths["output"] / "report.md"), markdown(result).encode("utf-8"))
    return result


if __name__ == "__main__":
    run_command(main, "across_runs")
