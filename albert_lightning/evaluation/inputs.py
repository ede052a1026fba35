"""What ``evaluate`` reads before the first fine-tuning: the task set, each task's files, the leakage figures.

``expand_tasks`` turns ``evaluate.tasks`` into task names: a folder the tasks stage wrote (its ``stats.json``
lists its ``tasks``) becomes its task folders in that list's order, whatever the corpus named them, and any
other name (a task folder of your own, a GLUE or CLUE name, ``squad1``, ``squad2``, ``race``) is kept as it is. A tasks
folder with no task gives its ``reason`` instead, which ``no_task_note`` turns into the report's note: the
evaluation then scores the held-out intrinsic sets alone. ``read_task`` reads every file of one task,
``read_leakage`` the leakage stage's metrics and ``load_checkpoint`` the network, so a bad input fails in seconds,
not after hours of earlier tasks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from albert_lightning.evaluation.config import EvaluateConfig
from albert_lightning.evaluation.finetuning import Encoder
from albert_lightning.evaluation.reading.runner import ReadingTask, reading_task
from albert_lightning.evaluation.task_files import Example, TaskDataError, read_task_config
from albert_lightning.evaluation.task_resolution import SplitFile, task_split_files
from albert_lightning.interop.pretrained import load_pretrained
from albert_lightning.model import AlbertForPreTraining
from pipelines.algorithms.vocabulary import load_vocabulary

__all__ = [
    "TaskSplits",
    "check_task",
    "expand_tasks",
    "load_checkpoint",
    "no_task_note",
    "read_leakage",
    "read_task",
]

TASKS_STATS = "stats.json"  # the tasks stage's record of the tasks it wrote (pipelines/tasks.py)
HOW_TO_ADD = (
    "to add one, set tasks.label_field in params.yaml (a JSON Lines key or Parquet column of your corpus, or "
    "'folder' for texts sorted into one folder per class) and rerun the pipeline, or name GLUE tasks in "
    "evaluate.tasks with evaluate.glue_dir (squad1, squad2, race with squad_dir, race_dir; CLUE's tnews, iflytek, "
    "afqmc, ocnli, cmnli, csl, cluewsc2020, cmrc2018, c3 with clue_dir)"
)

# split → where it was read from, and its examples: every file of a task, read once
TaskSplits = dict[str, tuple[SplitFile, list[Example]]]


def _stage_tasks(folder: Path) -> dict[str, Any] | None:
    """The tasks stage's ``stats.json`` of ``folder`` when it is one (an object listing ``tasks``), else None."""
    path = folder / TASKS_STATS
    if not path.is_file() or (folder / "task.json").is_file():
        return None
    try:
        stats = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TaskDataError(f"{path}, line {e.lineno}: not valid JSON ({e.msg})") from e
    return stats if isinstance(stats, dict) and isinstance(stats.get("tasks"), dict) else None


def expand_tasks(names: list[str]) -> tuple[list[str], list[str]]:
    """``names`` with each tasks-stage folder replaced by its task folders, in its ``stats.json``'s order.

    Returns:
        The task names, each once (a task named twice is evaluated once, where first named), and the reasons
        the tasks-stage folders among ``names`` that hold no task gave for it.

    Raises:
        TaskDataError: naming the file, when a tasks folder's ``stats.json`` is not valid JSON.
    """
    expanded: list[str] = []
    reasons: list[str] = []
    for name in names:
        stats = _stage_tasks(Path(name)) if Path(name).is_dir() else None
        if stats is None:
            expanded.append(name)
            continue
        expanded += [os.path.join(name, task) for task in stats["tasks"]]
        if not stats["tasks"]:
            reasons.append(f"{name}: {stats.get('reason') or 'the tasks stage wrote no task'}")
    unique: dict[str, str] = {}  # normalised path → the name as first given
    for name in expanded:
        unique.setdefault(os.path.normpath(name), name)
    return list(unique.values()), reasons


def no_task_note(reasons: list[str]) -> str:
    """The report's sentence for an evaluation without downstream tasks: why there is none, and how to add one."""
    why = "; ".join(reasons) if reasons else "evaluate.tasks names none"
    return (
        f"the corpus gave no downstream task ({why}), so only the held-out intrinsic scores are reported: {HOW_TO_ADD}."
    )


def check_task(name: str, config: EvaluateConfig, task_config: dict[str, Any]) -> TaskSplits:
    """Reads every file a run of task ``name`` reads, so that a missing or malformed one fails before any
    fine-tuning; returns each split's file and examples, which the run encodes without reading them again.

    Raises:
        TaskDataError: An unknown name (with the name probably meant), or a file problem, naming task and file.
    """
    files = task_split_files(name, config.glue_dir, task_config, config.clue_dir)
    try:
        return {split: (file, file.load()) for split, file in files.items()}
    except TaskDataError as e:
        raise TaskDataError(f"task {files['train'].spec.name}: {e}") from e


def read_task(name: str, config: EvaluateConfig) -> ReadingTask | TaskSplits:
    """Every file of task ``name``: a reading task (span extraction, RACE) or a sentence task's splits."""
    # task.json says whether a folder holds a span task or a sentence task: read once, for both.
    task_config = read_task_config(Path(name))
    reading = reading_task(name, config.squad_dir, config.race_dir, task_config, config.clue_dir)
    return reading or check_task(name, config, task_config)


def read_leakage(path: str) -> dict[str, Any]:
    """The leakage stage's metrics, checked for the fields the report shows.

    Raises:
        ValueError: naming the file, when it is not JSON of the leakage stage's shape.
    """
    try:
        with open(path, encoding="utf-8") as f:
            leakage = json.load(f)
        counts = [leakage["sentences"], *(c for splits in leakage["tasks"].values() for c in splits.values())]
        if not all(isinstance(v, int | float) for c in counts for v in c.values()):
            raise TypeError("a count is not a number")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{path}: not the leakage stage's metrics.json ({err!r}); rerun pipelines.leakage") from err
    return leakage


def load_checkpoint(config: EvaluateConfig) -> tuple[AlbertForPreTraining, Encoder]:
    """The pretrained network to fine-tune, checked against the vocabulary it was trained with, and the encoder
    that normalises text as its pretraining did."""
    if not os.path.exists(config.checkpoint):  # torch.load's own error would suggest a truncated file
        raise FileNotFoundError(f"{config.checkpoint}: no checkpoint file or Hugging Face folder there")
    pretrained, normalizer = load_pretrained(config.checkpoint)
    vocab = load_vocabulary(config.spiece, pretrained.config.vocab_size, config.checkpoint)
    return pretrained, Encoder(vocab, config.max_seq_length, normalizer)
