"""Tasks stage: segmented documents of the embedded default corpus → downstream evaluation tasks → ``data/tasks/``.

Run: ``python -m pipelines.tasks --input data/sentences --output data/tasks`` (Beam options may follow).
Two labelled tasks come from the ``meta`` that ``pydocs`` gives every embedded document, so ``dvc repro`` can
evaluate a pretrained model with no download:

- ``package`` (single text): passage → the top-level package it documents (``torch``, ``scipy``, ``email``…),
  among the ``num_packages`` packages with most documents (ties by name); documents of other packages are not
  used. On the embedded default with ``num_packages: 6`` these are the six libraries the project installs.
- ``returns`` (span extraction, SQuAD's layout): "what does ``module.qualname`` return?" over a function's or
  method's docstring (its first ``span_passage_sentences`` sentences) → the object of its "Return(s) …"
  sentence (``return_questions``). Written as ``returns/{train,dev,test}.json``.

A passage is a document's first ``passage_sentences`` sentences joined by spaces; the segment stage already
normalised them as AlbertTokenizer would (``textnorm``), so the evaluation tokenises passages as they are.
Identical passages (a docstring repeated on a property setter) are kept once, under the smallest id. Packages
with fewer than ``min_package_documents`` documents are dropped: too small to be a class.

Splits are by document, the one split of every stage (``pipelines.splits``): training documents give the
training examples, held-out documents (never pretrained on) the dev and test examples, so a score measures
transfer to unseen text, not recall. The input should be the dedup stage's output, whose held-out documents
share no sentence with training documents; its recorded ``held_out_fraction`` must equal this stage's.
Outputs: per task ``<task>/{train,dev,test}.jsonl`` (``text``, ``label`` as a string, source ``id``; rows in a
stable hash order), then ``<task>/task.json``; last ``stats.json`` (examples per split and label, counters).
Documents whose ``meta`` lacks package or module (user corpora) are counted and skipped; when none has them
the stage fails and leaves no output.

``same_module`` (do two passages document the same module?) was dropped: both starts stayed at chance at every
size, so its rows measured nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import apache_beam as beam

from pipelines import files, progress
from pipelines.commands import main
from pipelines.documents import STATS, finished_files, read_split_stats
from pipelines.hashes import stable_hash64
from pipelines.options import parse_stage_args, work_per_input_mb
from pipelines.return_questions import return_question
from pipelines.splits import SPLITS, check_fraction, split_of
from pipelines.stage import Counted, Counters, owning_outputs, run_and_count

__all__ = ["BuildReturnsTask", "BuildTasks", "TasksConfig", "run", "top_packages"]

TASKS = ("package", "returns")
SPAN_TASKS = ("returns",)  # written in SQuAD's JSON layout, one file per split; the others as JSON Lines
COUNTERS = Counters(
    "tasks",
    *"documents documents_without_module_meta duplicate_passages small_package_documents other_package_documents "
    "package_examples return_questions duplicate_contexts".split(),
)

# Single-core seconds per MB of sentence files that more workers can share (reading the files, bench/startup.py):
# pairing runs once per split, most of it in train's one element, so workers share little of it. Sizes Beam's
# local runner.
PARALLEL_CPU_S_PER_MB = 0.1


@dataclass
class TasksConfig:
    """The tasks stage's knobs (params.yaml section ``tasks``)."""

    seed: int = field(default=12345, metadata={"help": "seed of the rows' order in each file"})
    min_package_documents: int = field(default=10, metadata={"help": "drop smaller packages from both tasks"})
    num_packages: int = field(default=8, metadata={"help": "classes of the package task (largest packages)"})
    passage_sentences: int = field(default=3, metadata={"help": "a passage is a document's first k sentences"})
    span_passage_sentences: int = field(default=8, metadata={"help": "returns: the context's first k sentences"})
    held_out_fraction: float = field(
        default=0.2, metadata={"help": "share of documents held out, half dev, half test (top-level param)"}
    )

    def __post_init__(self) -> None:
        for name in ("min_package_documents", "num_packages", "passage_sentences", "span_passage_sentences"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        check_fraction(self.held_out_fraction)


def _read_passages(path: str, config: TasksConfig) -> Iterator[tuple[str, dict]]:
    """Yields (passage text, passage) for each document of one sentences file that has package/module meta."""
    for row in files.read_parquet(path).to_pylist():
        COUNTERS.inc("documents")
        meta = json.loads(row["meta"])
        if not meta.get("package") or not meta.get("module"):
            COUNTERS.inc("documents_without_module_meta")
            continue
        text = " ".join(row["sentences"][: config.passage_sentences])
        split = split_of(row["id"], config.held_out_fraction)
        passage = {"id": row["id"], "text": text, "package": meta["package"]}
        yield text, {**passage, "split": split}
    progress.advance()


def _first_by_id(element: tuple[str, Iterable[dict]], counter: str = "duplicate_passages") -> dict:
    # Equal texts in two splits would leak test passages into training; equal texts with two labels are noise.
    passages = sorted(element[1], key=lambda p: p["id"])
    COUNTERS.inc(counter, len(passages) - 1)
    return passages[0]


def _read_return_questions(path: str, config: TasksConfig) -> Iterator[tuple[str, dict]]:
    """Yields (context, question) for each documented function of one sentences file that says what it returns."""
    for row in files.read_parquet(path).to_pylist():
        meta = json.loads(row["meta"])
        question = return_question(row["id"], row["sentences"], meta, config.span_passage_sentences)
        if question is not None:
            COUNTERS.inc("return_questions")
            yield (
                question["context"],
                {**question, "split": split_of(row["id"], config.held_out_fraction)},
            )


class BuildReturnsTask(beam.PTransform):
    """Sentences file paths → (("returns", split), question): the span task, one question per docstring."""

    def __init__(self, config: TasksConfig):
        super().__init__()
        self._config = config

    def expand(self, paths: beam.PCollection) -> beam.PCollection:
        return (
            paths
            | "ReadReturnQuestions" >> Counted(beam.FlatMap(_read_return_questions, self._config))
            | "GroupByContext" >> beam.GroupByKey()
            | "DropDuplicateContexts" >> Counted(beam.Map(_first_by_id, "duplicate_contexts"))
            | "KeyBySplit" >> beam.Map(lambda q: (("returns", q.pop("split")), q))
        )


def top_packages(counts: dict[str, int], num_packages: int, min_documents: int) -> list[str]:
    """Returns the sorted names of the ``num_packages`` largest packages with at least ``min_documents``."""
    eligible = sorted((-n, name) for name, n in counts.items() if n >= min_documents)
    return sorted(name for _, name in eligible[:num_packages])


def _package_verdicts(counts: list[tuple[str, int]], num_packages: int, min_documents: int) -> Iterator[tuple]:
    """Yields (package, verdict): "label" for the ``top_packages``, "small" under ``min_documents``, else "other"."""
    labels = top_packages(dict(counts), num_packages, min_documents)
    for package, n in counts:
        yield package, "label" if package in labels else "small" if n < min_documents else "other"


class JudgePackages(beam.PTransform):
    """Passages → (package, {"passages": its passages, "verdict": [its verdict]}), verdicts ``_package_verdicts``.

    The package counts reach the passages through a join by package, not side inputs, which the Dask runner gets
    wrong (``pipelines.stage``).
    """

    def __init__(self, config: TasksConfig):
        super().__init__()
        self._config = config

    def expand(self, passages: beam.PCollection) -> beam.PCollection:
        n, least = self._config.num_packages, self._config.min_package_documents
        verdicts = (
            passages
            | "Packages" >> beam.Map(lambda p: p["package"])
            | "CountPackages" >> beam.combiners.Count.PerElement()
            | "ListCounts" >> beam.combiners.ToList().without_defaults()
            | "Verdicts" >> beam.FlatMap(_package_verdicts, n, least)
        )
        keyed = passages | "KeyByPackage" >> beam.Map(lambda p: (p["package"], p))
        return {"passages": keyed, "verdict": verdicts} | "JoinVerdicts" >> beam.CoGroupByKey()


def _package_examples(judged: tuple[str, dict[str, list]]) -> Iterator[tuple[tuple[str, str], dict]]:
    _, grouped = judged
    if grouped["verdict"] != ["label"]:
        COUNTERS.inc(f"{grouped['verdict'][0]}_package_documents", len(grouped["passages"]))
        return
    for passage in grouped["passages"]:
        COUNTERS.inc("package_examples")
        yield ("package", passage["split"]), {"id": passage["id"], "text": passage["text"], "label": passage["package"]}


class BuildTasks(beam.PTransform):
    """Sentences file paths → ((task, split), row) for every task, from documents with package/module meta."""

    def __init__(self, config: TasksConfig):
        super().__init__()
        self._config = config

    def expand(self, paths: beam.PCollection) -> beam.PCollection:
        config = self._config
        passages = (
            paths
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadPassages" >> Counted(beam.FlatMap(_read_passages, config))
            | "GroupByText" >> beam.GroupByKey()
            | "DropDuplicatePassages" >> Counted(beam.Map(_first_by_id))
        )
        judged = passages | "JudgePackages" >> JudgePackages(config)
        single = judged | "BuildPackageTask" >> Counted(beam.FlatMap(_package_examples))
        spans = paths | "BuildReturnsTask" >> BuildReturnsTask(config)
        return (single, spans) | "AllTasks" >> beam.Flatten()


def _write_split(element: tuple[tuple[str, str], Iterable[dict | None]], output: str, seed: int) -> str:
    """Writes one ``<task>/<split>.jsonl``, rows in a stable hash order (mixed labels, same on every run)."""
    (task, split), rows = element
    kept = sorted((r for r in rows if r is not None), key=lambda r: (stable_hash64(seed, task, r["id"]), r["id"]))
    if task in SPAN_TASKS:
        text, path = json.dumps(_squad_layout(kept), sort_keys=True, ensure_ascii=False), f"{split}.json"
    else:
        text, path = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in kept), f"{split}.jsonl"
    path = files.join(output, task, path)
    files.write_bytes_atomically(path, text.encode("utf-8"))
    return path


def _squad_layout(questions: list[dict]) -> dict:
    """SQuAD's JSON (articles → paragraphs → questions): one article of one paragraph per docstring."""
    articles = [
        {"title": q["title"], "paragraphs": [{"context": q["context"], "qas": [
            {"id": q["id"], "question": q["question"], "answers": q["answers"]}
        ]}]}
        for q in questions
    ]  # fmt: skip
    return {"version": "1.1", "data": articles}


def _task_spec(task: str, splits: dict[str, dict]) -> dict:
    """Returns ``task.json``, the generic keys the evaluation code reads (it rejects any other key)."""
    if task in SPAN_TASKS:
        return {"kind": "span", "metrics": ["f1", "exact"], "primary": "f1"}
    labels = sorted({label for split in splits.values() for label in split["labels"]})
    spec = {"kind": "classification", "labels": labels, "text_a": "text", "text_b": None, "label": "label"}
    return spec | {"metrics": ["accuracy"], "primary": "accuracy"}


def _outputs() -> list[str]:
    return [f"{task}/{name}" for task in TASKS for name in ("*.json*", ".tmp-*")]


def _split_stats(output: str, task: str) -> dict[str, dict]:
    """Reads one task's written splits back: examples and examples per label."""
    stats = {}
    for split in SPLITS:
        if task in SPAN_TASKS:
            data = json.loads(files.read_bytes(files.join(output, task, f"{split}.json")))
            stats[split] = {"examples": sum(len(p["qas"]) for a in data["data"] for p in a["paragraphs"])}
            continue
        data = files.read_bytes(files.join(output, task, f"{split}.jsonl")).decode("utf-8")
        labels = collections.Counter(json.loads(line)["label"] for line in data.splitlines())
        stats[split] = {"examples": sum(labels.values()), "labels": dict(sorted(labels.items()))}
    return stats


def run(argv: list[str] | None = None) -> dict:
    """Runs the tasks stage and returns what it wrote to ``stats.json``.

    Raises:
        ValueError: no input document has ``package`` and ``module`` meta (not the embedded default corpus).
    """
    paths = {"input": "segment stage output folder", "output": "folder for <task>/*.jsonl, task.json, stats.json"}
    args = parse_stage_args(
        argv, TasksConfig, "tasks", paths, __doc__.splitlines()[0], work_per_input_mb(PARALLEL_CPU_S_PER_MB)
    )
    config, output = args.config, args.paths["output"]
    inputs = finished_files(args.paths["input"], "sentences")
    read_split_stats(args.paths["input"], config.held_out_fraction)  # its held-out documents must be ours
    with owning_outputs(output, STATS, _outputs()):
        pipeline = beam.Pipeline(options=args.beam)
        rows = pipeline | "ListSentenceFiles" >> beam.Create(inputs) | "BuildTasks" >> BuildTasks(config)
        every = pipeline | "EverySplit" >> beam.Create([((t, s), None) for t in TASKS for s in SPLITS])
        _ = (
            (rows, every)
            | "WithEmptySplits" >> beam.Flatten()
            | "GroupBySplit" >> beam.GroupByKey()
            | "WriteSplits" >> beam.Map(_write_split, output, config.seed)
        )
        with progress.shown("tasks", len(inputs), "files", args.beam):  # the files read; pairing follows
            counters = run_and_count(pipeline, output, COUNTERS)
        if counters["documents"] == counters["documents_without_module_meta"]:
            raise ValueError(
                f"{args.paths['input']}: no document has 'package' and 'module' in its meta; the tasks stage "
                "needs the embedded default corpus (corpus stage without inputs) or documents with those fields"
            )
        tasks = {task: _split_stats(output, task) for task in TASKS}
        for task, splits in tasks.items():
            files.write_json_atomically(files.join(output, task, "task.json"), _task_spec(task, splits))
        stats = {"config": dataclasses.asdict(config), "counters": counters, "tasks": tasks}
        files.write_json_atomically(files.join(output, STATS), stats)
    return stats


if __name__ == "__main__":
    main(run, "tasks", beam=True)
