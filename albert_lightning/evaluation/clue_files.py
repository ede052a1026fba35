"""CLUE's classification and sentence-pair tasks (Chinese GLUE), read from the folders CLUE publishes them in.

``<clue_dir>/<task>_public/`` holds JSON Lines files named ``.json``: ``train.json`` (OCNLI: ``train.50k.json``,
its full training set), ``dev.json`` and the unlabelled ``test.json``, plus ``labels.json`` (one ``{"label": …}``
per line) for TNEWS and IFLYTEK. Records are read as CLUE's baseline processors read them
(``baselines/models/classifier_utils.py`` in github.com/CLUEbenchmark/CLUE):

* TNEWS, IFLYTEK: ``sentence`` → ``label``; AFQMC: ``sentence1``, ``sentence2`` → ``label`` ("0"/"1");
* OCNLI, CMNLI: ``sentence1``, ``sentence2`` → ``label``; a row labelled "-" (annotators without a majority) is
  dropped, as the processors drop it, and counted in ``LoadStats.skipped_no_gold``;
* CSL: the ``keyword`` list joined by spaces is the first text, ``abst`` the second → ``label`` ("0"/"1");
* CLUEWSC2020: ``text`` with the candidate (``target.span1_*``) marked ``_…_`` and the pronoun (``span2_*``)
  marked ``[…]``, as the baselines mark them → ``label`` ("true"/"false").

A test row's id is its ``id`` (CLUEWSC2020: ``idx``), which its leaderboard file repeats (``CLUE_SUBMISSION_FILES``:
one ``{"id": …, "label": "<label>"}`` per line, in test-file order). CLUE 1.1 re-drew the test sets of TNEWS and
CLUEWSC2020; their 1.0 test set, ``test1.0.json`` where present, is read as split ``test1.0`` and has its own
file name. CMRC 2018 and C3 are reading tasks: ``reading/clue_files.py``. Pure Python, like ``task_files``: every
problem raises ``TaskDataError`` naming the file and line. Tests: ``python -m pytest tests/test_clue.py``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from albert_lightning.evaluation.task_files import (
    Example,
    LoadStats,
    Prepare,
    TaskDataError,
    json_lines,
    load_split,
)
from albert_lightning.evaluation.task_specs import TaskSpec

__all__ = [
    "CLUE_SUBMISSION_FILES",
    "CLUE_TASKS",
    "clue_folder",
    "clue_name",
    "clue_task",
    "load_clue_split",
    "mark_wsc_spans",
    "read_clue_labels",
]

_SPLITS = {"train": "train.json", "dev": "dev.json", "test": "test.json"}
_RESPLIT = {**_SPLITS, "test1.0": "test1.0.json"}  # TNEWS, CLUEWSC2020: CLUE 1.0's test set beside 1.1's
_NLI = ("contradiction", "entailment", "neutral")
_BINARY = ("0", "1")
_ACC = dict(metrics=("accuracy",), primary="accuracy", benchmark="clue")
_PAIR = dict(text_a="sentence1", text_b="sentence2")
LABEL_FILE = "labels.json"

# fmt: off
CLUE_TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        # TNEWS and IFLYTEK take their labels from labels.json (clue_task); these are the processors' lists.
        TaskSpec("tnews", "classification", tuple(str(100 + i) for i in range(17) if i not in (5, 11)),
                 splits=_RESPLIT, text_a="sentence", **_ACC),
        TaskSpec("iflytek", "classification", tuple(str(i) for i in range(119)), splits=_SPLITS,
                 text_a="sentence", **_ACC),
        TaskSpec("afqmc", "classification", _BINARY, splits=_SPLITS, **_PAIR, **_ACC),
        TaskSpec("ocnli", "classification", _NLI, splits={**_SPLITS, "train": "train.50k.json"}, **_PAIR, **_ACC),
        TaskSpec("cmnli", "classification", _NLI, splits=_SPLITS, **_PAIR, **_ACC),
        TaskSpec("csl", "classification", _BINARY, splits=_SPLITS, text_a="keyword", text_b="abst", **_ACC),
        TaskSpec("cluewsc2020", "classification", ("true", "false"), splits=_RESPLIT, text_a="text", **_ACC),
    )
}
# (task, test split) → the file CLUE's leaderboard reads that split's predictions from (CLUE's submission guide:
# "<task>_predict.json", with the version in the name for the test sets CLUE 1.1 re-drew).
CLUE_SUBMISSION_FILES: dict[tuple[str, str], str] = {
    ("tnews", "test"): "tnews11_predict.json", ("tnews", "test1.0"): "tnews10_predict.json",
    ("iflytek", "test"): "iflytek_predict.json", ("afqmc", "test"): "afqmc_predict.json",
    ("ocnli", "test"): "ocnli_50k_predict.json", ("cmnli", "test"): "cmnli_predict.json",
    ("csl", "test"): "csl_predict.json",
    ("cluewsc2020", "test"): "cluewsc11_predict.json", ("cluewsc2020", "test1.0"): "cluewsc10_predict.json",
    ("c3", "test1.1"): "c311_predict.json", ("c3", "test1.0"): "c310_predict.json",
    ("cmrc2018", "test"): "cmrc2018_predict.json",
}
# fmt: on


def clue_name(name: str) -> str | None:
    """The CLUE classification task ``name`` means in any case (``TNEWS``, ``tnews``), or None."""
    return name.lower() if name.lower() in CLUE_TASKS else None


def clue_folder(task: str, clue_dir: str | Path | None) -> Path:
    """``<clue_dir>/<task>_public``, CLUE's folder of ``task``.

    Raises:
        TaskDataError: ``clue_dir`` is not set.
    """
    if clue_dir is None:
        raise TaskDataError(f"task {task!r} is a CLUE task: set clue_dir to the folder holding {task}_public/")
    return Path(clue_dir) / f"{task}_public"


def read_clue_labels(path: Path) -> tuple[str, ...]:
    """The labels of ``labels.json`` (one ``{"label": …, "label_desc": …}`` per line), in file order.

    Raises:
        TaskDataError: A missing file, a line without a label, a label twice, or no label at all.
    """
    labels: dict[str, int] = {}  # label → its line
    for line, record in json_lines(path):
        label = record.get("label")
        if isinstance(label, bool) or not isinstance(label, str | int):
            raise TaskDataError(f'{path}, line {line}: no "label" string; expected {{"label": …, "label_desc": …}}')
        if str(label) in labels:
            raise TaskDataError(f"{path}, line {line}: label {label!r} again (first on line {labels[str(label)]})")
        labels[str(label)] = line
    if not labels:
        raise TaskDataError(f'{path}: no labels; expected one {{"label": …}} object per line')
    return tuple(labels)


def clue_task(name: str, clue_dir: str | Path | None) -> tuple[TaskSpec, Path]:
    """The spec and folder of the CLUE classification task ``name`` (``clue_name``); TNEWS's and IFLYTEK's
    labels are their ``labels.json``'s, in its order.

    Raises:
        TaskDataError: ``clue_dir`` unset, or a missing or malformed ``labels.json``.
    """
    task = clue_name(name)
    if task is None:
        raise TaskDataError(f"{name!r} is not a CLUE classification task {tuple(CLUE_TASKS)}")
    folder = clue_folder(task, clue_dir)
    spec = CLUE_TASKS[task]
    if task in ("tnews", "iflytek"):
        spec = dataclasses.replace(spec, labels=read_clue_labels(folder / LABEL_FILE))
    return spec, folder


def _drop_no_gold(record: dict[str, Any], where: str) -> dict[str, Any] | None:
    return None if record.get("label") == "-" else record


def _join_keywords(record: dict[str, Any], where: str) -> dict[str, Any]:
    keywords = record.get("keyword")
    if not isinstance(keywords, list) or not all(isinstance(k, str) for k in keywords):
        raise TaskDataError(f'{where}: "keyword" is {keywords!r}, expected a list of strings')
    return {**record, "keyword": " ".join(keywords)}


def mark_wsc_spans(text: str, span1: tuple[int, str], span2: tuple[int, str], where: str) -> str:
    """``text`` with the candidate ``span1`` (index, text) in underscores and the pronoun ``span2`` in brackets.

    Raises:
        TaskDataError: A span whose text is not at its index, or spans that overlap.
    """
    marks = []
    for key, (index, span), (opening, closing) in (("span1", span1, "__"), ("span2", span2, "[]")):
        if isinstance(index, bool) or not isinstance(index, int) or not isinstance(span, str) or not span:
            raise TaskDataError(f"{where}: target {key}_index {index!r} / {key}_text {span!r}, expected int / text")
        found = text[index : index + len(span)] if index >= 0 else ""
        if found != span:
            raise TaskDataError(f"{where}: {key}_text {span!r} is not at {key}_index {index} (found {found!r})")
        marks.append((index, index + len(span), opening, closing))
    (_, end1, *_), (start2, *_) = sorted(marks)
    if start2 < end1:
        raise TaskDataError(f"{where}: span1 and span2 overlap; expected a candidate and a pronoun apart")
    for start, end, opening, closing in sorted(marks, reverse=True):  # the later span first: indices stay valid
        text = f"{text[:start]}{opening}{text[start:end]}{closing}{text[end:]}"
    return text


def _mark_target(record: dict[str, Any], where: str) -> dict[str, Any]:
    target, text = record.get("target"), record.get("text")
    if not isinstance(target, dict) or not isinstance(text, str):
        raise TaskDataError(f'{where}: expected a "text" string and a "target" object with the spans')
    spans = [(target.get(f"{key}_index"), target.get(f"{key}_text")) for key in ("span1", "span2")]
    return {**record, "text": mark_wsc_spans(text, spans[0], spans[1], where)}


_PREPARE: dict[str, Prepare] = {
    "ocnli": _drop_no_gold,
    "cmnli": _drop_no_gold,
    "csl": _join_keywords,
    "cluewsc2020": _mark_target,
}


def load_clue_split(
    spec: TaskSpec, folder: str | Path, split: str, stats: LoadStats | None = None, lines: tuple[str, ...] | None = None
) -> list[Example]:
    """One split of a CLUE task (``task_files.load_split`` with the task's record layout; see the module)."""
    return load_split(spec, folder, split, stats, lines, prepare=_PREPARE.get(spec.name))
