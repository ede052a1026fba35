"""The runs of one classification or regression task (``evaluate_task``): per training-set size and seed, the
pretrained and the random-init start fine-tuned on the same examples, every dev (and one audited run's test)
prediction scored and written, and the learning rate chosen per start on a held slice of the training set.
Reading comprehension has its own runner (``reading/runner.py``), with a report entry of the same shape.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import lightning as L
import torch

from albert_lightning.evaluation.config import EvaluateConfig
from albert_lightning.evaluation.finetuning import (
    AlbertFineTuning,
    Encoder,
    make_loader,
    run_finetuning,
    show_run,
    starts,
)
from albert_lightning.evaluation.inputs import (
    TaskSplits,
)
from albert_lightning.evaluation.lr_selection import HeldSlice, choose_lrs
from albert_lightning.evaluation.metrics import compute_metrics, majority_baseline
from albert_lightning.evaluation.plan import finetuning_seeds, finetuning_steps, train_sizes, train_subset
from albert_lightning.evaluation.report import (
    SplitPredictions,
    summarise,
    write_clue_submission,
    write_predictions,
    write_submission,
)
from albert_lightning.evaluation.task_files import Example, label_ids
from albert_lightning.evaluation.task_resolution import SplitFile
from albert_lightning.evaluation.task_specs import TaskSpec
from albert_lightning.model import AlbertForPreTraining

__all__ = ["Encoded", "TaskData", "evaluate_task", "finetune", "load_task", "predict"]


Encoded = list[tuple[list[int], list[int], Any]]  # (input_ids, token_type_ids, label) per example


@dataclasses.dataclass
class TaskData:
    """One task, encoded once for all of its fine-tuning runs."""

    spec: TaskSpec
    train: Encoded
    devs: dict[str, Encoded]  # dev split name → examples
    tests: dict[str, Encoded]  # test split name → examples, label None where the file has none
    ids: dict[str, list]  # split → each example's id in its file (None without an id column)
    files: dict[str, SplitFile]  # split → where it was read from


def _encode(spec: TaskSpec, examples: list[Example], encoder: Encoder) -> tuple[Encoded, list]:
    labelled = all(e.label is not None for e in examples)  # GLUE's test files have no labels
    labels = label_ids(spec, examples) if labelled else [None] * len(examples)
    encoded = [(*encoder(e.text_a, e.text_b), label) for e, label in zip(examples, labels, strict=True)]
    return encoded, [e.id for e in examples]


def load_task(splits: TaskSplits, encoder: Encoder) -> TaskData:
    """Encodes every split of a task (``check_task``'s examples)."""
    spec = splits["train"][0].spec
    encoded = {split: _encode(file.spec, examples, encoder) for split, (file, examples) in splits.items()}
    devs = {split: encoded[split][0] for split in spec.eval_splits}
    tests = {split: rows for split, (rows, _) in encoded.items() if split != "train" and split not in devs}
    ids = {split: split_ids for split, (_, split_ids) in encoded.items()}
    files = {split: file for split, (file, _) in splits.items()}
    return TaskData(spec, encoded["train"][0], devs, tests, ids, files)


class _ScoredFineTuning(AlbertFineTuning):
    """Predicts logits rather than label ids: the predictions files give the predicted label's probability."""

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self(batch)


def finetune(
    network: AlbertForPreTraining,
    spec: TaskSpec,
    train: Encoded,
    steps: int,
    seed: int,
    config: EvaluateConfig,
    lr: float,
) -> tuple[L.Trainer, AlbertFineTuning]:
    """Fine-tunes a copy of ``network`` for ``steps`` at ``lr`` on ``train``; ``seed`` fixes classifier, dropout
    and order.

    ``network`` itself is left untouched, so one loaded checkpoint serves every run.
    """
    regression = spec.kind == "regression"
    return run_finetuning(
        lambda: _ScoredFineTuning(network, 1 if regression else len(spec.labels), lr=lr, total_steps=steps),
        make_loader(train, config.batch_size, regression, shuffle=True, seed=seed), steps, seed, config.devices,
    )  # fmt: skip


def predict(
    trainer: L.Trainer, module: AlbertFineTuning, spec: TaskSpec, examples: Encoded, config: EvaluateConfig
) -> SplitPredictions:
    """Returns the fine-tuned ``module``'s prediction (label id, or value) for each encoded example, and its score."""
    regression = spec.kind == "regression"
    # Labels play no part in predicting and test files have none: a placeholder lets every split share one loader.
    rows = [(ids, types, 0) for ids, types, _ in examples]
    loader = make_loader(rows, config.batch_size, regression, shuffle=False, seed=config.seed)
    logits = torch.cat(trainer.predict(module, loader)).float()
    if regression:
        return SplitPredictions(logits.tolist(), logits.tolist())
    labels = logits.argmax(-1)  # from the logits: rounding in softmax could tie two labels
    return SplitPredictions(labels.tolist(), logits.softmax(-1).gather(-1, labels[:, None])[:, 0].tolist())


def _slice_score(
    task: TaskData, config: EvaluateConfig, network: AlbertForPreTraining, part: HeldSlice, lr: float
) -> float:
    """The primary score on the held slice of ``network`` fine-tuned at ``lr`` on the rest of the training set
    (``lr_selection.choose_lrs``'s ``score``)."""
    spec, fit_rows, held_rows = task.spec, [task.train[i] for i in part.fit], [task.train[i] for i in part.held]
    steps = finetuning_steps(len(fit_rows), config.epochs, config.batch_size, config.min_steps, config.max_steps)
    trainer, module = finetune(network, spec, fit_rows, steps, part.seed, config, lr)
    predicted = predict(trainer, module, spec, held_rows, config).values
    score = compute_metrics(spec, predicted, [row[-1] for row in held_rows])[spec.primary]
    show_run(f"{spec.name}, choosing lr on {len(fit_rows)} examples", trainer, module, {f"held {spec.primary}": score})
    return score


def _score(spec: TaskSpec, rows: Encoded, predicted: SplitPredictions) -> float:
    return compute_metrics(spec, predicted.values, [row[-1] for row in rows])[spec.primary]


def evaluate_size(
    task: TaskData,
    size: int,
    pretrained: AlbertForPreTraining,
    config: EvaluateConfig,
    lrs: dict[str, float],
    audit: bool = False,
) -> tuple[dict[str, Any], dict[str, dict[str, list]], dict[str, SplitPredictions]]:
    """Fine-tunes every (seed, start) on ``size`` training examples, each start at its rate in ``lrs``.

    Returns:
        Each dev split's summary; each dev split's predictions: start → one list per seed, in seed order; and
        with ``audit``, the first seed's pretrained run's predictions on every dev and test split ({} without).
    """
    spec, seeds = task.spec, finetuning_seeds(config.seed, config.seeds)
    steps = finetuning_steps(size, config.epochs, config.batch_size, config.min_steps, config.max_steps)
    predictions: dict[str, dict[str, list]] = {split: {} for split in task.devs}
    audited: dict[str, SplitPredictions] = {}
    for seed in seeds:
        # The same subset and order for both starts: the gain is a paired comparison.
        train = [task.train[i] for i in train_subset(len(task.train), seed, spec.name, size)]
        for start, network in starts(pretrained, seed, config.random_baseline):
            trainer, module = finetune(network, spec, train, steps, seed, config, lrs[start])
            chosen = audit and not audited and start == "pretrained"
            splits = {**task.devs, **task.tests} if chosen else task.devs
            outputs = {split: predict(trainer, module, spec, rows, config) for split, rows in splits.items()}
            for split in task.devs:
                predictions[split].setdefault(start, []).append(outputs[split].values)
            scores = {f"{split} {spec.primary}": _score(spec, task.devs[split], outputs[split]) for split in task.devs}
            show_run(f"{spec.name}, {size} examples, seed {seeds.index(seed) + 1}/{len(seeds)}, {start}", trainer,
                     module, scores)  # fmt: skip
            if chosen:
                audited = outputs
    summaries = {
        split: summarise(
            spec, [d[-1] for d in task.devs[split]], starts, size, steps, config.bootstrap_resamples, config.seed
        )
        for split, starts in predictions.items()
    }
    return summaries, predictions, audited


def _write_predictions(
    task: TaskData,
    predictions: dict[str, dict[str, dict[str, list]]],
    audited: dict[str, SplitPredictions],
    output: str,
) -> None:
    """Writes every dev and test split's predictions file and, for GLUE's and CLUE's test splits, the
    leaderboard's file."""
    for split, rows in {**task.devs, **task.tests}.items():
        labels, ids = [row[-1] for row in rows], task.ids[split]
        path = Path(output) / "predictions" / task.spec.name / f"{split}.jsonl"
        write_predictions(path, task.spec, labels, predictions.get(split, {}), audited[split], ids)
        file = task.files[split]
        if file.submission_file is not None:
            write = write_clue_submission if file.spec.benchmark == "clue" else write_submission
            write(Path(output) / file.submission_folder / file.submission_file, file.spec, ids, audited[split].values)


def evaluate_task(
    splits: TaskSplits, config: EvaluateConfig, pretrained: AlbertForPreTraining, encoder: Encoder
) -> dict:
    """Returns, per dev split, the majority score and per training-set size the fine-tuned scores of one task.

    Also writes its predictions files (``_write_predictions``). Their ``prediction``/``score`` and the test
    splits' predictions come from one audited run: the pretrained start's first seed on the largest training set
    (every example when ``train_sizes`` holds 0): what a single usual fine-tuning is, and one of the runs behind
    the report's largest-size median. Fixed in advance, not the best seed, so its test scores are not cherry-picked.
    """
    task = load_task(splits, encoder)
    train_labels = [t[-1] for t in task.train]
    splits: dict[str, dict[str, Any]] = {
        split: {
            "examples": len(dev),
            "majority": majority_baseline(task.spec, train_labels, [d[-1] for d in dev]),
            "sizes": {},
        }
        for split, dev in task.devs.items()
    }
    predictions: dict[str, dict[str, dict[str, list]]] = {split: {} for split in task.devs}
    sizes = train_sizes(config.train_sizes, len(task.train))
    ids = [str(i) for i in range(len(task.train))]  # the examples named by position in the train file
    choices = choose_lrs(pretrained, config, ids, task.spec.name, functools.partial(_slice_score, task, config))
    lrs = {start: choice.lr for start, choice in choices.items()}
    for size in sizes:
        summaries, by_split, audited = evaluate_size(task, size, pretrained, config, lrs, audit=size == sizes[-1])
        for split, summary in summaries.items():
            splits[split]["sizes"][str(size)] = summary
            predictions[split][str(size)] = by_split[split]
    _write_predictions(task, predictions, audited, config.output)
    # kind and labels: what the ablation report needs to re-score the predictions files without the task folder
    return {
        "task": task.spec.name,
        "primary": task.spec.primary,
        "kind": task.spec.kind,
        "labels": list(task.spec.labels),
        "train_examples": len(task.train),
        "lr": {start: choice.to_json() for start, choice in choices.items()},
        "splits": splits,
    }
