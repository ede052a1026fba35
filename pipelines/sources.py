"""Input files of the corpus stage: matching, location-independent names, format detection and readers.

Formats (``auto`` decides per file by extension, after a compression suffix: ``.gz``, ``.bz2``, ``.xz`` are
decoded by Python's own modules, which check CRCs and lengths where Beam's decoder returns garbage for a
corrupt ``.gz``; ``.zst``, ``.deflate`` by Beam's FileSystems):
- ``bert`` (never chosen by auto): one sentence per line, blank lines between documents; ``presegmented``.
- ``text`` (``.txt .text .md .rst``): one document per file. A file is what a user means by a document
  (a book, an article); blank-line paragraphs stay inside it as sentence boundaries, and sentence-order
  pairs need documents longer than a paragraph. Give a very large single text in ``bert`` or ``jsonl`` form.
- ``jsonl`` (``.jsonl .ndjson .json``): one document per line, text under ``text_field``; blank lines skipped.
  A file holding one JSON array fails, saying so; a ``text`` file whose every line looks like a JSON object
  is read as text, with a warning that suggests ``--format jsonl``.
- ``parquet`` (``.parquet``): one document per row of the ``text_field`` column.

Lines end at LF, CR LF or a lone CR (old Mac files), as in Python's universal newlines.
A file's ``name`` is its path relative to the non-glob folder of its pattern (its basename for a plain
path; ``books/a.txt`` for ``data/**/*.txt``), so ids built from it do not change when the data folder moves.
Readers yield every record, empty ones included, so ordinals stay tied to positions in the file; they raise
``ValueError`` naming the file (and line) on invalid UTF-8, NUL bytes (UTF-16 or binary), invalid JSON or a
missing text field.
``corpus.py`` runs them in Beam workers.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import gzip
import json
import logging
import lzma
import os
import zlib
from collections.abc import Iterable, Iterator
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines import files

log = logging.getLogger(__name__)

__all__ = ["FORMATS", "Source", "plan_sources", "read_records"]

FORMATS = ("auto", "bert", "text", "jsonl", "parquet")
_FORMAT_BY_EXTENSION = {".txt": "text", ".text": "text", ".md": "text", ".rst": "text", ".jsonl": "jsonl"}
_FORMAT_BY_EXTENSION |= {".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
_COMPRESSION_SUFFIXES = (".bz2", ".deflate", ".gz", ".zst", ".zstd", ".xz", ".lzma")  # Beam's AUTO list
# What a corrupt archive or Parquet file raises; read_records re-raises it naming the file.
_READ_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, pa.ArrowException)


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


@contextlib.contextmanager
def _open_decoded(path: str) -> Iterator[BinaryIO]:
    lowered = path.lower()
    checked = lowered.endswith((".gz", ".bz2", ".xz", ".lzma"))
    compression = CompressionTypes.UNCOMPRESSED if checked else CompressionTypes.AUTO
    with FileSystems.open(path, compression_type=compression) as raw:
        if lowered.endswith(".gz"):
            yield gzip.GzipFile(fileobj=raw, mode="rb")
        elif lowered.endswith(".bz2"):
            yield bz2.BZ2File(raw, mode="rb")
        elif checked:
            yield lzma.LZMAFile(raw, mode="rb")
        else:
            yield raw


def _lines(path: str) -> Iterator[tuple[int, str]]:
    """Yields (1-based line number, decoded line without its end) from a possibly compressed file."""
    number = 0
    with _open_decoded(path) as f:
        for raw in iter(f.readline, b""):
            body = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1] if raw.endswith((b"\n", b"\r")) else raw
            for piece in body.split(b"\r"):
                number += 1
                yield number, _decoded(path, number, piece)


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


def _bert_records(path: str) -> Iterator[tuple[str, dict]]:
    lines: list[str] = []
    first = 0
    for number, line in _lines(path):
        if line.strip():
            first = first if lines else number
            lines.append(line.strip())
        elif lines:
            yield "\n".join(lines), {"line": first}
            lines = []
    if lines:
        yield "\n".join(lines), {"line": first}


def _text_records(path: str) -> Iterator[tuple[str, dict]]:
    lines = [line for _, line in _lines(path)]
    _warn_if_json_lines(path, lines)
    text = "\n".join(lines)
    if text:
        yield text, {}


def _warn_if_json_lines(path: str, lines: list[str]) -> None:
    # Read as text, a JSON Lines file becomes one document of JSON syntax: legal, but surely not what was meant.
    filled = [line.strip() for line in lines if line.strip()]
    if filled and all(line.startswith("{") and line.endswith("}") for line in filled):
        log.warning(
            "%s: every line looks like JSON; read as plain text, the JSON syntax becomes the document's text. "
            "If it is JSON Lines, give --format jsonl",
            path,
        )


def _jsonl_records(path: str, field: str) -> Iterator[tuple[str, dict]]:
    for number, line in _lines(path):
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
        yield record[field] or "", {"line": number}


def _parquet_records(path: str, field: str) -> Iterator[tuple[str, dict]]:
    with _open_decoded(path) as f:
        parquet = pq.ParquetFile(pa.BufferReader(f.read()))
    schema = parquet.schema_arrow
    column = schema.field(field) if field in schema.names else None
    if column is None or not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        columns = ", ".join(f"{f.name}: {f.type}" for f in schema)
        raise ValueError(f"{path}: no text column '{field}' (columns: {columns}); set --text_field")
    row = 0
    for batch in parquet.iter_batches(columns=[field]):
        for text in batch.column(0).to_pylist():
            yield text or "", {"row": row}
            row += 1


def read_records(source: Source, text_field: str) -> Iterator[tuple[str, dict]]:
    """Yields (text, where in the file) for every record of ``source``, empty ones included.

    Raises:
        ValueError: naming the file (and line) when it is not valid input of its format.
    """
    if source.format == "bert":
        records = _bert_records(source.path)
    elif source.format == "text":
        records = _text_records(source.path)
    elif source.format == "jsonl":
        records = _jsonl_records(source.path, text_field)
    else:
        records = _parquet_records(source.path, text_field)
    try:
        yield from records
    except _READ_ERRORS as err:
        raise ValueError(f"{source.path}: cannot read ({type(err).__name__}: {err})") from err
