"""The leakage stage's steps: occurrences through ``spill`` files, counted a slice of keys at a time.

Grouping every sentence by its text in Beam kept every distinct sentence of the corpus in the local runner's
memory (3.7 GB at 0.3 GB of text, ``bench/results/scale.md``). Instead, per group of input files, each sentence
occurrence becomes a small record keyed by its 128-bit ``near_duplicates.sentence_key`` (a collision is ~2⁻¹²⁸
per pair), written by slice of its key; then per range of slices, a slice at a time, the records of one key
are its sentence's occurrences. The same for documents: each training shard's document ids and each held-out
task file's, by slice of the id's hash, so one slice's documents meet with all their places.

1. ``spill_sentences`` (per file group): (key, held out?, characters, long?) per sentence occurrence;
2. ``count_sentences`` (per slice range): the eight ``SENTENCE_COUNTS`` of the range's sentences;
3. ``spill_documents`` (per group of training shards, and once for the task files): (id, place) per document;
4. ``count_documents`` (per slice range): per place, its documents and those found in training.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from pipelines.algorithms.hashes import stable_hash64
from pipelines.algorithms.near_duplicates import sentence_key
from pipelines.algorithms.passages import word_count
from pipelines.algorithms.splits import is_held_out
from pipelines.runtime import files, progress
from pipelines.runtime.spill import Spill

__all__ = ["count_documents", "count_sentences", "spill_documents", "spill_sentences"]

SENTENCES = pa.schema([("hi", pa.uint64()), ("lo", pa.uint64()), ("held_out", pa.int8()), ("chars", pa.int64()),
                       ("long", pa.int8())])  # fmt: skip
DOCUMENTS = pa.schema([("id", pa.string()), ("place", pa.int32())])  # place 0: training shards; k: task file k-1
TRAINING = 0


def spill_sentences(group: int, kind: str, paths: list[str], groups: list[range], spill: Spill, fraction: float,
                    min_words: int, slices: int) -> Iterator[int]:  # fmt: skip
    """The sentence occurrences of input files ``groups[group]`` → records of ``kind`` by slice of their key."""
    with spill.writer(kind, group, SENTENCES, slices) as add:
        for index in groups[group]:
            table = files.read_parquet(paths[index], columns=["id", "sentences"])
            keys, held, chars, long = [], [], [], []
            for doc_id, sentences in zip(*(table.column(c).to_pylist() for c in ("id", "sentences")), strict=True):
                side = int(is_held_out(doc_id, fraction))
                for sentence in sentences:
                    keys.append(sentence_key(sentence))
                    held.append(side)
                    chars.append(len(sentence))
                    long.append(word_count(sentence) >= min_words)
            pairs = np.frombuffer(b"".join(keys), dtype="<u8").reshape(-1, 2)
            hi, lo = pairs[:, 0].copy(), pairs[:, 1].copy()
            columns = [hi, lo, np.array(held, np.int8), np.array(chars, np.int64), np.array(long, np.int8)]
            add(pa.table(columns, schema=SENTENCES), (lo % np.uint64(slices)).astype(np.int64))
            progress.advance()
    yield group


def _sentence_counts(records: pa.Table) -> np.ndarray:
    """One slice's records → (held-out occurrences, of them seen in training, their chars, seen chars), for every
    sentence then for the long ones: each occurrence in a held-out document counts once, as seen when the same
    text is in any training document."""
    if not records.num_rows:
        return np.zeros(8, dtype=np.int64)
    hi, lo = (records.column(c).to_numpy() for c in ("hi", "lo"))
    order = np.lexsort((lo, hi))
    hi, lo = hi[order], lo[order]
    starts = np.flatnonzero(np.r_[True, (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])])
    held = np.add.reduceat(records.column("held_out").to_numpy()[order].astype(np.int64), starts)
    occurrences = np.diff(np.r_[starts, len(hi)])
    seen = np.where(occurrences > held, held, 0)  # a training occurrence too
    chars = records.column("chars").to_numpy()[order][starts]
    long = records.column("long").to_numpy()[order][starts].astype(bool)
    every = np.array([np.sum(held), np.sum(seen), np.sum(held * chars), np.sum(seen * chars)], dtype=np.int64)
    passages = [np.sum(held * long), np.sum(seen * long), np.sum(held * chars * long), np.sum(seen * chars * long)]
    return np.concatenate([every, np.array(passages, dtype=np.int64)])


def count_sentences(task: int, kind: str, ranges: list[range], spill: Spill) -> Iterator[tuple[int, ...]]:
    """Slice range ``task`` of ``kind``'s records, a slice at a time → the eight sentence counts of its keys."""
    totals = np.zeros(8, dtype=np.int64)
    with spill.parts(kind, SENTENCES) as read:
        for part in ranges[task]:
            totals += _sentence_counts(read(part))
    yield tuple(int(total) for total in totals)


def _task_ids(path: str) -> set[str]:
    """The ids of the documents a task file's examples come from."""
    text = files.read_bytes(path).decode("utf-8")
    if path.endswith(".json"):  # SQuAD's layout: a question's id is its document's id
        data = json.loads(text)["data"]
        return {q["id"] for a in data for p in a["paragraphs"] for q in p["qas"]}
    return {json.loads(line)["id"] for line in text.splitlines()}


def spill_documents(source: int, shard_groups: list[range], shard_paths: list[str], task_paths: list[str],
                    spill: Spill, slices: int) -> Iterator[int]:  # fmt: skip
    """Training shard group ``source`` (or, for the index past the last group, the task files) → (id, place)
    records by slice of the id's hash, once per document and place."""
    if source < len(shard_groups):
        places = [(shard_paths[i], TRAINING) for i in shard_groups[source]]
    else:
        places = [(path, k + 1) for k, path in enumerate(task_paths)]
    with spill.writer("documents", source, DOCUMENTS, slices) as add:
        for path, place in places:
            if place == TRAINING:
                shard = pa.ipc.open_file(pa.BufferReader(files.read_bytes(path))).read_all()
                ids = sorted(set(shard.column("document_id").to_pylist()))
            else:
                ids = sorted(_task_ids(path))
            part = np.array([stable_hash64("leakage", doc_id) % slices for doc_id in ids], dtype=np.int64)
            add(pa.table([ids, [place] * len(ids)], schema=DOCUMENTS), part)
    yield source


def count_documents(task: int, ranges: list[range], spill: Spill, fraction: float) -> Iterator[dict[str, int]]:
    """Slice range ``task`` of document records → ``held_out_in_training`` and, per place k ≥ 1 (task file k-1),
    ``{k}/documents`` and ``{k}/in_training_shards``."""
    counts: Counter = Counter()
    with spill.parts("documents", DOCUMENTS) as read:
        for part in ranges[task]:
            places: dict[str, set[int]] = {}
            for doc_id, place in zip(*(read(part).column(c).to_pylist() for c in ("id", "place")), strict=True):
                places.setdefault(doc_id, set()).add(place)
            for doc_id, found in places.items():
                trained = TRAINING in found
                counts["held_out_in_training"] += trained and is_held_out(doc_id, fraction)
                for place in found - {TRAINING}:
                    counts[f"{place}/documents"] += 1
                    counts[f"{place}/in_training_shards"] += trained
    yield dict(counts)
