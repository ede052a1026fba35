"""The record contracts between the text stages: documents (corpus stage) and sentences (segment stage).

Both are Parquet files named ``{kind}-{i:05d}-of-{n:05d}.parquet``, none empty; a document goes to bucket
``stable_hash64(id) % b``, the buckets that hold documents become the n files in bucket order, and rows inside a
file are sorted by id, so equal inputs give equal files.
"""

from __future__ import annotations

import json
import re

import pyarrow as pa

from pipelines.algorithms.hashes import stable_hash64
from pipelines.runtime import files
from pipelines.runtime.options import ALLOW_UNDEDUPED

__all__ = [
    "DOCUMENT_SCHEMA",
    "SENTENCES_SCHEMA",
    "file_index",
    "file_name",
    "files_for_bytes",
    "finished_files",
    "read_normalizer",
    "read_split_stats",
    "read_stats",
    "require_deduped",
    "table_from_rows",
]

STATS = "stats.json"  # written last by the corpus and segment stages: its presence marks a finished run
DEDUP_STAGE = "dedup"  # the dedup stage's stats.json says ``"stage": "dedup"``: what ``require_deduped`` looks for

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

# A file is the unit of work of every later stage (two shards each): small files spread work over many workers,
# large ones cost less per token and keep folders small enough for DVC, so files grow from MIN_FILE_BYTES to
# MAX_FILE_BYTES once a corpus fills MIN_FILES of them (docs/results.md, "The instances stage").
MIN_FILE_BYTES, MAX_FILE_BYTES, MIN_FILES = 256 << 10, 1 << 20, 128


def files_for_bytes(total_bytes: int) -> int:
    """Returns how many files to spread ``total_bytes`` of text over (at least 1): ``MIN_FILES`` when that keeps
    each between ``MIN_FILE_BYTES`` and ``MAX_FILE_BYTES``, else as many of the nearer bound as it takes."""
    target = min(MAX_FILE_BYTES, max(MIN_FILE_BYTES, -(-total_bytes // MIN_FILES)))
    return max(1, -(-total_bytes // target))


def file_index(document_id: str, num_files: int) -> int:
    """Returns the bucket (of ``num_files``) a document belongs to: by hash, so not by reading order."""
    return stable_hash64("file", document_id) % num_files


def file_name(kind: str, index: int, num_files: int) -> str:
    return f"{kind}-{index:05d}-of-{num_files:05d}.parquet"


def outputs(kind: str) -> list[str]:
    """The file patterns a stage writing ``kind`` files owns, besides its ``STATS`` marker."""
    return [f"{kind}-*-of-*.parquet"]


def finished_files(folder: str, kind: str) -> list[str]:
    """Returns the ``{kind}-i-of-n.parquet`` files of a finished stage in ``folder``, in order.

    Raises:
        FileNotFoundError: ``folder`` has no ``stats.json`` (its stage did not finish) or no ``kind`` files.
        ValueError: the files are not one complete ``{kind}-i-of-n`` set.
    """
    if not files.exists(files.join(folder, STATS)):
        raise FileNotFoundError(f"{folder}: no {STATS}, so no finished stage output here")
    pattern = re.compile(rf"{kind}-(\d+)-of-(\d+)\.parquet$")
    paths = [p for p, _ in files.match_paths([files.join(folder, f"{kind}-*-of-*.parquet")]) if pattern.search(p)]
    numbers = sorted(tuple(map(int, pattern.search(p).groups())) for p in paths)
    if not paths or numbers != [(i, numbers[0][1]) for i in range(numbers[0][1])]:
        count = numbers[0][1] if numbers else 0
        raise ValueError(f"{folder}: {kind}-*.parquet are not one complete set of {count} files; rerun its stage")
    return sorted(paths)


def read_stats(folder: str) -> dict:
    """Returns the ``stats.json`` of a finished stage (its config, counters, ...)."""
    return json.loads(files.read_bytes(files.join(folder, STATS)))


def read_split_stats(folder: str, held_out_fraction: float) -> dict:
    """Returns ``read_stats(folder)`` after checking that a stage which split the documents (dedup, which records
    its ``held_out_fraction``) held out the ones the reading stage holds out.

    Raises:
        ValueError: naming the stats file, when the recorded fraction is not ``held_out_fraction``.
    """
    stats = read_stats(folder)
    recorded = stats.get("held_out_fraction")
    if recorded is not None and recorded != held_out_fraction:
        raise ValueError(
            f"{files.join(folder, STATS)}: written with held_out_fraction {recorded}, but this stage splits at "
            f"{held_out_fraction}; set one top-level held_out_fraction for every stage"
        )
    return stats


def read_normalizer(folder: str, held_out_fraction: float | None = None) -> dict:
    """Returns the segment stage's record of how it normalised the text, as ``folder``'s stats carry it (dedup
    copies it on; instances writes it into the manifest, for fine-tuning and export to repeat). With
    ``held_out_fraction``, the stats are read through ``read_split_stats``.

    Raises:
        ValueError: naming the stats file, when it has no record (an older segment stage wrote it).
    """
    stats = read_stats(folder) if held_out_fraction is None else read_split_stats(folder, held_out_fraction)
    if not isinstance(stats.get("normalizer"), dict):
        raise ValueError(f"{files.join(folder, STATS)}: no normalizer record (older segment stage); rerun it")
    return stats["normalizer"]


def require_deduped(folder: str, allow_undeduped: bool) -> dict:
    """Returns ``read_stats(folder)`` after checking that the dedup stage wrote ``folder``.

    Without dedup a held-out document can repeat a training one (a docstring copied into two modules), so the
    held-out text would not be unseen: ``allow_undeduped`` accepts any finished sentences folder anyway (a
    benchmark, a test of the stage alone).

    Raises:
        ValueError: naming the stats file and the flag, when another stage (segment) wrote the folder.
    """
    stats = read_stats(folder)
    if stats.get("stage") != DEDUP_STAGE and not allow_undeduped:
        raise ValueError(
            f"{files.join(folder, STATS)}: not written by the dedup stage, so held-out documents may repeat "
            f"training text; run pipelines.dedup on it and read its output, or pass --{ALLOW_UNDEDUPED}"
        )
    return stats


def table_from_rows(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Returns rows sorted by id as a table of ``schema`` (sorting makes the file independent of arrival order)."""
    rows = sorted(rows, key=lambda r: r["id"])
    return pa.Table.from_pylist(rows, schema=schema)
