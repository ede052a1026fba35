"""The record contracts between the text stages: documents (corpus stage) and sentences (segment stage).

Both are Parquet files named ``{kind}-{i:05d}-of-{n:05d}.parquet``, none empty; a document goes to bucket
``stable_hash64(id) % b``, the buckets that hold documents become the n files in bucket order, and rows inside a
file are sorted by id, so equal inputs give equal files.
"""

from __future__ import annotations

import pyarrow as pa

from pipelines import files
from pipelines.seeding import stable_hash64

__all__ = [
    "DOCUMENT_SCHEMA",
    "SENTENCES_SCHEMA",
    "file_index",
    "file_name",
    "files_for_bytes",
    "remove_outputs",
    "table_from_rows",
]

DOCUMENT_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),  # stable across runs: derived from source and position
        pa.field("text", pa.string(), nullable=False),
        # True when the source already has one sentence per line (BERT/ALBERT layout): segment keeps the lines.
        pa.field("presegmented", pa.bool_(), nullable=False),
        pa.field("meta", pa.string(), nullable=False),  # JSON object: source file, module, kind, ...
    ]
)

SENTENCES_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("sentences", pa.list_(pa.string()), nullable=False),  # normalised, non-empty
        pa.field("meta", pa.string(), nullable=False),
    ]
)

# A file is the instances stage's work item: ~60 k tokens of text, ~10 MB of instances at dupe_factor 40.
# Small enough that one worker holds one file's instances, and that even the embedded default (1.4 MB) gives
# several files for the workers to share; large enough that per-file overhead does not matter.
TARGET_FILE_BYTES = 256 << 10


def files_for_bytes(total_bytes: int, target_bytes: int = TARGET_FILE_BYTES) -> int:
    """Returns how many files to spread ``total_bytes`` of text over (at least 1)."""
    return max(1, -(-total_bytes // target_bytes))


def file_index(document_id: str, num_files: int) -> int:
    """Returns the bucket (of ``num_files``) a document belongs to: by hash, so not by reading order."""
    return stable_hash64("file", document_id) % num_files


def file_name(kind: str, index: int, num_files: int) -> str:
    return f"{kind}-{index:05d}-of-{num_files:05d}.parquet"


def remove_outputs(output: str, kind: str) -> None:
    """Deletes ``{kind}-*.parquet``, ``stats.json`` and leftover temporary files from ``output``."""
    files.delete_matching(output, [f"{kind}-*-of-*.parquet", "stats.json", ".tmp-*"])


def table_from_rows(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Returns rows sorted by id as a table of ``schema`` (sorting makes the file independent of arrival order)."""
    rows = sorted(rows, key=lambda r: r["id"])
    return pa.Table.from_pylist(rows, schema=schema)
