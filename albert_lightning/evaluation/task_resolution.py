"""Which task a command line names, and which of its split files a run reads.

``resolve_task`` turns a name (GLUE's, Hugging Face's ``sst2``/``stsb``…, CLUE's ``tnews``…, or a task folder) into
a ``TaskSpec`` and its folder, and says which known name a typo probably meant; ``run_splits`` lists the
``SplitFile``s a run reads (MNLI's with GLUE's diagnostic set), each naming the leaderboard's file for its
predictions. Reading the files is ``task_files``'s (``clue_files``'s for CLUE). Pure Python: no torch, no Beam.
Tests: ``python -m pytest tests/test_task_files.py``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from albert_lightning.evaluation.clue_files import (
    CLUE_SUBMISSION_FILES,
    CLUE_TASKS,
    clue_name,
    clue_task,
    load_clue_split,
)
from albert_lightning.evaluation.task_files import Example, TaskDataError, generic_task, load_split, read_generic_task
from albert_lightning.evaluation.task_specs import GLUE_DIAGNOSTIC, GLUE_SUBMISSION_FILES, GLUE_TASKS, TaskSpec

__all__ = [
    "SplitFile",
    "glue_name",
    "present_splits",
    "resolve_task",
    "run_splits",
    "task_split_files",
]


def _glue_key(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


def glue_name(name: str) -> str | None:
    """The GLUE task ``name`` means in any case, with or without GLUE's hyphen (Hugging Face's ``sst2``,
    ``stsb``, ``cola`` and GLUE's ``SST-2``, ``sts-b``), or None for any other name."""
    return next((task for task in GLUE_TASKS if _glue_key(task) == _glue_key(name)), None)


def _unknown_task(name: str) -> TaskDataError:
    if _glue_key(name) == "ax":
        return TaskDataError("AX is scored by the MNLI model: evaluate MNLI with <glue_dir>/diagnostic/diagnostic.tsv")
    # What a typo was probably meant to be: a GLUE or CLUE name in either spelling, or a folder beside the one named
    known = {spelling: task for task in GLUE_TASKS for spelling in (task.lower(), _glue_key(task))}
    known.update({task: task for task in CLUE_TASKS})
    parent = Path(name).parent
    if len(Path(name).parts) > 1 and parent.is_dir():
        known.update({str(p).lower(): str(p) for p in parent.iterdir() if p.is_dir()})
    meant = difflib.get_close_matches(name.lower(), list(known), n=1)
    hint = f"; did you mean {known[meant[0]]!r}?" if meant else ""
    return TaskDataError(f"unknown task {name!r}: neither a GLUE task {tuple(GLUE_TASKS)}, a CLUE task "
                         f"{tuple(CLUE_TASKS)} nor a task folder{hint}")  # fmt: skip


def resolve_task(name: str, glue_dir: str | Path | None, clue_dir: str | Path | None = None) -> tuple[TaskSpec, Path]:
    """The task a command line names, and its folder.

    Args:
        name: A GLUE task in GLUE's or Hugging Face's spelling (read from ``glue_dir/<GLUE's name>``), a CLUE
            classification task in any case (read from ``clue_dir/<task>_public``, ``clue_files``), or a task
            folder in the generic layout (``generic_task``). A folder named like a GLUE or CLUE task is given as a
            path (``./cola``).
        glue_dir: The folder holding GLUE's task folders; None when no GLUE task is wanted.
        clue_dir: The folder holding CLUE's ``<task>_public`` folders; None when no CLUE task is wanted.

    Raises:
        TaskDataError: A GLUE (CLUE) name without ``glue_dir`` (``clue_dir``), or a name that is none of these;
            the message says which known name was probably meant.
    """
    glue = glue_name(name)
    if glue is not None:
        if glue_dir is None:
            raise TaskDataError(f"task {name!r} is a GLUE task: set glue_dir to the folder holding {glue}/")
        return GLUE_TASKS[glue], Path(glue_dir) / glue
    if clue_name(name) is not None:
        return clue_task(name, clue_dir)
    if not Path(name).is_dir():
        raise _unknown_task(name)
    return generic_task(name), Path(name)


def task_split_files(
    name: str, glue_dir: str | Path | None, config: dict[str, Any], clue_dir: str | Path | None = None
) -> dict[str, SplitFile]:
    """The split files of the task ``name`` denotes (``resolve_task``), each file read at most once: a folder's
    ``task.json`` is ``config`` (read already) and its train file's lines, read for the labels, are kept."""
    if glue_name(name) is None and clue_name(name) is None and Path(name).is_dir():
        spec, lines = read_generic_task(name, config)
        return run_splits(spec, name, lines)
    return run_splits(*resolve_task(name, glue_dir, clue_dir))


def present_splits(spec: TaskSpec, folder: str | Path) -> tuple[str, ...]:
    """The splits of ``spec`` a run reads: train and dev always (reading reports a missing one), test splits only
    where their file exists: GLUE's test files carry no labels, so users often leave them out."""
    return tuple(s for s in spec.splits if not s.startswith("test") or (Path(folder) / spec.splits[s]).is_file())


@dataclass(frozen=True)
class SplitFile:
    """Where one split of a run comes from: ``split`` of ``spec`` in ``folder`` (MNLI's "diagnostic" is AX's)."""

    spec: TaskSpec
    folder: Path
    split: str
    lines: tuple[str, ...] | None = field(default=None, compare=False, repr=False)  # the file, when read already

    def load(self) -> list[Example]:
        """The split's examples (``load_split``; CLUE's tasks ``load_clue_split``)."""
        load = load_clue_split if self.spec.benchmark == "clue" else load_split
        return load(self.spec, self.folder, self.split, lines=self.lines)

    @property
    def submission_file(self) -> str | None:
        """The GLUE or CLUE leaderboard's file name for this split's predictions; None but for their own test
        files."""
        if self.spec.benchmark == "clue":
            return CLUE_SUBMISSION_FILES.get((self.spec.name, self.split))
        glue = self.spec is GLUE_DIAGNOSTIC or GLUE_TASKS.get(self.spec.name) is self.spec
        return GLUE_SUBMISSION_FILES.get((self.spec.name, self.split)) if glue else None

    @property
    def submission_folder(self) -> str:
        """The output folder its leaderboard file goes to: one per benchmark, each zipped whole for upload."""
        return "clue_submission" if self.spec.benchmark == "clue" else "glue_submission"


def run_splits(spec: TaskSpec, folder: str | Path, train_lines: tuple[str, ...] | None = None) -> dict[str, SplitFile]:
    """Every split a run of ``spec`` reads (``present_splits``), by name; an MNLI run also predicts GLUE's
    diagnostic set (split "diagnostic") when ``<glue_dir>/diagnostic/diagnostic.tsv`` is there. ``train_lines``:
    the train file's lines when read already."""
    folder = Path(folder)
    splits = {split: SplitFile(spec, folder, split) for split in present_splits(spec, folder)}
    splits["train"] = SplitFile(spec, folder, "train", train_lines)
    diagnostic = folder.parent / "diagnostic"
    if spec is GLUE_TASKS["MNLI"] and (diagnostic / GLUE_DIAGNOSTIC.splits["test"]).is_file():
        splits["diagnostic"] = SplitFile(GLUE_DIAGNOSTIC, diagnostic, "test")
    return splits
