"""A shuffle through files, for a stage whose groups must not all sit in one process at once.

Beam's local runner keeps every element a ``GroupByKey`` shuffles in its own process until the next step reads
them, so a stage that groups per sentence or per LSH band grows with its corpus on a laptop, however the work is
spread. A step that instead writes its records into part files (``Spill.write``, records partitioned by a key
into ``parts`` slices) and a later step that reads one part at a time (``Spill.read``) keep one part per worker
and leave only indices to the runner; the parts, not the workers, grow with the corpus. ``ThenEach`` orders the
steps: the next one starts once every element of the previous one is done.

A step's task covers several sources or parts (``even_ranges``), so the number of files stays the number of tasks,
not of input files or slices: a task reading parts opens each source file once (``Spill.parts``) and reads its
parts one at a time, so each file is opened once per reading task, whatever the number of parts.

Layout: ``{folder}/{kind}/{source:05d}.arrow``, one Arrow IPC file per source with one record batch per part, so
a step writes one file however many parts there are and a reader of a part reads one batch of each (the file's
footer says where). Written through a temporary name: a retried bundle rewrites the same bytes and a reader
never sees half a file. Works on every Beam file system that seeks; the stage owning ``folder`` deletes it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines.runtime import files

__all__ = ["Spill", "ThenEach", "even_ranges"]


class Spill:
    """Record files under ``folder``: partitioned (``write``, then ``read`` of one part across sources) or whole
    (``put``, then ``get`` by the same index)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def _path(self, kind: str, index: int) -> str:
        return files.join(self.folder, kind, f"{index:05d}.arrow")

    def write(self, kind: str, source: int, table: pa.Table, part: np.ndarray, parts: int) -> None:
        """Writes ``source``'s rows as ``parts`` batches, batch p holding the rows whose ``part`` is p (in table
        order): one file per source, whatever the number of parts."""
        with self.writer(kind, source, table.schema, parts) as add:
            add(table, part)

    @contextlib.contextmanager
    def writer(self, kind: str, source: int, schema: pa.Schema, parts: int = 1) -> Iterator[Callable[..., None]]:
        """Streams ``source``'s file: yields ``add(table, part=None)``, which appends ``table``'s rows as
        ``parts`` batches (batch p of a chunk holding the rows whose ``part`` is p, in table order; no ``part``:
        every row in part 0), so a writer holds one chunk at a time. The file appears whole when the block ends."""
        with files.open_atomically(self._path(kind, source)) as f, pa.ipc.new_file(f, _with_parts(schema, parts)) as w:

            def add(table: pa.Table, part: np.ndarray | None = None) -> None:
                part = np.zeros(table.num_rows, dtype=np.int64) if part is None else part
                counts = np.bincount(part, minlength=parts)
                if len(counts) > parts:
                    raise ValueError(f"{kind}: part {len(counts) - 1} of {parts} parts")
                ordered = table.take(pa.array(np.argsort(part, kind="stable"))).combine_chunks().to_batches()
                rows = ordered[0] if ordered else pa.RecordBatch.from_pylist([], schema=schema)
                for start, count in zip(np.cumsum(counts) - counts, counts, strict=True):
                    w.write_batch(rows.slice(int(start), int(count)).replace_schema_metadata(None))

            yield add

    def read(self, kind: str, part: int, schema: pa.Schema) -> pa.Table:
        """Returns every source's rows of ``part``, in source order; reads only that batch of each file."""
        with self.parts(kind, schema) as read_part:
            return read_part(part)

    @contextlib.contextmanager
    def parts(self, kind: str, schema: pa.Schema) -> Iterator[Callable[[int], pa.Table]]:
        """Opens every source file of ``kind`` once and yields ``read_part(p)``: every source's rows of part
        ``p``, in source order. A task reading many parts holds one open file per source (their footers, not
        their records) and one part's rows at a time."""
        # Digits first: a ``.tmp-*`` name of a write that never finished is not a source's file.
        pattern = files.join(self.folder, kind, "[0-9]*.arrow")
        with contextlib.ExitStack() as stack:
            readers = []
            for path in sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list):
                f = stack.enter_context(FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED))
                readers.append(pa.ipc.open_file(pa.PythonFile(f, mode="r")))

            def read_part(part: int) -> pa.Table:
                batches = [r.get_batch(i) for r in readers for i in range(part, r.num_record_batches, _parts(r))]
                return pa.Table.from_batches(batches, schema).combine_chunks()

            yield read_part

    def chunks(self, kind: str, source: int, schema: pa.Schema) -> Iterator[pa.Table]:
        """Yields ``source``'s file of ``kind`` a chunk (one ``add`` of its ``writer``) at a time, every part."""
        with FileSystems.open(self._path(kind, source), compression_type=CompressionTypes.UNCOMPRESSED) as f:
            reader = pa.ipc.open_file(pa.PythonFile(f, mode="r"))
            parts = _parts(reader)
            for start in range(0, reader.num_record_batches, parts):
                batches = [reader.get_batch(i) for i in range(start, start + parts)]
                yield pa.Table.from_batches(batches, schema).combine_chunks()

    def put(self, kind: str, index: int, table: pa.Table) -> None:
        """Writes ``table`` whole, for the step that reads it back by ``index``."""
        self.write(kind, index, table, np.zeros(table.num_rows, dtype=np.int64), 1)

    def delete(self) -> None:
        """Deletes the folder and everything under it, if it exists (Beam's local file system removes a folder
        whole; object stores remove a prefix named with its separator, and one with nothing under it is no error)."""
        if "://" not in self.folder:
            if os.path.isdir(self.folder):
                FileSystems.delete([self.folder])
        else:
            FileSystems.delete([self.folder.rstrip("/") + "/"])

    def get(self, kind: str, index: int, schema: pa.Schema) -> pa.Table:
        """Returns the table ``put`` under ``index`` (or every chunk a one-part ``writer`` added, in order)."""
        chunks = list(self.chunks(kind, index, schema))
        return pa.concat_tables(chunks).combine_chunks() if chunks else schema.empty_table()


def _with_parts(schema: pa.Schema, parts: int) -> pa.Schema:
    return schema.with_metadata({**(schema.metadata or {}), b"spill_parts": str(parts).encode()})


def _parts(reader: pa.ipc.RecordBatchFileReader) -> int:
    """The parts per chunk of a spill file: its batches are chunk after chunk, each ``parts`` batches long."""
    return int((reader.schema.metadata or {}).get(b"spill_parts", b"1"))


def even_ranges(count: int, tasks: int) -> list[range]:
    """Splits ``range(count)`` into ``min(tasks, count)`` consecutive ranges whose lengths differ by one at most
    (none when ``count`` is 0): the sources or parts each task of a step covers."""
    tasks = max(1, min(tasks, count))
    bounds = [count * t // tasks for t in range(tasks + 1)]
    return [range(a, b) for a, b in itertools.pairwise(bounds) if b > a]


@beam.ptransform_fn
def ThenEach(done: beam.PCollection, count: int) -> beam.PCollection:
    """Once every element of ``done`` exists, the indices 0 … ``count`` − 1, spread over workers.

    A grouping, not a side input: the Dask runner recomputes a side input's whole upstream in each reader.
    """
    return (
        done
        | "OneKey" >> beam.Map(lambda _: (None, None))
        | "WaitForAll" >> beam.GroupByKey()
        | "Indices" >> beam.FlatMap(lambda _, count: range(count), count)
        | "Spread" >> beam.Reshuffle()
    )
