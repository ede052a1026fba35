"""Corpus stage: input files (or Python's own documentation) → documents with stable ids → ``data/corpus/``.

Run: ``python -m pipelines.corpus --output data/corpus [--inputs 'books/**/*.txt' more.jsonl.gz]``.
Writes ``documents-{i:05d}-of-{n:05d}.parquet`` (``documents.DOCUMENT_SCHEMA``; a document goes to bucket
``file_index(id, b)``, b from the total text bytes, and the n buckets that hold documents become the n files, in
bucket order, so no file is empty) and then, last, ``stats.json`` with the stage's counters.

Inputs: files, folders or globs in ``bert``, ``text`` (one document per file), ``jsonl`` or ``parquet``
form, possibly gzip/bz2/... compressed (``sources`` says how each is read). No inputs: the embedded default
(``pydocs``), the docstrings and help topics of the standard library (``embedded_sources: stdlib``), the
docstrings of the project's installed dependencies (``dependencies``) or both, of which the
``embedded_max_documents`` with the smallest hash of their id are kept, a subset spread over every library.
``stats.json`` records the version of each library read (``sources``).

Ids are ``{name}:{ordinal}``: ``name`` is the file's path relative to the non-glob folder of its pattern
(its basename for a plain path, e.g. ``books/a.txt`` for ``data/**/*.txt``) and ``ordinal`` counts the
documents (records, rows) of the file from 0. Nothing in an id or ``meta`` depends on where the data folder is.

Bad input: a missing path or a pattern that matches nothing fails before the pipeline, naming it; so does an
unknown extension under ``auto``, or two files that would share ids. Invalid UTF-8, a NUL byte (a binary file),
invalid JSON, a JSON line without the text field, an unreadable archive or Parquet file fail the run with the
file (and line) in the message: silently dropping them would change the corpus without anyone noticing. So do
a line longer than ``max_line_mb``, a text file or bert document longer than ``max_document_mb`` and a
compressed file decoding to over ``max_expansion`` times its size, before they exhaust memory: files are read
a line (Parquet a record batch) at a time.
An empty file and an empty document are skipped and counted (``empty_files``, ``empty_documents``); inputs
with no text at all fail the run, naming them.

Labels: ``label_field`` (params.yaml's ``tasks.label_field``, read from there unless given as a flag) names a
JSON Lines key or Parquet column, or is ``folder`` (the input file's parent folder), whose value becomes the
document's ``meta["label"]``, with ``meta["label_field"]`` naming the field (``labels``); the tasks stage builds a
classification task from them. Documents without one are counted (``unlabelled_documents``) and carry none; a
field that no record of the inputs has fails the run, naming it and a file. The embedded default ignores it:
its documents carry their docstring meta (``module``, ``package``, ``kind``), which the tasks stage reads.
Outputs of an earlier run are removed first and again on failure, so no stale file is left under a final name.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Iterator

import apache_beam as beam

from pipelines.algorithms.hashes import stable_hash64
from pipelines.contracts.documents import (
    STATS,
    outputs,
)
from pipelines.readers import pydocs
from pipelines.readers.labels import check_label_field, require_labels, tasks_label_field
from pipelines.readers.sources import (
    FORMATS,
    MAX_DOCUMENT_MB,
    MAX_EXPANSION,
    MAX_LINE_MB,
    Source,
    plan_sources,
    read_records,
)
from pipelines.runtime import files, progress
from pipelines.runtime.commands import main
from pipelines.runtime.options import MB, parse_stage_args
from pipelines.runtime.outputs import check_outputs, owning_outputs
from pipelines.runtime.spill import Spill, ThenEach, even_ranges
from pipelines.runtime.stage import Counted, Counters, Smallest, run_and_count
from pipelines.steps import corpus as steps

__all__ = [
    "CorpusConfig",
    "SpillDocuments",
    "WriteDocumentFiles",
    "run",
]


@dataclasses.dataclass
class CorpusConfig:
    """The corpus stage's knobs (params.yaml section ``corpus``)."""

    inputs: list[str] = dataclasses.field(
        default_factory=list, metadata={"help": "files, folders or globs (any Beam filesystem); none = embedded"}
    )
    format: str = dataclasses.field(default="auto", metadata={"help": f"one of {', '.join(FORMATS)}"})
    text_field: str = dataclasses.field(default="text", metadata={"help": "JSON Lines key / Parquet column"})
    # Bounds on hostile input (a line of gigabytes, a compression bomb): the run fails naming the file instead of
    # exhausting memory. The defaults and their reasons are sources.MAX_LINE_MB, MAX_EXPANSION and MAX_DOCUMENT_MB.
    max_line_mb: float = dataclasses.field(
        default=MAX_LINE_MB, metadata={"help": "a longer line (text, jsonl, bert) fails the run, naming it"}
    )
    max_expansion: float = dataclasses.field(
        default=MAX_EXPANSION, metadata={"help": "a compressed input decoding to more than this x its size fails"}
    )
    max_document_mb: float = dataclasses.field(
        default=MAX_DOCUMENT_MB, metadata={"help": "a longer text file or bert document fails the run, naming it"}
    )
    # The built-in defaults keep the first corpus (stdlib, 4000) for runs without params.yaml, such as the tests'
    # shared fixture; params.yaml chooses both sources and a cap that does not bind.
    embedded_sources: str = dataclasses.field(
        default="stdlib", metadata={"help": f"embedded default: one of {', '.join(pydocs.EMBEDDED_SOURCES)}"}
    )
    embedded_max_documents: int = dataclasses.field(
        default=4000, metadata={"help": "embedded default: keep at most this many (the smallest id hashes)"}
    )
    embedded_min_chars: int = dataclasses.field(
        default=300, metadata={"help": "embedded default: keep only texts longer than this (characters)"}
    )
    embedded_packages: list[str] = dataclasses.field(
        default_factory=list, metadata={"help": "embedded default: only these modules and their submodules"}
    )
    # One knob with the tasks stage, which names its task for the field: params.yaml holds it once, under tasks.
    label_field: str | None = dataclasses.field(
        default=None,
        metadata={"help": "JSON Lines key, Parquet column or 'folder' carried as meta label; unset: tasks.label_field"},
    )

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        pydocs.embedded_libraries(self.embedded_sources)  # raises ValueError listing the choices
        if self.embedded_max_documents < 1:
            raise ValueError(f"embedded_max_documents must be positive, got {self.embedded_max_documents}")
        for name in ("max_line_mb", "max_expansion", "max_document_mb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        check_label_field(self.label_field, (self.text_field,))


class _ReadFile(beam.DoFn):
    """Reads one input file into spilled documents; owns the counters of files and documents skipped."""

    COUNTERS = Counters(
        "corpus.read", "input_files", "empty_files", "empty_documents", "labelled_documents", "unlabelled_documents"
    )

    def __init__(self, text_field: str, bounds: dict[str, float], label_field: str | None, spill: Spill):
        self._text_field, self._label_field = text_field, label_field
        self._bounds = bounds  # read_records' max_line_mb, max_expansion and max_document_mb
        self._spill = spill

    def process(self, element: tuple[int, Source]) -> Iterator[int]:
        """Input file ``index`` → its documents, spilled as source ``index``; yields their text bytes."""
        index, source = element
        yield steps.spill_documents(self._documents(source), self._spill, index)

    def _documents(self, source: Source) -> Iterator[dict]:
        self.COUNTERS.inc("input_files")
        produced = 0
        read = read_records(source, self._text_field, **self._bounds, label_field=self._label_field)
        for ordinal, (text, where) in enumerate(read if source.size else ()):
            produced += 1
            if not text.strip():
                self.COUNTERS.inc("empty_documents")
                continue
            meta = {"format": source.format, "source": source.name, **where}
            if "label" in where:
                meta["label_field"] = self._label_field
            if self._label_field:
                self.COUNTERS.inc("labelled_documents" if "label" in where else "unlabelled_documents")
            yield {
                "id": f"{source.name}:{ordinal}",
                "text": text.strip(),
                "presegmented": source.format == "bert",
                "meta": json.dumps(meta, sort_keys=True),
            }
        if not produced:
            self.COUNTERS.inc("empty_files")
        progress.advance()


class _ParseEmbeddedSource(beam.DoFn):
    """Parses one (library, source file) of the embedded default into documents; owns their counters."""

    COUNTERS = Counters("corpus.embedded", "source_files", "unparsable_sources", "short_docstrings")

    def __init__(self, min_chars: int, versions: dict[str, str]):
        self._min_chars = min_chars
        self._versions = versions

    def setup(self) -> None:
        # stats.json records the launcher's versions: a worker with others would write a corpus they do not describe.
        for library, version in self._versions.items():
            if (found := pydocs.library_version(library)) != version:
                raise RuntimeError(f"this worker has {library} {found}, the launcher {version}: install the same")
        self._roots = {library: pydocs.library_root(library) for library in self._versions}

    def process(self, element: tuple[str, str]) -> Iterator[dict]:
        library, source = element
        self.COUNTERS.inc("source_files")
        try:
            documents = pydocs.source_documents(source, self._roots[library], library)
        except (SyntaxError, ValueError):  # e.g. a file written for another Python version
            self.COUNTERS.inc("unparsable_sources")
            return
        finally:
            progress.advance()  # parsed or given up: the source's work is done, its yields cost little
        for document in documents:
            if len(document["text"]) > self._min_chars:
                yield document
            else:
                self.COUNTERS.inc("short_docstrings")


def _selection_key(document: dict) -> int:
    # Smallest hashes of the id: a subset spread over the whole library, the same for every run and runner.
    return stable_hash64("embedded", document["id"])


def _each(items: list) -> list:
    return items


class SpillDocuments(beam.PTransform):
    """Reads the configured inputs (or the embedded default) into spill files of documents (``DOCUMENT_SCHEMA``),
    one per input file (one for the embedded default), and yields each one's text bytes.

    Input files are matched when the transform is applied, so a missing path fails before the pipeline runs;
    then ``versions`` holds the version of each embedded library read, by name (empty for input files), ``files``
    the number of input or source files to read, ``sources`` the spill files and ``input_bytes`` the inputs' size.
    """

    def __init__(self, config: CorpusConfig, spill: Spill):
        super().__init__()
        self._config, self._spill = config, spill
        self.versions: dict[str, str] = {}
        self.files = self.sources = self.input_bytes = 0
        self.first_file = ""  # the first input file, by name: the one a refusal of the whole input names

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        config, spill = self._config, self._spill
        if config.inputs:
            planned = plan_sources(config.inputs, config.format)
            self.files = self.sources = len(planned)
            self.first_file = planned[0].path if planned else ""
            self.input_bytes = sum(source.size for source in planned)
            bounds = {name: getattr(config, name) for name in ("max_line_mb", "max_expansion", "max_document_mb")}
            read = _ReadFile(config.text_field, bounds, config.label_field, spill)
            return (
                pbegin
                | "ListFiles" >> beam.Create(list(enumerate(planned)))
                | "SpreadFiles" >> beam.Reshuffle()
                | "ReadFiles" >> Counted(beam.ParDo(read))
            )
        sources = pydocs.embedded_sources(config.embedded_sources, config.embedded_packages)
        self.versions = {library: pydocs.library_version(library) for library in sorted({lib for lib, _ in sources})}
        self.files, self.sources = len(sources), 1
        return (
            pbegin
            | "ListEmbeddedSources" >> beam.Create(sources)
            | "SpreadSources" >> beam.Reshuffle()
            | "ParseDocstrings" >> Counted(beam.ParDo(_ParseEmbeddedSource(config.embedded_min_chars, self.versions)))
            | "KeepSpreadSubset" >> Smallest(config.embedded_max_documents, key=_selection_key)
            | "SpillSubset" >> beam.Map(steps.spill_documents, spill, 0)  # a bounded list: the cap
        )


class _WriteFiles(beam.DoFn):
    """Writes one write task's buckets as ``documents-i-of-n.parquet`` files; owns the counters of what was written.

    Only buckets that hold documents become files: file i is the i-th of them in bucket order and n their
    count, so no file is empty (one large document used to leave all but one of n files empty) and the names
    depend on the set of ids alone, not on the runner or its workers.
    """

    COUNTERS = Counters("corpus.write", "documents", "document_bytes")

    def __init__(self, output: str, spill: Spill):
        self._output, self._spill = output, spill

    def process(self, part: int) -> Iterator[str]:
        for path, documents, text_bytes in steps.write_part(part, self._spill, self._output):
            self.COUNTERS.inc("documents", documents)
            self.COUNTERS.inc("document_bytes", text_bytes)
            yield path


def _union(lists: Iterable[list[int]]) -> list[int]:
    return sorted({item for items in lists for item in items})


class WriteDocumentFiles(beam.PTransform):
    """Each spilled source's text bytes → its documents written to Parquet files by id hash (n buckets, n from
    their total text bytes); yields the paths.

    Through ``spill`` files (``steps.corpus``), in steps that each start once the one before is done: n is
    planned, ``groups`` of spilled sources are split by write task, the files are numbered, and each of ``tasks``
    write tasks writes its range of buckets. A worker holds one chunk or one task's range, never the corpus.
    """

    def __init__(self, output: str, spill: Spill, sources: int, tasks: int):
        super().__init__()
        self._output, self._spill, self._tasks = output, spill, tasks
        self._groups = even_ranges(sources, tasks)

    def expand(self, sizes: beam.PCollection) -> beam.PCollection:
        spill, groups, tasks = self._spill, self._groups, self._tasks
        return (
            sizes
            | "TotalBytes" >> beam.CombineGlobally(sum).without_defaults()
            | "PlanBuckets" >> beam.Map(steps.plan_buckets, spill)
            | "ThenEachGroup" >> ThenEach(len(groups))
            | "SplitByTask" >> beam.FlatMap(steps.split_group, spill, groups, tasks)
            | "ListBuckets" >> beam.CombineGlobally(_union).without_defaults()
            | "NumberFiles" >> beam.Map(steps.number_files, spill)
            | "ThenEachTask" >> ThenEach(tasks)
            | "WriteFiles" >> Counted(beam.ParDo(_WriteFiles(self._output, spill)))
        )


def _require_text(config: CorpusConfig, counters: dict) -> None:
    """Raises ValueError when no document has text: an empty corpus would pass every later stage silently."""
    if counters["documents"]:
        return
    where = ", ".join(config.inputs) if config.inputs else f"the embedded default ({config.embedded_sources})"
    read = counters["input_files"] if config.inputs else counters["source_files"]
    raise ValueError(f"{where}: no text: every document in its {read} file(s) is empty; give inputs that hold text")


SPILL = ".tmp-spill"  # the documents between the steps; the stage deletes it whether it fails or not
# Write tasks: one per TASK_MB of input files, at least MIN_TASKS (the embedded default's size is known only once
# read): a write task holds its range of buckets, ~TASK_MB of documents, so memory stays flat as inputs grow.
TASK_MB, MIN_TASKS = 16, 8

# Single-core seconds per MB of input files, in-process, measured on a JSON Lines copy of the embedded default.
# Sizes Beam's local runner.
INPUT_CPU_S_PER_MB = 0.05


def _work_s(config: CorpusConfig, paths: dict[str, str]) -> float | None:
    """The stage's estimated single-core seconds, or None for the embedded default: its sources are known only
    once listed (~0.5 s), and its ~30 CPU-seconds of parsing want every core anyway."""
    if not config.inputs:
        return None
    return INPUT_CPU_S_PER_MB * sum(source.size for source in plan_sources(config.inputs, config.format)) / MB


def run(argv: list[str] | None = None) -> dict:
    """Runs the corpus stage and returns what it wrote to ``stats.json``."""
    args = parse_stage_args(
        argv,
        CorpusConfig,
        "corpus",
        {"output": "folder for documents-*.parquet and stats.json"},
        __doc__.splitlines()[0],
        _work_s,
    )
    config = args.config
    if config.label_field is None:  # no flag: the tasks section's, the one value both stages read
        config = dataclasses.replace(config, label_field=tasks_label_field(args.params_file))
    output = args.paths["output"]
    check_outputs(args.paths, {"output": [STATS, *outputs("documents")]}, {"inputs": config.inputs})
    spill = Spill(files.join(output, SPILL))
    spill.delete()  # an earlier run's, killed before it could
    with owning_outputs(output, STATS, outputs("documents")):
        pipeline = beam.Pipeline(options=args.beam)
        reader = SpillDocuments(config, spill)
        sizes = pipeline | "ReadDocuments" >> reader
        tasks = max(MIN_TASKS, math.ceil(reader.input_bytes / (TASK_MB * MB)))
        _ = sizes | "WriteDocuments" >> WriteDocumentFiles(output, spill, reader.sources, tasks)
        read = _ReadFile if config.inputs else _ParseEmbeddedSource
        with progress.shown("corpus", reader.files, "files", args.beam):
            try:
                counters = run_and_count(pipeline, output, read.COUNTERS, _WriteFiles.COUNTERS)
            finally:
                spill.delete()
        _require_text(config, counters)
        if config.inputs and config.label_field:
            require_labels(
                config.label_field, counters["labelled_documents"], counters["input_files"], reader.first_file
            )
        written = files.match_paths([files.join(output, "documents-*-of-*.parquet")])
        recorded = dataclasses.asdict(config)
        stats = {"config": recorded, "counters": counters, "files": len(written), "sources": reader.versions}
        files.write_json_atomically(files.join(output, STATS), stats)
    return stats


if __name__ == "__main__":
    main(run, "corpus", beam=True)
