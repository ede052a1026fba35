"""instances stage: sentences → Arrow IPC shards of SOP pairs with n-gram masks, plus ``manifest.json``.

Run: ``python -m pipelines.instances --input data/deduped --spiece data/vocab/spiece.model --output data/shards``
(any Beam option may follow, e.g. ``--direct_num_workers 2`` or ``--runner DataflowRunner ...``).

Sentence file i becomes shards ``train-i`` and ``validation-i``: a worker encodes a few files at once, then for
each file draws every sentence pair (all ``dupe_factor`` duplicates), orders them by a stable per-row key, lays
them out and masks them in runs of rows, and writes the two shards. Each file's shards depend on that file
alone, and the work unit is a few files of bounded size, so memory stays flat however large the corpus, and
nothing gathers all instances.
A document is held out (validation and evaluation, never trained on) by ``pipelines.algorithms.splits``, the one
split every stage shares; the tasks stage takes its dev and test examples from the same held-out documents. The
input must be the dedup stage's output, so no held-out document repeats training text (``documents.require_deduped``;
``--allow_undeduped`` overrides).

``--eval_output FOLDER`` also writes the held-out documents alone as SOP pairs and as NSP pairs, to
``FOLDER/sop`` and ``FOLDER/nsp`` (the sets of the paper's Table 5 intrinsic columns, whatever objective the
shards use): each is the shard folder ``--inter_sentence X --dupe_factor 0`` would write, byte for byte, built
from the same encoding of each file, so the evaluation sets cost no run of their own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.algorithms.batch_hashes import stable_hashes64
from pipelines.algorithms.masked_pairs import Instances, Items, build_planned, plan_pairs
from pipelines.algorithms.masking import WORD_SEGMENTERS, MaskingConfig
from pipelines.algorithms.sop import Documents, PairConfig
from pipelines.algorithms.splits import SPLIT_KEY, HeldOutSplit
from pipelines.algorithms.textnorm import Normalizer
from pipelines.algorithms.vocabulary import (
    SPIECE_MODEL,
    VOCAB_FILES,
    VOCAB_TXT,
    Vocabulary,
    read_vocabulary,
    token_classes,
    vocabulary_from_bytes,
)
from pipelines.algorithms.word_segments import jieba_words, pieces_joins
from pipelines.contracts.documents import finished_files, read_normalizer, require_deduped
from pipelines.contracts.manifest import MANIFEST, SCHEMA_VERSION, SPLITS, Manifest, ShardInfo, shard_schema
from pipelines.contracts.shards import ShardWriter, rows_table
from pipelines.runtime import files, progress
from pipelines.runtime.commands import main
from pipelines.runtime.options import input_mb, parse_stage_args
from pipelines.runtime.outputs import check_outputs, owning_outputs
from pipelines.runtime.stage import Counted, Counters, run_and_count_each

__all__ = ["BuildInstances", "InstancesConfig", "run"]


@dataclass
class InstancesConfig(HeldOutSplit):
    seed: int = field(default=12345, metadata={"help": "seed of every random choice"})
    max_seq_length: int = field(default=512, metadata={"help": "tokens per sequence, specials included"})
    short_seq_prob: float = field(default=0.1, metadata={"help": "share of pairs built for a shorter target"})
    dupe_factor: int = field(default=40, metadata={"help": "passes over each training document, new masks each"})
    masked_lm_prob: float = field(default=0.15, metadata={"help": "share of tokens to predict"})
    max_predictions_per_seq: int = field(default=20, metadata={"help": "cap on predictions per sequence"})
    ngram: int = field(default=3, metadata={"help": "longest masked span, in words"})
    favor_shorter_ngram: bool = field(default=True, metadata={"help": "p(n) proportional to 1/n"})
    inter_sentence: str = field(default="sop", metadata={"help": "sop | nsp | none"})
    word_segmenter: str = field(
        default="none",
        metadata={"help": f"{' | '.join(WORD_SEGMENTERS)}: whose words a span covers in Chinese text (jieba: wwm)"},
    )
    validation_dupe_factor: int = field(default=1, metadata={"help": "passes over each validation document"})

    def __post_init__(self) -> None:
        super().__post_init__()

    @property
    def pairs(self) -> PairConfig:
        return PairConfig(self.max_seq_length, self.short_seq_prob, self.inter_sentence)

    @property
    def masking(self) -> MaskingConfig:
        return MaskingConfig(
            self.masked_lm_prob, self.max_predictions_per_seq, self.ngram, self.favor_shorter_ngram, self.word_segmenter
        )


EVAL_OBJECTIVES = ("sop", "nsp")  # --eval_output's folders: the held-out documents paired each way
COUNTED = ("documents", "instances", "tokens", "masked_tokens")  # each output's counters, in its manifest


@dataclass(frozen=True)
class ShardOutput:
    """One shard folder the workers fill: its writer, the config its rows follow and its counters' namespace."""

    writer: ShardWriter
    config: InstancesConfig
    counters: Counters


def _outputs(
    config: InstancesConfig, output: str, eval_output: str | None, num_files: int, schema: pa.Schema
) -> list[ShardOutput]:
    """The stage's shard folders: ``output`` with ``config``, then, with ``eval_output``, one folder per
    ``EVAL_OBJECTIVES`` holding the held-out documents alone (``dupe_factor`` 0) paired that way; all hold out
    the same documents (one ``held_out_fraction``)."""

    def writer(folder: str) -> ShardWriter:
        return ShardWriter(folder, num_files, schema, files.open_atomically, files.join)

    outputs = [ShardOutput(writer(output), config, Counters("instances", *COUNTED))]
    for objective in EVAL_OBJECTIVES if eval_output else ():
        held_out = dataclasses.replace(config, inter_sentence=objective, dupe_factor=0)
        outputs.append(
            ShardOutput(writer(files.join(eval_output, objective)), held_out, Counters(f"eval_{objective}", *COUNTED))
        )
    return outputs


# Single-core seconds per MB of sentence files: encoding each document once, then building and masking it once a
# pass; solved from bench/startup.py's work on the embedded default (bench/results/startup.md).
ENCODE_CPU_S_PER_MB, PASS_CPU_S_PER_MB = 0.2, 0.03


def _work_s(config: InstancesConfig, paths: dict[str, str | None]) -> float:
    """The stage's estimated single-core seconds, which size Beam's local runner (``options.local_mode``)."""
    held_out = config.held_out_fraction
    passes = config.dupe_factor * (1 - held_out) + config.validation_dupe_factor * held_out
    if paths.get("eval_output"):
        passes += len(EVAL_OBJECTIVES) * config.validation_dupe_factor * held_out
    return input_mb(paths["input"]) * (ENCODE_CPU_S_PER_MB + PASS_CPU_S_PER_MB * passes)


# Sentence files a worker encodes in one SentencePiece call before building their shards one by one: called once
# per file, its tables go cold between shards; 4 files cost less per token than 1, as much as 16, same shards.
FILES_PER_ENCODE = 4
# Sentences per SentencePiece call, back to back over the group: a call returns a Python object per sentence, and
# a whole group's at once left a worker larger for good (docs/results.md, "History").
ENCODE_SENTENCES = 8192


class _BuildShardsFn(beam.DoFn):
    """Builds and writes every output's two shards of each sentence file of a group, encoding the group's
    sentences in one call; loads the vocabulary once per worker. Yields (output's position, ``ShardInfo``)."""

    def __init__(self, vocab: VocabSource, outputs: list[ShardOutput]) -> None:
        self.vocab_source, self.outputs = vocab, outputs

    def setup(self) -> None:
        self.vocab = self.vocab_source.load()
        self.classes = token_classes(self.vocab)
        self.knobs = [(o.config.pairs, o.config.masking) for o in self.outputs]  # built once per worker
        # The outputs share one encoding of each file, and their config's word_segmenter (one stage config).
        self.segmented = any(o.config.word_segmenter != "none" for o in self.outputs)

    def process(self, group: list[tuple[int, str]]) -> Iterator[tuple[int, ShardInfo]]:
        tables = [files.read_parquet(path, columns=["id", "sentences"]) for _, path in group]
        encoded = self._encode([table.column("sentences") for table in tables])
        for (index, _), table, documents in zip(group, tables, encoded, strict=True):
            # Ids stay Arrow: hashed, taken per item and written, never decoded.
            yield from self._file_shards(index, table.column("id").combine_chunks(), documents)
            progress.advance()  # every shard of the file written

    def _file_shards(self, index: int, ids: pa.Array, documents: Documents) -> Iterator[tuple[int, ShardInfo]]:
        """Builds and writes every output's two shards of sentence file ``index``."""
        # splits.is_held_out for every id at once; the outputs share the fraction.
        fraction = self.outputs[0].config.held_out_fraction
        held_out = stable_hashes64((SPLIT_KEY,), ids) / 2.0**64 < fraction
        for position, (output, knobs) in enumerate(zip(self.outputs, self.knobs, strict=True)):
            output.counters.inc("documents", len(ids))
            for split, items in _items(ids, held_out, output.config).items():
                runs = self._shard_runs(documents, items, output, *knobs)
                yield position, output.writer.write_shard(split, index, runs)

    def _shard_runs(
        self, documents: Documents, items: Items, output: ShardOutput, pairs: PairConfig, masking: MaskingConfig
    ) -> Iterator[pa.Table]:
        """Yields one shard's rows, ``items`` paired and masked, in key order: a run of rows at a time."""
        plan = plan_pairs(documents, items, output.config.seed, pairs)
        # Runs of rows bound the working memory however large the file or dupe_factor: the plan is in key order,
        # so the runs end to end are the shard in its final order, written as they come (no merge, no gather).
        for rows in _runs(plan.row_tokens()):
            built = build_planned(documents, plan.rows(rows), masking, self.classes)
            output.counters.inc("instances", len(built))
            output.counters.inc("tokens", len(built.input_ids))
            output.counters.inc("masked_tokens", len(built.masked.positions))
            yield _table(output.writer.schema, built, items)

    def _encode(self, files_sentences: list[pa.ChunkedArray]) -> list[Documents]:
        """Returns each file's documents (a list of sentences each) as piece ids."""
        # The tokenizer's compiled loop, not a Python one per sentence, over every file's sentences in a few calls.
        # SentencePiece takes UTF-8 bytes as it takes str, and bytes objects cost Arrow no decoding to make.
        text_type = pa.binary() if self.vocab.file == SPIECE_MODEL else pa.string()
        flat = [pc.list_flatten(sentences).cast(text_type) for sentences in files_sentences]
        texts = [text for texts in flat for text in texts.to_pylist()]
        encode = _encode_segmented if self.segmented else _encode_ids
        encoded = [
            encode(self.vocab, texts[start : start + ENCODE_SENTENCES])
            for start in range(0, max(len(texts), 1), ENCODE_SENTENCES)  # one call for none, for empty arrays
        ]
        tokens, lengths, *joins = (np.concatenate(parts) for parts in zip(*encoded, strict=True))
        # File f holds sentences sentence_bounds[f]:sentence_bounds[f + 1], and so tokens token_bounds[f]:…
        sentence_bounds = np.cumsum([0, *map(len, flat)])
        token_bounds = np.concatenate([[0], np.cumsum(lengths)])[sentence_bounds]
        return [
            Documents.from_lengths(
                tokens[token_bounds[f] : token_bounds[f + 1]],
                lengths[sentence_bounds[f] : sentence_bounds[f + 1]],
                pc.list_value_length(sentences).to_numpy(),
                joins[0][token_bounds[f] : token_bounds[f + 1]] if joins else None,
            )
            for f, sentences in enumerate(files_sentences)
        ]


def _items(ids: pa.Array, held_out: np.ndarray, config: InstancesConfig) -> dict[str, Items]:
    """Returns per split the items to build: its documents (their positions in the file) once per duplicate."""
    dupes = {"train": config.dupe_factor, "validation": config.validation_dupe_factor}
    items = {}
    for split in SPLITS:
        positions = np.flatnonzero(held_out == (split == "validation"))
        document = np.repeat(positions, dupes[split])
        duplicate = np.tile(np.arange(dupes[split], dtype=np.int64), len(positions))
        items[split] = Items(document, ids.take(document), duplicate)
    return items


def _table(schema: pa.Schema, built: Instances, items: Items) -> pa.Table:
    lists = {
        "input_ids": (built.offsets, built.input_ids),
        "token_type_ids": (built.offsets, built.token_type_ids),
        "masked_lm_positions": (built.masked.offsets, built.masked.positions),
        "masked_lm_ids": (built.masked.offsets, built.masked.labels),
    }
    if built.joins is not None:
        lists["joins_word"] = (built.offsets, built.joins)
    scalars = {
        "sentence_order_label": built.sentence_order_label,
        "document_id": items.document_id.take(built.item),
        "duplicate": items.duplicate[built.item],
        "target_length": built.target_length,
    }
    return rows_table(schema, lists, scalars)


def _encode_ids(vocab: Vocabulary, texts: list[str] | list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Returns every text's piece ids end to end (int32) and each one's count."""
    return vocab.encode(texts)


def _encode_segmented(vocab: Vocabulary, texts: list[bytes] | list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns what ``_encode_ids`` does, and each piece's ``piece_joins`` (int8): whether it continues a jieba
    word, found from the pieces' offsets (a slower call, made only here)."""
    decoded = [text.decode("utf-8") if isinstance(text, bytes) else text for text in texts]
    tokens, lengths, begins = vocab.encode_with_begins(decoded)
    return tokens, lengths, pieces_joins(decoded, begins, lengths, vocab.begins_unit)


RUN_TOKENS = 1 << 18  # tokens of the rows laid out and masked at once: ~20 MB of working arrays


def _runs(row_tokens: np.ndarray) -> Iterator[slice]:
    """Yields consecutive runs of rows holding about ``RUN_TOKENS`` tokens (``row_tokens``: each row's); one
    empty run for no rows, as an empty split (dupe_factor 0) still writes its shard."""
    ends = np.cumsum(row_tokens)
    if not len(ends) or ends[-1] <= RUN_TOKENS:  # one run: the usual case at dupe_factor 1
        yield slice(0, len(ends))
        return
    cuts = np.searchsorted(ends, np.arange(RUN_TOKENS, ends[-1], RUN_TOKENS), side="right")
    bounds = np.unique(np.concatenate([[0], cuts, [len(row_tokens)]])).tolist()
    yield from map(slice, bounds[:-1], bounds[1:])


class BuildInstances(beam.PTransform):
    """Groups of (file index, sentence file path) → (output's position, ``ShardInfo``) of each shard written."""

    def __init__(self, vocab: VocabSource, outputs: list[ShardOutput]) -> None:
        super().__init__()
        self.fn = _BuildShardsFn(vocab, outputs)

    def expand(self, files):
        return (
            files | "SpreadFilesOverWorkers" >> beam.Reshuffle() | "BuildAndWriteShards" >> Counted(beam.ParDo(self.fn))
        )


def _groups(inputs: list[str]) -> list[list[tuple[int, str]]]:
    """The work units: consecutive sentence files (with their index) ``FILES_PER_ENCODE`` at a time."""
    indexed = list(enumerate(inputs))
    return [indexed[start : start + FILES_PER_ENCODE] for start in range(0, len(indexed), FILES_PER_ENCODE)]


SHARD_INDEX = ".shard-index.json"  # the workers' ShardInfos, gathered in the pipeline; folded into the manifest


def _write_shard_indexes(written: list[tuple[int, ShardInfo]], folders: list[str]) -> None:
    """Writes each output folder's index: the entries of the shards written there, train first, by file."""
    for position, folder in enumerate(folders):
        infos = [dataclasses.asdict(info) for p, info in written if p == position]
        ordered = sorted(infos, key=lambda i: (i["split"] != "train", i["file"]))
        files.write_json_atomically(files.join(folder, SHARD_INDEX), ordered)


def _read_shard_index(output: str) -> list[ShardInfo]:
    # The workers' own entries (hashes of the bytes they wrote): the shards are not read again here, which on
    # Dataflow would mean downloading all of them to the launching machine.
    shards = [ShardInfo(**info) for info in json.loads(files.read_bytes(files.join(output, SHARD_INDEX)))]
    files.delete_if_exists(files.join(output, SHARD_INDEX))
    return shards


def _check_not_empty(shards: list[ShardInfo], output: ShardOutput, input_folder: str, counters: dict) -> None:
    rows = {split: sum(s.rows for s in shards if s.split == split) for split in SPLITS}
    training = output.config.dupe_factor > 0
    if (training and not rows["train"]) or not sum(rows.values()):
        raise ValueError(
            f"{input_folder}: no {'training' if training else 'held-out'} instances from {counters['documents']} "
            f"documents for {output.writer.folder}; is the corpus empty or too small?"
        )


def _write_shards(
    options: PipelineOptions, inputs: list[str], vocab: VocabSource, outputs: list[ShardOutput]
) -> list[tuple[list[ShardInfo], dict[str, int]]]:
    """Runs the pipeline that writes every shard; returns each output's manifest entries and counters."""
    pipeline = beam.Pipeline(options=options)
    folders = [o.writer.folder for o in outputs]
    _ = (
        pipeline
        | "ListSentenceFiles" >> beam.Create(_groups(inputs))
        | "BuildInstances" >> BuildInstances(vocab, outputs)
        | "GatherShardInfo" >> beam.combiners.ToList()
        | "WriteShardIndexes" >> beam.Map(_write_shard_indexes, folders)
    )
    with progress.shown("instances", len(inputs), "files", options):
        counters = run_and_count_each(pipeline, folders[0], *(o.counters for o in outputs))
    return [(_read_shard_index(folder), counted) for folder, counted in zip(folders, counters, strict=True)]


@dataclass(frozen=True)
class VocabSource:
    """The vocabulary file the stage encodes with, as bytes (a remote path is read once, by the launcher), and a
    vocab.txt's settings (its tokenizer_config.json's): what every worker loads the vocabulary from."""

    file: str  # SPIECE_MODEL or VOCAB_TXT
    data: bytes = field(repr=False)
    tokenizer: dict | None
    path: str

    @classmethod
    def find(cls, path: str) -> VocabSource:
        """Reads ``path``: a vocabulary file, or a folder holding exactly one (the vocab stage's output).

        Raises:
            FileNotFoundError: naming the folder, when it holds no vocabulary file.
            ValueError: naming the folder, when it holds both kinds (which one was meant is unknowable).
        """
        return cls(*read_vocabulary(path, files.exists, files.join, files.read_bytes))

    def load(self) -> Vocabulary:
        return vocabulary_from_bytes(self.file, self.data, self.tokenizer, self.path)


def _check_normalizer(vocab: Vocabulary, normalizer: Normalizer, vocab_path: str, input_folder: str) -> None:
    """A vocab.txt normalises as BertTokenizer does (its own case and accent rules): sentences the segment stage
    has already lower-cased or stripped (NFKD, which also folds full-width forms) would give other ids."""
    if vocab.file == VOCAB_TXT and (normalizer.lower_case or normalizer.strip_accents):
        raise ValueError(
            f"{input_folder}: the segment stage lower-cased or stripped accents ({normalizer}), but {vocab_path} "
            "is a WordPiece vocabulary that does its own (its tokenizer_config.json): rerun segment with "
            "segment.lower_case false and segment.strip_accents false, or normalization_from its folder"
        )


def run(argv: list[str] | None = None) -> Manifest:
    """Runs the stage; returns the manifest of ``--output``, written last (after any ``--eval_output``'s)."""
    args = parse_stage_args(
        argv,
        InstancesConfig,
        "instances",
        {
            "input": "dedup stage folder",
            "spiece": f"the vocab stage's folder, or its vocabulary file ({' or '.join(VOCAB_FILES)})",
            "output": "shard folder",
        },
        __doc__,
        _work_s,
        {"eval_output": f"folder for the held-out documents alone, as {' and as '.join(EVAL_OBJECTIVES)} pairs"},
    )
    config, (input_folder, spiece, output, eval_output) = args.config, args.paths.values()
    owned = ["*.arrow", SHARD_INDEX, *VOCAB_FILES]  # and MANIFEST: what the stage writes in each shard folder
    in_eval = [f"{objective}/{name}" for objective in EVAL_OBJECTIVES for name in [MANIFEST, *owned]]
    check_outputs(args.paths, {"output": [MANIFEST, *owned], "eval_output": in_eval})
    inputs = finished_files(input_folder, "sentences")
    require_deduped(input_folder, args.allow_undeduped)  # its held-out documents repeat no training text
    normalizer = Normalizer(**read_normalizer(input_folder, config.held_out_fraction))
    source = VocabSource.find(spiece)
    vocab = source.load()  # checked before any worker starts
    _check_normalizer(vocab, normalizer, source.path, input_folder)
    vocab_size = vocab.vocab_size
    config.pairs, config.masking  # noqa: B018 -- validate the knobs before any worker starts
    if config.word_segmenter == "jieba":
        jieba_words("")  # jieba installed, its dictionary the pinned one: checked before any worker starts
    schema = shard_schema(vocab_size, config.max_seq_length, config.word_segmenter)
    outputs = _outputs(config, output, eval_output, len(inputs), schema)
    with contextlib.ExitStack() as owning:
        # Stale shards of an earlier run with more files go too, so each folder holds this run alone.
        for o in outputs:
            owning.enter_context(owning_outputs(o.writer.folder, MANIFEST, owned))
        written = _write_shards(args.beam, inputs, source, outputs)
        for o, (shards, counters) in zip(outputs, written, strict=True):
            _check_not_empty(shards, o, input_folder, counters)
        manifests = [
            Manifest(
                schema_version=SCHEMA_VERSION,
                shards=shards,
                vocab_size=vocab_size,
                vocab_file=vocab.file,
                vocab_sha256=o.writer.write_vocab(vocab.file, source.data),
                tokenizer=vocab.tokenizer,
                max_seq_length=o.config.max_seq_length,
                inter_sentence=o.config.inter_sentence,
                masking=o.config.masking,
                normalizer=normalizer,
                params=dataclasses.asdict(o.config),
                counters=counters,
            )
            for o, (shards, counters) in zip(outputs, written, strict=True)
        ]
        for o, manifest in reversed(list(zip(outputs, manifests, strict=True))):  # the training shards' last
            o.writer.write_manifest(manifest)
    return manifests[0]


if __name__ == "__main__":
    main(run, "instances", beam=True)
