"""The dedup stage's five steps (``pipelines.dedup`` runs them in this order, each once the one before is done):
functions over one input file or one slice of a key space, which read and write ``spill`` records.

1. ``spill_facts`` (per file): its documents' content keys and band records (with the signature), by slice, and
   its sentences' keys for step 3;
2. ``decide_slice`` (per slice): exact duplicates (rule 1) and near duplicates (rule 2), by the removed one's file;
3. ``gather_removals`` (per file): one removal per removed document, the best survivor named; its survivors'
   sentences, by slice;
4. ``drop_repeats`` (per slice): repeated sentences (rule 3), by file;
5. ``write_file`` (per file): the decisions applied to the file read again; yields removed.jsonl candidates.

Groups are found by sorting Arrow tables (``near_duplicates.first_of_runs``), not by Python dicts: a slice's
records stay columns, a few bytes each beyond their keys.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines import documents, files, progress
from pipelines import near_duplicates as nd
from pipelines.documents import SENTENCES_SCHEMA, file_name
from pipelines.hashes import stable_hash64
from pipelines.spill import Spill
from pipelines.splits import is_held_out
from pipelines.stage import Counters

__all__ = ["COUNTERS", "RULES", "decide_slice", "drop_repeats", "gather_removals", "spill_facts", "write_file"]

RULES = ("exact_duplicate", "near_duplicate", "repeated_sentence")
COUNTERS = Counters(
    "dedup",
    *"documents exact_duplicate_documents near_duplicate_documents sentences repeated_sentences "
    "repeated_sentence_chars emptied_documents documents_kept sentences_kept held_out_documents_kept".split(),
)
SAMPLE_CHARS = 300  # of a removed document, in removed.jsonl
U64, I8, I32, STR = pa.uint64(), pa.int8(), pa.int32(), pa.string()
# The spilled records. A document's priority key is (side, id): side 0 held out, 1 training. hi/lo are a 16-byte
# key's two little-endian halves; file is the input file the document is in, where its decisions go.
CONTENTS = pa.schema([("hi", U64), ("lo", U64), ("side", I8), ("id", STR), ("file", I32)])
BANDS = pa.schema([("band", U64), ("side", I8), ("id", STR), ("file", I32), ("hi", U64), ("lo", U64),
                   ("signature", pa.binary())])  # fmt: skip
SENTENCES = pa.schema([("hi", U64), ("lo", U64), ("side", I8), ("id", STR), ("position", I32), ("file", I32)])
REMOVALS = pa.schema([("id", STR), ("rule", I8), ("kept_side", I8), ("kept_id", STR), ("file", I32)])
DROPS = pa.schema([("id", STR), ("position", I32), ("kept_id", STR), ("file", I32)])


def _column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy()


def _sorted(table: pa.Table, *names: str) -> pa.Table:
    return table.take(pc.sort_indices(table, sort_keys=[(name, "ascending") for name in names]))


def _all_but_first(table: pa.Table, *keys: str) -> tuple[pa.Table, pa.Table]:
    """For ``table`` sorted by ``keys`` then priority: the rows after the first of their run of equal keys, and
    for each of them that first row (the copy a rule keeps)."""
    first = nd.first_of_runs(*(_column(table, key) for key in keys))
    gone = np.flatnonzero(first != np.arange(len(first)))
    return table.take(pa.array(gone)), table.take(pa.array(first[gone]))


def _halves(keys: bytes) -> tuple[np.ndarray, np.ndarray]:
    pairs = np.frombuffer(keys, dtype="<u8").reshape(-1, 2)
    return pairs[:, 0].copy(), pairs[:, 1].copy()


def _slice_of(key: np.ndarray, slices: int) -> np.ndarray:
    return (key % np.uint64(slices)).astype(np.int64)


def spill_facts(index: int, paths: list[str], spill: Spill, hasher: nd.MinHasher, fraction: float,
                 slices: int) -> Iterator[int]:  # fmt: skip
    """Input file ``index`` → its documents' content keys and band records, by slice, and its sentences' keys."""
    table = files.read_parquet(paths[index], columns=["id", "sentences"])
    ids, docs = table.column("id"), table.column("sentences").to_pylist()
    sides = np.array([0 if is_held_out(doc_id, fraction) else 1 for doc_id in ids.to_pylist()], dtype=np.int8)
    contents, signatures, bands, keys = [], [], [], []
    for sentences in docs:
        signature = hasher.signature(sentences)
        contents.append(nd.content_key(sentences))
        signatures.append(nd.compact(signature))
        bands += hasher.band_keys(signature)
        keys += map(nd.sentence_key, sentences)
    COUNTERS.inc("documents", len(docs))
    COUNTERS.inc("sentences", len(keys))
    hi, lo = _halves(b"".join(contents))
    file = np.full(len(docs), index, dtype=np.int32)
    content = pa.table([hi, lo, sides, ids, file], schema=CONTENTS)
    spill.write("contents", index, content, _slice_of(lo, slices), slices)
    doc = np.repeat(np.arange(len(docs)), hasher.bands)
    band = pa.table([np.array(bands, dtype=np.uint64), sides[doc], ids.take(doc), file[doc], hi[doc], lo[doc],
                     pa.array(signatures, pa.binary()).take(doc)], schema=BANDS)  # fmt: skip
    spill.write("bands", index, band, _slice_of(_column(band, "band"), slices), slices)
    lengths = np.array([len(sentences) for sentences in docs], dtype=np.int64)
    doc = np.repeat(np.arange(len(docs)), lengths)
    position = (np.arange(len(doc)) - np.repeat(np.cumsum(lengths) - lengths, lengths)).astype(np.int32)
    hi, lo = _halves(b"".join(keys))
    sentence = pa.table([hi, lo, sides[doc], ids.take(doc), position, file[doc]], schema=SENTENCES)
    spill.put("sentences", index, sentence)
    progress.advance()
    yield index


def _removals(gone: pa.Table, kept: pa.Table, rule: int) -> pa.Table:
    """Rows ``gone`` removed in favour of the same rows of ``kept`` (both tables with side and id)."""
    rules = np.full(gone.num_rows, rule, dtype=np.int8)
    columns = [gone.column("id"), rules, kept.column("side"), kept.column("id"), gone.column("file")]
    return pa.table(columns, schema=REMOVALS)


def _near_removals(bands: pa.Table, threshold: float) -> pa.Table:
    """Band records sorted by (band, side, id) → a removal per similar (worse, better) pair of a bucket."""
    first = nd.first_of_runs(_column(bands, "band"))
    shared = np.isin(first, first[first != np.arange(len(first))])  # the rows of buckets with two members or more
    rows = bands.take(pa.array(np.flatnonzero(shared))).to_pylist()
    buckets = itertools.groupby(rows, key=lambda row: row["band"])
    members = ([((r["side"], r["id"]), (r["hi"], r["lo"]), r["signature"]) for r in bucket] for _, bucket in buckets)
    file_of = {(row["side"], row["id"]): row["file"] for row in rows}
    pairs = sorted(set(nd.similar_pairs(members, threshold)))
    columns = [[w[1] for w, _ in pairs], [1] * len(pairs), [b[0] for _, b in pairs], [b[1] for _, b in pairs]]
    return pa.table([*columns, [file_of[w] for w, _ in pairs]], schema=REMOVALS)


def decide_slice(part: int, spill: Spill, threshold: float, num_files: int) -> Iterator[int]:
    """Slice ``part`` of content keys and band buckets → exact and near removals, by the removed one's file."""
    contents = _sorted(spill.read("contents", part, CONTENTS), "hi", "lo", "side", "id")
    exact = _removals(*_all_but_first(contents, "hi", "lo"), 0)
    near = _near_removals(_sorted(spill.read("bands", part, BANDS), "band", "side", "id"), threshold)
    removals = pa.concat_tables([exact, near]).combine_chunks()
    spill.write("removals", part, removals, _column(removals, "file"), num_files)
    progress.advance()
    yield part


def gather_removals(index: int, spill: Spill, slices: int) -> Iterator[int]:
    """Input file ``index``'s removals → one per removed document (the best survivor named); its survivors'
    sentences → the sentence slices."""
    removals = _sorted(spill.read("removals", index, REMOVALS), "id", "rule", "kept_side", "kept_id")
    first = nd.first_of_runs(np.array(removals.column("id").to_pylist(), dtype=object))
    removed = removals.take(pa.array(np.flatnonzero(first == np.arange(len(first)))))
    spill.put("removed", index, removed)
    sentences = spill.get("sentences", index, SENTENCES)
    kept = sentences.filter(pc.invert(pc.is_in(sentences.column("id"), value_set=removed.column("id"))))
    spill.write("occurrences", index, kept, _slice_of(_column(kept, "lo"), slices), slices)
    progress.advance()
    yield index


def drop_repeats(part: int, spill: Spill, num_files: int) -> Iterator[int]:
    """Slice ``part`` of surviving sentences → each occurrence after the first in (side, id, position) order."""
    occurrences = _sorted(spill.read("occurrences", part, SENTENCES), "hi", "lo", "side", "id", "position")
    gone, kept = _all_but_first(occurrences, "hi", "lo")
    drops = pa.table([gone.column("id"), gone.column("position"), kept.column("id"), gone.column("file")], DROPS)
    spill.write("drops", part, drops, _column(drops, "file"), num_files)
    progress.advance()
    yield part


def _sample(rule: str, doc_id: str, kept_id: str, text: str, position: int | None = None) -> tuple:
    """A removed.jsonl candidate: (sample hash, rule, id, position, kept id, text); the sample keeps the smallest."""
    key = stable_hash64(rule, doc_id) if position is None else stable_hash64(rule, doc_id, position)
    return key, rule, doc_id, position, kept_id, text


def _apply(row: dict, removal: tuple | None, dropped: dict[int, str], fraction: float) -> tuple[dict | None, list]:
    """One input row and the decisions about it → the row to write (None: dropped) and its sample candidates."""
    if removal:
        COUNTERS.inc(f"{removal[0]}_documents")
        return None, [_sample(removal[0], row["id"], removal[1], " ".join(row["sentences"])[:SAMPLE_CHARS])]
    samples = [_sample(RULES[2], row["id"], dropped[i], s, i) for i, s in enumerate(row["sentences"]) if i in dropped]
    COUNTERS.inc("repeated_sentences", len(samples))
    COUNTERS.inc("repeated_sentence_chars", sum(len(sample[-1]) for sample in samples))
    sentences = [s for i, s in enumerate(row["sentences"]) if i not in dropped]
    if not sentences:
        COUNTERS.inc("emptied_documents")
        return None, samples
    COUNTERS.inc("documents_kept")
    COUNTERS.inc("sentences_kept", len(sentences))
    COUNTERS.inc("held_out_documents_kept", int(is_held_out(row["id"], fraction)))
    return {**row, "sentences": sentences}, samples


def write_file(index: int, paths: list[str], spill: Spill, output: str, fraction: float) -> Iterator[tuple]:
    """Input file ``index`` and the decisions about its documents → its survivors written; yields sample
    candidates. A file whose documents all go is written too, with no rows."""
    removed = spill.get("removed", index, REMOVALS).to_pylist()
    removals = {row["id"]: (RULES[row["rule"]], row["kept_id"]) for row in removed}
    dropped = collections.defaultdict(dict)
    for row in spill.read("drops", index, DROPS).to_pylist():
        dropped[row["id"]][row["position"]] = row["kept_id"]
    rows = []
    for row in files.read_parquet(paths[index]).to_pylist():
        kept, samples = _apply(row, removals.get(row["id"]), dropped.get(row["id"], {}), fraction)
        rows += [kept] if kept else []
        yield from samples
    out = files.join(output, file_name("sentences", index, len(paths)))
    files.write_parquet_atomically(out, documents.table_from_rows(rows, SENTENCES_SCHEMA))
    progress.advance()
