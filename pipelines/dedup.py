"""Dedup stage: segmented documents → the same documents less exact and near duplicates and shared passages.

Run: ``python -m pipelines.dedup --input data/sentences --output data/deduped`` (Beam options may follow).
Input: a finished segment-stage folder. Output: the same layout (``documents.SENTENCES_SCHEMA``, the same n, each
surviving document in the file it was in, rows sorted by id; a file left with no document is written with no
rows), then ``removed.jsonl`` (a sample of what was removed, per rule the ``sample_removed`` smallest stable
hashes) and last ``stats.json`` (``stage: dedup``, which vocab, instances and tasks require of their input;
config, counters, files, ``held_out_fraction``, and the input's ``normalizer`` record unchanged, which the
instances stage reads).

Every rule keeps the copy with the smallest priority key ``(0 if held out else 1, id)`` (``splits.is_held_out``),
so held-out text is unseen in training and which copy survives depends on ids alone:

1. exact duplicates: equal sentence lists (``near_duplicates.content_key``);
2. near duplicates: MinHash over word shingles with LSH banding (``near_duplicates.MinHasher``): taking documents
   in priority order, one is removed iff a better one that stays shares a band bucket with it at estimated
   Jaccard ≥ ``jaccard_threshold`` (``near_duplicates.similar_pairs`` and ``greedy_removals``), so a kept id
   always names a survivor; exact copies of a document removed so follow it to its survivor, under this rule.
   A document with no word is nobody's near duplicate;
3. shared passages (``passages.PassageRule``): among the survivors, a passage (a sentence of ≥ ``passage_words``
   words, or ``passage_span`` consecutive sentences of as many words together) found in ≥ ``passage_documents``
   documents, or in a held-out and a training document, stays in its best document only; its sentences leave
   the others. Shorter text and repeats inside one document stay (a play keeps "romeo."); a document left with
   no sentence is dropped (emptied).

The records between the rules pass through ``spill`` files, not Beam shuffles, in six steps, each over groups
of input files or over ranges of the ``slices`` slices of the key spaces (content keys, band keys, passage keys),
each starting when the one before is done: (1) per file group, its documents' keys and signatures; (2) per slice
range, a slice at a time, repeated ids (a ValueError naming the files), rule 1 and rule 2's similar pairs; (3)
once, rule 2 over all the pairs; (4) per file group, one removal per removed document, and its survivors'
passages; (5) per slice range, rule 3; (6) per file group, the decisions applied to each file read again. A
worker holds one group's records (``task_mb`` of input) or one slice's (``slice_mb``), step 3 the similar pairs
only; the runner holds indices only, so memory stays flat as the corpus grows, with ``slices`` and the tasks
growing as the input. Each step writes one spill file per task, which each task of the next step opens once, so
the files opened grow as the tasks squared (``task_mb``), not as input files × slices.
The output depends on neither the slice nor the task count. A stage whose output would hold no document fails naming
the input folder; an input folder without ``stats.json`` or its ``normalizer`` record fails before the pipeline.
Outputs of an earlier run are removed first and again on failure.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable

import apache_beam as beam

from pipelines.algorithms import near_duplicates as nd
from pipelines.algorithms.passages import PassageRule
from pipelines.algorithms.splits import HeldOutSplit
from pipelines.contracts import documents
from pipelines.contracts.documents import STATS, finished_files, outputs
from pipelines.runtime import files, progress
from pipelines.runtime.commands import main
from pipelines.runtime.options import input_mb, parse_stage_args, work_per_input_mb
from pipelines.runtime.outputs import check_outputs, owning_outputs
from pipelines.runtime.spill import Spill, ThenEach, even_ranges
from pipelines.runtime.stage import Counted, GatherAndWrite, Smallest, run_and_count
from pipelines.steps import dedup as steps
from pipelines.steps.dedup import COUNTERS, RULES

__all__ = ["DedupConfig", "DeduplicateDocuments", "plan_tasks", "run"]

REMOVED = "removed.jsonl"
SPILL = ".tmp-spill"  # the folder of the records between steps; the stage deletes it whether it fails or not
# Single-core seconds per MB of sentence files: the slope between bench/dedup.py's runs on the sentences and on
# their 10x copy (bench/results/dedup.json). Sizes Beam's local runner.
CPU_S_PER_MB = 0.65
MIN_TASKS = 8  # per step while there are as many files: a small input still spreads over the cores


@dataclasses.dataclass
class DedupConfig(HeldOutSplit):
    """The dedup stage's knobs (params.yaml section ``dedup``, plus the top-level ``held_out_fraction``)."""

    shingle_words: int = dataclasses.field(default=5, metadata={"help": "words per MinHash shingle"})
    num_perm: int = dataclasses.field(default=128, metadata={"help": "MinHash permutations (signature length)"})
    bands: int = dataclasses.field(default=16, metadata={"help": "LSH bands; must divide num_perm"})
    jaccard_threshold: float = dataclasses.field(
        default=0.8, metadata={"help": "estimated shingle Jaccard at which a worse document is removed"}
    )
    passage_words: int = dataclasses.field(
        default=8,
        metadata={"help": "rule 3: words at which a sentence, or passage_span sentences together, identify a "
                  "passage; shorter text is never removed (the leakage stage counts held-out sentences this long)"},
    )  # fmt: skip
    passage_span: int = dataclasses.field(default=3, metadata={"help": "rule 3: consecutive sentences per span"})
    passage_documents: int = dataclasses.field(
        default=3,
        metadata={"help": "rule 3: documents a passage is found in to be boilerplate, kept in the best one only "
                  "(a held-out passage leaves every training document whatever this is)"},
    )  # fmt: skip
    sample_removed: int = dataclasses.field(default=200, metadata={"help": "removed.jsonl items per rule"})
    slice_mb: float = dataclasses.field(
        default=2.0,
        metadata={"help": "MB of input sentence files per slice of the key spaces: a worker holds one slice's "
                  "records at a time; the output does not depend on it"},
    )  # fmt: skip

    task_mb: float = dataclasses.field(
        default=8.0,
        metadata={"help": "MB of input sentence files per task of the per-file and per-slice steps (at least "
                  f"{MIN_TASKS} tasks while there are as many files): one spill file per task; the output does not "
                  "depend on it"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.jaccard_threshold <= 1:
            raise ValueError(f"jaccard_threshold must be in (0, 1], got {self.jaccard_threshold}")
        if self.slice_mb <= 0 or self.task_mb <= 0:
            raise ValueError(f"slice_mb and task_mb must be positive, got {self.slice_mb} and {self.task_mb}")
        if self.sample_removed < 0:
            raise ValueError(f"sample_removed must be at least 0, got {self.sample_removed}")
        self.hasher  # noqa: B018 -- refuses a num_perm that bands does not divide, before any worker starts
        self.passages  # noqa: B018 -- refuses a zero passage_words or passage_span, or passage_documents < 2

    @property
    def hasher(self) -> nd.MinHasher:
        return nd.MinHasher(self.num_perm, self.bands, self.shingle_words)

    @property
    def passages(self) -> PassageRule:
        return PassageRule(self.passage_words, self.passage_span, self.passage_documents)


def _concatenate(lists: Iterable[list]) -> list:
    return [item for items in lists for item in items]


def _write_removed(samples: list[tuple], path: str, per_rule: int) -> None:
    """The samples (each rule's ``max(per_rule, 1)`` smallest) → removed.jsonl, sorted by rule, id, position."""
    lines = [
        {"rule": rule, "id": doc_id, "kept_id": kept_id, "text": text, **({} if i is None else {"position": i})}
        for _, rule, doc_id, i, kept_id, text in (samples if per_rule else [])
    ]
    lines.sort(key=lambda line: (RULES.index(line["rule"]), line["id"], line.get("position", -1)))
    text = "".join(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n" for line in lines)
    files.write_bytes_atomically(path, text.encode("utf-8"))


@beam.ptransform_fn
def WriteRemovedSample(samples: beam.PCollection, path: str, per_rule: int) -> beam.PCollection:
    """Sample candidates → ``path`` (removed.jsonl): per rule the ``per_rule`` with the smallest stable hash."""
    lists = []
    for rule in RULES:
        name = rule.title().replace("_", "")
        only = samples | f"Only{name}" >> beam.Filter(lambda sample, rule: sample[1] == rule, rule)
        lists.append(only | f"Sample{name}" >> Smallest(per_rule or 1))  # the smallest sample hashes
    # Written also when nothing was removed: an empty list joins the samples.
    return tuple(lists) | "Write" >> GatherAndWrite(_concatenate, [], _write_removed, path, per_rule)


class DeduplicateDocuments(beam.PTransform):
    """The pipeline's root → every deduplicated sentences file of ``paths`` (the input files, in order) written
    under ``output``, then removed.jsonl. Six steps, each over file groups or slice ranges (``tasks``) once the one
    before is done; records pass between them through ``spill``."""

    def __init__(self, output: str, config: DedupConfig, paths: list[str], spill: Spill, tasks: steps.Tasks) -> None:
        super().__init__()
        self._output, self._config, self._paths, self._spill, self._tasks = output, config, paths, spill, tasks

    def expand(self, root: beam.pvalue.PBegin) -> beam.PCollection:
        config, paths, spill, tasks = self._config, self._paths, self._spill, self._tasks
        fraction, groups, ranges = config.held_out_fraction, len(tasks.groups), len(tasks.ranges)
        facts = Counted(beam.FlatMap(steps.spill_facts, paths, spill, config.hasher, config.passages, fraction, tasks))
        write = Counted(beam.FlatMap(steps.write_files, paths, spill, self._output, fraction, tasks))
        samples = (
            root
            | "EachFileGroup" >> beam.Create(range(groups))
            | "SpreadFiles" >> beam.Reshuffle()
            | "SpillFacts" >> facts
            | "ThenEachSliceRange" >> ThenEach(ranges)
            | "DecideSlices" >> beam.FlatMap(steps.decide_slices, spill, config.jaccard_threshold, paths, tasks)
            | "ThenResolve" >> ThenEach(1)
            | "ResolveNearDuplicates" >> beam.FlatMap(steps.resolve_near, spill)
            | "ThenEachFileGroup" >> ThenEach(groups)
            | "GatherRemovals" >> beam.FlatMap(steps.gather_removals, spill, tasks)
            | "ThenEachPassageRange" >> ThenEach(ranges)
            | "DropSharedPassages" >> beam.FlatMap(steps.drop_shared_passages, spill, config.passages, tasks)
            | "ThenWriteEachGroup" >> ThenEach(groups)
            | "WriteFiles" >> write
        )
        sample = WriteRemovedSample(files.join(self._output, REMOVED), config.sample_removed)
        return samples | "WriteRemovedSample" >> sample


def plan_tasks(num_files: int, input_mb: float, config: DedupConfig) -> steps.Tasks:
    """The file groups and slice ranges of a run over ``num_files`` files of ``input_mb`` MB in all: ``slice_mb``
    per slice; ``task_mb`` per task, at least ``MIN_TASKS`` tasks while there are as many files."""
    slices = max(1, math.ceil(input_mb / config.slice_mb))
    count = max(MIN_TASKS, math.ceil(input_mb / config.task_mb))
    return steps.Tasks(even_ranges(num_files, count), even_ranges(slices, count), slices)


def run(argv: list[str] | None = None) -> dict:
    """Runs the dedup stage and returns what it wrote to ``stats.json``."""
    paths = {"input": "segment stage output folder", "output": "folder for sentences-*.parquet, removed.jsonl, stats"}
    args = parse_stage_args(argv, DedupConfig, "dedup", paths, __doc__.splitlines()[0], work_per_input_mb(CPU_S_PER_MB))
    source, output, config = args.paths["input"], args.paths["output"], args.config
    check_outputs(args.paths, {"output": [STATS, *outputs("sentences"), REMOVED]})  # before the spill is cleared
    inputs = finished_files(source, "sentences")
    spill = Spill(files.join(output, SPILL))
    normalizer = documents.read_normalizer(source)  # the instances stage needs it from here
    tasks = plan_tasks(len(inputs), input_mb(source, "sentences-*.parquet"), config)
    spill.delete()  # an earlier run's, killed before it could
    with owning_outputs(output, STATS, [*outputs("sentences"), REMOVED]):
        pipeline = beam.Pipeline(options=args.beam)
        _ = pipeline | "DeduplicateDocuments" >> DeduplicateDocuments(output, config, inputs, spill, tasks)
        with progress.shown("dedup", 3 * len(inputs) + 2 * tasks.slices + 1, "file and slice passes", args.beam):
            try:
                counters = run_and_count(pipeline, output, COUNTERS)
            finally:
                spill.delete()
        if not counters["documents_kept"]:  # empty files would pass the later stages silently
            raise ValueError(f"{source}: no documents left after deduplication ({counters['documents']} read)")
        stats = {
            "config": dataclasses.asdict(config),
            "counters": counters,
            "files": len(inputs),
            "held_out_fraction": config.held_out_fraction,
            "normalizer": normalizer,  # the segment stage's, unchanged
            "stage": documents.DEDUP_STAGE,  # what documents.require_deduped checks in vocab, instances and tasks
        }
        files.write_json_atomically(files.join(output, STATS), stats)
    return stats


if __name__ == "__main__":
    main(run, "dedup", beam=True)
