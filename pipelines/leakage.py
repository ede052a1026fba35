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

Every count is exact (no sampling; sentences are told apart by a 128-bit hash of their text); the occurrences
are grouped through spill files a slice of keys at a time (``steps.leakage``), so no worker holds the corpus.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

import apache_beam as beam

from pipelines.algorithms.splits import HELD_OUT, HeldOutSplit
from pipelines.contracts.documents import STATS, finished_files, read_split_stats, read_stats
from pipelines.contracts.manifest import Manifest
from pipelines.runtime import files, progress
from pipelines.runtime.commands import main
from pipelines.runtime.options import input_mb, parse_stage_args
from pipelines.runtime.outputs import check_outputs, owning_outputs
from pipelines.runtime.spill import Spill, ThenEach, even_ranges
from pipelines.runtime.stage import Counted, Counters, run_and_count_each, sum_counts
from pipelines.steps import leakage as steps

__all__ = ["CountSentenceLeakage", "CountTaskLeakage", "LeakageConfig", "run"]

METRICS = "metrics.json"
# Single-core seconds per MB of sentence files, in-process: reading them and grouping every sentence by its text.
# Sizes Beam's local runner.
CPU_S_PER_MB = 1.0
SPILL = ".tmp-spill"  # the records between the steps; the stage deletes it whether it fails or not
# A task per TASK_MB of sentence files (at least MIN_TASKS), a slice of keys per SLICE_MB: a worker holds one
# file's records or one slice's (~25 bytes per sentence), however large the corpus.
TASK_MB, SLICE_MB, MIN_TASKS = 64, 16, 8
COUNTS = ("held_out_sentences", "seen_in_training", "held_out_chars", "seen_chars")
# Every sentence (all_*), then the sentences of at least the dedup stage's passage_words words (passage_*).
SENTENCE_COUNTS = tuple(f"{kind}_{count}" for kind in ("all", "passage") for count in COUNTS)


@dataclasses.dataclass
class LeakageConfig(HeldOutSplit):
    """The leakage stage's one knob: the split it checks (the top-level param every stage shares)."""


def _sum_columns(rows: Iterable[tuple[int, ...]]) -> tuple[int, ...]:
    return tuple(sum(column) for column in zip(*rows, strict=True))


def _plan(megabytes: float, sources: int) -> tuple[list[range], list[range], int]:
    """Groups of ``sources`` and ranges of slices for ``megabytes`` of input: a task per ``TASK_MB`` (at least
    ``MIN_TASKS``), a slice per ``SLICE_MB``."""
    slices = max(1, math.ceil(megabytes / SLICE_MB))
    tasks = max(MIN_TASKS, math.ceil(megabytes / TASK_MB))
    return even_ranges(sources, tasks), even_ranges(slices, tasks), slices


class CountSentenceLeakage(beam.PTransform):
    """The pipeline's root → nothing; counts (``counters``) the held-out sentence occurrences of the sentences
    files ``paths`` seen in training, of all sentences and of those of ``min_words`` words or more. Through
    ``spill`` (``steps.leakage``), so no worker holds the corpus's sentences."""

    def __init__(self, paths: list[str], megabytes: float, fraction: float, min_words: int, counters: Counters,
                 spill: Spill) -> None:  # fmt: skip
        super().__init__()
        self._paths, self._fraction, self._min_words, self._counters = paths, fraction, min_words, counters
        self._spill, (self._groups, self._ranges, self._slices) = spill, _plan(megabytes, len(paths))

    def _count(self, totals: tuple[int, ...]) -> None:
        for name, value in zip(SENTENCE_COUNTS, totals, strict=True):
            self._counters.inc(name, value)

    def expand(self, root: beam.pvalue.PBegin) -> beam.PCollection:
        kind, spill, groups, ranges = self._counters.namespace, self._spill, self._groups, self._ranges
        spilled = beam.FlatMap(steps.spill_sentences, kind, self._paths, groups, spill, self._fraction,
                               self._min_words, self._slices)  # fmt: skip
        return (
            root
            | "EachFileGroup" >> beam.Create(range(len(groups)))
            | "SpreadFiles" >> beam.Reshuffle()
            | "SpillSentences" >> spilled
            | "ThenEachSliceRange" >> ThenEach(len(ranges))
            | "CountSlices" >> beam.FlatMap(steps.count_sentences, kind, ranges, spill)
            | "SumAll" >> beam.CombineGlobally(_sum_columns).without_defaults()
            | "Count" >> Counted(beam.Map(self._count))
        )


class CountTaskLeakage(beam.PTransform):
    """The pipeline's root → nothing; counts each held-out task split's documents found in the training shards
    ``shard_paths``, and the training documents that the split holds out. Through ``spill``, by slice of ids."""

    def __init__(self, shard_paths: list[str], megabytes: float, task_files: list[tuple[str, str, str]],
                 fraction: float, counters: Counters, spill: Spill) -> None:  # fmt: skip
        super().__init__()
        self._shard_paths, self._task_files, self._fraction = shard_paths, task_files, fraction
        self._counters, self._spill = counters, spill
        self._groups, self._ranges, self._slices = _plan(megabytes, len(shard_paths))

    def _count(self, counts: dict[str, int]) -> None:
        self._counters.inc("held_out_in_training", counts.get("held_out_in_training", 0))
        for k, (_, task, split) in enumerate(self._task_files, start=1):
            for name in ("documents", "in_training_shards"):
                self._counters.inc(f"{task}/{split}/{name}", counts.get(f"{k}/{name}", 0))

    def expand(self, root: beam.pvalue.PBegin) -> beam.PCollection:
        spill, groups, ranges = self._spill, self._groups, self._ranges
        task_paths = [path for path, _, _ in self._task_files]
        spilled = beam.FlatMap(steps.spill_documents, groups, self._shard_paths, task_paths, spill, self._slices)
        return (
            root
            | "EachShardGroupAndTheTasks" >> beam.Create(range(len(groups) + 1))
            | "SpreadShards" >> beam.Reshuffle()
            | "SpillDocuments" >> spilled
            | "ThenEachSliceRange" >> ThenEach(len(ranges))
            | "CountSlices" >> beam.FlatMap(steps.count_documents, ranges, spill, self._fraction)
            | "SumAll" >> beam.CombineGlobally(sum_counts).without_defaults()
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
    spill = Spill(files.join(p["output"], SPILL))
    spill.delete()  # an earlier run's, killed before it could
    with owning_outputs(p["output"], METRICS, []):
        pipeline = beam.Pipeline(options=args.beam)
        for (name, paths_of), counted in zip(inputs.items(), counters, strict=False):
            count = CountSentenceLeakage(paths_of, input_mb(folders[name]), fraction, min_words, counted, spill)
            _ = pipeline | f"Count{name}" >> count
        count = CountTaskLeakage(shard_paths, input_mb(p["sentences"]), task_files, fraction, counters[-1], spill)
        _ = pipeline | "CountTaskLeakage" >> count
        with progress.shown("leakage", sum(map(len, inputs.values())), "files", args.beam):
            try:
                *sentence_counts, tasks = run_and_count_each(pipeline, p["output"], *counters)
            finally:
                spill.delete()
        metrics = {name: _shares(c, min_words) for name, c in zip(folders, sentence_counts, strict=True)}
        metrics |= {"tasks": _task_table(tasks, task_files), "held_out_in_training": tasks["held_out_in_training"]}
        metrics["held_out_fraction"] = fraction
        files.write_json_atomically(files.join(p["output"], METRICS), metrics)
    return metrics


if __name__ == "__main__":
    main(run, "leakage", beam=True)
