"""Dedup stage: segmented documents → the same documents less exact and near duplicates and repeated sentences.

Run: ``python -m pipelines.dedup --input data/sentences --output data/deduped`` (Beam options may follow).
Input: a finished segment-stage folder. Output: the same layout (``documents.SENTENCES_SCHEMA``, the same n, each
surviving document in the file it was in, rows sorted by id; a file left with no document is written with no
rows), then ``removed.jsonl`` (a sample of what was removed, per rule the ``sample_removed`` smallest stable
hashes) and last ``stats.json`` (config, counters, files, ``held_out_fraction``, and the input's ``normalizer``
record unchanged, which the instances stage reads).

Every rule keeps the copy with the smallest priority key ``(0 if held out else 1, id)`` (``splits.is_held_out``),
so held-out text is unseen in training and which copy survives depends on ids alone:

1. exact duplicates: equal sentence lists (``near_duplicates.content_key``);
2. near duplicates: MinHash over word shingles with LSH banding (``near_duplicates.MinHasher``): a document is
   removed when a better one sharing a band bucket has estimated Jaccard ≥ ``jaccard_threshold``;
3. repeated sentences: among the survivors, a sentence is kept at its first occurrence in (priority key,
   position) order and dropped everywhere else; a document left with no sentence is dropped (emptied).

Only keys, ids and signatures cross the shuffles; the last step reads each input file again and applies the
decisions about its documents, so no text is grouped. Beam's local runner still holds every shuffle in its own
process (decoded, for the one being grouped), so its memory grows with the corpus: per (document, band) and per
sentence an element. A stage whose output would hold no document fails naming
the input folder; an input folder without ``stats.json`` or its ``normalizer`` record fails before the pipeline.
Outputs of an earlier run are removed first and again on failure.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
from collections.abc import Iterable, Iterator

import apache_beam as beam

from pipelines import documents, files, progress
from pipelines import near_duplicates as nd
from pipelines.commands import main
from pipelines.documents import SENTENCES_SCHEMA, STATS, file_index, file_name, finished_files, outputs
from pipelines.hashes import stable_hash64
from pipelines.options import parse_stage_args, work_per_input_mb
from pipelines.splits import check_fraction, is_held_out
from pipelines.stage import Counted, Counters, Smallest, owning_outputs, run_and_count

__all__ = ["DedupConfig", "DeduplicateDocuments", "run"]

REMOVED = "removed.jsonl"
RULES = ("exact_duplicate", "near_duplicate", "repeated_sentence")
COUNTERS = Counters(
    "dedup",
    *"documents exact_duplicate_documents near_duplicate_documents sentences repeated_sentences "
    "repeated_sentence_chars emptied_documents documents_kept sentences_kept held_out_documents_kept".split(),
)
SAMPLE_CHARS = 300  # of a removed document, in removed.jsonl
# Single-core seconds per MB of sentence files, in-process: 3,000 embedded documents (1.5 MB of files) took 2.8 CPU-s
# and their marked 10x copy (bench/dedup.py, 17 MB) 15.3, so (15.3 - 2.8) / 15.5 MB. Sizes Beam's local runner.
CPU_S_PER_MB = 0.8
_SENTENCE_FILE = re.compile(r"sentences-(\d{5})-of-(\d{5})\.parquet$")
# A document's facts, a plain tuple (cheap to encode between steps): (priority key, content key, compact signature,
# band keys, its sentences' 16-byte keys concatenated).
PRIORITY, CONTENT, SIGNATURE, BANDS, SENTENCE_KEYS = range(5)


@dataclasses.dataclass
class DedupConfig:
    """The dedup stage's knobs (params.yaml section ``dedup``, plus the top-level ``held_out_fraction``)."""

    shingle_words: int = dataclasses.field(default=5, metadata={"help": "words per MinHash shingle"})
    num_perm: int = dataclasses.field(default=128, metadata={"help": "MinHash permutations (signature length)"})
    bands: int = dataclasses.field(default=16, metadata={"help": "LSH bands; must divide num_perm"})
    jaccard_threshold: float = dataclasses.field(
        default=0.8, metadata={"help": "estimated shingle Jaccard at which a worse document is removed"}
    )
    sample_removed: int = dataclasses.field(default=200, metadata={"help": "removed.jsonl items per rule"})
    held_out_fraction: float = dataclasses.field(
        default=0.2, metadata={"help": "share of documents held out (top-level param: every stage's one split)"}
    )

    def __post_init__(self) -> None:
        check_fraction(self.held_out_fraction)
        if not 0 < self.jaccard_threshold <= 1:
            raise ValueError(f"jaccard_threshold must be in (0, 1], got {self.jaccard_threshold}")
        if self.sample_removed < 0:
            raise ValueError(f"sample_removed must be at least 0, got {self.sample_removed}")
        self.hasher  # noqa: B018 -- refuses a num_perm that bands does not divide, before any worker starts

    @property
    def hasher(self) -> nd.MinHasher:
        return nd.MinHasher(self.num_perm, self.bands, self.shingle_words)


def _read_facts(path: str, hasher: nd.MinHasher, fraction: float) -> Iterator[tuple[str, tuple]]:
    """One sentences file → (id, facts) per document."""
    table = files.read_parquet(path, columns=["id", "sentences"])
    for doc_id, sentences in zip(table.column("id").to_pylist(), table.column("sentences").to_pylist(), strict=True):
        COUNTERS.inc("documents")
        COUNTERS.inc("sentences", len(sentences))
        signature, keys = hasher.signature(sentences), b"".join(map(nd.sentence_key, sentences))
        priority = (0 if is_held_out(doc_id, fraction) else 1, doc_id)
        yield doc_id, (priority, nd.content_key(sentences), nd.compact(signature), hasher.band_keys(signature), keys)
    progress.advance()


def _all_but_smallest(group: tuple[object, Iterable[tuple]]) -> Iterator[tuple[str, tuple[str, str]]]:
    priorities = sorted(group[1])
    yield from ((doc_id, (RULES[0], priorities[0][1])) for _, doc_id in priorities[1:])


@beam.ptransform_fn
def RemoveExactDuplicates(facts: beam.PCollection) -> beam.PCollection:
    """(id, facts) → (id, ("exact_duplicate", kept id)) for every document but the best of equal sentence lists."""
    return (
        facts
        | "KeyByContent" >> beam.Map(lambda kv: (kv[1][CONTENT], kv[1][PRIORITY]))
        | "GroupByContent" >> beam.GroupByKey()
        | "AllButSmallest" >> beam.FlatMap(_all_but_smallest)
    )


def _pairs(group: tuple[int, Iterable[tuple]], max_better: int) -> Iterator[tuple[str, tuple]]:
    """A band bucket → (worse id, better priority) for its bounded candidate pairs."""
    return ((worse[1], better) for worse, better in nd.bucket_pairs(list(group[1]), max_better))


def _to_better(joined: tuple[str, dict]) -> Iterator[tuple[str, tuple]]:
    """(worse id, {better: priorities, signature: [(priority, signature)]}) → (better id, worse's record) each."""
    if joined[1]["better"]:
        [record] = joined[1]["signature"]
        yield from ((better[1], record) for better in sorted(set(joined[1]["better"])))


def _compare(joined: tuple[str, dict], threshold: float) -> Iterator[tuple[str, tuple]]:
    """(better id, {worse: records, signature: [its record]}) → (worse id, better priority) when similar enough."""
    if joined[1]["worse"]:
        [(priority, signature)] = joined[1]["signature"]
        for worse, other in joined[1]["worse"]:
            if nd.estimated_jaccard(signature, other) >= threshold:
                yield worse[1], priority


@beam.ptransform_fn
def RemoveNearDuplicates(facts: beam.PCollection, threshold: float) -> beam.PCollection:
    """(id, facts) → (id, ("near_duplicate", kept id)), once per removed document: the best better document in
    one of its band buckets whose signature matches on ≥ ``threshold`` of its entries. Buckets hold priority and
    content keys only; the signatures reach each candidate pair through two joins by id."""
    band_members = beam.FlatMap(lambda kv: ((key, (kv[1][PRIORITY], kv[1][CONTENT])) for key in kv[1][BANDS]))
    signatures = facts | "KeySignature" >> beam.Map(lambda kv: (kv[0], (kv[1][PRIORITY], kv[1][SIGNATURE])))
    pairs = (
        facts
        | "KeyByBand" >> band_members
        | "GroupByBand" >> beam.GroupByKey()
        | "PairInBucket" >> beam.FlatMap(_pairs, nd.MAX_BETTER)
    )
    worse = {"better": pairs, "signature": signatures} | "JoinWorse" >> beam.CoGroupByKey()
    return (
        {"worse": worse | "ToBetter" >> beam.FlatMap(_to_better), "signature": signatures}
        | "JoinBetter" >> beam.CoGroupByKey()
        | "Compare" >> beam.FlatMap(_compare, threshold)
        | "GroupByRemoved" >> beam.GroupByKey()
        | "SmallestSurvivor" >> beam.Map(lambda kv: (kv[0], (RULES[1], min(kv[1])[1])))
    )


def _occurrences(joined: tuple[str, dict]) -> Iterator[tuple[bytes, tuple]]:
    """(id, {keys: [(priority, keys)], removed: ...}) → (sentence key, (priority, position)) for a survivor."""
    if not joined[1]["removed"]:
        [(priority, keys)] = joined[1]["keys"]
        yield from ((keys[16 * i : 16 * i + 16], (priority, i)) for i in range(len(keys) // 16))


def _all_but_first(group: tuple[bytes, Iterable[tuple]]) -> Iterator[tuple[str, tuple[int, str]]]:
    occurrences = sorted(group[1])
    yield from ((priority[1], (i, occurrences[0][0][1])) for priority, i in occurrences[1:])


@beam.ptransform_fn
def DropRepeatedSentences(inputs: tuple[beam.PCollection, beam.PCollection]) -> beam.PCollection:
    """((id, facts), (id, removal)) → (id, (position, id holding the kept occurrence)) for each sentence of a
    surviving document that occurs earlier in (priority key, position) order."""
    facts, removed = inputs
    keys = facts | "KeySentenceKeys" >> beam.Map(lambda kv: (kv[0], (kv[1][PRIORITY], kv[1][SENTENCE_KEYS])))
    return (
        {"keys": keys, "removed": removed}
        | "JoinRemoved" >> beam.CoGroupByKey()
        | "SentenceOccurrences" >> beam.FlatMap(_occurrences)
        | "GroupBySentence" >> beam.GroupByKey()
        | "AllButFirst" >> beam.FlatMap(_all_but_first)
    )


def _sample(rule: str, doc_id: str, kept_id: str, text: str, position: int | None = None) -> tuple:
    """A removed.jsonl candidate: (sample hash, rule, id, position, kept id, text); the sample keeps the smallest."""
    key = stable_hash64(rule, doc_id) if position is None else stable_hash64(rule, doc_id, position)
    return key, rule, doc_id, position, kept_id, text


def _apply(row: dict, removal: tuple | None, dropped: dict[int, str], fraction: float) -> tuple[dict | None, list]:
    """One input row and the decisions about it → the row to write (None: dropped) and its sample candidates."""
    if removal:
        COUNTERS.inc(f"{removal[0]}_documents")
        return None, [_sample(removal[0], row["id"], removal[1], " ".join(row["sentences"])[:SAMPLE_CHARS])]
    samples = [_sample(RULES[2], row["id"], dropped[i], s, i) for i, s in enumerate(row["sentences"]) if i in dropped]
    COUNTERS.inc("repeated_sentences", len(samples))
    COUNTERS.inc("repeated_sentence_chars", sum(len(sample[-1]) for sample in samples))
    sentences = [s for i, s in enumerate(row["sentences"]) if i not in dropped]
    if not sentences:
        COUNTERS.inc("emptied_documents")
        return None, samples
    COUNTERS.inc("documents_kept")
    COUNTERS.inc("sentences_kept", len(sentences))
    COUNTERS.inc("held_out_documents_kept", int(is_held_out(row["id"], fraction)))
    return {**row, "sentences": sentences}, samples


def _write_file(joined: tuple[int, dict], output: str, num_files: int, fraction: float) -> Iterator[tuple]:
    """(file index, {path: [input path], decision: [...]}) → writes the file's survivors; yields sample candidates."""
    index, tags = joined
    removals, dropped = {}, collections.defaultdict(dict)
    for doc_id, kind, decision in tags["decision"]:
        if kind == "removed":
            removals[doc_id] = decision
        else:
            dropped[doc_id][decision[0]] = decision[1]
    rows = []
    for row in files.read_parquet(tags["path"][0]).to_pylist():
        kept, samples = _apply(row, removals.get(row["id"]), dropped.get(row["id"], {}), fraction)
        rows += [kept] if kept else []
        yield from samples
    out = files.join(output, file_name("sentences", index, num_files))
    files.write_parquet_atomically(out, documents.table_from_rows(rows, SENTENCES_SCHEMA))  # no rows: still written
    progress.advance()


def _by_file(kv: tuple[str, tuple], kind: str, num_files: int) -> tuple[int, tuple]:
    return file_index(kv[0], num_files), (kv[0], kind, kv[1])


@beam.ptransform_fn
def WriteSentenceFiles(
    inputs: tuple[beam.PCollection, ...], output: str, num_files: int, fraction: float
) -> beam.PCollection:
    """(input paths, (id, removal), (id, (position, kept id))) → every output file written, one step per file;
    returns the removed.jsonl candidates. Every path joins, so a file whose documents all go is written too."""
    paths, removed, dropped = inputs
    decisions = (
        removed | "RemovedByFile" >> beam.Map(_by_file, "removed", num_files),
        dropped | "DroppedByFile" >> beam.Map(_by_file, "dropped", num_files),
    ) | "AllDecisions" >> beam.Flatten()
    by_index = beam.Map(lambda path: (int(_SENTENCE_FILE.search(path).group(1)), path))
    write = Counted(beam.FlatMap(_write_file, output, num_files, fraction))
    joined = {"path": paths | "KeyByFile" >> by_index, "decision": decisions}
    return joined | "GroupByFile" >> beam.CoGroupByKey() | "WriteFiles" >> write


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
    # One empty list, so the file is written when nothing was removed, without a combine default (stage.py).
    nothing = samples.pipeline | "NothingRemoved" >> beam.Create([[]])
    return (
        (*lists, nothing)
        | "Gather" >> beam.Flatten()
        | "Concatenate" >> beam.CombineGlobally(_concatenate).without_defaults()
        | "Write" >> beam.Map(_write_removed, path, per_rule)
    )


class DeduplicateDocuments(beam.PTransform):
    """Sentences file paths → the deduplicated files written under ``output`` (same n), then removed.jsonl."""

    def __init__(self, output: str, config: DedupConfig, num_files: int) -> None:
        super().__init__()
        self._output, self._config, self._num_files = output, config, num_files

    def expand(self, paths: beam.PCollection) -> beam.PCollection:
        config, fraction = self._config, self._config.held_out_fraction
        read = Counted(beam.FlatMap(_read_facts, config.hasher, fraction))
        facts = paths | "SpreadFiles" >> beam.Reshuffle() | "ReadDocuments" >> read
        exact = facts | "RemoveExactDuplicates" >> RemoveExactDuplicates()
        near = facts | "RemoveNearDuplicates" >> RemoveNearDuplicates(config.jaccard_threshold)
        removed = (exact, near) | "AllRemoved" >> beam.Flatten()
        dropped = (facts, removed) | "DropRepeatedSentences" >> DropRepeatedSentences()
        write = WriteSentenceFiles(self._output, self._num_files, fraction)
        samples = (paths, removed, dropped) | "WriteSentenceFiles" >> write
        sample = WriteRemovedSample(files.join(self._output, REMOVED), config.sample_removed)
        return samples | "WriteRemovedSample" >> sample


def run(argv: list[str] | None = None) -> dict:
    """Runs the dedup stage and returns what it wrote to ``stats.json``."""
    paths = {"input": "segment stage output folder", "output": "folder for sentences-*.parquet, removed.jsonl, stats"}
    args = parse_stage_args(argv, DedupConfig, "dedup", paths, __doc__.splitlines()[0], work_per_input_mb(CPU_S_PER_MB))
    source, output, config = args.paths["input"], args.paths["output"], args.config
    inputs = finished_files(source, "sentences")
    normalizer = documents.read_stats(source).get("normalizer")
    if normalizer is None:  # the instances stage needs it from here
        raise ValueError(f"{files.join(source, STATS)}: no normalizer record (older segment stage); rerun it")
    with owning_outputs(output, STATS, [*outputs("sentences"), REMOVED]):
        pipeline = beam.Pipeline(options=args.beam)
        dedup = DeduplicateDocuments(output, config, len(inputs))
        _ = pipeline | "ListSentenceFiles" >> beam.Create(inputs) | "DeduplicateDocuments" >> dedup
        with progress.shown("dedup", 2 * len(inputs), "file passes", args.beam):
            counters = run_and_count(pipeline, output, COUNTERS)
        if not counters["documents_kept"]:  # empty files would pass the later stages silently
            raise ValueError(f"{source}: no documents left after deduplication ({counters['documents']} read)")
        stats = {
            "config": dataclasses.asdict(config),
            "counters": counters,
            "files": len(inputs),
            "held_out_fraction": config.held_out_fraction,
            "normalizer": normalizer,  # the segment stage's, unchanged
        }
        files.write_json_atomically(files.join(output, STATS), stats)
    return stats


if __name__ == "__main__":
    main(run, "dedup", beam=True)
