"""What a downstream task is (``TaskSpec``), and the nine GLUE tasks with the paper's fine-tuning settings.

``GLUE_TASKS`` holds GLUE's tasks with the files and columns of their standard distribution (read from
``<glue_dir>/<TaskSpec.name>/train.tsv`` … by ``task_files``), ``GLUE_DIAGNOSTIC`` the AX set that MNLI runs
predict, and ``GLUE_SUBMISSION_FILES`` what the leaderboard calls each test split's predictions. Users' own tasks
get their ``TaskSpec`` from their folder (``task_files.generic_task``). Pure Python: no torch, no Beam, so the
report and tests use it without a model.
Tests: ``python -m pytest tests/test_task_files.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "CLASSIFICATION_METRICS",
    "GLUE_DIAGNOSTIC",
    "GLUE_SUBMISSION_FILES",
    "GLUE_TASKS",
    "KINDS",
    "METRIC_NAMES",
    "REGRESSION_METRICS",
    "TaskSpec",
]

KINDS = ("classification", "regression")
# Implemented in metrics.py; listed here so a TaskSpec is checked without importing scikit-learn.
CLASSIFICATION_METRICS = ("accuracy", "f1", "f1_accuracy_mean", "matthews_correlation")
REGRESSION_METRICS = ("pearson", "spearman", "pearson_spearman_mean")
METRIC_NAMES = CLASSIFICATION_METRICS + REGRESSION_METRICS


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
    benchmark: str | None = None  # "clue" for CLUE's tasks (``clue_files``): their reader and submission files

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
