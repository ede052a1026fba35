"""How a task's files become ``Example``s: TSV and JSONL files, checked row by row, and users' task folders.

GLUE's files are read as the original ``run_classifier.py`` / ALBERT ``classifier_utils.py`` processors do
(tab-separated, no quoting; the tasks themselves are in ``task_specs``), and a generic layout serves users' own tasks
(``generic_task``: ``train``/``dev``/``test`` as ``.tsv`` or ``.jsonl``, an optional ``task.json``). Pure Python: no
torch, no Beam, so the report and tests use it without a model. Every problem in a task file raises
``TaskDataError`` naming the file and line. Which task a name means, and which files a run reads, is
``task_resolution``'s.
Tests: ``python -m pytest tests/test_task_files.py``.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albert_lightning.evaluation.task_specs import REGRESSION_METRICS, TaskSpec

__all__ = [
    "GENERIC_KEYS",
    "ID_COLUMNS",
    "Example",
    "LoadStats",
    "Prepare",
    "TaskDataError",
    "generic_task",
    "json_lines",
    "label_ids",
    "load_split",
    "read_generic_task",
    "read_task_config",
]

log = logging.getLogger(__name__)

GENERIC_KEYS = ("kind", "labels", "text_a", "text_b", "label", "metrics", "primary")
# An example's id, kept for predictions files and GLUE submissions: GLUE's files call it "index" (QQP "id"), Hugging
# Face's exports "idx".
ID_COLUMNS = ("index", "id", "idx")


class TaskDataError(ValueError):
    """A task file is missing or holds something other than what its task expects."""


@dataclass
class Example:
    """One example: one or two texts and a label (None in unlabelled test files)."""

    text_a: str
    text_b: str | None
    label: str | float | None
    line: int  # 1-based line in its file, for error messages
    id: Any = None  # the file's own id (an ID_COLUMNS value): a GLUE test file's submission index; None without one


@dataclass
class LoadStats:
    """What ``load_split`` read; pass one in to see the rows it dropped (only tasks with ``skip_malformed``)."""

    rows: int = 0  # data rows read, header excluded
    skipped_malformed: int = 0  # rows skipped for a wrong field count
    skipped_no_gold: int = 0  # rows a ``prepare`` hook dropped: CLUE's NLI rows whose annotators did not agree ("-")


def _read_lines(path: Path) -> tuple[str, ...]:
    if not path.is_file():
        raise TaskDataError(f"{path}: file not found")
    # utf-8-sig: MRPC's files can start with a byte-order mark, which would otherwise glue onto "Quality". Lines
    # end only at \n, \r\n or \r, as in the reference readers: str.splitlines would also cut at U+2028 and friends.
    with path.open(encoding="utf-8-sig") as f:
        return tuple(line.rstrip("\n") for line in f)


def _records(
    path: Path,
    headerless: tuple[str, ...] = (),
    skip_malformed: bool = False,
    stats: LoadStats | None = None,
    lines: tuple[str, ...] | None = None,
) -> tuple[tuple[str, ...] | None, Iterator[tuple[int, dict[str, Any]]]]:
    """Parses a TSV or JSONL file (its ``lines`` when already read): (TSV column names or None for JSONL,
    iterator of (line, record))."""
    lines = _read_lines(path) if lines is None else lines
    stats = stats if stats is not None else LoadStats()
    if path.suffix in (".jsonl", ".json"):  # CLUE's ".json" files hold one object per line too
        return None, _jsonl(path, lines, stats)
    rows = csv.reader(lines, delimiter="\t", quotechar=None)
    columns = headerless or tuple(next(rows, ()))
    if not columns:
        raise TaskDataError(f"{path}: empty file; expected a header row, then data rows")
    return columns, _tsv(path, rows, columns, 0 if headerless else 1, skip_malformed, stats)


def _tsv(
    path: Path, rows: Iterator[list[str]], columns: tuple[str, ...], offset: int, skip: bool, stats: LoadStats
) -> Iterator[tuple[int, dict[str, Any]]]:
    for i, row in enumerate(rows, start=1 + offset):
        if not row:
            continue
        stats.rows += 1
        if len(row) != len(columns):
            if skip:
                stats.skipped_malformed += 1
                continue
            raise TaskDataError(f"{path}, line {i}: {len(row)} tab-separated fields, expected {len(columns)} {columns}")
        yield i, dict(zip(columns, row, strict=True))


def _jsonl(path: Path, lines: list[str], stats: LoadStats) -> Iterator[tuple[int, dict[str, Any]]]:
    for i, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        stats.rows += 1
        try:
            record = json.loads(text)
        except json.JSONDecodeError as e:
            raise TaskDataError(f"{path}, line {i}: not valid JSON ({e.msg}); expected one object per line") from e
        if not isinstance(record, dict):
            raise TaskDataError(f"{path}, line {i}: a JSON {type(record).__name__}, expected an object")
        yield i, record


def json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, object) for each non-blank line of a JSON Lines file.

    Raises:
        TaskDataError: A missing file, or a line that is not a JSON object, naming the file and line.
    """
    return _jsonl(path, _read_lines(path), LoadStats())


def _require(keys: Any, required: list[str], where: str) -> None:
    missing = [k for k in required if k not in keys]
    if missing:
        raise TaskDataError(f"{where}: no column {missing[0]!r}; expected columns including {required}")


def _label_text(value: Any) -> str:
    # JSONL and task.json labels may be numbers or booleans: 0 → "0", true → "true", as JSON spells them.
    return value if isinstance(value, str) else json.dumps(value)


def _label(spec: TaskSpec, value: Any, where: str) -> str | float:
    if spec.kind == "regression":
        try:
            score = float(value)
        except (TypeError, ValueError):
            score = math.nan
        if isinstance(value, bool) or not math.isfinite(score):
            raise TaskDataError(f"{where}: score {value!r} in column {spec.label_column!r} is not a finite number")
        return score
    label = _label_text(value)
    if label not in spec.labels:
        raise TaskDataError(f"{where}: label {label!r} is not one of the task's labels {spec.labels}")
    return label


def _example(
    spec: TaskSpec,
    path: Path,
    split: str,
    line: int,
    record: dict[str, Any],
    required: list[str],
    unlabelled_ok: bool,
) -> Example:
    """Checks one record's columns and label and makes it an ``Example``."""
    where = f"{path}, line {line}"
    _require(record, required, where)
    value = record.get(spec.label_column)
    if value is None and not unlabelled_ok:
        raise TaskDataError(f"{where}: null {spec.label_column!r}; expected a label in split {split!r}")
    label = None if value is None else _label(spec, value, where)
    text_b = None if spec.text_b is None else str(record[spec.text_b])
    example_id = next((record[c] for c in ID_COLUMNS if c in record), None)
    return Example(str(record[spec.text_a]), text_b, label, line, example_id)


# A benchmark's own record layout → the spec's columns: the record to read (a copy), or None to drop it.
Prepare = Callable[[dict[str, Any], str], dict[str, Any] | None]


def load_split(
    spec: TaskSpec,
    folder: str | Path,
    split: str,
    stats: LoadStats | None = None,
    lines: tuple[str, ...] | None = None,
    prepare: Prepare | None = None,
) -> list[Example]:
    """Reads one split of a task.

    Args:
        spec: The task, from ``GLUE_TASKS`` or ``generic_task``.
        folder: The task's folder (for GLUE, ``<glue_dir>/<spec.name>``).
        split: A key of ``spec.splits``. Splits named ``test*`` may lack the label column (labels are then None).
        stats: If given, the rows read and malformed rows skipped are added to it.
        lines: The file's lines when they were read already (``read_generic_task`` reads the train file).
        prepare: Called with each JSON record and its "file, line N" before it is checked: returns the record in
            the spec's columns, or None to drop it (counted in ``stats.skipped_no_gold``); see ``clue_files``.

    Returns:
        The examples in file order.

    Raises:
        TaskDataError: An unknown split, a missing file, a missing column, an unknown label, a non-numeric
            score, a malformed row, or no examples at all; the message names the file and line.
    """
    if split not in spec.splits:
        raise TaskDataError(f"task {spec.name} has no split {split!r}; expected one of {tuple(spec.splits)}")
    path = Path(folder) / spec.splits[split]
    headerless = () if split.startswith("test") else spec.headerless_columns
    stats = stats if stats is not None else LoadStats()
    columns, records = _records(path, headerless, spec.skip_malformed, stats, lines)
    unlabelled_ok = split.startswith("test")  # GLUE test files carry no labels
    required = [c for c in (spec.text_a, spec.text_b, spec.label_column) if c is not None]
    required = required[:-1] if unlabelled_ok else required
    if columns is not None:
        _require(columns, required, f"{path}, line 1 (header)" if not headerless else f"{path} (no header row)")
    if prepare is not None:
        records = _prepared(path, records, prepare, stats)
    examples = [_example(spec, path, split, line, record, required, unlabelled_ok) for line, record in records]
    if not examples:
        raise TaskDataError(f"{path}: no examples; expected at least one data row for split {split!r}")
    if stats.skipped_malformed:
        log.warning("%s: skipped %d malformed rows so far (wrong field count)", path, stats.skipped_malformed)
    return examples


def _prepared(
    path: Path, records: Iterator[tuple[int, dict[str, Any]]], prepare: Prepare, stats: LoadStats
) -> Iterator[tuple[int, dict[str, Any]]]:
    for line, record in records:
        prepared = prepare(record, f"{path}, line {line}")
        if prepared is None:
            stats.skipped_no_gold += 1
            continue
        yield line, prepared


def label_ids(spec: TaskSpec, examples: list[Example]) -> list[int | float]:
    """The model targets: label indices into ``spec.labels``, or float scores for regression.

    Raises:
        TaskDataError: An example has no label or a label outside ``spec.labels``.
    """
    index = {label: i for i, label in enumerate(spec.labels)}
    out: list[int | float] = []
    for e in examples:
        if e.label is None or (spec.kind == "classification" and e.label not in index):
            raise TaskDataError(f"example from line {e.line}: label {e.label!r}, expected one of {spec.labels}")
        out.append(float(e.label) if spec.kind == "regression" else index[e.label])
    return out


def _split_files(folder: Path) -> dict[str, str]:
    splits = {}
    for split in ("train", "dev", "test"):
        found = [f"{split}{ext}" for ext in (".tsv", ".jsonl") if (folder / f"{split}{ext}").is_file()]
        if len(found) > 1:
            raise TaskDataError(f"{folder}: both {found[0]} and {found[1]}; keep one file per split")
        if found:
            splits[split] = found[0]
        elif split != "test":
            raise TaskDataError(f"{folder}: no {split}.tsv or {split}.jsonl; a task needs train and dev files")
    return splits


def read_task_config(folder: Path) -> dict[str, Any]:
    """Returns ``folder``'s ``task.json`` (an object of ``GENERIC_KEYS``), or {} when it has none.

    Raises:
        TaskDataError: naming the file, for a file that is not JSON, not an object, or has other keys.
    """
    path = folder / "task.json"
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TaskDataError(f"{path}, line {e.lineno}: not valid JSON ({e.msg})") from e
    unknown = sorted(set(config) - set(GENERIC_KEYS)) if isinstance(config, dict) else ["<not an object>"]
    if unknown:
        raise TaskDataError(f"{path}: unknown keys {unknown}; expected an object with keys from {GENERIC_KEYS}")
    return config


def _sorted_labels(values: set[str]) -> tuple[str, ...]:
    # Numeric labels sort as numbers so "2" comes before "10"; anything else sorts as text.
    try:
        return tuple(sorted(values, key=float))
    except ValueError:
        return tuple(sorted(values))


def _train_labels(
    train: Path, columns: tuple[str, ...] | None, rows: list[tuple[int, dict[str, Any]]], label_column: str
) -> tuple[str, ...]:
    """The sorted set of labels in the train file's rows, for a task whose ``task.json`` lists none."""
    if columns is not None:
        _require(columns, [label_column], f"{train}, line 1 (header)")
    for line, record in rows:
        _require(record, [label_column], f"{train}, line {line}")
    if not rows:
        raise TaskDataError(f"{train}: no examples; expected labelled training rows to take the labels from")
    return _sorted_labels({_label_text(record[label_column]) for _, record in rows})


def generic_task(folder: str | Path) -> TaskSpec:
    """The spec of a user's task folder (``read_generic_task`` without the train file's lines)."""
    return read_generic_task(folder)[0]


def read_generic_task(folder: str | Path, config: dict[str, Any] | None = None) -> tuple[TaskSpec, tuple[str, ...]]:
    """Describes a user's task folder: ``train`` and ``dev`` (optional ``test``) as ``.tsv`` or ``.jsonl``.

    TSVs carry a header row. An optional ``task.json`` sets any of ``kind`` ("classification"), ``labels``,
    ``text_a`` ("text"), ``text_b``, ``label`` ("label"), ``metrics`` and ``primary``. Without ``text_b`` the
    column ``text_b`` is used when the train file has it; without ``labels`` a classification task takes the
    sorted set of train labels. Default metrics: accuracy for classification; Pearson, Spearman and their mean for
    regression. The primary metric defaults to the Pearson/Spearman mean when listed, else the first metric.

    Args:
        folder: The task folder; its name becomes the task name.
        config: Its ``task.json`` when read already (``read_task_config``).

    Returns:
        The task's spec, for ``load_split``, and the train file's lines, which it read for the labels.

    Raises:
        TaskDataError: Missing train/dev files, a bad ``task.json``, or a train file without the label column.
    """
    folder = Path(folder)
    splits, config = _split_files(folder), read_task_config(folder) if config is None else config
    kind, label_column = config.get("kind", "classification"), config.get("label", "label")
    train = folder / splits["train"]
    lines = _read_lines(train)
    columns, records = _records(train, lines=lines)
    rows = list(records)
    keys = columns if columns is not None else (tuple(rows[0][1]) if rows else ())
    text_b = config["text_b"] if "text_b" in config else ("text_b" if "text_b" in keys else None)
    labels = tuple(_label_text(x) for x in config.get("labels", ()))
    if kind == "classification" and not labels:
        labels = _train_labels(train, columns, rows, label_column)
    metrics = tuple(config.get("metrics", REGRESSION_METRICS if kind == "regression" else ("accuracy",)))
    primary = config.get("primary", "pearson_spearman_mean" if "pearson_spearman_mean" in metrics else metrics[0])
    try:
        spec = TaskSpec(folder.name, kind, labels, metrics, primary, splits, text_a=config.get("text_a", "text"),
                        text_b=text_b, label_column=label_column)  # fmt: skip
    except ValueError as e:
        raise TaskDataError(f"{folder}: {e}") from e
    return spec, lines
