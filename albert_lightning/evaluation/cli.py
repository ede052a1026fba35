"""What pretraining bought, with its noise: ``python -m albert_lightning.evaluate`` → ``data/eval/``.

For every configured task and training-set size (``train_sizes``: nested subsets, a learning curve), each of
``seeds`` fine-tuning seeds fine-tunes (a) the pretrained checkpoint and (b) random weights of the same shape on
the same examples in the same order; the report gives both starts' medians over seeds, the median gain with a
bootstrap interval over seeds and dev examples, and (c) the majority class (or train mean). Plus intrinsic
scores of the checkpoint on held-out shards (MLM accuracy, and SOP or NSP accuracy by the shards' kind: the
columns of the paper's Table 5). Tasks are the tasks stage's folder (``data/tasks``: each task it wrote, whatever
its name; ``inputs.expand_tasks``), task folders of your own, GLUE task names (GLUE's or Hugging Face's spelling)
read from ``glue_dir``, or reading comprehension (``reading/runner.py``): ``squad1``/``squad2`` from ``squad_dir``,
``race`` from ``race_dir`` and span tasks in SQuAD's layout (the embedded default's ``data/tasks/returns``). With
no task (a corpus without labels) the report says how to add one. Knobs: the ``evaluate`` section of
``params.yaml``, each also a ``--flag``.

Every input (vocabulary, checkpoint, every file of every task) is read before the first fine-tuning, and the
outputs (see ``report.py``) are rewritten after each task, so a failure keeps the tasks already done. Every
dev prediction of every run lands in ``predictions/<task>/<split>.jsonl``, so a score can be checked by hand and
runs compared pairwise; one audited run (``evaluate_task`` says which) also predicts the test splits, whose
predictions files and, for GLUE, leaderboard files (``glue_submission/``) it writes.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import lightning as L
import torch

from albert_lightning.evaluation.finetuning import (
    CHATTER,
    AlbertFineTuning,
    Encoder,
    make_loader,
    run_finetuning,
    show_run,
    starts,
)
from albert_lightning.evaluation.inputs import (
    TaskSplits,
    expand_tasks,
    load_checkpoint,
    no_task_note,
    read_leakage,
    read_task,
)
from albert_lightning.evaluation.intrinsic import intrinsic_scores
from albert_lightning.evaluation.lr_selection import HeldSlice, choose_lrs
from albert_lightning.evaluation.metrics import compute_metrics, majority_baseline
from albert_lightning.evaluation.plan import finetuning_seeds, finetuning_steps, train_sizes, train_subset
from albert_lightning.evaluation.reading.runner import ReadingTask, evaluate_reading_task
from albert_lightning.evaluation.report import (
    SplitPredictions,
    summarise,
    write_predictions,
    write_report,
    write_submission,
)
from albert_lightning.evaluation.task_files import Example, SplitFile, TaskSpec, label_ids
from albert_lightning.model import AlbertForPreTraining
from pipelines.commands import main as run_command
from pipelines.params import parse_config

__all__ = ["EvaluateConfig", "evaluate_task", "intrinsic_scores", "main", "read_leakage", "read_task"]


@dataclasses.dataclass
class EvaluateConfig:
    """The ``evaluate`` section of params.yaml; each field is also a ``--flag``."""

    tasks: list[str] = dataclasses.field(
        default_factory=lambda: ["data/tasks"],
        metadata={"help": "the tasks stage's folder (its every task), task folders, GLUE names, squad1/2, race"},
    )
    glue_dir: str | None = dataclasses.field(
        default=None, metadata={"help": "folder of GLUE's task folders, which names like CoLA are read from"}
    )
    checkpoint: str = dataclasses.field(
        default="data/pretrain/checkpoints/last.ckpt",
        metadata={"help": "pretrained checkpoint (or HF folder) to fine-tune"},
    )
    spiece: str = dataclasses.field(
        default="data/vocab/spiece.model", metadata={"help": "SentencePiece model the checkpoint was pretrained with"}
    )
    shards: list[str] = dataclasses.field(
        default_factory=lambda: ["data/eval_shards/sop", "data/eval_shards/nsp"],
        metadata={"help": "held-out shards scored for MLM and SOP/NSP accuracy"},
    )
    output: str = dataclasses.field(
        default="data/eval", metadata={"help": "folder for the report, metrics.json and every run's predictions"}
    )
    leakage: str | None = dataclasses.field(
        default=None, metadata={"help": "the leakage stage's metrics.json, shown beside the scores"}
    )
    max_seq_length: int = dataclasses.field(
        default=128, metadata={"help": "pieces per fine-tuning example, special tokens included"}
    )
    batch_size: int = dataclasses.field(default=32, metadata={"help": "examples per fine-tuning and scoring batch"})
    epochs: float = dataclasses.field(
        default=3.0,
        metadata={"help": "passes over the training set per fine-tuning run, within the step floor and cap"},
    )
    min_steps: int = dataclasses.field(
        default=30,
        metadata={"help": "floor of steps per fine-tuning run: 32 examples are one batch, too few steps to learn"},
    )
    max_steps: int = dataclasses.field(
        default=300, metadata={"help": "cap of steps per fine-tuning run (CPU budget); -1 for none"}
    )
    lrs: list[float] = dataclasses.field(
        default_factory=lambda: [1e-4],
        metadata={"help": "fine-tuning learning rates; each start uses the best on a held-out slice, one skips that"},
    )
    lr_selection_fraction: float = dataclasses.field(
        default=0.2, metadata={"help": "share of the training examples held out to choose the rate on"}
    )
    seed: int = dataclasses.field(
        default=12345, metadata={"help": "seed of the fine-tuning seeds, training subsets and bootstrap resamples"}
    )
    seeds: int = dataclasses.field(default=3, metadata={"help": "fine-tuning seeds per task and training-set size"})
    train_sizes: list[int] = dataclasses.field(
        default_factory=lambda: [32, 128, 512, 0],
        metadata={"help": "nested training-set sizes (a learning curve); 0: every example"},
    )
    bootstrap_resamples: int = dataclasses.field(
        default=2000, metadata={"help": "resamples of (seeds, dev examples) for the gain's interval"}
    )
    devices: int = dataclasses.field(default=1, metadata={"help": "devices each fine-tuning run is sharded over"})
    intrinsic_batches: int = dataclasses.field(
        default=20, metadata={"help": "held-out batches scored per shards folder"}
    )
    random_baseline: bool = dataclasses.field(
        default=True, metadata={"help": "also fine-tune a random model of the same shape (grids may skip it)"}
    )
    squad_dir: str | None = dataclasses.field(
        default=None, metadata={"help": "folder of SQuAD's official files (tasks squad1, squad2)"}
    )
    race_dir: str | None = dataclasses.field(default=None, metadata={"help": "folder of the RACE data (task race)"})
    doc_stride: int = dataclasses.field(
        default=128, metadata={"help": "context pieces between reading windows' starts (the reference's)"}
    )
    max_query_length: int = dataclasses.field(default=64, metadata={"help": "question pieces kept (the reference's)"})
    max_answer_length: int = dataclasses.field(
        default=30, metadata={"help": "pieces in a decoded answer (the reference's)"}
    )
    n_best_size: int = dataclasses.field(
        default=20, metadata={"help": "answer starts and ends tried per window (the reference's)"}
    )


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


# The folders of the runs' outputs: every dev (and audited test) prediction, and each span task's fine-tuned
# network as a Hugging Face folder.
OUTPUT_FOLDERS = ("predictions", "finetuned")


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
    """Writes every dev and test split's predictions file and, for GLUE's test splits, the leaderboard's file."""
    for split, rows in {**task.devs, **task.tests}.items():
        labels, ids = [row[-1] for row in rows], task.ids[split]
        path = Path(output) / "predictions" / task.spec.name / f"{split}.jsonl"
        write_predictions(path, task.spec, labels, predictions.get(split, {}), audited[split], ids)
        submission = task.files[split].submission_file
        if submission is not None:
            write_submission(Path(output) / "glue_submission" / submission, task.spec, ids, audited[split].values)


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


def _parse(argv: list[str] | None) -> EvaluateConfig:
    # The stages' own reader: flags over params.yaml's `evaluate` section over the defaults; unknown keys refused.
    prog, description = "python -m albert_lightning.evaluate", __doc__.split("\n")[0]
    config = parse_config(argv, EvaluateConfig, "evaluate", {}, description, prog=prog).config
    if not config.train_sizes:
        raise ValueError("evaluate.train_sizes is empty: give at least one size (0 for every example)")
    return config


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Runs every task and the intrinsic scores; writes the outputs and returns ``metrics.json``'s content."""
    config = _parse(argv)
    # Every input is read before the long work, so a bad one fails in seconds, not after hours of earlier tasks.
    pretrained, encoder = load_checkpoint(config)  # once: fine-tuning copies its weights and leaves it as it was
    names, reasons = expand_tasks(config.tasks)
    tasks = [read_task(name, config) for name in names]
    report = {
        "checkpoint": config.checkpoint,
        "seeds": finetuning_seeds(config.seed, config.seeds),
        "intrinsic": {
            Path(shards).name: intrinsic_scores(pretrained, shards, config.intrinsic_batches, config.batch_size)
            for shards in config.shards
        },
        "tasks": {},
    }
    if not names:  # no error: the intrinsic scores and leakage still describe the checkpoint
        report["no_tasks"] = no_task_note(reasons)
    if config.leakage:
        report["leakage"] = read_leakage(config.leakage)
    table = write_report(report, config.output)
    for folder in OUTPUT_FOLDERS:  # there even when no task writes into it: dvc.yaml declares each one
        (Path(config.output) / folder).mkdir(parents=True, exist_ok=True)
    for task in tasks:
        if isinstance(task, ReadingTask):
            result = evaluate_reading_task(task, config, pretrained, encoder)
        else:
            result = evaluate_task(task, config, pretrained, encoder)
        report["tasks"][result["task"]] = result
        table = write_report(report, config.output)  # after every task: a later failure keeps these scores
    print(table)
    return report


def command() -> None:
    """Runs the command line; an error is one line, its trace in a log (pipelines/commands.py)."""
    run_command(main, "evaluate", chatter=CHATTER)  # Lightning's output to the log; a line per run here
