"""What pretraining bought, with its noise: ``python -m albert_lightning.evaluate`` → ``data/eval/``.

For every configured task and training-set size (``train_sizes``: nested subsets, a learning curve), each of
``seeds`` fine-tuning seeds fine-tunes (a) the pretrained checkpoint and (b) random weights of the same shape on
the same examples in the same order; the report gives both starts' medians over seeds, the median gain with a
bootstrap interval over seeds and dev examples, and (c) the majority class (or train mean). Plus intrinsic
scores of the checkpoint on held-out shards (MLM accuracy, and SOP or NSP accuracy by the shards' kind: the
columns of the paper's Table 5). Tasks are the tasks stage's folder (``data/tasks``: each task it wrote, whatever
its name; ``inputs.expand_tasks``), task folders of your own, GLUE task names (GLUE's or Hugging Face's spelling)
read from ``glue_dir``, CLUE's tasks from ``clue_dir`` (``clue_files``), or reading comprehension
(``reading/runner.py``): ``squad1``/``squad2`` from ``squad_dir``, ``race`` from ``race_dir``, ``cmrc2018``/``c3``
from ``clue_dir`` and span tasks in SQuAD's layout (the embedded default's ``data/tasks/returns``). With
no task (a corpus without labels) the report says how to add one. Knobs: the ``evaluate`` section of
``params.yaml``, each also a ``--flag``.

Every input (vocabulary, checkpoint, every file of every task) is read before the first fine-tuning, and the
outputs (see ``report.py``) are rewritten after each task, so a failure keeps the tasks already done. Every
dev prediction of every run lands in ``predictions/<task>/<split>.jsonl``, so a score can be checked by hand and
runs compared pairwise; one audited run (``evaluate_task`` says which) also predicts the test splits, whose
predictions files and, for GLUE and CLUE, leaderboard files (``glue_submission/``, ``clue_submission/``) it writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from albert_lightning.evaluation.config import EvaluateConfig
from albert_lightning.evaluation.finetuning import (
    CHATTER,
)
from albert_lightning.evaluation.inputs import (
    expand_tasks,
    load_checkpoint,
    no_task_note,
    read_leakage,
    read_task,
)
from albert_lightning.evaluation.intrinsic import intrinsic_scores
from albert_lightning.evaluation.plan import finetuning_seeds
from albert_lightning.evaluation.reading.runner import ReadingTask, evaluate_reading_task
from albert_lightning.evaluation.report import (
    write_report,
)
from albert_lightning.evaluation.runner import evaluate_task
from pipelines.runtime.commands import main as run_command
from pipelines.runtime.params import parse_config

__all__ = ["OUTPUT_FOLDERS", "EvaluateConfig", "command", "main"]


# The folders of the runs' outputs: every dev (and audited test) prediction, and each span task's fine-tuned
# network as a Hugging Face folder.
OUTPUT_FOLDERS = ("predictions", "finetuned")


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
    """Runs the command line; an error is one line, its trace in a log (pipelines/runtime/commands.py)."""
    run_command(main, "evaluate", chatter=CHATTER)  # Lightning's output to the log; a line per run here
