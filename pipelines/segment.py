"""Segment stage: corpus documents → normalised sentences, one row per document → ``data/sentences/``.

Run: ``python -m pipelines.segment --input data/corpus --output data/sentences``.
Each ``documents-i-of-n.parquet`` becomes ``sentences-i-of-n.parquet`` (``documents.SENTENCES_SCHEMA``): the
same n and the same file per document, so the stage works file by file with no shuffle of documents. Then,
last, ``stats.json`` with the counters.

Per document: the RAW text is split into sentences (``sentences.split_sentences``, or its lines when
``presegmented``), because the segmenter needs case and punctuation; each sentence is then normalised with
``textnorm.Normalizer`` (what AlbertTokenizer would do) and cut to ``max_sentence_words`` words.
Counted: documents, sentences, long_sentences_split (sentences that were cut), and what is dropped:
empty_sentences (nothing left after normalisation) and empty_documents (no sentence left).
A corpus that gives no sentence at all fails the run, naming the input folder.
Bad input: an input folder without ``stats.json`` (the corpus stage did not finish) or with an incomplete set
of document files fails before the pipeline, naming the folder; an unreadable Parquet file fails the run naming
the file. Outputs of an earlier run are removed first and again on failure.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

import apache_beam as beam

from pipelines.algorithms.sentences import document_sentences, split_long
from pipelines.algorithms.textnorm import CHINESE_SCRIPTS, Normalizer, hf_normalizer
from pipelines.contracts.documents import SENTENCES_SCHEMA, STATS, file_name, finished_files, outputs, table_from_rows
from pipelines.runtime import files, progress
from pipelines.runtime.commands import main
from pipelines.runtime.options import parse_stage_args, work_per_input_mb
from pipelines.runtime.outputs import check_outputs, owning_outputs
from pipelines.runtime.stage import Counted, Counters, run_and_count

__all__ = ["SegmentConfig", "SegmentDocuments", "run"]

_DOCUMENT_FILE = re.compile(r"documents-(\d{5})-of-(\d{5})\.parquet$")
# Single-core seconds per MB of corpus files, in-process on the embedded default (bench/startup.py's work).
# Sizes Beam's local runner.
CPU_S_PER_MB = 0.6


@dataclasses.dataclass
class SegmentConfig:
    """The segment stage's knobs (params.yaml section ``segment``)."""

    language: str = dataclasses.field(default="en", metadata={"help": "ISO 639 code for the sentence splitter"})
    lower_case: bool = dataclasses.field(default=True, metadata={"help": "lower-case (AlbertTokenizer default)"})
    strip_accents: bool = dataclasses.field(
        default=True, metadata={"help": "drop combining marks after NFKD (AlbertTokenizer default)"}
    )
    max_sentence_words: int = dataclasses.field(
        default=200, metadata={"help": "cut longer sentences (CJK characters count one word each)"}
    )
    chinese_script: str = dataclasses.field(
        default="keep",
        metadata={"help": f"{' | '.join(CHINESE_SCRIPTS)}: convert Chinese characters to one script (OpenCC)"},
    )
    normalization_from: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "a Hugging Face model folder (or its tokenizer_config.json) whose do_lower_case, keep_accents and "
            "chinese_script replace the three (continued pretraining normalises as its start did)"
        },
    )

    def __post_init__(self) -> None:
        if self.max_sentence_words < 1:
            raise ValueError(f"max_sentence_words must be positive, got {self.max_sentence_words}")
        self.normalizer  # noqa: B018 -- a misspelt chinese_script fails here, before any worker starts

    @property
    def normalizer(self) -> Normalizer:
        return Normalizer(self.lower_case, self.strip_accents, self.chinese_script)

    def resolved(self) -> SegmentConfig:
        """This config with ``normalization_from``'s switches in place of its own, read once here so that workers
        elsewhere never need the file."""
        if not self.normalization_from:
            return self
        normalizer = hf_normalizer(self.normalization_from)
        switches = ("lower_case", "strip_accents", "chinese_script")
        return dataclasses.replace(self, **{name: getattr(normalizer, name) for name in switches})


class _SegmentFile(beam.DoFn):
    """Segments and normalises the documents of one corpus file and writes its sentences file."""

    COUNTERS = Counters(
        "segment", "documents", "empty_documents", "sentences", "empty_sentences", "long_sentences_split"
    )

    def __init__(self, output: str, config: SegmentConfig):
        self._output = output
        self._config = config

    def setup(self) -> None:
        self._normalize = self._config.normalizer
        self._language = self._config.language

    def process(self, path: str) -> Iterator[str]:
        index, num_files = map(int, _DOCUMENT_FILE.search(path).groups())
        rows = []
        for document in files.read_parquet(path).to_pylist():
            self.COUNTERS.inc("documents")
            sentences = self._sentences(document["text"], document["presegmented"])
            if not sentences:
                self.COUNTERS.inc("empty_documents")
                continue
            rows.append({"id": document["id"], "sentences": sentences, "meta": document["meta"]})
        out = files.join(self._output, file_name("sentences", index, num_files))
        files.write_parquet_atomically(out, table_from_rows(rows, SENTENCES_SCHEMA))
        progress.advance()
        yield out

    def _sentences(self, text: str, presegmented: bool) -> list[str]:
        kept: list[str] = []
        for raw in document_sentences(text, presegmented, self._language):
            sentence = self._normalize(raw)
            if not sentence:
                self.COUNTERS.inc("empty_sentences")
                continue
            pieces = split_long(sentence, self._config.max_sentence_words)
            if len(pieces) > 1:
                self.COUNTERS.inc("long_sentences_split")
            kept.extend(pieces)
        self.COUNTERS.inc("sentences", len(kept))
        return kept


class SegmentDocuments(beam.PTransform):
    """Corpus document file paths → the sentences files written for them (their paths), file by file."""

    def __init__(self, output: str, config: SegmentConfig):
        super().__init__()
        self._output = output
        self._config = config

    def expand(self, document_files: beam.PCollection) -> beam.PCollection:
        return (
            document_files
            | "SpreadFiles" >> beam.Reshuffle()
            | "SegmentFiles" >> Counted(beam.ParDo(_SegmentFile(self._output, self._config)))
        )


def run(argv: list[str] | None = None) -> dict:
    """Runs the segment stage and returns what it wrote to ``stats.json``."""
    paths = {"input": "corpus stage output folder", "output": "folder for sentences-*.parquet and stats.json"}
    args = parse_stage_args(
        argv, SegmentConfig, "segment", paths, __doc__.splitlines()[0], work_per_input_mb(CPU_S_PER_MB)
    )
    config = args.config.resolved()
    check_outputs(
        args.paths, {"output": [STATS, *outputs("sentences")]}, {"normalization_from": config.normalization_from}
    )
    inputs, output = finished_files(args.paths["input"], "documents"), args.paths["output"]
    with owning_outputs(output, STATS, outputs("sentences")):
        pipeline = beam.Pipeline(options=args.beam)
        _ = (
            pipeline
            | "ListDocumentFiles" >> beam.Create(inputs)
            | "SegmentDocuments" >> SegmentDocuments(output, config)
        )
        with progress.shown("segment", len(inputs), "files", args.beam):
            counters = run_and_count(pipeline, output, _SegmentFile.COUNTERS)
        if not counters["sentences"]:  # empty shards would pass the later stages silently
            raise ValueError(
                f"{args.paths['input']}: no sentences: none of its {counters['documents']} documents has text "
                "left after segmentation and normalisation"
            )
        stats = {
            "config": dataclasses.asdict(config),
            "counters": counters,
            "files": len(inputs),
            # What the instances stage records in its manifest, for fine-tuning and export to repeat.
            "normalizer": dataclasses.asdict(config.normalizer),
        }
        files.write_json_atomically(files.join(output, STATS), stats)
    return stats


if __name__ == "__main__":
    main(run, "segment", beam=True)
