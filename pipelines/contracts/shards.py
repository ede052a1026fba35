"""The shard files: Arrow IPC *files* (random access, memory-mappable) named ``{split}-{i:05d}-of-{n:05d}.arrow``,
written by ``ShardWriter`` (run by the instances stage) and opened by ``open_shard`` (the training loader,
evaluation and the benches), which readers reach only through the folder's ``manifest.Manifest``.

The writer streams rows in record batches, hashes each file as it writes it, and writes the manifest last, only
once every shard it lists is whole. Pure: imports neither Beam nor torch (the writer is handed the file system's
atomic open by its caller).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute

from pipelines.algorithms.vocabulary import VOCAB_FILES
from pipelines.contracts.manifest import MANIFEST, SPLITS, Manifest, ShardInfo, shard_name

__all__ = ["ROWS_PER_BATCH", "ShardWriter", "open_shard", "rows_table", "schema_difference", "shard_batches"]

ROWS_PER_BATCH = 4096  # record batch size inside a file: small enough for cheap slicing, large enough to amortise


def rows_table(
    schema: pa.Schema, lists: dict[str, tuple[np.ndarray, np.ndarray]], scalars: dict[str, np.ndarray | pa.Array]
) -> pa.Table:
    """Returns rows as a table of the shard schema, in the order given.

    Args:
        schema: the shard schema (``shard_schema``); values are cast to its types, and an overflow raises.
        lists: the four list columns as (offsets [rows + 1], flat values).
        scalars: the scalar columns, one value per row.
    """
    columns = {}
    for name, (offsets, values) in lists.items():
        columns[name] = pa.ListArray.from_arrays(
            pa.array(np.asarray(offsets, dtype=np.int32)),
            pa.array(np.asarray(values), schema.field(name).type.value_type),
        )
    for name, values in scalars.items():
        columns[name] = pa.array(values, type=schema.field(name).type)
    return pa.table([columns[f.name] for f in schema], schema=schema)


# The IPC writer writes a buffer sliced from a larger one together with the bytes that follow the slice, up to
# Arrow's 64-byte alignment, where the larger buffer has them (zeros past its end). So a batch is cut from the rows
# received so far only once every buffer holds this much past it: cut earlier, it would be written with other
# bytes than the same batch cut from the whole shard (tests/test_shards.py: 8 is too few, 56 happens to do).
LOOKAHEAD_BYTES = 64


def shard_batches(runs: Iterable[pa.Table]) -> Iterator[pa.RecordBatch]:
    """Yields the ``ROWS_PER_BATCH``-row record batches of the runs end to end (the shard's rows in their final
    order), holding about one run at a time; written in turn, they are the bytes ``to_batches`` of the runs'
    concatenation would give."""
    pending: pa.Table | None = None  # rows received and not yet yielded, one chunk per column
    for run in runs:
        # One chunk per column, as _bytes_after reads them (the stage's runs are; combining one costs no copy).
        pending = run.combine_chunks() if pending is None or not pending.num_rows else _joined(pending, run)
        start = 0
        while (
            pending.num_rows - start > ROWS_PER_BATCH
            and _bytes_after(pending, start + ROWS_PER_BATCH) >= LOOKAHEAD_BYTES
        ):
            yield from pending.slice(start, ROWS_PER_BATCH).to_batches()
            start += ROWS_PER_BATCH
        pending = pending.slice(start)
    if pending is not None:
        yield from pending.to_batches(max_chunksize=ROWS_PER_BATCH)


def _joined(head: pa.Table, tail: pa.Table) -> pa.Table:
    return pa.concat_tables([head, tail]).combine_chunks()


def _bytes_after(table: pa.Table, row: int) -> int:
    """The fewest bytes any value buffer of ``table`` (single-chunk columns) holds past row ``row``'s start."""
    return min(_array_bytes_after(column.chunk(0), row) for column in table.columns)


def _array_bytes_after(array: pa.Array, row: int) -> int:
    if pa.types.is_list(array.type) or pa.types.is_string(array.type):
        start = np.frombuffer(array.buffers()[1], dtype=np.int32)[array.offset + row]  # absolute, into the values
        if pa.types.is_string(array.type):
            return array.buffers()[2].size - int(start)
        return _array_bytes_after(array.values, int(start))  # the values unsliced, as the offsets count them
    return array.buffers()[1].size - (array.offset + row) * (array.type.bit_width // 8)


class _HashingSink:
    """Write-only stream passing bytes on to ``file`` while hashing and counting them (a shard's manifest entry)."""

    closed = False

    def __init__(self, file: BinaryIO) -> None:
        self.file, self.sha256, self.size = file, hashlib.sha256(), 0

    def write(self, data: Any) -> int:
        self.sha256.update(data)
        self.file.write(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass


def open_shard(path: str | os.PathLike, schema: pa.Schema | None = None) -> pa.Table:
    """Opens a local shard memory-mapped: rows are read from the page cache, never copied whole.

    Raises:
        ValueError: naming the file, when it is not an Arrow IPC file or its schema is not ``schema``.
    """
    try:
        table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()
    except (pa.ArrowInvalid, OSError) as err:
        raise ValueError(f"{path}: not a readable Arrow shard ({err}); rerun the instances stage") from err
    if schema is not None and not table.schema.equals(schema):
        raise ValueError(f"{path}: not the manifest's schema ({schema_difference(table.schema, schema)})")
    return table


def schema_difference(actual: pa.Schema, expected: pa.Schema) -> str:
    """Says in one line how ``actual`` differs from ``expected``: missing, unexpected and retyped columns."""
    have = {field.name: field.type for field in actual}
    want = {field.name: field.type for field in expected}
    parts = [f"no column {name}" for name in want if name not in have]
    parts += [f"unexpected column {name}" for name in have if name not in want]
    parts += [f"{name} is {have[name]}, not {t}" for name, t in want.items() if name in have and have[name] != t]
    return "; ".join(parts) or "column order or nullability differs"


@dataclass(frozen=True)
class ShardWriter:
    """Writes a shard folder the way readers rely on it: each file whole under its final name, and the manifest
    last, only once every shard it must list is there.

    The file system is the caller's: ``create`` opens a path to write atomically (a temporary name, renamed when
    the block ends) and ``join`` builds paths, so the same writer fills a local folder, gs:// or s3:// and this
    module stays pure.
    Picklable, so Beam workers write their own shards.

    Args:
        folder: the shard folder.
        files: sentence files of the run; each becomes one shard per split.
        schema: the shards' schema (``shard_schema``).
    """

    folder: str
    files: int
    schema: pa.Schema
    create: Callable[[str], AbstractContextManager[BinaryIO]]
    join: Callable[..., str] = os.path.join

    def write_shard(self, split: str, index: int, runs: Iterable[pa.Table]) -> ShardInfo:
        """Writes one shard, its rows in their final order given as consecutive tables, and returns its manifest
        entry. The rows stream into the file as they come: a shard is never held whole, in rows or in bytes."""
        name = shard_name(split, index, self.files)
        rows = tokens = 0
        with self.create(self.join(self.folder, name)) as file:
            sink = _HashingSink(file)
            with pa.ipc.new_file(sink, self.schema) as writer:
                for batch in shard_batches(self._checked(split, index, runs)):
                    writer.write_batch(batch)
                    rows += batch.num_rows
                    tokens += pa.compute.sum(pa.compute.list_value_length(batch.column("input_ids"))).as_py() or 0
        return ShardInfo(name, split, rows, tokens, sink.size, sink.sha256.hexdigest())

    def _checked(self, split: str, index: int, runs: Iterable[pa.Table]) -> Iterator[pa.Table]:
        for run in runs:
            if not run.schema.equals(self.schema):
                raise ValueError(f"shard {split} {index}: {schema_difference(run.schema, self.schema)}")
            yield run

    def write_vocab(self, name: str, data: bytes) -> str:
        """Copies the vocabulary file ``name`` (``spiece.model`` or ``vocab.txt``) into the folder; returns its
        sha256 for the manifest."""
        if name not in VOCAB_FILES:
            raise ValueError(f"{self.folder}: {name!r} is not a vocabulary file name ({', '.join(VOCAB_FILES)})")
        self._write(name, data)
        return hashlib.sha256(data).hexdigest()

    def write_manifest(self, manifest: Manifest) -> None:
        """Writes the manifest, last; refuses one that does not list exactly the shards of this run."""
        expected = {shard_name(split, i, self.files) for split in SPLITS for i in range(self.files)}
        listed = [s.file for s in manifest.shards]
        if sorted(listed) != sorted(expected):
            missing, extra = sorted(expected - set(listed)), sorted(set(listed) - expected)
            raise RuntimeError(
                f"{self.folder}: {len(listed)} shards written, expected {len(expected)} ({missing=}, {extra=})"
            )
        self._write(MANIFEST, manifest.to_bytes())

    def _write(self, name: str, data: bytes) -> None:
        with self.create(self.join(self.folder, name)) as file:
            file.write(data)
