"""instances stage: sentences → Arrow IPC shards of SOP pairs with n-gram masks, plus ``manifest.json``.

Run: ``python -m pipelines.instances --input data/sentences --spiece data/vocab/spiece.model --output data/shards``
(any Beam option may follow, e.g. ``--direct_num_workers 2`` or ``--runner DataflowRunner ...``).

Sentence file i becomes shards ``train-i`` and ``validation-i``: a worker builds every instance of one file
(all ``dupe_factor`` duplicates, masked in batches), sorts them by a stable per-row key and writes the two
shards. The work unit is a file of bounded size, so memory stays flat however large the corpus, and nothing
gathers all instances.
A document is held out for validation by the hash of its id, so changing the seed keeps the split.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import files
from pipelines.commands import main
from pipelines.documents import STATS, finished_files, read_stats
from pipelines.masked_pairs import Instances, Item, build_instances
from pipelines.masking import MaskingConfig, TokenClasses
from pipelines.options import parse_stage_args
from pipelines.seeding import rng_for, unit_interval
from pipelines.shards import (
    MANIFEST,
    SCHEMA_VERSION,
    SPIECE,
    SPLITS,
    Manifest,
    ShardInfo,
    ShardWriter,
    rows_table,
    shard_schema,
    sorted_by_key,
)
from pipelines.sop import PairConfig, randint
from pipelines.stage import Counters, owning_outputs, run_and_count
from pipelines.textnorm import Normalizer
from pipelines.vocab_layout import spiece_from_proto

__all__ = ["BuildInstances", "InstancesConfig", "run"]


@dataclass
class InstancesConfig:
    seed: int = field(default=12345, metadata={"help": "seed of every random choice"})
    max_seq_length: int = field(default=512, metadata={"help": "tokens per sequence, specials included"})
    short_seq_prob: float = field(default=0.1, metadata={"help": "share of pairs built for a shorter target"})
    dupe_factor: int = field(default=40, metadata={"help": "passes over each training document, new masks each"})
    masked_lm_prob: float = field(default=0.15, metadata={"help": "share of tokens to predict"})
    max_predictions_per_seq: int = field(default=20, metadata={"help": "cap on predictions per sequence"})
    ngram: int = field(default=3, metadata={"help": "longest masked span, in words"})
    favor_shorter_ngram: bool = field(default=True, metadata={"help": "p(n) proportional to 1/n"})
    inter_sentence: str = field(default="sop", metadata={"help": "sop | nsp | none"})
    validation_fraction: float = field(default=0.02, metadata={"help": "share of documents held out"})
    validation_dupe_factor: int = field(default=1, metadata={"help": "passes over each validation document"})

    @property
    def pairs(self) -> PairConfig:
        return PairConfig(self.max_seq_length, self.short_seq_prob, self.inter_sentence)

    @property
    def masking(self) -> MaskingConfig:
        return MaskingConfig(self.masked_lm_prob, self.max_predictions_per_seq, self.ngram, self.favor_shorter_ngram)


class _BuildShardsFn(beam.DoFn):
    """Builds and writes the two shards of one sentence file; loads SentencePiece once per worker."""

    COUNTERS = Counters("instances", "documents", "instances", "tokens", "masked_tokens")

    def __init__(self, spiece: str, writer: ShardWriter, config: InstancesConfig) -> None:
        self.spiece, self.writer, self.config = spiece, writer, config

    def setup(self) -> None:
        self.sp = spiece_from_proto(files.read_bytes(self.spiece), self.spiece)
        self.classes = TokenClasses.from_pieces([self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())])
        self.pairs, self.masking = self.config.pairs, self.config.masking  # built once per worker

    def process(self, indexed_path: tuple[int, str]) -> Iterator[ShardInfo]:
        index, path = indexed_path
        table = files.read_parquet(path, columns=["id", "sentences"])
        ids = table.column("id").to_pylist()
        documents = self._encode(table.column("sentences").to_pylist())
        self.COUNTERS.inc("documents", len(ids))
        for split, (items, sizes) in self._items(ids, documents).items():
            tables, keys = [], []
            # Chunks bound the working memory however large the file or dupe_factor.
            for chunk in _chunks(items, sizes):
                built = build_instances(chunk, self.config.seed, self.pairs, self.masking, self.classes)
                tables.append(self._table(built, chunk))
                keys.append(built.keys)
                self.COUNTERS.inc("instances", len(built))
                self.COUNTERS.inc("tokens", len(built.input_ids))
                self.COUNTERS.inc("masked_tokens", len(built.masked.positions))
            yield self.writer.write_shard(split, index, sorted_by_key(tables, keys))

    def _encode(self, sentences: list[list[str]]) -> list[list[list[int]]]:
        """Returns each document's sentences as piece ids."""
        # One call encodes the whole file: SentencePiece's C++ loop, not a Python one per sentence.
        flat = self.sp.encode([s for doc in sentences for s in doc], num_threads=1)  # workers are the parallelism
        documents, start = [], 0
        for doc in sentences:
            documents.append(flat[start : start + len(doc)])
            start += len(doc)
        return documents

    def _items(self, ids: list[str], documents: list[list[list[int]]]) -> dict[str, tuple[list[Item], list[int]]]:
        """Returns per split the items to build (a document once per duplicate) and each one's source tokens."""
        items: dict[str, tuple[list[Item], list[int]]] = {split: ([], []) for split in SPLITS}
        for position, (document_id, segments) in enumerate(zip(ids, documents, strict=True)):
            held_out = unit_interval("validation", document_id) < self.config.validation_fraction
            split, size = "validation" if held_out else "train", sum(map(len, segments))
            dupes = self.config.validation_dupe_factor if held_out else self.config.dupe_factor
            for duplicate in range(dupes):
                other = None
                if self.pairs.inter_sentence == "nsp":  # only BERT's negatives need another document
                    rng = rng_for(self.config.seed, document_id, duplicate, "nsp")
                    other = _other_document(documents, position, rng)
                items[split][0].append(Item(segments, document_id, duplicate, other))
                items[split][1].append(size)
        return items

    def _table(self, built: Instances, items: list[Item]) -> pa.Table:
        lists = {
            "input_ids": (built.offsets, built.input_ids),
            "token_type_ids": (built.offsets, built.token_type_ids),
            "masked_lm_positions": (built.masked.offsets, built.masked.positions),
            "masked_lm_ids": (built.masked.offsets, built.masked.labels),
        }
        scalars = {
            "sentence_order_label": built.sentence_order_label,
            "document_id": pa.array([item.document_id for item in items], pa.string()).take(built.item),
            "duplicate": np.array([item.duplicate for item in items], dtype=np.int64)[built.item],
            "target_length": built.target_length,
        }
        return rows_table(self.writer.schema, lists, scalars)


CHUNK_TOKENS = 1 << 18  # source tokens built and masked at once: ~20 MB of working arrays


def _chunks(items: list[Item], sizes: list[int]) -> Iterator[list[Item]]:
    """Yields consecutive runs of items holding about ``CHUNK_TOKENS`` source tokens (``sizes``: each item's);
    one empty run for no items."""
    chunk, tokens = [], 0
    for item, size in zip(items, sizes, strict=True):
        chunk.append(item)
        tokens += size
        if tokens >= CHUNK_TOKENS:
            yield chunk
            chunk, tokens = [], 0
    if chunk or not items:
        yield chunk  # an empty split (dupe_factor 0) still writes its empty shard


def _other_document(documents: list, position: int, rng):
    """Returns a function drawing another document of the same file: BERT's NSP negatives, used by ``nsp`` only."""

    def draw():
        if len(documents) < 2:
            return []
        pick = randint(rng, 0, len(documents) - 2)
        return documents[pick + (pick >= position)]

    return draw


class BuildInstances(beam.PTransform):
    """(file index, sentence file path) → the ``ShardInfo`` of the two shards ``writer`` wrote for it."""

    def __init__(self, spiece: str, writer: ShardWriter, config: InstancesConfig) -> None:
        super().__init__()
        self.fn = _BuildShardsFn(spiece, writer, config)

    def expand(self, files):
        return files | "SpreadFilesOverWorkers" >> beam.Reshuffle() | "BuildAndWriteShards" >> beam.ParDo(self.fn)


SHARD_INDEX = ".shard-index.json"  # the workers' ShardInfos, gathered in the pipeline; folded into the manifest


def _write_shard_index(infos: list[ShardInfo], output: str) -> None:
    ordered = sorted((dataclasses.asdict(i) for i in infos), key=lambda i: (i["split"] != "train", i["file"]))
    files.write_json_atomically(files.join(output, SHARD_INDEX), ordered)


def _read_shard_index(output: str) -> list[ShardInfo]:
    # The workers' own entries (hashes of the bytes they wrote): the shards are not read again here, which on
    # Dataflow would mean downloading all of them to the launching machine.
    shards = [ShardInfo(**info) for info in json.loads(files.read_bytes(files.join(output, SHARD_INDEX)))]
    files.delete_if_exists(files.join(output, SHARD_INDEX))
    return shards


def _normalizer(input_folder: str) -> Normalizer:
    """How the segment stage normalised the text: recorded in the manifest for fine-tuning and export."""
    stats = read_stats(input_folder)
    if "normalizer" not in stats:
        raise ValueError(f"{files.join(input_folder, STATS)}: no normalizer record (older segment stage); rerun it")
    return Normalizer(**stats["normalizer"])


def _check_not_empty(shards: list[ShardInfo], input_folder: str, config: InstancesConfig, counters: dict) -> None:
    rows = {split: sum(s.rows for s in shards if s.split == split) for split in SPLITS}
    if (config.dupe_factor > 0 and not rows["train"]) or not sum(rows.values()):
        raise ValueError(
            f"{input_folder}: no {'training ' if config.dupe_factor else ''}instances from "
            f"{counters['documents']} documents; is the corpus empty or too small?"
        )


def _write_shards(
    options: PipelineOptions, inputs: list[str], spiece: str, writer: ShardWriter, config: InstancesConfig
) -> tuple[list[ShardInfo], dict[str, int]]:
    """Runs the pipeline that writes every shard; returns their manifest entries and the counters."""
    pipeline = beam.Pipeline(options=options)
    _ = (
        pipeline
        | "ListSentenceFiles" >> beam.Create(list(enumerate(inputs)))
        | "BuildInstances" >> BuildInstances(spiece, writer, config)
        | "GatherShardInfo" >> beam.combiners.ToList()
        | "WriteShardIndex" >> beam.Map(_write_shard_index, writer.folder)
    )
    counters = run_and_count(pipeline, _BuildShardsFn.COUNTERS)
    return _read_shard_index(writer.folder), counters


def run(argv: list[str] | None = None) -> Manifest:
    """Runs the stage; returns the manifest it wrote last."""
    args = parse_stage_args(
        argv,
        InstancesConfig,
        "instances",
        {"input": "segment stage folder", "spiece": "spiece.model of the vocab stage", "output": "shard folder"},
        __doc__,
    )
    config, input_folder, spiece, output = args.config, *args.paths.values()
    inputs = finished_files(input_folder, "sentences")
    normalizer = _normalizer(input_folder)
    spiece_bytes = files.read_bytes(spiece)
    vocab_size = spiece_from_proto(spiece_bytes, spiece).get_piece_size()  # before any worker starts
    config.pairs, config.masking  # noqa: B018 -- validate the knobs before any worker starts
    schema = shard_schema(vocab_size, config.max_seq_length)
    writer = ShardWriter(output, len(inputs), schema, files.write_bytes_atomically, files.join)
    # Stale shards of an earlier run with more files go too, so the folder holds this run alone.
    with owning_outputs(output, MANIFEST, ["*.arrow", SHARD_INDEX, SPIECE]):
        shards, counters = _write_shards(args.beam, inputs, spiece, writer, config)
        _check_not_empty(shards, input_folder, config, counters)
        manifest = Manifest(
            schema_version=SCHEMA_VERSION,
            shards=shards,
            vocab_size=vocab_size,
            spiece_sha256=writer.write_spiece(spiece_bytes),
            max_seq_length=config.max_seq_length,
            inter_sentence=config.inter_sentence,
            masking=config.masking,
            normalizer=normalizer,
            params=dataclasses.asdict(config),
            counters=counters,
        )
        writer.write_manifest(manifest)
    return manifest


if __name__ == "__main__":
    main(run, "instances", beam=True)
