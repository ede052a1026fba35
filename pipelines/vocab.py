"""The vocab stage: a deterministic, bounded sentence sample → SentencePiece unigram model with ALBERT's ids.

Owns ``VocabConfig``, the ``SampleSentences`` PTransform and ``train_vocab``. SentencePiece loads every
training sentence into memory and builds a suffix array (google/sentencepiece issue 708), so Beam first keeps
the ``sample_sentences`` sentences with the smallest stable hash (memory O(sample), the same whatever the
runner or worker count), writes them sorted by hash to one file, and SentencePiece trains on that file alone.
Only training documents are sampled (``pipelines.algorithms.splits``, the split every stage shares): a word that only
held-out text uses gets no piece of its own, so the vocabulary tells nothing of the text evaluation scores on.
The input must be the dedup stage's output (``documents.require_deduped``; ``--allow_undeduped`` overrides).
Run::

    python -m pipelines.vocab --input data/deduped --output data/vocab

Outputs: ``spiece.model``, ``spiece.vocab`` and, written last, ``stats.json`` (``trained_on``, the documents
read and held-out documents skipped, the sentences sampled). With ``kind: wordpiece`` (or ``from_wordpiece``) a
BERT ``vocab.txt`` and its ``tokenizer_config.json`` instead (``pipelines.algorithms.wordpiece``), which the
instances stage reads as ``transformers.BertTokenizer`` does.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import re
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import pyarrow.compute as pc
import sentencepiece as spm
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.algorithms.hashes import stable_hash64
from pipelines.algorithms.splits import HeldOutSplit, is_held_out
from pipelines.algorithms.vocab_layout import CONTROL_SYMBOLS, PAD_ID, SPECIAL_PIECES, UNK_ID, spiece_from_proto
from pipelines.algorithms.wordpiece import (
    CONFIG,
    VOCAB_TXT,
    WordPieceSettings,
    WordPieceVocab,
    is_vocab_txt,
    read_config,
    train_wordpiece,
    wordpiece_from_bytes,
)
from pipelines.contracts.documents import STATS, finished_files, read_split_stats, require_deduped
from pipelines.runtime import files, progress
from pipelines.runtime.commands import main
from pipelines.runtime.options import parse_stage_args, work_per_input_mb
from pipelines.runtime.outputs import check_outputs, owning_outputs
from pipelines.runtime.stage import Counted, Counters, Smallest, run_and_count

log = logging.getLogger("pipelines.vocab")  # by name: run as `python -m`, __name__ is "__main__"

__all__ = ["SampleSentences", "VocabConfig", "read_sentences", "run", "sample_to_file", "train_vocab", "write_spiece"]

MODEL_TYPES = ("unigram",)  # transformers.AlbertTokenizer is a Unigram tokenizer; BPE pieces would not load
SAMPLE_FILE = ".sample-sentences.txt"
KINDS = ("sentencepiece", "wordpiece")
SPIECE_FILES = ["spiece.model", "spiece.vocab"]
WORDPIECE_FILES = [VOCAB_TXT, CONFIG]
# sentences_read: the training documents' sentences, the pool the sample is drawn from.
COUNTERS = Counters(
    "vocab", "files_read", "documents_read", "held_out_documents_skipped", "sentences_read", "sentences_sampled"
)
TRAINED_ON = "training documents"  # stats.json's record of what the sample was drawn from
# "identity": textnorm.Normalizer is the only normalisation. AlbertTokenizer applies the same steps, and with
# no precompiled charsmap in the model there is nothing else for the Hugging Face export to carry over.
NORMALIZATION_RULE = "identity"
# Single-core seconds per MB of sentence files for the Beam sample alone (SentencePiece trains in the launching
# process whatever the runner), measured on the embedded default. Sizes Beam's local runner.
SAMPLE_CPU_S_PER_MB = 0.6


@dataclasses.dataclass
class VocabConfig(HeldOutSplit):
    """The vocab stage's knobs (params.yaml section ``vocab``)."""

    vocab_size: int = dataclasses.field(default=30000, metadata={"help": "pieces including the 5 special ones"})
    character_coverage: float = dataclasses.field(
        default=0.99995, metadata={"help": "share of characters covered; the rarest rest map to <unk>"}
    )
    model_type: str = dataclasses.field(default="unigram", metadata={"help": f"one of {MODEL_TYPES}"})
    sample_sentences: int = dataclasses.field(
        default=1_000_000, metadata={"help": "train on at most this many sentences, chosen by stable hash"}
    )
    seed: int = dataclasses.field(default=12345, metadata={"help": "salt of the sampling hash"})
    num_threads: int = dataclasses.field(
        default=8, metadata={"help": "SentencePiece trainer threads; part of the result (float sum order)"}
    )
    from_spiece: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "an existing spiece.model, or a Hugging Face folder holding one, to use instead of training "
            "(continued pretraining keeps its start's vocabulary); vocab_size and the sampling knobs are then unused"
        },
    )
    kind: str = dataclasses.field(
        default="sentencepiece",
        metadata={
            "help": f"one of {KINDS}: spiece.model (ALBERT's), or a BERT vocab.txt trained here (SentencePiece BPE's "
            "pieces over BERT's words, every character of the sample kept; segment must then neither lower-case "
            "nor strip accents, which BertTokenizer does itself)"
        },
    )
    lower_case: bool = dataclasses.field(
        default=True, metadata={"help": "kind wordpiece: the vocab.txt's do_lower_case (BERT also strips accents)"}
    )
    from_wordpiece: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "an existing BERT vocab.txt, or a folder holding one (and its tokenizer_config.json), to use "
            "instead of training: its ids, special ones included, stay as they are"
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type {self.model_type!r}: expected one of {MODEL_TYPES}")
        if self.vocab_size <= len(SPECIAL_PIECES):
            raise ValueError(f"vocab_size {self.vocab_size}: must exceed the {len(SPECIAL_PIECES)} special pieces")
        if self.sample_sentences < 1 or self.num_threads < 1:
            raise ValueError("sample_sentences and num_threads must be positive")
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r}: expected one of {KINDS}")
        if self.from_spiece and self.from_wordpiece:
            raise ValueError("from_spiece and from_wordpiece both set: the stage has one vocabulary")


class SampleSentences(beam.PTransform):
    """Sentences → one element: the ``size`` sentences with the smallest hash, sorted by that hash.

    The hash is ``stable_hash64("vocab", seed, sentence)``, so the sample depends only on the set of input
    sentences and the seed; repeated sentences share a hash and enter the sample together, keeping their count.
    """

    def __init__(self, size: int, seed: int) -> None:
        super().__init__()
        self._size = size
        self._seed = seed

    def expand(self, sentences: beam.PCollection[str]) -> beam.PCollection[list[str]]:
        seed = self._seed
        return (
            sentences
            | "KeyByHash" >> beam.Map(lambda s: (stable_hash64("vocab", seed, s), s))
            | "KeepSmallest" >> Smallest(self._size)
            | "DropHashes" >> beam.Map(lambda pairs: [s for _, s in pairs])
        )


def read_sentences(path: str, held_out_fraction: float) -> Iterator[str]:
    """Yields every sentence of the training documents of one sentences Parquet file (``splits.is_held_out``
    skips the rest), counting files, documents and sentences (in ``Counted``)."""
    table = files.read_parquet(path, columns=["id", "sentences"])
    training = [not is_held_out(doc_id, held_out_fraction) for doc_id in table.column("id").to_pylist()]
    COUNTERS.inc("files_read")
    COUNTERS.inc("documents_read", len(training))
    COUNTERS.inc("held_out_documents_skipped", training.count(False))
    sentences = pc.list_flatten(table.column("sentences").filter(training)).to_pylist()
    COUNTERS.inc("sentences_read", len(sentences))
    yield from sentences  # each one is hashed and sampled downstream before the next is asked for
    progress.advance()


def _write_sample(sample: list[str], path: str) -> int:
    # Normalised sentences hold no newlines (textnorm collapses whitespace), so one per line is lossless.
    COUNTERS.inc("sentences_sampled", len(sample))
    files.write_bytes_atomically(path, "".join(s + "\n" for s in sample).encode("utf-8"))
    return len(sample)


def _lines(path: str) -> Iterator[str]:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        for line in io.TextIOWrapper(raw, encoding="utf-8"):
            yield line.rstrip("\n")


def train_vocab(sentences_file: str, model_prefix: str, config: VocabConfig) -> spm.SentencePieceProcessor:
    """Trains SentencePiece on ``sentences_file`` and writes ``{model_prefix}.model`` and ``.vocab``.

    Training is byte-identical for equal input files and config: the whole file is used in order (no
    SentencePiece subsampling or shuffling: the Beam sample is the bounded one), sentences come through an
    iterator and the model through a writer, so no file path is recorded in the model, and the thread count
    is fixed by config because it changes the float sums and hence the pieces.

    Args:
        sentences_file: one normalised sentence per line (any Beam filesystem path).
        model_prefix: path prefix of the two output files.
        config: the stage's knobs.

    Returns:
        The trained model, its id layout checked.

    Raises:
        ValueError: when the file holds no sentence, or the result breaks ALBERT's id layout.
    """
    try:
        model = _train(sentences_file, config, config.vocab_size)
    except RuntimeError as err:
        # A small corpus (under ~100 KB, e.g. BERT's sample text) cannot fill the default vocabulary: SentencePiece
        # says the largest size it supports, and a smaller vocabulary is what such a corpus should get anyway.
        limit = _TOO_HIGH.search(str(err))
        characters = _TOO_FEW.search(str(err))
        if characters:  # Chinese: thousands of characters, each a piece of its own
            raise ValueError(
                f"{sentences_file}: vocab.vocab_size {config.vocab_size} is below the {characters.group(1)} characters "
                f"that character_coverage {config.character_coverage} keeps (with the special pieces); raise "
                "vocab.vocab_size or lower vocab.character_coverage (docs/your-corpus.md, Chinese)"
            ) from err
        if limit is None:
            raise ValueError(f"{sentences_file}: SentencePiece training failed: {err}") from err
        supported = int(limit.group(1))
        log.warning("vocab_size %d is more than this corpus supports; using %d", config.vocab_size, supported)
        model = _train(sentences_file, config, supported)
    return write_spiece(model.getvalue(), model_prefix, f"{model_prefix}.model")


def write_spiece(model: bytes, model_prefix: str, where: str) -> spm.SentencePieceProcessor:
    """Checks ALBERT's id layout in ``model`` (naming ``where`` if it breaks it) and writes ``{model_prefix}.model``
    and ``.vocab``, each renamed into place once complete."""
    sp = spiece_from_proto(model, where)
    files.write_bytes_atomically(f"{model_prefix}.model", model)
    files.write_bytes_atomically(f"{model_prefix}.vocab", _vocab_text(sp).encode("utf-8"))
    return sp


_TOO_HIGH = re.compile(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)")
_TOO_FEW = re.compile(r"Vocabulary size is smaller than required_chars\. \d+ vs (\d+)")


def _train(sentences_file: str, config: VocabConfig, vocab_size: int) -> io.BytesIO:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=_lines(sentences_file),
        model_writer=model,
        model_type=config.model_type,
        vocab_size=vocab_size,
        character_coverage=config.character_coverage,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=-1,
        eos_id=-1,
        pad_piece=SPECIAL_PIECES[PAD_ID],
        unk_piece=SPECIAL_PIECES[UNK_ID],
        control_symbols=list(CONTROL_SYMBOLS),
        normalization_rule_name=NORMALIZATION_RULE,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        num_threads=config.num_threads,
        minloglevel=2,
    )
    return model


def _vocab_text(sp: spm.SentencePieceProcessor) -> str:
    # spm_train's own .vocab format: piece, tab, score printed like C++ ostream's default (6 significant digits).
    return "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))


def run(argv: list[str] | None = None) -> dict:
    """Runs the stage: sample sentences with Beam, train SentencePiece, write ``stats.json`` last.

    Returns:
        The stats written to ``stats.json``.
    """
    args = parse_stage_args(
        argv,
        VocabConfig,
        "vocab",
        {"input": "dedup stage folder", "output": "folder for spiece.model (or vocab.txt)"},
        "Sample sentences and train the vocabulary (SentencePiece with ALBERT's special ids, or WordPiece).",
        work_per_input_mb(SAMPLE_CPU_S_PER_MB),
    )
    config, out = args.config, args.paths["output"]
    # Both kinds' files: a run of one kind removes what a run of the other left, so the folder holds one vocabulary.
    owned = [*SPIECE_FILES, *WORDPIECE_FILES, SAMPLE_FILE]
    check_outputs(
        args.paths,
        {"output": [STATS, *owned]},
        {"from_spiece": config.from_spiece, "from_wordpiece": config.from_wordpiece},
    )
    if config.from_spiece:
        with owning_outputs(out, STATS, owned):
            return _copy_and_record(config.from_spiece, out, config)
    if config.from_wordpiece:
        with owning_outputs(out, STATS, owned):
            return _copy_wordpiece(config.from_wordpiece, out, config)
    inputs = finished_files(args.paths["input"], "sentences")
    require_deduped(args.paths["input"], args.allow_undeduped)  # its held-out documents repeat no training text
    read_split_stats(args.paths["input"], config.held_out_fraction)  # and are the ones skipped here
    sample_path = files.join(out, SAMPLE_FILE)
    with owning_outputs(out, STATS, owned):
        counters = sample_to_file(inputs, sample_path, config, args.beam)
        if config.kind == "wordpiece":
            return _train_wordpiece(sample_path, out, config, counters)
        return _train_and_record(sample_path, out, config, counters)


def sample_to_file(
    inputs: list[str], sample_path: str, config: VocabConfig, options: PipelineOptions
) -> dict[str, int]:
    """Runs the Beam pipeline that writes the sentence sample of ``inputs`` to ``sample_path``.

    Args:
        inputs: sentences Parquet files (the dedup stage's).
        sample_path: the text file to write, one sentence per line, sorted by sampling hash.
        config: the stage's knobs (``sample_sentences``, ``seed``, ``held_out_fraction``).
        options: Beam's pipeline options.

    Returns:
        The pipeline's counters in namespace ``vocab`` (``COUNTERS``).
    """
    pipeline = beam.Pipeline(options=options)
    _ = (
        pipeline
        | "ListSentenceFiles" >> beam.Create(inputs)
        | "SpreadFiles" >> beam.Reshuffle()
        | "ReadSentences" >> Counted(beam.FlatMap(read_sentences, config.held_out_fraction))
        | "SampleSentences" >> SampleSentences(config.sample_sentences, config.seed)
        | "WriteSample" >> Counted(beam.Map(_write_sample, sample_path))
    )
    with progress.shown("vocab", len(inputs), "files", options):
        return run_and_count(pipeline, FileSystems.split(sample_path)[0], COUNTERS)


def _copy_and_record(source: str, out: str, config: VocabConfig) -> dict:
    # The bytes as they are: the shards' manifest records their hash, which the start's spiece.model must match.
    inside = files.join(source, "spiece.model")
    path = inside if files.exists(inside) else source  # a model folder, or the file itself
    if not files.exists(path):
        raise FileNotFoundError(f"{source}: no spiece.model there (vocab.from_spiece)")
    data = files.read_bytes(path)
    sp = write_spiece(data, files.join(out, "spiece"), path)
    log.info("vocab: %d pieces copied from %s", sp.get_piece_size(), path)
    return _record(out, sp, data, config, from_spiece=path)


def _train_and_record(sample_path: str, out: str, config: VocabConfig, counters: dict[str, int]) -> dict:
    if not counters.get("sentences_sampled"):
        raise ValueError(f"{sample_path}: no sentence to train on (counters: {counters})")
    sp = train_vocab(sample_path, files.join(out, "spiece"), config)
    files.delete_if_exists(sample_path)  # reproducible from the inputs; not worth a DVC-cached copy
    log.info("vocab: %d pieces from %d sentences", sp.get_piece_size(), counters["sentences_sampled"])
    model = files.read_bytes(files.join(out, "spiece.model"))
    drawn = {"trained_on": TRAINED_ON, "sampled_sentences": counters["sentences_sampled"], "counters": counters}
    return _record(out, sp, model, config, **drawn)


def _train_wordpiece(sample_path: str, out: str, config: VocabConfig, counters: dict[str, int]) -> dict:
    if not counters.get("sentences_sampled"):
        raise ValueError(f"{sample_path}: no sentence to train on (counters: {counters})")
    settings = WordPieceSettings(do_lower_case=config.lower_case)
    vocab = train_wordpiece(_lines(sample_path), config.vocab_size, settings, config.num_threads)
    files.delete_if_exists(sample_path)
    log.info("vocab: %d WordPiece pieces from %d sentences", vocab.vocab_size, counters["sentences_sampled"])
    if vocab.vocab_size < config.vocab_size:  # Chinese: every CJK character is a word, so few merges exist
        log.warning("vocab_size %d: the sample holds only %d WordPiece pieces", config.vocab_size, vocab.vocab_size)
    drawn = {"trained_on": TRAINED_ON, "sampled_sentences": counters["sentences_sampled"], "counters": counters}
    return _write_wordpiece(vocab, out, config, **drawn)


def _copy_wordpiece(source: str, out: str, config: VocabConfig) -> dict:
    # The pieces as they are (a start's ids, special ones included, must not move). Its tokenizer_config.json is
    # read for BertTokenizer's switches alone and written anew: a file from elsewhere may carry anything else.
    path = source if is_vocab_txt(source) else files.join(source, VOCAB_TXT)
    if not files.exists(path):
        raise FileNotFoundError(f"{source}: no {VOCAB_TXT} there (vocab.from_wordpiece)")
    config_path = files.join(FileSystems.split(path)[0], CONFIG)
    tokenizer = read_config(files.read_bytes(config_path), config_path) if files.exists(config_path) else None
    vocab = wordpiece_from_bytes(files.read_bytes(path), tokenizer, path)
    log.info("vocab: %d WordPiece pieces copied from %s", vocab.vocab_size, path)
    return _write_wordpiece(vocab, out, config, from_wordpiece=path)


def _write_wordpiece(vocab: WordPieceVocab, out: str, config: VocabConfig, **provenance: Any) -> dict:
    data = vocab.vocab_txt()
    files.write_bytes_atomically(files.join(out, VOCAB_TXT), data)
    tokenizer_config = {**vocab.tokenizer, "tokenizer_class": "BertTokenizer"}
    files.write_json_atomically(files.join(out, CONFIG), tokenizer_config)
    stats = {
        **provenance,
        "kind": "wordpiece",
        "vocab_size": vocab.vocab_size,
        "vocab_txt_sha256": files.sha256_hex(data),
        "tokenizer": vocab.tokenizer,
        "config": dataclasses.asdict(config),
    }
    files.write_json_atomically(files.join(out, STATS), stats)  # last: its presence marks a finished stage
    return stats


def _record(out: str, sp: spm.SentencePieceProcessor, model: bytes, config: VocabConfig, **provenance: Any) -> dict:
    # stats.json, written last (owning_outputs takes its presence for a finished stage)
    stats = {
        **provenance,
        "vocab_size": sp.get_piece_size(),
        "spiece_model_sha256": files.sha256_hex(model),
        "config": dataclasses.asdict(config),
    }
    files.write_json_atomically(files.join(out, STATS), stats)
    return stats


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    main(run, "vocab", beam=True)
