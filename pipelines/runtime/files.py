"""File access for every stage: Beam FileSystems (local, gs://, s3://, ...) with write-then-rename.

A reader never sees a half-written file under its final name: bytes go to a temporary name in the same
directory and are renamed once complete. Stages that write several files write their index (manifest) last.
On S3, which has no rename, Beam's rename is a server-side copy then a delete. The contract holds there too:
S3 shows an object, uploaded (a multipart upload) or copied, only once it is complete; a crash may leave a
``.tmp-*`` object behind, which the stage's next run deletes.

Object-store settings (``--s3_endpoint_url``, ``--s3_access_key_id``, ...) are Beam's pipeline options: the
pipeline hands them to its workers, and ``use_options`` gives the same ones to the launching process's calls.
Unset ones fall back to boto3's own configuration (``AWS_ENDPOINT_URL_S3``, ``~/.aws``, instance roles).
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import io
import json
import lzma
import os
import posixpath
import uuid
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from apache_beam.io.filesystem import CompressionTypes, FileSystem
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.localfilesystem import LocalFileSystem
from apache_beam.options.pipeline_options import PipelineOptions

__all__ = [
    "delete_if_exists",
    "delete_matching",
    "download",
    "ensure_options",
    "exists",
    "is_compressed",
    "join",
    "match_paths",
    "open_atomically",
    "open_decompressed",
    "read_bytes",
    "read_parquet",
    "renamed_into_place",
    "sha256_hex",
    "use_options",
    "write_bytes_atomically",
    "write_figure_atomically",
    "write_json_atomically",
    "write_parquet_atomically",
    "write_text_atomically",
]


def use_options(options: PipelineOptions) -> None:
    """Makes this process's file calls use ``options``' file-system settings (an S3 endpoint, credentials, ...).

    Beam hands the options to its workers itself, and ``beam.Pipeline(options)`` sets them for the launching
    process only from its construction on; a stage calls this first, so that clearing its output folder before
    the pipeline exists reaches the same bucket.
    """
    FileSystems.set_options(options)


def ensure_options() -> None:
    """Gives this process empty file-system options unless it has some: Beam's S3 and GCS clients refuse to
    start without options, and a process that builds no pipeline (training) has none. Empty ones leave every
    setting to the client's own configuration (``AWS_ENDPOINT_URL_S3``, ``~/.aws``, ...)."""
    if FileSystems._pipeline_options is None:
        use_options(PipelineOptions([]))


def join(base: str, *names: str) -> str:
    """Joins path components with the separator of ``base``'s filesystem."""
    return FileSystems.join(base, *names)


def match_paths(patterns: Iterable[str]) -> list[tuple[str, int]]:
    """Returns sorted (path, size in bytes) for every file matched by the glob ``patterns``.

    Raises:
        FileNotFoundError: naming the pattern that matched nothing.
    """
    found: dict[str, int] = {}
    for pattern in patterns:
        metadata = FileSystems.match([pattern])[0].metadata_list
        if not metadata:
            raise FileNotFoundError(f"{pattern}: no file matches this path or pattern")
        found.update((m.path, m.size_in_bytes) for m in metadata)
    return sorted(found.items())


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_bytes(path: str) -> bytes:
    """Reads a whole file as it is stored (compressed input goes through ``open_decompressed``)."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def download(path: str, local_path: str | os.PathLike, chunk_bytes: int = 8 << 20) -> str:
    """Copies ``path`` (any file system) to the local ``local_path`` in chunks; returns the bytes' sha256.

    Not atomic: the caller downloads to a temporary name and renames once the hash is checked.
    """
    digest = hashlib.sha256()
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as source, open(local_path, "wb") as f:
        while chunk := source.read(chunk_bytes):
            digest.update(chunk)
            f.write(chunk)
    return digest.hexdigest()


def is_compressed(path: str) -> bool:
    """Whether ``path``'s suffix names a compression Beam knows (``.gz``, ``.bz2``, ``.xz``, ``.zst``, ...)."""
    return CompressionTypes.detect_compression_type(path) != CompressionTypes.UNCOMPRESSED


@contextlib.contextmanager
def open_decompressed(path: str) -> Iterator[BinaryIO]:
    """Yields ``path`` decoded by its compression suffix (Beam's list), each read decoding only what it returns.

    Not Beam's own decoder (``CompressionTypes.AUTO``): it decompresses 16 MB of input per step however far that
    expands, and its readline has no limit, so a compression bomb would be held whole; it also returns garbage
    for a corrupt ``.gz``. Python's gzip, bz2 and lzma modules stop at the size asked and check CRCs and lengths;
    zstd and zlib (``.deflate``) go through bounded readers, concatenated streams included, as Beam reads them.
    """
    kind = CompressionTypes.detect_compression_type(path)
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        if kind == CompressionTypes.GZIP:
            yield gzip.GzipFile(fileobj=raw, mode="rb")
        elif kind == CompressionTypes.BZIP2:
            yield bz2.BZ2File(raw, mode="rb")
        elif kind == CompressionTypes.LZMA:
            yield lzma.LZMAFile(raw, mode="rb")
        elif kind == CompressionTypes.ZSTD:
            # Beam's window limit (2 GiB): zstd's default refuses frames written with --long
            decoder = zstandard.ZstdDecompressor(max_window_size=1 << 31)
            yield io.BufferedReader(decoder.stream_reader(raw, read_across_frames=True, closefd=False))
        elif kind == CompressionTypes.DEFLATE:
            yield io.BufferedReader(_Inflated(raw))
        else:
            yield raw


class _Inflated(io.RawIOBase):
    """zlib streams, one after another, decoded at most one caller's buffer at a time (zlib's ``max_length``)."""

    def __init__(self, raw: BinaryIO, chunk_bytes: int = 1 << 16):
        self._raw, self._chunk_bytes = raw, chunk_bytes
        self._stream, self._input = zlib.decompressobj(), b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while len(buffer):
            if self._stream.eof:  # another stream may follow, as in a concatenated .gz
                self._input = self._stream.unused_data or self._raw.read(self._chunk_bytes)
                if not self._input:
                    return 0
                self._stream = zlib.decompressobj()
            elif not self._input:
                self._input = self._raw.read(self._chunk_bytes)
                if not self._input:
                    raise EOFError("compressed file ended before the end-of-stream marker was reached")
            out = self._stream.decompress(self._input, len(buffer))
            self._input = self._stream.unconsumed_tail
            if out:
                buffer[: len(out)] = out
                return len(out)
        return 0


@contextlib.contextmanager
def open_atomically(path: str) -> Iterator[BinaryIO]:
    """Yields a binary file to write ``path`` through: a temporary sibling, renamed to ``path`` when the block
    ends, deleted when it raises, so ``path`` is either absent, as before, or whole."""
    # One file-system object for every step: Beam's FileSystems.* build a new one per call (a scan of its
    # plugins, ~60 µs), which a stage writing small shards pays six times per file.
    filesystem = FileSystems.get_filesystem(path)
    with _renamed_into_place(filesystem, path) as tmp:
        with filesystem.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            yield f


@contextlib.contextmanager
def renamed_into_place(path: str) -> Iterator[str]:
    """Yields a temporary sibling name of ``path`` for the caller to create (a link, a download, ...): renamed to
    ``path`` when the block ends, deleted when it raises. ``open_atomically`` is this with a file opened on it."""
    with _renamed_into_place(FileSystems.get_filesystem(path), path) as tmp:
        yield tmp


@contextlib.contextmanager
def _renamed_into_place(filesystem: FileSystem, path: str) -> Iterator[str]:
    directory, name = posixpath.split(path) if "://" in path else _split_local(path)
    _ensure_directory(filesystem, directory)
    tmp = filesystem.join(directory, f".tmp-{uuid.uuid4().hex}-{name}")
    try:
        yield tmp
        _rename_over(filesystem, tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):  # the error that got here matters, not a failed clean-up
            filesystem.delete([tmp])
        raise


def _rename_over(filesystem: FileSystem, tmp: str, path: str) -> None:
    if isinstance(filesystem, LocalFileSystem):
        # One rename that replaces: readers see the old file until the new one has its name, and a link at ``path``
        # is replaced, never followed (Beam's exists and delete would follow it).
        os.replace(tmp, path)
        return
    if filesystem.exists(path):  # object stores' renames (a copy, then a delete) may refuse an existing target
        filesystem.delete([path])
    filesystem.rename([tmp], [path])


def write_bytes_atomically(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` through a temporary sibling that is renamed when complete."""
    with open_atomically(path) as f:
        f.write(data)


def write_text_atomically(path: str, text: str) -> None:
    """Writes ``text`` as UTF-8, line ends as given (no translation), through ``write_bytes_atomically``."""
    write_bytes_atomically(path, text.encode("utf-8"))


def write_figure_atomically(path: str, figure: Any, **savefig: Any) -> None:
    """Saves a matplotlib ``figure`` as PNG through ``open_atomically`` (``savefig``: its options, e.g. dpi)."""
    with open_atomically(path) as f:
        # format: the file object has no suffix to take it from
        figure.savefig(f, format="png", **savefig)


def _ensure_directory(filesystem: FileSystem, directory: str) -> None:
    """Creates ``directory`` unless it exists; another worker creating it at the same moment is not an error."""
    if filesystem.exists(directory):
        return
    try:
        filesystem.mkdirs(directory)
    except OSError:
        # Beam's local mkdirs raises when the folder appeared between the check and the call.
        if not filesystem.exists(directory):
            raise


def _split_local(path: str) -> tuple[str, str]:
    import os.path

    directory, name = os.path.split(path)
    return directory or ".", name


def exists(path: str) -> bool:
    return FileSystems.exists(path)


def delete_if_exists(path: str) -> None:
    if exists(path):
        FileSystems.delete([path])


def delete_matching(folder: str, patterns: list[str]) -> None:
    """Deletes every file of ``folder`` that a glob of ``patterns`` matches (a stage's outputs before a rerun)."""
    for pattern in patterns:
        matched = FileSystems.match([join(folder, pattern)])[0].metadata_list
        if matched:
            FileSystems.delete([m.path for m in matched])


def write_json_atomically(path: str, obj: Any) -> None:
    """Writes ``obj`` as sorted, indented JSON (byte-stable for equal objects)."""
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    write_bytes_atomically(path, text.encode("utf-8"))


def write_parquet_atomically(path: str, table: pa.Table) -> None:
    """Writes ``table`` as one Parquet file (zstd) without statistics that would vary between runs."""
    buffer = io.BytesIO()
    # No dictionary pages: the pipeline's files hold documents and sentences, nearly every value unique, so a
    # dictionary only adds a pass each way (docs/results.md, "History").
    pq.write_table(table, buffer, compression="zstd", use_dictionary=False, write_statistics=False, store_schema=True)
    write_bytes_atomically(path, buffer.getvalue())


def read_parquet(path: str, columns: list[str] | None = None) -> pa.Table:
    """Reads one Parquet file through Beam's FileSystems, naming the file in any error (a missing column too)."""
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            # ParquetFile reads the one file directly; read_table would first build a dataset around it, which
            # costs more than decoding a small file of sentences.
            parquet = pq.ParquetFile(pa.BufferReader(f.read()))
        missing = [name for name in columns or () if name not in parquet.schema_arrow.names]
        if missing:  # ParquetFile.read would return no column for it, without a word
            raise ValueError(f"{path}: no column {', '.join(missing)} (has {', '.join(parquet.schema_arrow.names)})")
        # One thread, as SentencePiece gets: a stage's parallelism is its workers, and on a file this small
        # Arrow's pool costs CPU in hand-offs (half the read's CPU time on the embedded corpus's files).
        return parquet.read(columns=columns, use_threads=False)
    except (pa.ArrowInvalid, OSError) as err:
        raise ValueError(f"{path}: not a readable Parquet file ({err})") from err
