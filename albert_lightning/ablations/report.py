"""The ablation report: ``python -m albert_lightning.ablation_report --runs data/ablations --output data/ablations``.

Collects every variant folder under ``--runs`` (its pretraining runs, one per seed, in ``pretrain/seed-<n>``:
``checkpoints/last.ckpt``, ``curves/validation.csv``; their evaluations in ``eval/seed-<n>/metrics.json``) into the
shape of the paper's tables: Tables 3–4 (cross-layer sharing and embedding size), Table 5 (inter-sentence
objective), and the other factors (dropout, static or dynamic masking, n-gram length), as ``report.md`` and
``report.csv``, plus ``curves.png`` with each variant's validation curves (mean over its runs). A value is the
mean over the variant's pretraining runs, with the between-run standard deviation (``*_sd``) beside it.
Parameter counts come from each variant's own model config, not from a list.
``report.md`` opens with the paper's findings checked on these runs, each with a 95% interval and a verdict
(``findings.py``), also written to ``findings.json``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albert_lightning.ablations import findings as ablation_findings
from albert_lightning.ablations.findings import Evidence, TaskPredictions
from albert_lightning.ablations.replicates import seed_folders
from albert_lightning.checkpoints import load_checkpoint
from albert_lightning.evaluation.report import read_predictions
from albert_lightning.evaluation.task_specs import TaskSpec
from albert_lightning.model import AlbertConfig, AlbertForPreTraining, num_parameters
from pipelines.contracts.manifest import MANIFEST, Manifest
from pipelines.runtime import files
from pipelines.runtime.commands import main as run_command
from pipelines.runtime.params import parse_config

__all__ = ["Run", "collect", "main", "tables"]

FACTORS = ("objective", "sharing", "embedding_size", "dropout", "masking", "ngram")
GROUPS = {  # which paper table a factor belongs to
    "sharing": "Cross-layer sharing and embedding size (paper Tables 3 and 4)",
    "embedding_size": "Cross-layer sharing and embedding size (paper Tables 3 and 4)",
    "objective": "Inter-sentence objective (paper Table 5)",
    "dropout": "Other factors",
    "masking": "Other factors",
    "ngram": "Other factors",
}


@dataclass
class Run:
    name: str
    factors: dict[str, Any]
    parameters: int  # AlbertModel: the encoder the paper counts
    parameters_pretraining: int  # with the MLM and SOP heads
    intrinsic: dict[str, float]  # mlm, nsp, sop accuracy on held-out shards: mean over pretraining runs
    tasks: dict[str, float] = field(default_factory=dict)  # primary dev score per task: mean over runs
    curves: list[list[dict[str, float]]] = field(default_factory=list)  # each run's validation curve
    evidence: Evidence = field(default_factory=Evidence)  # counts and dev predictions, for the findings
    spread: dict[str, float] = field(default_factory=dict)  # between-run SD of mlm, nsp, sop and the average

    @property
    def average(self) -> float | None:
        return sum(self.tasks.values()) / len(self.tasks) if self.tasks else None


def _factors(checkpoint: dict[str, Any]) -> dict[str, Any]:
    config = checkpoint["hyper_parameters"]["config"]
    data = checkpoint.get("datamodule_hyper_parameters", {})
    shards = Path(data.get("data_dir", ""))
    ngram = Manifest.read(shards).masking.ngram if (shards / MANIFEST).exists() else None
    return {
        "objective": checkpoint["hyper_parameters"].get("inter_sentence"),
        "sharing": config["sharing"],
        "embedding_size": config["embedding_size"],
        "dropout": config["hidden_dropout_prob"],
        "masking": data.get("masking"),
        "ngram": ngram,
    }


def _parameters(config: dict[str, Any]) -> tuple[int, int]:
    with torch.device("meta"):  # shapes only: no memory, no time
        model = AlbertForPreTraining(AlbertConfig(**config))
    return num_parameters(model.albert), num_parameters(model)


def _evidence(folder: Path, evaluation: dict[str, Any]) -> Evidence:
    """One pretraining run's counts behind the intrinsic accuracies and its pretrained dev predictions at each
    task's largest size (``folder``: its evaluation).

    Evaluations from before the counts and predictions files existed give none: their findings are skipped.
    """
    evidence = Evidence()
    for scores in evaluation["intrinsic"].values():  # the MLM counts come from the shards the "mlm" column does
        if "pair_correct" in scores:
            evidence.counts.setdefault("mlm", [(scores["mlm_correct"], scores["mlm_predictions"])])
            evidence.counts[scores["kind"]] = [(scores["pair_correct"], scores["pairs"])]
    for name, task in evaluation["tasks"].items():
        split = next(iter(task["splits"]))  # the table's split: MNLI's matched
        path = folder / "predictions" / name / f"{split}.jsonl"
        if "kind" not in task or not path.exists():
            continue
        dev = read_predictions(path)
        sizes = dev.starts["pretrained"]
        seeds = sizes[max(sizes, key=int)]
        spec = TaskSpec(name, task["kind"], tuple(task["labels"]), (task["primary"],), task["primary"], {})
        evidence.downstream[name] = TaskPredictions(spec, np.asarray(dev.labels), np.asarray(seeds)[None])
    return evidence


def _scores(evaluation: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """One run's intrinsic accuracies and its primary dev score per task (median over seeds, largest size)."""
    intrinsic: dict[str, float] = {}
    for scores in evaluation["intrinsic"].values():
        intrinsic.setdefault("mlm", scores["mlm_accuracy"])
        intrinsic[scores["kind"]] = scores[f"{scores['kind']}_accuracy"]
    tasks = {}
    for name, task in evaluation["tasks"].items():
        split = next(iter(task["splits"].values()))
        if "sizes" in split:  # a learning curve: compare runs at their largest training set (median over seeds)
            split = split["sizes"][max(split["sizes"], key=int)]
        tasks[name] = split["pretrained"][task["primary"]]
    return intrinsic, tasks


def _mean_and_spread(per_run: list[dict[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
    """The mean over runs of each value every run has, and its between-run standard deviation."""
    keys = [k for k in per_run[0] if all(k in r for r in per_run)]
    means = {k: float(np.mean([r[k] for r in per_run])) for k in keys}
    return means, {k: ablation_findings.spread([r[k] for r in per_run]) for k in keys}


def _replicates(folder: Path) -> list[str]:
    """The seed folders (``seed-<n>``) the variant has both a pretraining run and an evaluation of, by seed."""
    return [p.name for p in seed_folders(folder / "eval") if (folder / "pretrain" / p.name).is_dir()]


def _read_run(folder: Path) -> Run:
    """One variant: its pretraining runs (``pretrain/seed-<n>``) and their evaluations (``eval/seed-<n>``)."""
    seeds = _replicates(folder)
    checkpoint = load_checkpoint(folder / "pretrain" / seeds[0] / "checkpoints" / "last.ckpt")
    intrinsic, tasks, curves, evidence = [], [], [], []
    for seed in seeds:
        evaluation = json.loads((folder / "eval" / seed / "metrics.json").read_text())
        run_intrinsic, run_tasks = _scores(evaluation)
        intrinsic.append(run_intrinsic)
        tasks.append(run_tasks)
        with open(folder / "pretrain" / seed / "curves" / "validation.csv", newline="", encoding="utf-8") as f:
            curves.append([{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)])
        evidence.append(_evidence(folder / "eval" / seed, evaluation))
    encoder, pretraining = _parameters(checkpoint["hyper_parameters"]["config"])
    intrinsic_mean, intrinsic_spread = _mean_and_spread(intrinsic)
    averages = [{"average": sum(t.values()) / len(t)} for t in tasks if t]
    spread = intrinsic_spread | (_mean_and_spread(averages)[1] if len(averages) == len(tasks) else {})
    task_mean = _mean_and_spread(tasks)[0]
    evidence_all = Evidence.of_runs(evidence)
    return Run(folder.name, _factors(checkpoint), encoder, pretraining, intrinsic_mean, task_mean, curves,
               evidence_all, spread)  # fmt: skip


def collect(runs: Path) -> list[Run]:
    """Returns every variant under ``runs`` with at least one evaluated pretraining run, by name."""
    done = sorted(p for p in runs.iterdir() if p.is_dir() and _replicates(p))
    if not done:
        raise FileNotFoundError(
            f"{runs}: no variant folder with pretrain/seed-<n> and eval/seed-<n>/metrics.json; run the grid first"
        )
    return [_read_run(p) for p in done]


def _row(run: Run, task_names: list[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"variant": run.name, **run.factors}
    row.update(parameters=run.parameters, parameters_pretraining=run.parameters_pretraining)
    row["runs"] = len(run.curves)
    for k in ("mlm", "nsp", "sop"):
        row.update({f"{k}_accuracy": run.intrinsic.get(k), f"{k}_sd": run.spread.get(k)})
    row.update({t: run.tasks.get(t) for t in task_names})
    row.update(average=run.average, average_sd=run.spread.get("average"))
    return row


def tables(runs: list[Run], baseline: str = "baseline") -> dict[str, list[dict[str, Any]]]:
    """Groups runs as the paper's tables: each non-baseline run goes where the factors it changes belong."""
    task_names = sorted({t for r in runs for t in r.tasks})
    base = next((r for r in runs if r.name == baseline), runs[0])
    grouped: dict[str, list[dict[str, Any]]] = {}
    for title in dict.fromkeys(GROUPS.values()):
        members = [base] + [r for r in runs if r is not base and _group(r, base) == title]
        if len(members) > 1:
            grouped[title] = [_row(r, task_names) for r in members]
    grouped["All runs"] = [_row(r, task_names) for r in runs]
    return grouped


def _group(run: Run, base: Run) -> str:
    changed = [f for f in FACTORS if run.factors[f] != base.factors[f]]
    return GROUPS[changed[0]] if changed else "All runs"


def _markdown(rows: list[dict[str, Any]]) -> str:
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [
            f"{v:.3f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v) for v in row.values()
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _plot(runs: list[Run], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
    for run in runs:
        steps = [r["step"] for r in run.curves[0]]
        for axis, column in zip(axes, ("mlm_loss", "mlm_accuracy", "sop_accuracy"), strict=True):
            mean = np.mean([[r[column] for r in curve] for curve in run.curves], axis=0)  # the runs' steps agree
            axis.plot(steps, mean, marker=".", label=run.name)
            axis.set_title(f"validation {column}")
            axis.set_xlabel("optimizer step")
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    files.write_figure_atomically(path, figure, dpi=100)
    plt.close(figure)


@dataclass
class ReportConfig:
    """The ``report`` section of ablations/params.yaml; each field is also a ``--flag``."""

    runs: str = field(default="data/ablations/runs", metadata={"help": "folder holding one folder per run"})
    output: str = field(default="data/ablations", metadata={"help": "where to write the report"})
    baseline: str = field(default="baseline", metadata={"help": "the run the others differ from"})
    bootstrap_resamples: int = field(default=2000, metadata={"help": "resamples per downstream interval"})
    seed: int = field(default=0, metadata={"help": "seeds the bootstrap: the same intervals every run"})


# The grid's own params file, unless --params names another: the main params.yaml's top-level seed is the
# pipeline's, and parse_config would hand it to this command's --seed.
ABLATION_PARAMS = "ablations/params.yaml"


def _parse(argv: list[str] | None) -> ReportConfig:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not any(arg == "--params" or arg.startswith("--params=") for arg in argv):
        argv = ["--params", ABLATION_PARAMS, *argv]
    prog, description = "python -m albert_lightning.ablation_report", __doc__.split("\n")[0]
    return parse_config(argv, ReportConfig, "report", {}, description, prog=prog).config


def main(argv: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Writes report.md (findings first, then the tables), findings.json, report.csv and curves.png.

    Returns:
        The tables, and the checked findings under "Findings".
    """
    args = _parse(argv)
    runs = collect(Path(args.runs))
    grouped = tables(runs, args.baseline)
    evidence = {run.name: run.evidence for run in runs}
    findings = ablation_findings.check(evidence, resamples=args.bootstrap_resamples, seed=args.seed)
    text = ablation_findings.markdown(findings) + "\n"
    text += "\n\n".join(f"### {title}\n\n{_markdown(rows)}" for title, rows in grouped.items()) + "\n"
    table = io.StringIO()
    writer = csv.DictWriter(table, list(grouped["All runs"][0]))
    writer.writeheader()
    writer.writerows(grouped["All runs"])
    files.write_text_atomically(os.path.join(args.output, "findings.json"), json.dumps(findings, indent=2) + "\n")
    files.write_text_atomically(os.path.join(args.output, "report.md"), text)
    files.write_text_atomically(os.path.join(args.output, "report.csv"), table.getvalue())
    _plot(runs, os.path.join(args.output, "curves.png"))
    print(text)
    return {**grouped, "Findings": findings}


def command() -> None:
    """Runs the command line; an error is one line, its trace in a log (pipelines/runtime/commands.py)."""
    run_command(main, "ablation_report")
