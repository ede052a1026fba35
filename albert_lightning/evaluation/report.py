"""The evaluation's outputs: per-size summaries over seeds, ``metrics.json``, ``report.md`` and the learning curve.

``summarise`` turns the dev predictions of every (seed, start) into medians over seeds, the per-seed primary
scores and the median gain with its bootstrap interval (``intervals.py``). ``write_report`` writes
``metrics.json`` (what ``dvc metrics show`` lists and ``ablations/report.py`` reads), ``report.md``,
``learning_curve.csv`` (``dvc plots show``) and ``learning_curve.png``. Numbers are rounded to 4 decimals so
the files are stable. ``write_predictions`` and ``read_predictions`` are both sides of the per-example
predictions files (``predictions/<task>/<split>.jsonl``), which the ablation report pairs runs on;
``write_submission`` writes a GLUE leaderboard file, ``write_clue_submission`` a CLUE one. Every file is renamed
into place whole. No torch.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from albert_lightning.evaluation.intervals import GainInterval, median_gain_interval
from albert_lightning.evaluation.metrics import compute_metrics
from albert_lightning.evaluation.task_specs import TaskSpec
from pipelines.runtime import files

__all__ = [
    "ACROSS_RUNS",
    "STARTS",
    "DevPredictions",
    "SplitPredictions",
    "curve_rows",
    "markdown_table",
    "read_predictions",
    "read_question_scores",
    "round_score",
    "rounded_gain",
    "summarise",
    "text_writer",
    "write_all_atomically",
    "write_clue_submission",
    "write_json_lines",
    "write_predictions",
    "write_report",
    "write_submission",
]

STARTS = ("pretrained", "random_init")
# Under every gain table: what its intervals leave out, and where the figures that include it are.
ACROSS_RUNS = (
    "These intervals resample the fine-tuning seeds and dev examples of this one pretraining run; another run of "
    "the same pretraining can land outside them (docs/reproducibility.md). data/replicates/report/report.md gives "
    "each gain with an interval over pretraining runs too (`dvc repro replicates/dvc.yaml`)."
)
DIGITS = 4
PREDICTION_DIGITS = 6  # regression predictions: far below any score's 4th decimal, and short lines


def round_score(value: float) -> float:
    """A score as reports print it: DIGITS decimals, never -0.0."""
    return round(float(value), DIGITS) + 0.0  # + 0.0: -0.0 would print as "-0.0"


def rounded_gain(gain: GainInterval) -> dict[str, float]:
    """An ``intervals.median_gain_interval`` result as the report holds it."""
    return {"median": round_score(gain.median), "low": round_score(gain.low), "high": round_score(gain.high)}


def write_all_atomically(writers: dict[Path, Callable[[BinaryIO], None]]) -> None:
    """Has each writer write its file through ``files.open_atomically``, all of them open at once, so that the
    renames into place come only after every file is written.

    A reader never sees half a file, and a failure before the renames (a report that cannot be drawn, a full
    disk) leaves the previous files as they were: after a crash the folder holds the last complete results.
    """
    with contextlib.ExitStack() as stack:
        for path, write in writers.items():
            write(stack.enter_context(files.open_atomically(os.fspath(path))))


def text_writer(text: str) -> Callable[[BinaryIO], None]:
    """A writer for ``write_all_atomically`` of ``text``, UTF-8, written as built (no line-end translation)."""
    return lambda f: f.write(text.encode("utf-8"))


def summarise(
    spec: TaskSpec,
    references: Sequence,
    predictions: dict[str, list[list]],
    train_examples: int,
    steps: int,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """Summarises one task, dev split and training-set size over its fine-tuning seeds.

    Args:
        spec: The task.
        references: The dev labels.
        predictions: Start ("pretrained", "random_init") → one list of dev predictions per seed, seeds in the
            same order for every start.
        train_examples: Examples each run trained on.
        steps: Optimizer steps of each run.
        resamples: Bootstrap resamples for the gain's interval.
        seed: Seeds the bootstrap generator.

    Returns:
        Per start the median over seeds of every metric, the per-seed primary scores under ``seeds``, and with
        both starts the median gain of the primary metric and its 95% interval under ``gain``.
    """
    summary: dict[str, Any] = {"train_examples": train_examples, "steps": steps, "seeds": {}}
    for start, rows in predictions.items():
        scores = [compute_metrics(spec, row, references) for row in rows]
        summary[start] = {m: round_score(np.median([s[m] for s in scores])) for m in spec.metrics}
        summary["seeds"][start] = [round_score(s[spec.primary]) for s in scores]
    if all(start in predictions for start in STARTS):
        # Accuracy is a per-example mean, which the bootstrap computes vectorised; other metrics are recomputed.
        metric = None if spec.primary == "accuracy" else lambda p, r: compute_metrics(spec, p, r)[spec.primary]
        arrays = [np.asarray(predictions[start]) for start in STARTS]
        gain = median_gain_interval(*arrays, np.asarray(references), metric, resamples, seed)
        summary["gain"] = rounded_gain(gain)
    return summary


@dataclass(frozen=True)
class DevPredictions:
    """One predictions file: the gold labels, and start → train size → one list of predictions per seed."""

    labels: list  # [N] label strings, or scores for regression
    starts: dict[str, dict[str, list[list]]]  # "pretrained" → "512" → [S][N]


@dataclass(frozen=True)
class SplitPredictions:
    """One fine-tuned model's outputs on one split, per example: its prediction and the score behind it."""

    values: list  # label ids, or values for regression
    scores: list[float]  # the predicted label's probability; for regression the value itself


def _value(spec: TaskSpec, value: Any) -> str | float | None:
    """A label id as its label string, a regression score as a rounded float: what a reader can check by eye."""
    if value is None:  # an unlabelled test example
        return None
    if spec.kind == "regression":
        return round(float(value), PREDICTION_DIGITS)
    return spec.labels[int(value)]


def write_predictions(
    path: str | Path,
    spec: TaskSpec,
    references: Sequence,
    predictions: dict[str, dict[str, list[list]]],
    audited: SplitPredictions,
    ids: Sequence | None = None,
) -> None:
    """Writes one line per example of a split, in file order: the audited run's prediction and every run's.

    A line is ``{"index": i, "id": the file's id or null, "label": gold or null, "prediction": p, "score": s,
    "pretrained": {"<train size>": [one per seed]}, "random_init": {...}}``. ``prediction`` and ``score`` are the
    audited run's (``evaluation/runner.py`` says which run that is); the per-start entries hold every run that was
    scored on the split (dev splits; none for test splits, which only the audited run predicts). ``index`` is the
    example's position among the split's data rows.

    Args:
        path: The ``.jsonl`` file; its folder is created.
        spec: The task: label ids are written as its label strings.
        references: The gold label ids (or scores) [N], None where the file has no label.
        predictions: Train size → start → one list of N predictions per seed, seeds in the same order.
        audited: The audited run's predictions and scores [N].
        ids: Each example's id in its file [N] (None without an id column); all None if not given.
    """
    starts = [s for s in STARTS if any(s in by_start for by_start in predictions.values())]
    lines = []
    for i, gold in enumerate(references):
        line: dict[str, Any] = {"index": i, "id": None if ids is None else ids[i], "label": _value(spec, gold)}
        line["prediction"] = _value(spec, audited.values[i])
        line["score"] = round(float(audited.scores[i]), PREDICTION_DIGITS)
        for start in starts:
            line[start] = {
                size: [_value(spec, row[i]) for row in by_start[start]] for size, by_start in predictions.items()
            }
        lines.append(json.dumps(line) + "\n")
    files.write_text_atomically(os.fspath(path), "".join(lines))


def write_submission(path: str | Path, spec: TaskSpec, ids: Sequence, values: Sequence) -> None:
    """Writes a GLUE leaderboard file: ``index\tprediction``, then per test example in file order its index (the
    file's own, or its position without one) and its label string (a float for STS-B)."""
    rows = [f"{i if example_id is None else example_id}\t{_value(spec, v)}" for i, (example_id, v) in
            enumerate(zip(ids, values, strict=True))]  # fmt: skip
    files.write_text_atomically(os.fspath(path), "\n".join(["index\tprediction", *rows]) + "\n")


def write_clue_submission(path: str | Path, spec: TaskSpec, ids: Sequence, values: Sequence) -> None:
    """Writes a CLUE leaderboard file of a classification task: per test example, in file order, one line
    ``{"id": <the file's id, or its position without one>, "label": "<label string>"}``."""
    rows = [{"id": i if example_id is None else example_id, "label": _value(spec, v)} for i, (example_id, v) in
            enumerate(zip(ids, values, strict=True))]  # fmt: skip
    write_json_lines(path, rows)


def write_json_lines(path: str | Path, rows: Sequence[dict[str, Any]]) -> None:
    """Writes ``rows`` one JSON object a line, Chinese and other non-ASCII text as itself (what CLUE's files do)."""
    files.write_text_atomically(os.fspath(path), "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def read_predictions(path: str | Path) -> DevPredictions:
    """Reads a file ``write_predictions`` wrote back into per-seed rows.

    Raises:
        ValueError: The lines are not in index order, or a line's runs differ from the first line's.
    """
    labels: list = []
    starts: dict[str, dict[str, list[list]]] = {}
    with open(path, encoding="utf-8") as f:
        for i, text in enumerate(f):
            line = json.loads(text)
            if line["index"] != i:
                raise ValueError(f"{path}, line {i + 1}: index {line['index']}; expected {i} (dev order)")
            labels.append(line["label"])
            for start in STARTS:
                for size, seeds in line.get(start, {}).items():
                    rows = starts.setdefault(start, {}).setdefault(size, [[] for _ in seeds])
                    if len(rows) != len(seeds):
                        raise ValueError(f"{path}, line {i + 1}: {len(seeds)} seeds for {start} {size}")
                    for row, value in zip(rows, seeds, strict=True):
                        row.append(value)
    return DevPredictions(labels, starts)


def read_question_scores(path: str | Path) -> dict[str, dict[str, list[list[float]]]]:
    """Reads a reading task's ``dev.jsonl`` (``reading/runner.py``) back into start → train size → per seed the
    primary score of each question, in file order.

    Raises:
        ValueError: A line's runs differ from the first line's, or no line has per-seed scores.
    """
    starts: dict[str, dict[str, list[list[float]]]] = {}
    with open(path, encoding="utf-8") as f:
        for i, text in enumerate(f):
            line = json.loads(text)
            for start in STARTS:
                for size, seeds in line.get(start, {}).items():
                    rows = starts.setdefault(start, {}).setdefault(size, [[] for _ in seeds])
                    if len(rows) != len(seeds) or any(len(row) != i for row in rows):
                        raise ValueError(f"{path}, line {i + 1}: {len(seeds)} seeds for {start} {size}")
                    for row, value in zip(rows, seeds, strict=True):
                        row.append(float(value))
    if not starts:
        raise ValueError(f"{path}: no per-seed question scores (written before they were recorded?)")
    return starts


def _splits(report: dict[str, Any]):
    """Yields (task, split, primary metric, split summary) per task and dev split."""
    for name, task in report["tasks"].items():
        for split, scores in task["splits"].items():
            yield name, split, task["primary"], scores


def markdown_table(report: dict[str, Any]) -> str:
    """Returns the report as Markdown: a row per task, dev split and training-set size, then intrinsic scores;
    without tasks, ``no_tasks`` (why there is none and how to add one) in place of the task rows."""
    lines = [
        "| task | split | metric | train examples | pretrained (median) | random init (median) | gain [95% CI] "
        "| baseline |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if "no_tasks" in report:
        lines = [f"No downstream task: {report['no_tasks']}"]
    for name, split, metric, scores in _splits(report):
        for size in scores["sizes"].values():
            cells = [f"{size[s][metric]:.3f}" if s in size else "-" for s in STARTS]
            gain = size.get("gain")
            cells.append(f"{gain['median']:+.3f} [{gain['low']:+.3f}, {gain['high']:+.3f}]" if gain else "-")
            cells.append(f"{scores['majority'][metric]:.3f}")
            where = f"{split} ({scores['examples']})"
            lines.append(f"| {name} | {where} | {metric} | {size['train_examples']} | {' | '.join(cells)} |")
    if any("gain" in size for *_, scores in _splits(report) for size in scores["sizes"].values()):
        lines += ["", ACROSS_RUNS]
    lines += [
        "",
        "| held-out shards | kind | MLM accuracy | most frequent token | MLM per whole word | sentence-pair accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for name, scores in report["intrinsic"].items():
        pair = scores[f"{scores['kind']}_accuracy"]
        # The accuracy a model that learnt only word frequencies gets: MLM accuracy means little below it.
        frequent = scores.get("mlm_most_frequent_accuracy")
        frequent_cell = "-" if frequent is None else f"{frequent:.3f}"
        word = scores.get("mlm_word_accuracy")  # every masked piece of a word right (older reports lack it)
        word_cell = "-" if word is None else f"{word:.3f}"
        cells = f"{scores['mlm_accuracy']:.3f} | {frequent_cell} | {word_cell} | {pair:.3f}"
        lines.append(f"| {name} | {scores['kind']} | {cells} |")
    if "leakage" in report:
        lines += ["", *leakage_lines(report["leakage"])]
    return "\n".join(lines) + "\n"


def leakage_lines(leakage: dict[str, Any]) -> list[str]:
    """The leakage stage's metrics as a Markdown table: how much of what is scored the model trained on."""
    lines = ["| leakage (pipelines/leakage.py) | seen in training | of |", "|---|---|---|"]
    for name in ("sentences", "sentences_before_dedup"):
        if name in leakage:
            counts = leakage[name]
            when = " before dedup" if name.endswith("dedup") else ""
            # Sentences long enough to identify a passage (the dedup stage's floor), then every sentence.
            for kind, what in (("passage", f"of ≥ {counts['passage_words']} words"), ("all", "of any length")):
                share, seen = counts[f"{kind}_share_seen"], counts[f"{kind}_seen_in_training"]
                lines.append(f"| held-out sentences {what}{when} | {share:.2%} ({seen}) "
                             f"| {counts[f'{kind}_held_out_sentences']} |")  # fmt: skip
    for task, splits in sorted(leakage["tasks"].items()):
        for split, counts in sorted(splits.items()):
            lines.append(f"| {task} {split} documents in the training shards | {counts['in_training_shards']} "
                         f"| {counts['documents']} |")  # fmt: skip
    return lines


def curve_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The learning curve: per task and training-set size, each start's median primary score and the majority."""
    rows = []
    for name, split, metric, scores in _splits(report):
        for size in scores["sizes"].values():
            row = {"task": name if split == "dev" else f"{name} {split}", "train_examples": size["train_examples"]}
            row.update({s: size[s][metric] if s in size else "" for s in STARTS})
            rows.append({**row, "majority": round_score(scores["majority"][metric])})
    return rows


def _plot(report: dict[str, Any], out: BinaryIO) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI or under dvc repro
    import matplotlib.pyplot as plt

    panels = list(_splits(report))
    figure, axes = plt.subplots(1, max(len(panels), 1), figsize=(5 * max(len(panels), 1), 4), squeeze=False)
    for axis, (name, split, metric, scores) in zip(axes[0], panels, strict=False):
        sizes = list(scores["sizes"].values())
        x = [s["train_examples"] for s in sizes]
        for start, colour in zip(STARTS, ("tab:blue", "tab:orange"), strict=True):
            if start not in sizes[0]:
                continue
            axis.plot(x, [s[start][metric] for s in sizes], color=colour, marker="o", label=f"{start} (median)")
            for n, size in zip(x, sizes, strict=True):
                axis.scatter([n] * len(size["seeds"][start]), size["seeds"][start], color=colour, s=12, alpha=0.5)
        baseline = scores.get("baseline", "majority")  # reading tasks name their model-free baseline
        axis.axhline(scores["majority"][metric], color="grey", linestyle="--", label=baseline)
        axis.set(xscale="log", title=f"{name} ({split})", xlabel="train examples", ylabel=f"dev {metric}")
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(out, dpi=100, format="png")  # format: a file object has no suffix to take it from
    plt.close(figure)


def write_report(report: dict[str, Any], output: str) -> str:
    """Writes metrics.json, report.md, learning_curve.csv and learning_curve.png to ``output``; returns report.md.

    The four files are replaced together (``write_all_atomically``): ``evaluate`` rewrites them after every task, and a
    failure while writing leaves the previous complete set.
    """
    table = markdown_table(report)
    curve = io.StringIO()
    writer = csv.DictWriter(curve, ["task", "train_examples", *STARTS, "majority"])
    writer.writeheader()
    writer.writerows(curve_rows(report))
    folder = Path(output)
    write_all_atomically({
        folder / "metrics.json": text_writer(json.dumps(report, indent=2, sort_keys=True) + "\n"),
        folder / "report.md": text_writer(table),
        folder / "learning_curve.csv": text_writer(curve.getvalue()),
        folder / "learning_curve.png": lambda f: _plot(report, f),
    })  # fmt: skip
    return table
