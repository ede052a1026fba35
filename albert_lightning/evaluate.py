"""What pretraining bought, with its noise: ``python -m albert_lightning.evaluate`` → ``data/eval/``.

For every configured task and training-set size (``train_sizes``: nested subsets, a learning curve), each of
``seeds`` fine-tuning seeds fine-tunes (a) the pretrained checkpoint and (b) random weights of the same shape on
the same examples in the same order; the report gives both starts' medians over seeds, the median gain with a
bootstrap interval over seeds and dev examples, and (c) the majority class (or train mean). Plus intrinsic
scores of the checkpoint on held-out shards (MLM accuracy, and SOP or NSP accuracy by the shards' kind: the
columns of the paper's Table 5). Tasks are folders in the generic task format (the embedded default's
``data/tasks/*``, or your own) or GLUE task names read from ``glue_dir``. Knobs: the ``evaluate`` section of
``params.yaml``, each also a ``--flag``. Outputs: see ``eval_report.py``; every dev prediction of every run
lands in ``predictions/<task>/<split>.jsonl``, so a score can be checked by hand and runs compared pairwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections import Counter
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml

from albert_lightning.eval_report import summarise, write_predictions, write_report
from albert_lightning.finetuning import AlbertFineTuning, Encoder, load_encoder, make_loader, random_encoder
from albert_lightning.metrics import majority_baseline
from albert_lightning.model import AlbertForPreTraining
from albert_lightning.shard_loader import ShardDataset, collate
from albert_lightning.sharding import FSDP2Strategy
from albert_lightning.subsets import finetuning_seeds, finetuning_steps, random_init_seed, train_sizes, train_subset
from albert_lightning.tasks import GLUE_TASKS, TaskSpec, generic_task, label_ids, load_split
from pipelines.commands import main as run_command

__all__ = ["EvaluateConfig", "evaluate_task", "intrinsic_scores", "main"]


@dataclasses.dataclass
class EvaluateConfig:
    tasks: list[str] = dataclasses.field(default_factory=lambda: ["data/tasks/package", "data/tasks/same_module"])
    glue_dir: str | None = None  # where GLUE's task folders are; names in `tasks` like "CoLA" are read from it
    checkpoint: str = "data/pretrain/checkpoints/last.ckpt"
    spiece: str = "data/vocab/spiece.model"
    # held-out shards to score: the SOP ones and the same documents as NSP pairs (paper Table 5's columns)
    shards: list[str] = dataclasses.field(default_factory=lambda: ["data/eval_shards/sop", "data/eval_shards/nsp"])
    output: str = "data/eval"
    max_seq_length: int = 128
    batch_size: int = 32
    epochs: float = 3.0
    min_steps: int = 30  # floor per fine-tuning run: a 32-example set is one batch, too few steps to learn
    max_steps: int = 300  # cap per fine-tuning run (CPU budget); -1 for none
    lr: float = 1e-4
    seed: int = 12345
    seeds: int = 3  # fine-tuning seeds per task and size, derived from `seed`
    train_sizes: list[int] = dataclasses.field(default_factory=lambda: [32, 128, 512, 0])  # 0: every example
    bootstrap_resamples: int = 2000  # resamples of (seeds, dev examples) for the gain's interval
    devices: int = 1
    intrinsic_batches: int = 20
    random_baseline: bool = True  # also fine-tune a random model of the same shape (ablation grids may skip it)


Encoded = list[tuple[list[int], list[int], Any]]  # (input_ids, token_type_ids, label) per example


@dataclasses.dataclass
class TaskData:
    """One task, encoded once for all of its fine-tuning runs."""

    spec: TaskSpec
    train: Encoded
    devs: dict[str, Encoded]  # dev split name → examples


def _task(name: str, config: EvaluateConfig) -> tuple[TaskSpec, Path]:
    if name in GLUE_TASKS:
        if config.glue_dir is None:
            raise ValueError(f"task {name!r} is a GLUE task: set evaluate.glue_dir to the folder holding {name}/")
        return GLUE_TASKS[name], Path(config.glue_dir) / name
    return generic_task(name), Path(name)


def _encode(spec: TaskSpec, folder: Path, split: str, encoder: Encoder) -> Encoded:
    examples = load_split(spec, folder, split)
    labels = label_ids(spec, examples)
    return [(*encoder(e.text_a, e.text_b), label) for e, label in zip(examples, labels, strict=True)]


def load_task(name: str, config: EvaluateConfig, encoder: Encoder) -> TaskData:
    """Reads and encodes a task's train and dev splits."""
    spec, folder = _task(name, config)
    devs = {split: _encode(spec, folder, split, encoder) for split in spec.eval_splits}
    return TaskData(spec, _encode(spec, folder, "train", encoder), devs)


def _trainer(config: EvaluateConfig, max_steps: int) -> L.Trainer:
    return L.Trainer(
        accelerator="auto",
        devices=config.devices,
        strategy=FSDP2Strategy(),
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        use_distributed_sampler=False,
        num_sanity_val_steps=0,
    )


def finetune(
    network: AlbertForPreTraining, spec: TaskSpec, train: Encoded, steps: int, seed: int, config: EvaluateConfig
) -> tuple[L.Trainer, AlbertFineTuning]:
    """Fine-tunes a copy of ``network`` for ``steps`` on ``train``; ``seed`` fixes classifier, dropout and order.

    ``network`` itself is left untouched, so one loaded checkpoint serves every run.
    """
    # Adam's second moments and some activations underflow into subnormal floats, which x86 CPUs compute many
    # times slower: 30 steps of the small preset on one thread took 2.5 s a step with them, 1.25 s flushed.
    torch.set_flush_denormal(True)
    L.seed_everything(seed, verbose=False)  # before the classifier is drawn: its init and dropout follow the seed
    regression = spec.kind == "regression"
    loader = make_loader(train, config.batch_size, regression, shuffle=True, seed=seed)
    module = AlbertFineTuning(network, 1 if regression else len(spec.labels), lr=config.lr, total_steps=steps)
    trainer = _trainer(config, steps)
    trainer.fit(module, train_dataloaders=loader)
    return trainer, module


def predict(trainer: L.Trainer, module: AlbertFineTuning, spec: TaskSpec, dev: Encoded, config: EvaluateConfig):
    """Returns the fine-tuned ``module``'s predictions (label ids or scores) on the encoded ``dev`` examples."""
    loader = make_loader(dev, config.batch_size, spec.kind == "regression", shuffle=False, seed=config.seed)
    return torch.cat(trainer.predict(module, loader)).tolist()


def _starts(pretrained: AlbertForPreTraining, seed: int, config: EvaluateConfig):
    yield "pretrained", pretrained
    if config.random_baseline:
        yield "random_init", random_encoder(pretrained.config, random_init_seed(seed))


def evaluate_size(
    task: TaskData, size: int, pretrained: AlbertForPreTraining, config: EvaluateConfig
) -> tuple[dict[str, Any], dict[str, dict[str, list]]]:
    """Fine-tunes every (seed, start) on ``size`` training examples.

    Returns:
        Each dev split's summary, and each dev split's predictions: start → one list per seed, in seed order.
    """
    spec, seeds = task.spec, finetuning_seeds(config.seed, config.seeds)
    steps = finetuning_steps(size, config.epochs, config.batch_size, config.min_steps, config.max_steps)
    predictions: dict[str, dict[str, list]] = {split: {} for split in task.devs}
    for seed in seeds:
        # The same subset and order for both starts: the gain is a paired comparison.
        train = [task.train[i] for i in train_subset(len(task.train), seed, spec.name, size)]
        for start, network in _starts(pretrained, seed, config):
            trainer, module = finetune(network, spec, train, steps, seed, config)
            for split, dev in task.devs.items():
                predictions[split].setdefault(start, []).append(predict(trainer, module, spec, dev, config))
    summaries = {
        split: summarise(
            spec, [d[-1] for d in task.devs[split]], starts, size, steps, config.bootstrap_resamples, config.seed
        )
        for split, starts in predictions.items()
    }
    return summaries, predictions


def evaluate_task(name: str, config: EvaluateConfig, pretrained: AlbertForPreTraining, encoder: Encoder) -> dict:
    """Returns, per dev split, the majority score and per training-set size the fine-tuned scores of one task."""
    task = load_task(name, config, encoder)
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
    for size in train_sizes(config.train_sizes, len(task.train)):
        summaries, by_split = evaluate_size(task, size, pretrained, config)
        for split, summary in summaries.items():
            splits[split]["sizes"][str(size)] = summary
            predictions[split][str(size)] = by_split[split]
    for split, by_size in predictions.items():
        folder = Path(config.output) / "predictions" / task.spec.name
        write_predictions(folder / f"{split}.jsonl", task.spec, [d[-1] for d in task.devs[split]], by_size)
    # kind and labels: what the ablation report needs to re-score the predictions files without the task folder
    return {
        "task": task.spec.name,
        "primary": task.spec.primary,
        "kind": task.spec.kind,
        "labels": list(task.spec.labels),
        "train_examples": len(task.train),
        "splits": splits,
    }


@torch.no_grad()
def intrinsic_scores(model: AlbertForPreTraining, shards: str, batches: int, batch_size: int) -> dict[str, Any]:
    """MLM accuracy and sentence-pair accuracy of ``model`` on the validation split of ``shards``.

    Returns:
        The accuracies with the counts behind them (``mlm_correct`` of ``mlm_predictions`` masked tokens,
        ``pair_correct`` of ``pairs``: what a proportion's interval needs), and ``mlm_most_frequent_accuracy``,
        the accuracy of always answering the most frequent masked token of the scored rows (``mlm_most_frequent_id``):
        no constant guess does better, so it is what a model that learnt only word frequencies scores.
    """
    dataset = ShardDataset(shards, "validation")
    model.eval()
    correct = masked = pair_correct = pairs = 0
    targets: Counter[int] = Counter()
    for start in range(0, min(len(dataset), batches * batch_size), batch_size):
        batch = collate([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
        out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["masked_lm_positions"])
        real = batch["masked_lm_ids"] != -100
        correct += int((out.prediction_logits.argmax(-1) == batch["masked_lm_ids"])[real].sum())
        masked += int(real.sum())
        targets.update(batch["masked_lm_ids"][real].tolist())
        pair_correct += int((out.sop_logits.argmax(-1) == batch["sentence_order_label"]).sum())
        pairs += len(batch["index"])
    kind = dataset.manifest.params["inter_sentence"]
    # most_common breaks ties by first occurrence: the same id on every run over the same rows
    frequent_id, frequent_count = targets.most_common(1)[0] if targets else (None, 0)
    return {
        "shards": shards,
        "kind": kind,
        "mlm_accuracy": correct / max(masked, 1),
        f"{kind}_accuracy": pair_correct / max(pairs, 1),
        "mlm_correct": correct,
        "mlm_predictions": masked,
        "pair_correct": pair_correct,
        "pairs": pairs,
        "mlm_most_frequent_accuracy": frequent_count / max(masked, 1),
        "mlm_most_frequent_id": frequent_id,
    }


def _parse_bool(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() in ("true", "1")


def _parse(argv: list[str] | None) -> EvaluateConfig:
    parser = argparse.ArgumentParser(prog="python -m albert_lightning.evaluate", description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml", help="params file with an `evaluate` section")
    for field in dataclasses.fields(EvaluateConfig):
        types = {"int": int, "float": float, "bool": _parse_bool, "list[int]": int}
        kind = types.get(field.type, str)  # annotations are strings
        nargs = "*" if field.type.startswith("list") else None
        parser.add_argument(f"--{field.name}", nargs=nargs, type=kind, default=argparse.SUPPRESS)
    args = vars(parser.parse_args(argv))
    params, values = args.pop("params"), {}
    if os.path.exists(params):
        with open(params, encoding="utf-8") as f:
            values = dict((yaml.safe_load(f) or {}).get("evaluate") or {})
    values.update(args)
    return EvaluateConfig(**values)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Runs every task and the intrinsic scores; writes the outputs and returns ``metrics.json``'s content."""
    config = _parse(argv)
    encoder = Encoder(config.spiece, config.max_seq_length)  # the vocabulary is checked before any long work
    pretrained = load_encoder(config.checkpoint)  # once: fine-tuning copies its weights and leaves it as it was
    if encoder.sp.get_piece_size() != pretrained.config.vocab_size:
        raise ValueError(
            f"{config.spiece}: {encoder.sp.get_piece_size()} pieces, but {config.checkpoint} was trained with "
            f"vocab_size {pretrained.config.vocab_size}"
        )
    report = {
        "checkpoint": config.checkpoint,
        "seeds": finetuning_seeds(config.seed, config.seeds),
        "intrinsic": {
            Path(shards).name: intrinsic_scores(pretrained, shards, config.intrinsic_batches, config.batch_size)
            for shards in config.shards
        },
        "tasks": {},
    }
    for name in config.tasks:
        result = evaluate_task(name, config, pretrained, encoder)
        report["tasks"][result["task"]] = result
    table = write_report(report, config.output)
    print(table)
    return report


if __name__ == "__main__":
    run_command(main, "evaluate")
