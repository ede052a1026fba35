"""The corpus stage's writing steps: documents through ``spill`` files into their bucket files, never all in memory.

Beam's local runner holds everything a ``GroupByKey`` shuffles, so grouping the documents by bucket in Beam kept
the whole corpus in one process (3.7 GB of memory at 0.3 GB of text, ``bench/results/scale.md``). The bucket
count n depends on the total text bytes, known only once every input is read, so the documents are written
twice, each time a chunk at a time:

1. ``spill_documents`` (per input file, or once for the embedded default's selection): the documents with their
   id's file hash, in chunks of ``CHUNK_BYTES`` of text; returns the text bytes;
2. ``plan_buckets`` (once): the total text bytes → n (``documents.files_for_bytes``);
3. ``split_group`` (per group of input files): each chunk's documents → the part of the write task that owns
   their bucket (buckets in consecutive ranges, one range per task); yields the buckets that hold documents;
4. ``number_files`` (once): the buckets that hold documents → file i of n, in bucket order;
5. ``write_part`` (per write task): its part of every group's file → one Parquet file per bucket, rows sorted by
   id (``documents.table_from_rows``), the bytes the stage wrote when it grouped in memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.algorithms.hashes import stable_hash64
from pipelines.contracts.documents import DOCUMENT_SCHEMA, file_name, files_for_bytes, table_from_rows
from pipelines.runtime import files
from pipelines.runtime.spill import Spill

__all__ = ["CHUNK_BYTES", "number_files", "plan_buckets", "spill_documents", "split_group", "write_part"]

CHUNK_BYTES = 16 << 20  # of text per spilled chunk: what a reading or splitting worker holds at once
SPILLED = DOCUMENT_SCHEMA.append(pa.field("hash", pa.uint64()))  # stable_hash64("file", id): bucket = hash % n
BUCKETED = SPILLED.append(pa.field("bucket", pa.int64()))
PLAN = pa.schema([("buckets", pa.int64())])
NUMBERING = pa.schema([("bucket", pa.int64())])  # the buckets that hold documents, in order: file i is row i


def _chunk(rows: list[dict]) -> pa.Table:
    table = pa.Table.from_pylist(rows, schema=DOCUMENT_SCHEMA)
    hashes = pa.array([stable_hash64("file", doc_id) for doc_id in table.column("id").to_pylist()], pa.uint64())
    return table.append_column("hash", hashes)


def spill_documents(documents: Iterable[dict], spill: Spill, source: int) -> int:
    """Writes ``documents`` (dicts of ``DOCUMENT_SCHEMA``) as spill source ``source``, a chunk at a time; returns
    their text bytes (UTF-8). A source with no document is written too, empty."""
    total, rows, size = 0, [], 0
    with spill.writer("documents", source, SPILLED) as add:
        for document in documents:
            rows.append(document)
            text_bytes = len(document["text"].encode("utf-8"))
            size, total = size + text_bytes, total + text_bytes
            if size >= CHUNK_BYTES:
                add(_chunk(rows))
                rows, size = [], 0
        add(_chunk(rows))
    return total


def plan_buckets(total_bytes: int, spill: Spill) -> int:
    """Records the bucket count for ``total_bytes`` of text; returns it."""
    buckets = files_for_bytes(total_bytes)
    spill.put("plan", 0, pa.table({"buckets": [buckets]}, schema=PLAN))
    return buckets


def split_group(group: int, spill: Spill, groups: list[range], tasks: int) -> Iterator[list[int]]:
    """The spilled documents of input files ``groups[group]`` → one file of ``tasks`` parts, part t holding the
    buckets b·t/tasks … that write task t writes; yields the buckets that hold documents."""
    buckets = spill.get("plan", 0, PLAN).column("buckets")[0].as_py()
    present: set[int] = set()
    with spill.writer("bucketed", group, BUCKETED, tasks) as add:
        for source in groups[group]:
            for chunk in spill.chunks("documents", source, SPILLED):
                bucket = (chunk.column("hash").to_numpy() % np.uint64(buckets)).astype(np.int64)
                add(chunk.append_column("bucket", pa.array(bucket)), bucket * tasks // buckets)
                present.update(np.unique(bucket).tolist())
    yield sorted(present)


def number_files(buckets: list[int], spill: Spill) -> int:
    """Records the buckets that hold documents, in order (file i of n is the i-th); returns n."""
    spill.put("numbering", 0, pa.table({"bucket": sorted(buckets)}, schema=NUMBERING))
    return len(buckets)


def write_part(part: int, spill: Spill, output: str) -> Iterator[tuple[str, int, int]]:
    """Write task ``part``'s documents → one ``documents-i-of-n.parquet`` per bucket; yields (path, documents,
    text bytes) of each file written."""
    numbering = spill.get("numbering", 0, NUMBERING).column("bucket").to_numpy()
    with spill.parts("bucketed", BUCKETED) as read:
        table = read(part)
    if not table.num_rows:
        return
    table = table.take(pc.sort_indices(table, sort_keys=[("bucket", "ascending")]))
    bucket = table.column("bucket").to_numpy()
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    for start, end in zip(starts, [*starts[1:], len(bucket)], strict=True):
        rows = table.slice(int(start), int(end - start)).drop_columns(["hash", "bucket"]).to_pylist()
        index = int(np.searchsorted(numbering, bucket[start]))
        path = files.join(output, file_name("documents", index, len(numbering)))
        files.write_parquet_atomically(path, table_from_rows(rows, DOCUMENT_SCHEMA))
        yield path, len(rows), sum(len(row["text"].encode("utf-8")) for row in rows)
