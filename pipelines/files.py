"""File access for every stage: Beam FileSystems (local, gs://, s3://, ...) with write-then-rename.

A reader never sees a half-written file under its final name: bytes go to a temporary name in the same
directory and are renamed once complete. Stages that write several files write their index (manifest) last.
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

__all__ = [
    "delete_if_exists",
    "delete_matching",
    "exists",
    "join",
    "match_paths",
    "read_bytes",
    "read_parquet",
    "sha256_hex",
    "write_bytes_atomically",
    "write_json_atomically",
    "write_parquet_atomically",
]


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


def read_bytes(path: str, compressed: bool = False) -> bytes:
    """Reads a whole file; with ``compressed``, gzip/bz2/... are decoded by extension."""
    compression = CompressionTypes.AUTO if compressed else CompressionTypes.UNCOMPRESSED
    with FileSystems.open(path, compression_type=compression) as f:
        return f.read()


def write_bytes_atomically(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` through a temporary sibling that is renamed when complete."""
    directory, name = posixpath.split(path) if "://" in path else _split_local(path)
    ensure_directory(directory)
    tmp = join(directory, f".tmp-{uuid.uuid4().hex}-{name}")
    with FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(data)
    delete_if_exists(path)
    FileSystems.rename([tmp], [path])


def ensure_directory(directory: str) -> None:
    """Creates ``directory`` unless it exists; another worker creating it at the same moment is not an error."""
    if FileSystems.exists(directory):
        return
    try:
        FileSystems.mkdirs(directory)
    except OSError:
        # Beam's local mkdirs raises when the folder appeared between the check and the call.
        if not FileSystems.exists(directory):
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
    pq.write_table(table, buffer, compression="zstd", write_statistics=False, store_schema=True)
    write_bytes_atomically(path, buffer.getvalue())


def read_parquet(path: str, columns: list[str] | None = None) -> pa.Table:
    """Reads one Parquet file through Beam's FileSystems, naming the file in any error."""
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            return pq.read_table(pa.BufferReader(f.read()), columns=columns)
    except (pa.ArrowInvalid, OSError) as err:
        raise ValueError(f"{path}: not a readable Parquet file ({err})") from err
