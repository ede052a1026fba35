"""Leakage stage: how much held-out text the model trained on → ``data/leakage/metrics.json`` (DVC metrics).

Run: ``python -m pipelines.leakage --sentences data/deduped --shards data/shards --tasks data/tasks
--output data/leakage [--segmented data/sentences]`` (Beam options may follow).

Scores are meant to be measured on text the model never read. This stage measures, from the files themselves,
how far that holds, so a regression shows in ``dvc metrics diff``:

- ``sentences``: of the sentences of held-out documents (``pipelines.algorithms.splits``) in ``--sentences``
  (the documents every later stage reads), the share that also occur verbatim in a training document, by count
  and by characters. Each occurrence in a held-out document counts once, as seen when the same text is in any
  training document. The headline, ``passage_*``, counts only sentences of at least ``passage_words`` words
  (``passages.word_count``): text long enough to identify a passage, the floor the dedup stage's
  shared-passage rule keeps out of training, read from the dedup config recorded in ``--sentences``'
  ``stats.json``. A shared "yes." or "returns." is language, not leakage. ``all_*`` counts every sentence
  whatever its length, beside it. ``--segmented`` (the segment stage's output, before deduplication) gives
  the same figures, at the same floor, as ``sentences_before_dedup``, so the effect of the dedup stage is on
  record.
- ``tasks``: per task and held-out split, the documents its examples come from, and how many of them are in
  the training shards (the ``document_id`` column of ``--shards``' training split); ``held_out_in_training``
  counts training-shard documents that the split holds out. Both should be 0.

Every count is exact (no sampling); the sentences are grouped by their text, so no worker holds the corpus.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator

import apache_beam as beam
import pyarrow as pa

from pipelines.algorithms.passages import word_count
from pipelines.algorithms.splits import HELD_OUT, HeldOutSplit, is_held_out
from pipelines.contracts.documents import STATS, finished_files, read_split_stats, read_stats
from pipelines.contracts.manifest import Manifest
from pipelines.runtime import files, progress
from pipelines.runtime.commands import main
from pipelines.runtime.options import input_mb, parse_stage_args
from pipelines.runtime.outputs import check_outputs, owning_outputs
from pipelines.runtime.stage import Counted, Counters, run_and_count_each

__all__ = ["CountSentenceLeakage", "CountTaskLeakage", "LeakageConfig", "run"]

METRICS = "metrics.json"
# Single-core seconds per MB of sentence files, in-process: reading them and grouping every sentence by its text.
# Sizes Beam's local runner.
CPU_S_PER_MB = 1.0
COUNTS = ("held_out_sentences", "seen_in_training", "held_out_chars", "seen_chars")
# Every sentence (all_*), then the sentences of at least the dedup stage's passage_words words (passage_*).
SENTENCE_COUNTS = tuple(f"{kind}_{count}" for kind in ("all", "passage") for count in COUNTS)


@dataclasses.dataclass
class LeakageConfig(HeldOutSplit):
    """The leakage stage's one knob: the split it checks (the top-level param every stage shares)."""


def _sentence_sides(path: str, fraction: float) -> Iterator[tuple[str, tuple[int, int]]]:
    """Yields (sentence, (occurrences in held-out documents, in training documents)) for one sentences file."""
    table = files.read_parquet(path, columns=["id", "sentences"])
    columns = table.column("id").to_pylist(), table.column("sentences").to_pylist()
    for document_id, sentences in zip(*columns, strict=True):
        side = (1, 0) if is_held_out(document_id, fraction) else (0, 1)
        for sentence in sentences:
            yield sentence, side
    progress.advance()


def _leaked(element: tuple[str, tuple[int, int]], min_words: int) -> tuple[int, ...]:
    """One sentence's (held-out occurrences, of them seen in training, their chars, seen chars), twice: for every
    sentence, then again if it has ``min_words`` words or more (else zeros)."""
    sentence, (held_out, training) = element
    seen = held_out if training else 0
    counts = (held_out, seen, held_out * len(sentence), seen * len(sentence))
    return counts + (counts if word_count(sentence) >= min_words else (0, 0, 0, 0))


def _sum_columns(rows: Iterable[tuple[int, ...]]) -> tuple[int, ...]:
    return tuple(sum(column) for column in zip(*rows, strict=True))


class CountSentenceLeakage(beam.PTransform):
    """Sentences file paths → nothing; counts (``counters``) held-out sentence occurrences seen in training, of all
    sentences and of those of ``min_words`` words or more."""

    def __init__(self, fraction: float, min_words: int, counters: Counters):
        super().__init__()
        self._fraction, self._min_words, self._counters = fraction, min_words, counters

    def _count(self, totals: tuple[int, ...]) -> None:
        for name, value in zip(SENTENCE_COUNTS, totals, strict=True):
            self._counters.inc(name, value)

    def expand(self, paths: beam.PCollection) -> beam.PCollection:
        return (
            paths
            | "SpreadFiles" >> beam.Reshuffle()
            | "SentenceSides" >> beam.FlatMap(_sentence_sides, self._fraction)
            | "SumPerSentence" >> beam.CombinePerKey(_sum_columns)
            | "Leaked" >> beam.Map(_leaked, self._min_words)
            | "SumAll" >> beam.CombineGlobally(_sum_columns).without_defaults()
            | "Count" >> Counted(beam.Map(self._count))
        )


def _training_documents(path: str) -> Iterator[tuple[str, str]]:
    """Yields (document id, "train") once per document of one training shard."""
    ids = pa.ipc.open_file(pa.BufferReader(files.read_bytes(path))).read_all().column("document_id")
    for document_id in sorted(set(ids.to_pylist())):
        yield document_id, "train"


def _task_documents(path: str, task: str, split: str) -> Iterator[tuple[str, str]]:
    """Yields (document id, "task/split") once per document a task file's examples come from."""
    text = files.read_bytes(path).decode("utf-8")
    if path.endswith(".json"):  # SQuAD's layout: a question's id is its document's id
        data = json.loads(text)["data"]
        ids = {q["id"] for a in data for p in a["paragraphs"] for q in p["qas"]}
    else:
        ids = {json.loads(line)["id"] for line in text.splitlines()}
    for document_id in sorted(ids):
        yield document_id, f"{task}/{split}"


class CountTaskLeakage(beam.PTransform):
    """(training shard paths, task files) → nothing; counts each held-out split's documents found in training."""

    def __init__(self, task_files: list[tuple[str, str, str]], fraction: float, counters: Counters):
        super().__init__()
        self._task_files, self._fraction, self._counters = task_files, fraction, counters

    def _count(self, element: tuple[str, Iterable[str]]) -> None:
        document_id, places = element
        places = set(places)
        trained = "train" in places
        if trained and is_held_out(document_id, self._fraction):
            self._counters.inc("held_out_in_training")
        for place in places - {"train"}:
            self._counters.inc(f"{place}/documents")
            self._counters.inc(f"{place}/in_training_shards", int(trained))

    def expand(self, shard_paths: beam.PCollection) -> beam.PCollection:
        tasks = (
            shard_paths.pipeline
            | "ListTaskFiles" >> beam.Create(self._task_files)
            | "TaskDocuments" >> beam.FlatMap(lambda f: _task_documents(*f))
        )
        trained = shard_paths | "TrainingDocuments" >> beam.FlatMap(_training_documents)
        return (
            (trained, tasks)
            | "AllDocuments" >> beam.Flatten()
            | "GroupByDocument" >> beam.GroupByKey()
            | "Count" >> Counted(beam.Map(self._count))
        )


def _task_files(folder: str) -> list[tuple[str, str, str]]:
    """(path, task, split) of every held-out split file of a tasks folder, from its ``stats.json``."""
    stats = read_stats(folder)
    found = []
    for task in sorted(stats["tasks"]):
        for split in HELD_OUT:
            for name in (f"{split}.jsonl", f"{split}.json"):
                if files.exists(files.join(folder, task, name)):
                    found.append((files.join(folder, task, name), task, split))
    return found


def _shares(counts: dict[str, int], min_words: int) -> dict[str, float | int]:
    shares = {"passage_words": min_words}
    for kind in ("passage", "all"):
        c = {name: counts[f"{kind}_{name}"] for name in COUNTS}
        shares |= {f"{kind}_{name}": value for name, value in c.items()}
        shares[f"{kind}_share_seen"] = round(c["seen_in_training"] / max(1, c["held_out_sentences"]), 6)
        shares[f"{kind}_char_share_seen"] = round(c["seen_chars"] / max(1, c["held_out_chars"]), 6)
    return shares


def _passage_words(folder: str) -> int:
    """The word floor of the dedup stage that wrote ``folder``, from its recorded config."""
    words = read_stats(folder).get("config", {}).get("passage_words")
    if not isinstance(words, int):  # without it the figure would count every shared "yes." as leakage
        raise ValueError(f"{files.join(folder, STATS)}: no dedup config with passage_words; rerun pipelines.dedup")
    return words


def _task_table(counts: dict[str, int], task_files: list[tuple[str, str, str]]) -> dict[str, dict]:
    table: dict[str, dict] = {}
    for _, task, split in task_files:
        table.setdefault(task, {})[split] = {
            key: counts[f"{task}/{split}/{key}"] for key in ("documents", "in_training_shards")
        }
    return table


def _work_s(config: LeakageConfig, paths: dict[str, str | None]) -> float:
    folders = [paths["sentences"], *([paths["segmented"]] if paths.get("segmented") else [])]
    return CPU_S_PER_MB * sum(input_mb(folder) for folder in folders)


def run(argv: list[str] | None = None) -> dict:
    """Runs the leakage stage and returns what it wrote to ``metrics.json``."""
    paths = {
        "sentences": "sentences folder the later stages read (the dedup stage's output)",
        "shards": "shard folder (the instances stage's output)",
        "tasks": "tasks folder (the tasks stage's output)",
        "output": "folder for metrics.json",
    }
    optional = {"segmented": "the segment stage's sentences, before deduplication: the 'before' figures"}
    args = parse_stage_args(argv, LeakageConfig, "leakage", paths, __doc__.splitlines()[0], _work_s, optional)
    fraction, p = args.config.held_out_fraction, args.paths
    check_outputs(p, {"output": [METRICS]})
    folders = {"sentences": p["sentences"]} | ({"sentences_before_dedup": p["segmented"]} if p["segmented"] else {})
    inputs = {name: finished_files(folder, "sentences") for name, folder in folders.items()}
    read_split_stats(p["sentences"], fraction)  # counted against another split, the figures would mean nothing
    min_words = _passage_words(p["sentences"])
    manifest = Manifest.read(p["shards"], read_bytes=files.read_bytes, join=files.join)
    shard_paths = [files.join(p["shards"], s.file) for s in manifest.split("train")]
    task_files = _task_files(p["tasks"])
    task_counts = [f"{t}/{s}/{k}" for _, t, s in task_files for k in ("documents", "in_training_shards")]
    counters = [Counters(name, *SENTENCE_COUNTS) for name in folders]
    counters.append(Counters("tasks", "held_out_in_training", *task_counts))
    with owning_outputs(p["output"], METRICS, []):
        pipeline = beam.Pipeline(options=args.beam)
        for (name, paths_of), counted in zip(inputs.items(), counters, strict=False):
            _ = (
                pipeline
                | f"List{name}" >> beam.Create(paths_of)
                | f"Count{name}" >> CountSentenceLeakage(fraction, min_words, counted)
            )
        _ = (
            pipeline
            | "ListTrainingShards" >> beam.Create(shard_paths)
            | "CountTaskLeakage" >> CountTaskLeakage(task_files, fraction, counters[-1])
        )
        with progress.shown("leakage", sum(map(len, inputs.values())), "files", args.beam):
            *sentence_counts, tasks = run_and_count_each(pipeline, p["output"], *counters)
        metrics = {name: _shares(c, min_words) for name, c in zip(folders, sentence_counts, strict=True)}
        metrics |= {"tasks": _task_table(tasks, task_files), "held_out_in_training": tasks["held_out_in_training"]}
        metrics["held_out_fraction"] = fraction
        files.write_json_atomically(files.join(p["output"], METRICS), metrics)
    return metrics


if __name__ == "__main__":
    main(run, "leakage", beam=True)
