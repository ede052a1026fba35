"""Tasks stage: segmented documents → downstream evaluation tasks → ``data/tasks/``.

Run: ``python -m pipelines.tasks --input data/deduped --output data/tasks`` (Beam options may follow).
Tasks come from what the corpus carries in each document's ``meta``, so ``dvc repro`` evaluates a pretrained
model with no download:

- a single-text classification task named for ``label_field`` (params.yaml ``tasks.label_field``): passage → the
  class the corpus stage carried as ``meta["label"]`` from a JSON Lines key, a Parquet column or the input file's
  folder (``folder``; ``pipelines.readers.labels``). Unset, the embedded default's own field, ``package``: the top-level
  package a docstring documents (``torch``, ``scipy``, ``email``…; ``pydocs``' meta). A field of the embedded
  default's docstring meta (``kind``, ``module``) works the same way. The classes are the ``num_classes`` with
  most documents (ties by name) among those with at least ``min_class_documents`` (smaller ones are too small
  to be a class); documents of other classes are not used. On the embedded default with ``num_classes: 6`` they
  are the six libraries the project installs.
- ``returns`` (span extraction, SQuAD's layout), from the embedded default's docstring meta alone: "what does
  ``module.qualname`` return?" over a function's or method's docstring (its first ``span_passage_sentences``
  sentences) → the object of its "Return(s) …" sentence (``return_questions``). Written as
  ``returns/{train,dev,test}.json``.

A passage is a document's first ``passage_sentences`` sentences joined by spaces; the segment stage already
normalised them as AlbertTokenizer would (``textnorm``), so the evaluation tokenises passages as they are.
Identical passages (a docstring repeated on a property setter) are kept once, under the smallest id.

Splits are by document, the one split of every stage (``pipelines.algorithms.splits``): training documents give the
training examples, held-out documents (never pretrained on) the dev and test examples, so a score measures
transfer to unseen text, not recall. The input should be the dedup stage's output, whose held-out documents
share no sentence with training documents; its recorded ``held_out_fraction`` must equal this stage's.
Outputs: per task ``<task>/{train,dev,test}.jsonl`` (``text``, ``label`` as a string, source ``id``; rows in a
stable hash order), then ``<task>/task.json``; last ``stats.json``: ``tasks``, the tasks written (what the
leakage stage and ``evaluate`` read) with examples per split and label, counters, and ``skipped``, why a task
was not written (no labelled document, fewer than two classes, an empty split). A corpus that gives no task is
no error: ``tasks`` is then empty and ``reason`` says why, and ``evaluate`` reports the intrinsic scores alone.
Documents without a label (``unlabelled_documents``) are counted and skipped.

``same_module`` (do two passages document the same module?) was dropped: both starts stayed at chance at every
size, so its rows measured nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines.algorithms.return_questions import return_question
from pipelines.algorithms.splits import SPLITS, HeldOutSplit, split_of
from pipelines.contracts.documents import STATS, finished_files, read_split_stats, require_deduped
from pipelines.readers.labels import check_label_field
from pipelines.runtime import files, progress
from pipelines.runtime.commands import main
from pipelines.runtime.options import input_mb, parse_stage_args, work_per_input_mb
from pipelines.runtime.outputs import check_outputs, owning_outputs
from pipelines.runtime.spill import Spill, ThenEach, even_ranges
from pipelines.runtime.stage import Counted, Counters, run_and_count, sum_counts
from pipelines.steps import tasks as steps

__all__ = ["BuildTasks", "TasksConfig", "document_label", "run", "task_names", "top_classes"]

SPAN_TASKS = ("returns",)  # written in SQuAD's JSON layout, one file per split; the others as JSON Lines
DEFAULT_LABEL_FIELD = "package"  # the embedded default's own field: pydocs' meta["package"]
COUNTERS = Counters(
    "tasks",
    *"documents unlabelled_documents other_field_documents duplicate_passages small_class_documents "
    "other_class_documents classification_examples return_questions duplicate_contexts".split(),
)

# Single-core seconds per MB of sentence files that more workers can share (reading the files, bench/startup.py):
# pairing runs once per split, most of it in train's one element, so workers share little of it. Sizes Beam's
# local runner.
PARALLEL_CPU_S_PER_MB = 0.1
SPILL = ".tmp-spill"  # the candidates between the steps; the stage deletes it whether it fails or not
# A task per TASK_MB of sentence files (at least MIN_TASKS), a slice of text keys per SLICE_MB: a worker holds one
# file's candidates or one slice's, however large the corpus.
TASK_MB, SLICE_MB, MIN_TASKS = 64, 16, 8
WRITE_MB = 4  # of sentence files per range of a split's order key: a writer holds one range's rows


@dataclass
class TasksConfig(HeldOutSplit):
    """The tasks stage's knobs (params.yaml section ``tasks``)."""

    seed: int = field(default=12345, metadata={"help": "seed of the rows' order in each file"})
    label_field: str | None = field(
        default=None, metadata={"help": "the class the corpus carried (key, column, 'folder'); unset: package"}
    )
    min_class_documents: int = field(default=10, metadata={"help": "drop classes with fewer documents"})
    num_classes: int = field(default=8, metadata={"help": "classes of the classification task (the largest)"})
    passage_sentences: int = field(default=3, metadata={"help": "a passage is a document's first k sentences"})
    span_passage_sentences: int = field(default=8, metadata={"help": "returns: the context's first k sentences"})

    def __post_init__(self) -> None:
        for name in ("min_class_documents", "num_classes", "passage_sentences", "span_passage_sentences"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        super().__post_init__()
        check_label_field(self.label_field, SPAN_TASKS)


def task_names(config: TasksConfig) -> tuple[str, ...]:
    """The tasks the stage builds, if the corpus gives them: the classification task, named for its field, and
    the span tasks."""
    return (config.label_field or DEFAULT_LABEL_FIELD, *SPAN_TASKS)


def document_label(meta: dict, label_field: str) -> str | None:
    """A document's class under ``label_field``: the label the corpus stage carried from an input file, or for
    the embedded default (docstring meta: a ``module``) the meta's own field; None without one."""
    if "label_field" in meta:
        return meta["label"] if meta["label_field"] == label_field else None
    value = meta.get(label_field) if meta.get("module") else None
    return value if isinstance(value, str) and value else None


def _candidates(index: int, paths: list[str], config: TasksConfig) -> Iterator[tuple[str, str, dict, str, str]]:
    """Yields (kind, text, row, label, split) for input file ``index``: its labelled documents' passages and its
    docstrings' return questions (``steps.tasks.spill_candidates`` keys each by its text)."""
    label_field = task_names(config)[0]
    for row in files.read_parquet(paths[index]).to_pylist():
        COUNTERS.inc("documents")
        meta = json.loads(row["meta"])
        split = split_of(row["id"], config.held_out_fraction)
        question = return_question(row["id"], row["sentences"], meta, config.span_passage_sentences)
        if question is not None:
            COUNTERS.inc("return_questions")
            yield "questions", question["context"], question, "", split
        label = document_label(meta, label_field)
        if label is None:
            COUNTERS.inc("unlabelled_documents")
            COUNTERS.inc("other_field_documents", int(meta.get("label_field", label_field) != label_field))
            continue
        text = " ".join(row["sentences"][: config.passage_sentences])
        yield "passages", text, {"id": row["id"], "text": text, "label": label}, label, split
    progress.advance()


def top_classes(counts: dict[str, int], num_classes: int, min_documents: int) -> list[str]:
    """Returns the sorted names of the ``num_classes`` largest classes with at least ``min_documents``."""
    eligible = sorted((-n, name) for name, n in counts.items() if n >= min_documents)
    return sorted(name for _, name in eligible[:num_classes])


class BuildTasks(beam.PTransform):
    """The pipeline's root → every ``<task>/<split>`` file of the sentences files ``paths`` written under
    ``output``; yields their paths. Through ``spill`` (``steps.tasks``) in steps that each start once the one
    before is done, so a worker holds one file's candidates, one slice's or one range of a split's rows."""

    def __init__(self, config: TasksConfig, paths: list[str], megabytes: float, output: str, spill: Spill):
        super().__init__()
        self._config, self._paths, self._output, self._spill = config, paths, output, spill
        self._slices = max(1, math.ceil(megabytes / SLICE_MB))
        tasks = max(MIN_TASKS, math.ceil(megabytes / TASK_MB))
        self._groups, self._ranges = even_ranges(len(paths), tasks), even_ranges(self._slices, tasks)
        self._parts = max(MIN_TASKS, math.ceil(megabytes / WRITE_MB))  # ranges of each split's order key

    def _choose(self, counts: dict[str, int]) -> list[str]:
        return top_classes(counts, self._config.num_classes, self._config.min_class_documents)

    def expand(self, root: beam.pvalue.PBegin) -> beam.PCollection:
        config, spill, groups, ranges = self._config, self._spill, self._groups, self._ranges
        names, parts = task_names(config), self._parts
        read = functools.partial(_candidates, paths=self._paths, config=config)
        spilled = Counted(beam.FlatMap(steps.spill_candidates, groups, read, spill, self._slices))
        kept = Counted(beam.FlatMap(steps.keep_first, ranges, spill, names, config.seed, parts, COUNTERS))
        judged = Counted(beam.Map(steps.judge_classes, spill, self._choose, config.min_class_documents, COUNTERS))
        splits = [(kind, name, split) for kind, name in enumerate(names) for split in SPLITS]
        write = Counted(beam.FlatMap(steps.write_split, spill, self._output, parts, COUNTERS))
        return (
            root
            | "EachFileGroup" >> beam.Create(range(len(groups)))
            | "SpreadFiles" >> beam.Reshuffle()
            | "SpillCandidates" >> spilled
            | "ThenEachSliceRange" >> ThenEach(len(ranges))
            | "KeepFirstOfEachText" >> kept
            | "CountClasses" >> beam.CombineGlobally(sum_counts).without_defaults()
            | "JudgeClasses" >> judged
            | "ThenEachSplit" >> ThenEach(len(splits))
            | "Splits" >> beam.Map(lambda i, splits: splits[i], splits)
            | "WriteSplits" >> write
        )


def _task_spec(task: str, splits: dict[str, dict]) -> dict:
    """Returns ``task.json``, the generic keys the evaluation code reads (it rejects any other key)."""
    if task in SPAN_TASKS:
        return {"kind": "span", "metrics": ["f1", "exact"], "primary": "f1"}
    labels = sorted({label for split in splits.values() for label in split["labels"]})
    spec = {"kind": "classification", "labels": labels, "text_a": "text", "text_b": None, "label": "label"}
    return spec | {"metrics": ["accuracy"], "primary": "accuracy"}


def _outputs(names: tuple[str, ...]) -> list[str]:
    return [f"{task}/{name}" for task in names for name in ("*.json*", ".tmp-*")]


def _earlier_tasks(output: str) -> list[str]:
    """The tasks whose folders an earlier run left in ``output`` (built or skipped, by its stats.json): the stage's
    own, to clear with this run's, as a run with another label_field writes other folders."""
    path = files.join(output, STATS)
    try:
        stats = json.loads(files.read_bytes(path)) if files.exists(path) else {}
        named = [*stats.get("tasks", {}), *stats.get("skipped", {})]
    except (ValueError, TypeError, AttributeError):  # not this stage's stats: it names no folder of ours
        return []
    return [name for name in named if isinstance(name, str) and _folder_name(name)]


def _folder_name(name: str) -> bool:
    try:
        return check_label_field(name) is not None
    except ValueError:  # not a name the stage gives a task's folder
        return False


def _split_stats(output: str, task: str) -> dict[str, dict]:
    """Reads one task's written splits back: examples and examples per label."""
    stats = {}
    for split in SPLITS:
        if task in SPAN_TASKS:
            data = json.loads(files.read_bytes(files.join(output, task, f"{split}.json")))
            stats[split] = {"examples": sum(len(p["qas"]) for a in data["data"] for p in a["paragraphs"])}
            continue
        path = files.join(output, task, f"{split}.jsonl")
        # A line at a time: the training split of a corpus holds most of its labelled documents' passages.
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            labels = collections.Counter(json.loads(line)["label"] for line in io.TextIOWrapper(f, encoding="utf-8"))
        stats[split] = {"examples": sum(labels.values()), "labels": dict(sorted(labels.items()))}
    return stats


def _skip_reason(task: str, splits: dict[str, dict], config: TasksConfig, counters: dict[str, int]) -> str | None:
    """Why a built task is not written (it would measure nothing, or fail evaluate's reading), or None."""
    if task in SPAN_TASKS and not counters["return_questions"]:
        return f"no docstring says what it returns (the {task} task asks about the embedded default's)"
    if task not in SPAN_TASKS and counters["documents"] == counters["unlabelled_documents"]:
        if counters["other_field_documents"]:  # a corpus stage run with another label_field than this stage's
            return (
                f"no document has a '{task}' label, but {counters['other_field_documents']} have another field's: "
                "give the corpus and tasks stages the same tasks.label_field"
            )
        if config.label_field is None:
            return "no label_field set and no embedded-default metadata"
        return f"no document has a '{task}' label"
    if task not in SPAN_TASKS and len(splits["train"]["labels"]) < 2:
        return f"'{task}': fewer than two classes of at least {config.min_class_documents} documents in training"
    empty = [split for split in SPLITS if not splits[split]["examples"]]
    return f"'{task}': no {' or '.join(empty)} examples; too few documents" if empty else None


def run(argv: list[str] | None = None) -> dict:
    """Runs the tasks stage and returns what it wrote to ``stats.json``: no task, with the ``reason``, when the
    corpus gives none."""
    paths = {"input": "dedup stage output folder", "output": "folder for <task>/*.jsonl, task.json, stats.json"}
    args = parse_stage_args(
        argv, TasksConfig, "tasks", paths, __doc__.splitlines()[0], work_per_input_mb(PARALLEL_CPU_S_PER_MB)
    )
    config, output = args.config, args.paths["output"]
    names = task_names(config)
    owned = _outputs((*names, *(task for task in _earlier_tasks(output) if task not in names)))
    check_outputs(args.paths, {"output": [STATS, *owned]})
    inputs = finished_files(args.paths["input"], "sentences")
    require_deduped(args.paths["input"], args.allow_undeduped)  # its held-out documents repeat no training text
    read_split_stats(args.paths["input"], config.held_out_fraction)  # its held-out documents must be ours
    spill = Spill(files.join(output, SPILL))
    spill.delete()  # an earlier run's, killed before it could
    with owning_outputs(output, STATS, owned):
        pipeline = beam.Pipeline(options=args.beam)
        megabytes = input_mb(args.paths["input"], "sentences-*.parquet")
        _ = pipeline | "BuildTasks" >> BuildTasks(config, inputs, megabytes, output, spill)
        with progress.shown("tasks", len(inputs), "files", args.beam):  # the files read; pairing follows
            try:
                counters = run_and_count(pipeline, output, COUNTERS)
            finally:
                spill.delete()
        built = {task: _split_stats(output, task) for task in names}
        skipped = {task: why for task, splits in built.items() if (why := _skip_reason(task, splits, config, counters))}
        files.delete_matching(output, [f"{task}/*.json*" for task in skipped])
        tasks = {task: splits for task, splits in built.items() if task not in skipped}
        for task, splits in tasks.items():
            files.write_json_atomically(files.join(output, task, "task.json"), _task_spec(task, splits))
        stats = {"config": dataclasses.asdict(config), "counters": counters, "tasks": tasks, "skipped": skipped}
        if not tasks:  # no error: evaluate reports the intrinsic scores, and says why there is no task
            stats["reason"] = "; ".join(skipped.values())
        files.write_json_atomically(files.join(output, STATS), stats)
    return stats


if __name__ == "__main__":
    main(run, "tasks", beam=True)
