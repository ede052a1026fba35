"""What pretraining bought: ``python -m albert_lightning.evaluate`` → ``data/eval/metrics.json``.

For every configured task, the dev score of (a) fine-tuning the pretrained checkpoint, (b) the same fine-tuning
from random weights of the same shape, and (c) the majority class (or train mean), all on the same split; plus
intrinsic scores of the checkpoint on held-out shards (MLM accuracy, and SOP or NSP accuracy by the shards' kind:
the columns of the paper's Table 5). Tasks are folders in the generic task format (the embedded default's
``data/tasks/*``, or your own) or GLUE task names read from ``glue_dir``. Knobs: the ``evaluate`` section of
``params.yaml``, each also a ``--flag``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml

from albert_lightning.finetuning import AlbertFineTuning, Encoder, load_encoder, make_loader
from albert_lightning.metrics import compute_metrics, majority_baseline
from albert_lightning.model import AlbertForPreTraining
from albert_lightning.shard_loader import ShardDataset, collate
from albert_lightning.sharding import FSDP2Strategy
from albert_lightning.tasks import GLUE_TASKS, TaskSpec, generic_task, label_ids, load_split

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
    max_steps: int = 300  # cap per fine-tuning run (CPU budget); -1 for none
    lr: float = 1e-4
    seed: int = 12345
    devices: int = 1
    intrinsic_batches: int = 20
    random_baseline: bool = True  # also fine-tune a random model of the same shape (ablation grids may skip it)


def _task(name: str, config: EvaluateConfig) -> tuple[TaskSpec, Path]:
    if name in GLUE_TASKS:
        if config.glue_dir is None:
            raise ValueError(f"task {name!r} is a GLUE task: set evaluate.glue_dir to the folder holding {name}/")
        return GLUE_TASKS[name], Path(config.glue_dir) / name
    return generic_task(name), Path(name)


def _encode(spec: TaskSpec, folder: Path, split: str, encoder: Encoder) -> list[tuple[list[int], list[int], Any]]:
    examples = load_split(spec, folder, split)
    labels = label_ids(spec, examples)
    return [(*encoder(e.text_a, e.text_b), label) for e, label in zip(examples, labels, strict=True)]


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


def finetune(network: AlbertForPreTraining, spec: TaskSpec, train: list, config: EvaluateConfig):
    """Fine-tunes ``network`` on the encoded ``train`` examples; returns the trainer and the fine-tuned module."""
    L.seed_everything(config.seed, verbose=False)
    regression = spec.kind == "regression"
    loader = make_loader(train, config.batch_size, regression, shuffle=True, seed=config.seed)
    steps = math.ceil(config.epochs * len(loader))
    if config.max_steps > 0:
        steps = min(steps, config.max_steps)
    module = AlbertFineTuning(network, 1 if regression else len(spec.labels), lr=config.lr, total_steps=steps)
    trainer = _trainer(config, steps)
    trainer.fit(module, train_dataloaders=loader)
    return trainer, module


def score(trainer: L.Trainer, module: AlbertFineTuning, spec: TaskSpec, dev: list, config: EvaluateConfig) -> dict:
    """Returns the task's metrics of the fine-tuned ``module`` on the encoded ``dev`` examples."""
    loader = make_loader(dev, config.batch_size, spec.kind == "regression", shuffle=False, seed=config.seed)
    predictions = torch.cat(trainer.predict(module, loader)).tolist()
    return compute_metrics(spec, predictions, [label for *_, label in dev])


def evaluate_task(name: str, config: EvaluateConfig, pretrained: AlbertForPreTraining) -> dict[str, Any]:
    """Returns, per dev split, the pretrained, random-init and majority scores of one task."""
    spec, folder = _task(name, config)
    encoder = Encoder(config.spiece, config.max_seq_length)
    train = _encode(spec, folder, "train", encoder)
    devs = {split: _encode(spec, folder, split, encoder) for split in spec.eval_splits}
    splits: dict[str, dict[str, Any]] = {
        split: {"examples": len(dev), "majority": majority_baseline(spec, [t[-1] for t in train], [d[-1] for d in dev])}
        for split, dev in devs.items()
    }
    inits = [("pretrained", pretrained)]
    if config.random_baseline:
        inits.append(("random_init", load_encoder(None, pretrained.config)))
    for init, network in inits:
        trainer, module = finetune(network, spec, train, config)
        for split, dev in devs.items():
            splits[split][init] = score(trainer, module, spec, dev, config)
    return {"task": spec.name, "primary": spec.primary, "train_examples": len(train), "splits": splits}


@torch.no_grad()
def intrinsic_scores(model: AlbertForPreTraining, shards: str, batches: int, batch_size: int) -> dict[str, Any]:
    """MLM accuracy and sentence-pair accuracy of ``model`` on the validation split of ``shards``."""
    dataset = ShardDataset(shards, "validation")
    model.eval()
    correct = masked = pair_correct = pairs = 0
    for start in range(0, min(len(dataset), batches * batch_size), batch_size):
        batch = collate([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
        out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["masked_lm_positions"])
        real = batch["masked_lm_ids"] != -100
        correct += int((out.prediction_logits.argmax(-1) == batch["masked_lm_ids"])[real].sum())
        masked += int(real.sum())
        pair_correct += int((out.sop_logits.argmax(-1) == batch["sentence_order_label"]).sum())
        pairs += len(batch["index"])
    kind = dataset.manifest.params["inter_sentence"]
    return {
        "shards": shards,
        "kind": kind,
        "mlm_accuracy": correct / max(masked, 1),
        f"{kind}_accuracy": pair_correct / max(pairs, 1),
    }


def _parse_bool(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() in ("true", "1")


def _parse(argv: list[str] | None) -> EvaluateConfig:
    parser = argparse.ArgumentParser(prog="python -m albert_lightning.evaluate", description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml", help="params file with an `evaluate` section")
    for field in dataclasses.fields(EvaluateConfig):
        kind = {"int": int, "float": float, "bool": _parse_bool}.get(field.type, str)  # annotations are strings
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
    """Runs every task and the intrinsic scores; writes and returns ``{output}/metrics.json``."""
    config = _parse(argv)
    pretrained = load_encoder(config.checkpoint)
    report = {
        "checkpoint": config.checkpoint,
        "intrinsic": {
            Path(shards).name: intrinsic_scores(pretrained, shards, config.intrinsic_batches, config.batch_size)
            for shards in config.shards
        },
        "tasks": {},
    }
    for name in config.tasks:
        result = evaluate_task(name, config, load_encoder(config.checkpoint))
        report["tasks"][result["task"]] = result
    os.makedirs(config.output, exist_ok=True)
    with open(os.path.join(config.output, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, sort_keys=True)
        f.write("\n")
    table = markdown_table(report)
    with open(os.path.join(config.output, "report.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(table)
    return report


def markdown_table(report: dict[str, Any]) -> str:
    """Returns the report as Markdown: one row per task and dev split, then the intrinsic scores."""
    lines = [
        "| task | split | metric | pretrained | random init | majority |",
        "|---|---|---|---|---|---|",
    ]
    for name, task in report["tasks"].items():
        metric = task["primary"]
        for split, scores in task["splits"].items():
            cells = [
                f"{scores[k][metric]:.3f}" if k in scores else "-" for k in ("pretrained", "random_init", "majority")
            ]
            lines.append(f"| {name} | {split} ({scores['examples']}) | {metric} | {' | '.join(cells)} |")
    lines += ["", "| held-out shards | kind | MLM accuracy | sentence-pair accuracy |", "|---|---|---|---|"]
    for name, scores in report["intrinsic"].items():
        pair = scores[f"{scores['kind']}_accuracy"]
        lines.append(f"| {name} | {scores['kind']} | {scores['mlm_accuracy']:.3f} | {pair:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
