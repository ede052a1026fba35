"""Downstream tasks: what a task is (``TaskSpec``) and how its files become ``Example``s.

Owns the nine GLUE tasks in their standard distribution layout (``<glue_dir>/<TaskSpec.name>/train.tsv`` …, read as
the original ``run_classifier.py`` / ALBERT ``classifier_utils.py`` processors do: tab-separated, no quoting) and a
generic layout for users' own tasks (``generic_task``). Pure Python: no torch, no Beam, so the report and tests use
it without a model. Every problem in a task file raises ``TaskDataError`` naming the file and line. ``resolve_task``
turns a command-line name (GLUE's, Hugging Face's ``sst2``/``stsb``…, or a folder) into a task; ``run_splits`` says
which files a run reads, and ``GLUE_SUBMISSION_FILES`` what the leaderboard calls each test split's predictions.
Tests: ``python -m pytest tests/test_task_files.py``.
"""

from __future__ import annotations

import csv
import difflib
import json
import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = [
    "GLUE_DIAGNOSTIC",
    "GLUE_SUBMISSION_FILES",
    "GLUE_TASKS",
    "METRIC_NAMES",
    "Example",
    "LoadStats",
    "SplitFile",
    "TaskDataError",
    "TaskSpec",
    "generic_task",
    "glue_name",
    "label_ids",
    "load_split",
    "present_splits",
    "read_generic_task",
    "read_task_config",
    "resolve_task",
    "run_splits",
    "task_split_files",
]

log = logging.getLogger(__name__)

KINDS = ("classification", "regression")
# Implemented in metrics.py; listed here so a TaskSpec is checked without importing scikit-learn.
CLASSIFICATION_METRICS = ("accuracy", "f1", "f1_accuracy_mean", "matthews_correlation")
REGRESSION_METRICS = ("pearson", "spearman", "pearson_spearman_mean")
METRIC_NAMES = CLASSIFICATION_METRICS + REGRESSION_METRICS
GENERIC_KEYS = ("kind", "labels", "text_a", "text_b", "label", "metrics", "primary")
# An example's id, kept for predictions files and GLUE submissions: GLUE's files call it "index" (QQP "id"), Hugging
# Face's exports "idx".
ID_COLUMNS = ("index", "id", "idx")


class TaskDataError(ValueError):
    """A task file is missing or holds something other than what its task expects."""


@dataclass(frozen=True)
class TaskSpec:
    """What a task is: its labels, metrics, files and columns, and the paper's fine-tuning settings.

    ``name`` doubles as the task's folder name in the GLUE distribution. ``splits`` and ``hparams`` are read-only.
    """

    name: str  # "CoLA", "MNLI", or a generic task's folder name
    kind: str  # "classification" or "regression"
    labels: tuple[str, ...]  # label strings in id order; () for regression
    metrics: tuple[str, ...]  # names from METRIC_NAMES, computed by metrics.compute_metrics
    primary: str  # the metric that ranks models; one of ``metrics``
    splits: Mapping[str, str]  # split name → file name inside the task folder
    hparams: Mapping[str, float] = field(default_factory=dict)  # paper Table 14 fine-tuning settings; {} if none
    text_a: str = "text"  # column (or JSONL key) of the first text
    text_b: str | None = None  # column of the second text of a pair task; None for single-text tasks
    label_column: str = "label"  # column of the label (or regression score)
    headerless_columns: tuple[str, ...] = ()  # column names of train/dev TSVs without a header row (CoLA)
    skip_malformed: bool = False  # skip and count rows with the wrong field count (QQP) instead of failing
    paper_metric: str | None = None  # the metric the paper's GLUE dev numbers are in

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"task {self.name}: kind {self.kind!r} is not one of {KINDS}")
        if (self.kind == "classification") != bool(self.labels):
            raise ValueError(f"task {self.name}: a classification task needs labels, a regression task none")
        unknown = [m for m in (*self.metrics, self.primary) if m not in METRIC_NAMES]
        if unknown or self.primary not in self.metrics:
            raise ValueError(
                f"task {self.name}: metrics {self.metrics} / primary {self.primary!r} must come from "
                f"{METRIC_NAMES}, with primary among the metrics"
            )
        object.__setattr__(self, "splits", MappingProxyType(dict(self.splits)))
        object.__setattr__(self, "hparams", MappingProxyType(dict(self.hparams)))

    @property
    def eval_splits(self) -> tuple[str, ...]:
        """The labelled evaluation splits: ("dev",), or MNLI's ("dev_matched", "dev_mismatched")."""
        return tuple(s for s in self.splits if s.startswith("dev"))


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


HPARAM_NAMES = ("learning_rate", "batch_size", "albert_dropout", "classifier_dropout", "train_steps", "warmup_steps")


def _hp(lr: float, batch: int, dropout: float, steps: int, warmup: int) -> dict[str, float]:
    # Paper Table 14: classifier dropout is 0.1 and max length 512 for every GLUE task.
    return dict(zip(HPARAM_NAMES, (lr, batch, dropout, 0.1, steps, warmup), strict=True), max_seq_length=512)


_STD_SPLITS = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
_MNLI_SPLITS = {f"{s}_{m}": f"{s}_{m}.tsv" for s in ("dev", "test") for m in ("matched", "mismatched")}
_BINARY = ("0", "1")
_NLI2 = ("entailment", "not_entailment")
_ACC = dict(metrics=("accuracy",), primary="accuracy", paper_metric="accuracy")
# GLUE's leaderboard scores MRPC/QQP by the F1/accuracy mean and STS-B by the Pearson/Spearman mean, so those rank
# models here. ALBERT's classifier_utils.py reports accuracy for them (Pearson for STS-B): likely the paper's metric.
_F1ACC = dict(metrics=("f1", "accuracy", "f1_accuracy_mean"), primary="f1_accuracy_mean", paper_metric="accuracy")
_PAIR = dict(text_a="sentence1", text_b="sentence2")

# One task per call reads as the table it is, so the formatter leaves it alone.
# fmt: off
GLUE_TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        # CoLA train/dev have no header: source, label, original author's mark, sentence. Test has "index sentence".
        TaskSpec("CoLA", "classification", _BINARY, ("matthews_correlation",), "matthews_correlation", _STD_SPLITS,
                 _hp(1e-5, 16, 0.0, 5336, 320), text_a="sentence", paper_metric="matthews_correlation",
                 headerless_columns=("source", "label", "label_mark", "sentence")),
        TaskSpec("SST-2", "classification", _BINARY, splits=_STD_SPLITS, hparams=_hp(1e-5, 32, 0.0, 20935, 1256),
                 text_a="sentence", **_ACC),
        TaskSpec("MRPC", "classification", _BINARY, splits=_STD_SPLITS, hparams=_hp(2e-5, 32, 0.0, 800, 200),
                 text_a="#1 String", text_b="#2 String", label_column="Quality", **_F1ACC),
        TaskSpec("STS-B", "regression", (), ("pearson", "spearman", "pearson_spearman_mean"), "pearson_spearman_mean",
                 _STD_SPLITS, _hp(2e-5, 16, 0.0, 3598, 214), label_column="score", paper_metric="pearson",
                 **_PAIR),
        # QQP's train file has rows broken by stray newlines; the reference processors skip them, and so do we.
        TaskSpec("QQP", "classification", _BINARY, splits=_STD_SPLITS, hparams=_hp(5e-5, 128, 0.1, 14000, 1000),
                 text_a="question1", text_b="question2", label_column="is_duplicate", skip_malformed=True,
                 **_F1ACC),
        TaskSpec("MNLI", "classification", ("contradiction", "entailment", "neutral"),
                 splits={"train": "train.tsv", **_MNLI_SPLITS}, hparams=_hp(3e-5, 128, 0.0, 10000, 1000),
                 label_column="gold_label", **_PAIR, **_ACC),
        TaskSpec("QNLI", "classification", _NLI2, splits=_STD_SPLITS, hparams=_hp(1e-5, 32, 0.0, 33112, 1986),
                 text_a="question", text_b="sentence", **_ACC),
        TaskSpec("RTE", "classification", _NLI2, splits=_STD_SPLITS, hparams=_hp(3e-5, 32, 0.1, 800, 200),
                 **_PAIR, **_ACC),
        TaskSpec("WNLI", "classification", _BINARY, splits=_STD_SPLITS, hparams=_hp(2e-5, 16, 0.1, 2000, 250),
                 **_PAIR, **_ACC),
    )
}
# GLUE's diagnostic set (AX): unlabelled NLI pairs in <glue_dir>/diagnostic/, which the leaderboard scores with the
# MNLI model's predictions; read as a test split of MNLI runs (``run_splits``), never fine-tuned on.
GLUE_DIAGNOSTIC = TaskSpec("AX", "classification", GLUE_TASKS["MNLI"].labels, splits={"test": "diagnostic.tsv"},
                           **_PAIR, **_ACC)
# (task, test split) → the file the leaderboard expects that split's predictions in; a submission zips them.
GLUE_SUBMISSION_FILES: dict[tuple[str, str], str] = {
    **{(name, "test"): f"{name}.tsv" for name in GLUE_TASKS if name != "MNLI"},
    ("MNLI", "test_matched"): "MNLI-m.tsv", ("MNLI", "test_mismatched"): "MNLI-mm.tsv", ("AX", "test"): "AX.tsv",
}
# fmt: on


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
    if path.suffix == ".jsonl":
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


def load_split(
    spec: TaskSpec,
    folder: str | Path,
    split: str,
    stats: LoadStats | None = None,
    lines: tuple[str, ...] | None = None,
) -> list[Example]:
    """Reads one split of a task.

    Args:
        spec: The task, from ``GLUE_TASKS`` or ``generic_task``.
        folder: The task's folder (for GLUE, ``<glue_dir>/<spec.name>``).
        split: A key of ``spec.splits``. Splits named ``test*`` may lack the label column (labels are then None).
        stats: If given, the rows read and malformed rows skipped are added to it.
        lines: The file's lines when they were read already (``read_generic_task`` reads the train file).

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
    examples = [_example(spec, path, split, line, record, required, unlabelled_ok) for line, record in records]
    if not examples:
        raise TaskDataError(f"{path}: no examples; expected at least one data row for split {split!r}")
    if stats.skipped_malformed:
        log.warning("%s: skipped %d malformed rows so far (wrong field count)", path, stats.skipped_malformed)
    return examples


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


def _glue_key(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


def glue_name(name: str) -> str | None:
    """The GLUE task ``name`` means in any case, with or without GLUE's hyphen (Hugging Face's ``sst2``,
    ``stsb``, ``cola`` and GLUE's ``SST-2``, ``sts-b``), or None for any other name."""
    return next((task for task in GLUE_TASKS if _glue_key(task) == _glue_key(name)), None)


def _unknown_task(name: str) -> TaskDataError:
    if _glue_key(name) == "ax":
        return TaskDataError("AX is scored by the MNLI model: evaluate MNLI with <glue_dir>/diagnostic/diagnostic.tsv")
    # What a typo was probably meant to be: a GLUE name in either spelling, or a folder beside the one named
    known = {spelling: task for task in GLUE_TASKS for spelling in (task.lower(), _glue_key(task))}
    parent = Path(name).parent
    if len(Path(name).parts) > 1 and parent.is_dir():
        known.update({str(p).lower(): str(p) for p in parent.iterdir() if p.is_dir()})
    meant = difflib.get_close_matches(name.lower(), list(known), n=1)
    hint = f"; did you mean {known[meant[0]]!r}?" if meant else ""
    return TaskDataError(f"unknown task {name!r}: neither a GLUE task {tuple(GLUE_TASKS)} nor a task folder{hint}")


def resolve_task(name: str, glue_dir: str | Path | None) -> tuple[TaskSpec, Path]:
    """The task a command line names, and its folder.

    Args:
        name: A GLUE task in GLUE's or Hugging Face's spelling (read from ``glue_dir/<GLUE's name>``), or a task
            folder in the generic layout (``generic_task``). A folder named like a GLUE task is given as a path
            (``./cola``).
        glue_dir: The folder holding GLUE's task folders; None when no GLUE task is wanted.

    Raises:
        TaskDataError: A GLUE name without ``glue_dir``, or a name that is neither; the message says which known
            name was probably meant.
    """
    glue = glue_name(name)
    if glue is not None:
        if glue_dir is None:
            raise TaskDataError(f"task {name!r} is a GLUE task: set glue_dir to the folder holding {glue}/")
        return GLUE_TASKS[glue], Path(glue_dir) / glue
    if not Path(name).is_dir():
        raise _unknown_task(name)
    return generic_task(name), Path(name)


def task_split_files(name: str, glue_dir: str | Path | None, config: dict[str, Any]) -> dict[str, SplitFile]:
    """The split files of the task ``name`` denotes (``resolve_task``), each file read at most once: a folder's
    ``task.json`` is ``config`` (read already) and its train file's lines, read for the labels, are kept."""
    if glue_name(name) is None and Path(name).is_dir():
        spec, lines = read_generic_task(name, config)
        return run_splits(spec, name, lines)
    return run_splits(*resolve_task(name, glue_dir))


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
        """The split's examples (``load_split``)."""
        return load_split(self.spec, self.folder, self.split, lines=self.lines)

    @property
    def submission_file(self) -> str | None:
        """The GLUE leaderboard's file name for this split's predictions; None but for GLUE's own test files."""
        glue = self.spec is GLUE_DIAGNOSTIC or GLUE_TASKS.get(self.spec.name) is self.spec
        return GLUE_SUBMISSION_FILES.get((self.spec.name, self.split)) if glue else None


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
