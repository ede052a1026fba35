"""Input files of the corpus stage: matching, location-independent names, format detection and readers.

Formats (``auto`` decides per file by extension, after a compression suffix: ``.gz``, ``.bz2``, ``.xz``,
``.zst``, ``.deflate``, decoded as they are read by ``files.open_decompressed``):
- ``bert`` (never chosen by auto): one sentence per line, blank lines between documents; ``presegmented``.
- ``text`` (``.txt .text .md .rst``): one document per file. A file is what a user means by a document
  (a book, an article); blank-line paragraphs stay inside it as sentence boundaries, and sentence-order
  pairs need documents longer than a paragraph. Give a very large single text in ``bert`` or ``jsonl`` form.
- ``jsonl`` (``.jsonl .ndjson .json``): one document per line, text under ``text_field``; blank lines skipped.
  A file holding one JSON array fails, saying so; a ``text`` file whose every line looks like a JSON object
  is read as text, with a warning that suggests ``--format jsonl``.
- ``parquet`` (``.parquet``): one document per row of the ``text_field`` column.

Lines end at LF, CR LF or a lone CR (old Mac files), as in Python's universal newlines.
Hostile input fails with one line naming the file instead of exhausting memory: files are read a line at a
time (Parquet a record batch at a time), a line longer than ``max_line_mb`` fails naming it, so does a ``text``
file or ``bert`` document longer than ``max_document_mb`` (either is held whole, being one document), and so
does a compressed file that decodes to more than ``max_expansion`` times its size (a compression bomb).
A file's ``name`` is its path relative to the non-glob folder of its pattern (its basename for a plain
path; ``books/a.txt`` for ``data/**/*.txt``), so ids built from it do not change when the data folder moves.
Readers yield every record, empty ones included, so ordinals stay tied to positions in the file; they raise
``ValueError`` naming the file (and line) on invalid UTF-8, NUL bytes (UTF-16 or binary), invalid JSON or a
missing text field.
A ``label_field`` (``tasks.label_field``) adds the record's class to ``where`` as ``label``: a JSON Lines key or
Parquet column holding a string, integer or boolean (written as JSON spells it: ``3``, ``true``), or ``folder``,
the name of the file's parent folder (any format). A record without it (null, empty, absent) carries no label; a
nested or fractional value fails naming the file and line (Parquet: column).
``corpus.py`` runs them in Beam workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import lzma
import os
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines.readers.labels import FOLDER_LABEL, folder_name, is_label_type, label_text
from pipelines.runtime import files

log = logging.getLogger(__name__)

__all__ = ["FORMATS", "MAX_DOCUMENT_MB", "MAX_EXPANSION", "MAX_LINE_MB", "Source", "plan_sources", "read_records"]

FORMATS = ("auto", "bert", "text", "jsonl", "parquet")
_FORMAT_BY_EXTENSION = {".txt": "text", ".text": "text", ".md": "text", ".rst": "text", ".jsonl": "jsonl"}
_FORMAT_BY_EXTENSION |= {".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
_COMPRESSION_SUFFIXES = (".bz2", ".deflate", ".gz", ".zst", ".zstd", ".xz", ".lzma")  # Beam's AUTO list
# What a corrupt archive or Parquet file raises; read_records re-raises it naming the file.
_READ_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, zstandard.ZstdError, pa.ArrowException)
# A line is held whole while it is read, so this bounds a reader's memory: a thousand times the embedded
# default's longest document (60 KB, a JSON Lines record when written as one), a small share of a worker's memory.
MAX_LINE_MB = 64.0
# A document is held whole (and later split into sentences in one worker): four times the line bound leaves room
# for a book as one text file, while a file of gigabytes fails instead of taking a worker's memory.
MAX_DOCUMENT_MB = 256.0
# Text compresses 3-5.5x (40x for repeated copies in one .xz), far below this; deflate cannot pass 1032x, so a
# gzip bomb fails within its first tenth (bench/results/hostile_input.md).
MAX_EXPANSION = 100.0
_MB = 1 << 20
_SPOOL_CHUNK = 1 << 20  # bytes per read when decoding a compressed Parquet file to a seekable local copy
# Parquet is read a page at a time: Arrow's default pre-buffering fetches every row group's column at once, and
# without a buffer size reads a row group's column whole; batches count rows, so a small count bounds huge ones.
_PARQUET_BATCH_ROWS = 1024


@dataclasses.dataclass(frozen=True)
class Source:
    """One input file: where it is, the location-independent name its ids start with, and how to read it."""

    path: str
    name: str
    format: str
    size: int


def plan_sources(patterns: Iterable[str], format: str = "auto") -> list[Source]:
    """Matches ``patterns`` and returns one ``Source`` per file, sorted by name.

    Raises:
        FileNotFoundError: a pattern matches nothing (the message names it).
        ValueError: a file's format cannot be told from its extension, or two files get the same name.
    """
    by_name: dict[str, Source] = {}
    for pattern in patterns:
        if "://" not in pattern and os.path.isdir(pattern):
            pattern = os.path.join(pattern, "**")
        prefix = _glob_folder(pattern)
        for path, size in files.match_paths([pattern]):
            source = Source(path, _relative_name(path, prefix), _format_of(path, format), size)
            other = by_name.setdefault(source.name, source)
            if other.path != source.path:
                raise ValueError(
                    f"{other.path} and {path} would share the document ids '{source.name}:N'; "
                    "give one glob over their common folder instead"
                )
    return sorted(by_name.values(), key=lambda s: s.name)


def _glob_folder(pattern: str) -> str:
    cut = min((i for i in (pattern.find(c) for c in "*?[") if i >= 0), default=len(pattern))
    head = pattern[:cut]
    return head[: max(head.rfind("/"), head.rfind(os.sep)) + 1]


def _relative_name(path: str, folder: str) -> str:
    if "://" in path:
        relative = path[len(folder) :] if path.startswith(folder) else path.rsplit("/", 1)[-1]
    else:
        relative = os.path.relpath(os.path.abspath(path), os.path.abspath(folder or "."))
        relative = os.path.basename(path) if relative.startswith("..") else relative
    return relative.replace(os.sep, "/")


def _format_of(path: str, format: str) -> str:
    if format != "auto":
        return format
    stem = path.lower()
    stem = next((stem[: -len(s)] for s in _COMPRESSION_SUFFIXES if stem.endswith(s)), stem)
    found = _FORMAT_BY_EXTENSION.get(os.path.splitext(stem)[1])
    if found is None:
        known = " ".join(sorted(_FORMAT_BY_EXTENSION))
        raise ValueError(
            f"{path}: cannot tell the format from the extension (known: {known}); narrow the glob or pass --format"
        )
    return found


@dataclasses.dataclass(frozen=True)
class _Bounds:
    """How far reading one file may go: the longest line and document, and the decoded bytes of a compressed
    file."""

    path: str
    max_line_mb: float
    max_document_mb: float
    max_expansion: float
    size: int  # the file's own bytes, compressed
    compressed: bool

    def check_decoded(self, decoded: int) -> None:
        if self.compressed and decoded > self.max_expansion * self.size:
            raise ValueError(
                f"{self.path}: decompresses to more than {self.max_expansion:g}x its {self.size:,} bytes "
                "(max_expansion): a compression bomb, or raise max_expansion"
            )


def _lines(bounds: _Bounds) -> Iterator[tuple[int, str]]:
    """Yields (1-based line number, decoded line without its end) from a possibly compressed file.

    Holds at most ``limit + 1`` bytes: readline stops at LF or at the size asked, so a line is known to be too
    long once that many bytes hold no end. A lone CR ends lines inside a read; a CR LF cut after its CR by the
    size is one end, not two.
    """
    path, limit = bounds.path, max(1, int(bounds.max_line_mb * _MB))
    number, decoded, pending, after_cr = 0, 0, b"", False
    with files.open_decompressed(path) as f:
        while chunk := f.readline(limit + 1 - len(pending)):
            decoded += len(chunk)
            bounds.check_decoded(decoded)
            data = pending + (chunk[1:] if after_cr and chunk.startswith(b"\n") else chunk)
            ended, after_cr = data.endswith(b"\n"), data.endswith(b"\r")
            body = data[:-2] if data.endswith(b"\r\n") else data[:-1] if ended or after_cr else data
            pieces = body.split(b"\r")
            pending = b"" if ended or after_cr else pieces.pop()  # the start of a line the size cut
            for piece in pieces:
                number += 1
                yield number, _decoded(path, number, piece)
            if len(pending) > limit:
                raise ValueError(f"{path}: line {number + 1} is longer than {bounds.max_line_mb:g} MB (max_line_mb)")
    if pending:
        yield number + 1, _decoded(path, number + 1, pending)


def _decoded(path: str, number: int, raw: bytes) -> str:
    if b"\0" in raw:  # UTF-16 puts a NUL in every ASCII character; UTF-8 text has none
        raise ValueError(f"{path}: line {number}: contains NUL bytes; looks like UTF-16 or binary, not UTF-8 text")
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path}: line {number}: invalid UTF-8 at byte {err.start} of the line "
            "(a binary file, or text in another encoding)"
        ) from err
    return line.removeprefix("\ufeff") if number == 1 else line


class _Document:
    """The lines of one document as they are read; fails once they pass ``max_document_mb`` (counted in
    characters: a byte each for ASCII, fewer than its bytes for other text)."""

    def __init__(self, bounds: _Bounds) -> None:
        self._bounds, self._limit = bounds, bounds.max_document_mb * _MB
        self.lines: list[str] = []
        self.first, self._size = 0, 0

    def add(self, number: int, line: str) -> None:
        self.first = self.first if self.lines else number
        self._size += len(line) + 1
        if self._size > self._limit:
            raise ValueError(
                f"{self._bounds.path}: the document from line {self.first} is longer than "
                f"{self._bounds.max_document_mb:g} MB (max_document_mb); split it, or raise max_document_mb"
            )
        self.lines.append(line)


def _bert_records(bounds: _Bounds) -> Iterator[tuple[str, dict]]:
    document = _Document(bounds)
    for number, line in _lines(bounds):
        if line.strip():
            document.add(number, line.strip())
        elif document.lines:
            yield "\n".join(document.lines), {"line": document.first}
            document = _Document(bounds)
    if document.lines:
        yield "\n".join(document.lines), {"line": document.first}


def _text_records(bounds: _Bounds) -> Iterator[tuple[str, dict]]:
    document = _Document(bounds)
    filled = all_json = 0
    for number, line in _lines(bounds):
        document.add(number, line)
        stripped = line.strip()
        filled += bool(stripped)
        all_json += stripped.startswith("{") and stripped.endswith("}")
    _warn_if_json_lines(bounds.path, filled, all_json)
    text = "\n".join(document.lines)
    if text:
        yield text, {}


def _warn_if_json_lines(path: str, filled: int, json_like: int) -> None:
    # Read as text, a JSON Lines file becomes one document of JSON syntax: legal, but surely not what was meant.
    if filled and json_like == filled:
        log.warning(
            "%s: every line looks like JSON; read as plain text, the JSON syntax becomes the document's text. "
            "If it is JSON Lines, give --format jsonl",
            path,
        )


def _jsonl_records(bounds: _Bounds, field: str, label_field: str | None) -> Iterator[tuple[str, dict]]:
    path = bounds.path
    for number, line in _lines(bounds):
        if not line.strip():
            continue
        if line.lstrip().startswith("["):  # records are objects, so a line that opens an array is no record
            raise ValueError(
                f"{path}: line {number}: a JSON array, not JSON Lines (one JSON object per line); "
                "convert it, e.g. with jq -c '.[]'"
            )
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: line {number}: invalid JSON ({err})") from err
        if not isinstance(record, dict) or field not in record:
            raise ValueError(f"{path}: line {number}: no '{field}' field (set --text_field)")
        if not isinstance(record[field], str | None):
            raise ValueError(f"{path}: line {number}: '{field}' is {type(record[field]).__name__}, not text")
        label = label_text(record.get(label_field), f"{path}: line {number}", label_field) if label_field else None
        yield record[field] or "", {"line": number} | ({"label": label} if label is not None else {})


def _parquet_records(bounds: _Bounds, field: str, label_field: str | None) -> Iterator[tuple[str, dict]]:
    path = bounds.path
    with contextlib.ExitStack() as stack:
        f = stack.enter_context(FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED))
        if bounds.compressed:  # Parquet reads by seeking, which a decoder cannot
            f = _decoded_copy(bounds, stack.enter_context(tempfile.TemporaryFile()))
        parquet = pq.ParquetFile(f, pre_buffer=False, buffer_size=_MB)
        schema = parquet.schema_arrow
        column = schema.field(field) if field in schema.names else None
        if column is None or not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            columns = ", ".join(f"{f.name}: {f.type}" for f in schema)
            raise ValueError(f"{path}: no text column '{field}' (columns: {columns}); set --text_field")
        labelled = label_field in schema.names
        if labelled and not is_label_type(schema.field(label_field).type):
            raise ValueError(
                f"{path}: column '{label_field}' is {schema.field(label_field).type}, not class labels "
                "(strings, integers or booleans)"
            )
        row = 0
        for batch in parquet.iter_batches(
            batch_size=_PARQUET_BATCH_ROWS, columns=[field, label_field] if labelled else [field]
        ):
            labels = batch.column(1).to_pylist() if labelled else [None] * batch.num_rows
            for text, value in zip(batch.column(0).to_pylist(), labels, strict=True):
                label = label_text(value, f"{path}: row {row}", label_field) if labelled else None
                yield text or "", {"row": row} | ({"label": label} if label is not None else {})
                row += 1


def _decoded_copy(bounds: _Bounds, copy: BinaryIO) -> BinaryIO:
    """Decodes the compressed file of ``bounds`` into ``copy`` (a local temporary file) and rewinds it."""
    decoded = 0
    with files.open_decompressed(bounds.path) as f:
        while chunk := f.read(_SPOOL_CHUNK):
            decoded += len(chunk)
            bounds.check_decoded(decoded)
            copy.write(chunk)
    copy.seek(0)
    return copy


def read_records(
    source: Source,
    text_field: str,
    max_line_mb: float = MAX_LINE_MB,
    max_expansion: float = MAX_EXPANSION,
    max_document_mb: float = MAX_DOCUMENT_MB,
    label_field: str | None = None,
) -> Iterator[tuple[str, dict]]:
    """Yields (text, where in the file) for every record of ``source``, empty ones included; ``where`` holds the
    record's ``label`` when ``label_field`` gives it one.

    Args:
        source: the file.
        text_field: the JSON Lines key or Parquet column of the text.
        max_line_mb: the longest line (text, JSON Lines, bert) read; a longer one fails.
        max_expansion: a compressed file may decode to at most this many times its size.
        max_document_mb: the longest ``text`` file or ``bert`` document read; a longer one fails.
        label_field: the JSON Lines key or Parquet column of the record's class, or ``folder``; None: no labels.

    Raises:
        ValueError: naming the file (and line) when it is not valid input of its format, or passes a bound.
    """
    compressed = files.is_compressed(source.path)
    bounds = _Bounds(source.path, max_line_mb, max_document_mb, max_expansion, source.size, compressed)
    if source.format == "bert":
        records = _bert_records(bounds)
    elif source.format == "text":
        records = _text_records(bounds)
    elif source.format == "jsonl":
        records = _jsonl_records(bounds, text_field, None if label_field == FOLDER_LABEL else label_field)
    else:
        records = _parquet_records(bounds, text_field, None if label_field == FOLDER_LABEL else label_field)
    folder = {"label": folder_name(source.path)} if label_field == FOLDER_LABEL and folder_name(source.path) else {}
    try:
        for text, where in records:
            yield text, where | folder
    except _READ_ERRORS as err:
        raise ValueError(f"{source.path}: cannot read ({type(err).__name__}: {err})") from err
