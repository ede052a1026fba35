"""The dedup stage's six steps (``pipelines.dedup`` runs them in this order, each once the one before is done):
functions over one group of input files or one range of slices of a key space, which read and write ``spill``
records: one spill file per task, not per input file or slice, so each is opened once by each reading task and
the files opened grow as tasks², never as input files × slices (``spill.even_ranges`` makes the groups).

1. ``spill_facts`` (per file group): its documents' content keys and band records (with the signature), by
   slice, and its passages' keys (``passages.PassageRule.units``) for step 5, and its ids, by slice;
2. ``decide_slices`` (per slice range, a slice at a time): ids checked unique; exact duplicates (rule 1), by the
   removed one's file group; the similar pairs of its band buckets (``near_duplicates.similar_pairs``);
3. ``resolve_near`` (once): every slice's similar pairs → the near duplicates (rule 2), each removed iff like a
   better document that stays (``near_duplicates.greedy_removals``): memory is the pairs, not the documents;
4. ``gather_removals`` (per file group): one removal per removed document, the best survivor named; its
   survivors' passages, by slice;
5. ``drop_shared_passages`` (per slice range, a slice at a time): shared passages (rule 3,
   ``passages.PassageRule.shared``), one drop per sentence of each copy that goes, by file group;
6. ``write_files`` (per file group, a file at a time): the decisions applied to each file read again; yields
   removed.jsonl candidates.

Groups are found by sorting Arrow tables (``near_duplicates.first_of_runs``), not by Python dicts: a slice's
records stay columns, a few bytes each beyond their keys. Every rule sorts its records by total keys, so the
output depends on neither the slices nor the groups.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.algorithms import near_duplicates as nd
from pipelines.algorithms.hashes import stable_hash64
from pipelines.algorithms.passages import PassageRule
from pipelines.algorithms.splits import is_held_out
from pipelines.contracts import documents
from pipelines.contracts.documents import SENTENCES_SCHEMA, file_name
from pipelines.runtime import files, progress
from pipelines.runtime.spill import Spill
from pipelines.runtime.stage import Counters

__all__ = [
    "COUNTERS", "RULES", "Tasks", "decide_slices", "drop_shared_passages", "gather_removals", "resolve_near",
    "spill_facts", "write_files",
]  # fmt: skip

RULES = ("exact_duplicate", "near_duplicate", "shared_passage")
COUNTERS = Counters(
    "dedup",
    *"documents exact_duplicate_documents near_duplicate_documents sentences shared_passage_sentences "
    "shared_passage_chars emptied_documents documents_kept sentences_kept held_out_documents_kept".split(),
)
SAMPLE_CHARS = 300  # of a removed document, in removed.jsonl
U64, I8, I32, STR = pa.uint64(), pa.int8(), pa.int32(), pa.string()
# The spilled records. A document's priority key is (side, id): side 0 held out, 1 training. hi/lo are a 16-byte
# key's two little-endian halves; file is the input file the document is in, where its decisions go.
CONTENTS = pa.schema([("hi", U64), ("lo", U64), ("side", I8), ("id", STR), ("file", I32)])
BANDS = pa.schema([("band", U64), ("side", I8), ("id", STR), ("file", I32), ("hi", U64), ("lo", U64),
                   ("signature", pa.binary())])  # fmt: skip
# A passage (passages.PassageRule.units): its key, its document, and the sentences it covers (span from position).
PASSAGES = pa.schema([("hi", U64), ("lo", U64), ("side", I8), ("id", STR), ("position", I32), ("span", I32),
                      ("file", I32)])  # fmt: skip
REMOVALS = pa.schema([("id", STR), ("rule", I8), ("kept_side", I8), ("kept_id", STR), ("file", I32)])
# A similar (worse, better) pair of a bucket: the worse document (side, id, file), the better one (kept_*).
PAIRS = pa.schema([("side", I8), ("id", STR), ("file", I32), ("kept_side", I8), ("kept_id", STR)])
IDS = pa.schema([("id", STR), ("file", I32)])  # every document's id, sliced by its hash: duplicates meet
DROPS = pa.schema([("id", STR), ("position", I32), ("kept_side", I8), ("kept_id", STR), ("file", I32)])


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


@dataclasses.dataclass(frozen=True)
class Tasks:
    """How the steps split their work: ``groups[g]`` the input files of file task g, ``ranges[r]`` the slices of
    slice task r; ``slices`` parts per key space."""

    groups: list[range]
    ranges: list[range]
    slices: int

    def group_of(self, file: np.ndarray) -> np.ndarray:
        """The file task of each input file index in ``file``."""
        starts = np.array([g.start for g in self.groups], dtype=np.int64)
        return np.searchsorted(starts, file, side="right") - 1


def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables(tables).combine_chunks() if tables else schema.empty_table()


def spill_facts(group: int, paths: list[str], spill: Spill, hasher: nd.MinHasher, rule: PassageRule,
                fraction: float, tasks: Tasks) -> Iterator[int]:  # fmt: skip
    """File group ``group`` → its documents' content keys and band records, by slice, and its passages' keys:
    one spill file per kind, a chunk per input file, so a worker holds one file's records (band records, with
    their signatures, weigh several times the file)."""
    slices = tasks.slices
    with contextlib.ExitStack() as stack:
        add = {kind: stack.enter_context(spill.writer(kind, group, schema, parts)) for kind, schema, parts in
               (("contents", CONTENTS, slices), ("bands", BANDS, slices), ("ids", IDS, slices),
                ("passages", PASSAGES, 1))}  # fmt: skip
        for index in tasks.groups[group]:
            facts = _file_facts(index, paths, hasher, rule, fraction)
            ids = facts["ids"].column("id").to_pylist()
            add["ids"](facts["ids"], np.array([stable_hash64("id", i) % slices for i in ids], dtype=np.int64))
            add["contents"](facts["contents"], _slice_of(_column(facts["contents"], "lo"), slices))
            add["bands"](facts["bands"], _slice_of(_column(facts["bands"], "band"), slices))
            add["passages"](facts["passages"])
    yield group


def _file_facts(index: int, paths: list[str], hasher: nd.MinHasher, rule: PassageRule,
                fraction: float) -> dict[str, pa.Table]:  # fmt: skip
    """Input file ``index`` → its documents' content, band, id and passage records."""
    table = files.read_parquet(paths[index], columns=["id", "sentences"])
    ids, docs = table.column("id"), table.column("sentences").to_pylist()
    sides = np.array([0 if is_held_out(doc_id, fraction) else 1 for doc_id in ids.to_pylist()], dtype=np.int8)
    contents, signatures, bands, units, counts = [], [], [], [], []
    for doc, sentences in enumerate(docs):
        signature = hasher.signature(sentences)
        contents.append(nd.content_key(sentences))
        signatures.append(nd.compact(signature))
        doc_bands = hasher.band_keys(signature)  # none for a document with no word
        bands += doc_bands
        counts.append(len(doc_bands))
        units += ((key, doc, position, span) for key, position, span in rule.units(sentences))
    COUNTERS.inc("documents", len(docs))
    COUNTERS.inc("sentences", sum(map(len, docs)))
    hi, lo = _halves(b"".join(contents))
    file = np.full(len(docs), index, dtype=np.int32)
    doc = np.repeat(np.arange(len(docs)), np.array(counts, dtype=np.int64))
    band = pa.table([np.array(bands, dtype=np.uint64), sides[doc], ids.take(doc), file[doc], hi[doc], lo[doc],
                     pa.array(signatures, pa.binary()).take(doc)], schema=BANDS)  # fmt: skip
    progress.advance()
    return {"contents": pa.table([hi, lo, sides, ids, file], schema=CONTENTS), "bands": band,
            "ids": pa.table([ids, file], schema=IDS), "passages": _passages(units, sides, ids, index)}  # fmt: skip


def _passages(units: list[tuple[bytes, int, int, int]], sides: np.ndarray, ids: pa.ChunkedArray,
              index: int) -> pa.Table:  # fmt: skip
    """A file's passages, (key, document, position, span) each → PASSAGES records."""
    keys, doc, position, span = (list(column) for column in zip(*units, strict=True)) if units else ([],) * 4
    hi, lo = _halves(b"".join(keys))
    doc = np.array(doc, dtype=np.int64)
    columns = [hi, lo, sides[doc], ids.take(doc), np.array(position, dtype=np.int32), np.array(span, dtype=np.int32)]
    return pa.table([*columns, np.full(len(doc), index, dtype=np.int32)], schema=PASSAGES)


def _removals(gone: pa.Table, kept: pa.Table, rule: int) -> pa.Table:
    """Rows ``gone`` removed in favour of the same rows of ``kept`` (both tables with side and id)."""
    rules = np.full(gone.num_rows, rule, dtype=np.int8)
    columns = [gone.column("id"), rules, kept.column("side"), kept.column("id"), gone.column("file")]
    return pa.table(columns, schema=REMOVALS)


def _check_ids(ids: pa.Table, paths: list[str]) -> None:
    """Raises a ValueError naming the input files of the smallest id of the slice found more than once: every
    decision is keyed by id, so two documents with one id would share their fates."""
    ids = _sorted(ids, "id", "file")
    first = nd.first_of_runs(np.array(ids.column("id").to_pylist(), dtype=object))
    repeated = np.flatnonzero(first != np.arange(len(first)))
    if len(repeated):
        run = np.flatnonzero(first == first[repeated[0]])
        doc_id, where = ids.column("id")[run[0]].as_py(), _column(ids, "file")[run]
        names = ", ".join(paths[i] for i in sorted(set(where.tolist())))
        raise ValueError(f"{names}: document id {doc_id!r} occurs {len(run)} times; ids must be unique")


def _near_pairs(bands: pa.Table, threshold: float) -> pa.Table:
    """Band records sorted by (band, side, id) → the similar (worse, better) pairs of each bucket, sorted."""
    first = nd.first_of_runs(_column(bands, "band"))
    shared = np.isin(first, first[first != np.arange(len(first))])  # the rows of buckets with two members or more
    rows = bands.take(pa.array(np.flatnonzero(shared))).to_pylist()
    buckets = itertools.groupby(rows, key=lambda row: row["band"])
    members = ([((r["side"], r["id"]), (r["hi"], r["lo"]), r["signature"]) for r in bucket] for _, bucket in buckets)
    file_of = {(row["side"], row["id"]): row["file"] for row in rows}
    pairs = sorted(set(nd.similar_pairs(members, threshold)))
    columns = [[w[0] for w, _ in pairs], [w[1] for w, _ in pairs], [file_of[w] for w, _ in pairs]]
    return pa.table([*columns, [b[0] for _, b in pairs], [b[1] for _, b in pairs]], schema=PAIRS)


def decide_slices(task: int, spill: Spill, threshold: float, paths: list[str], tasks: Tasks) -> Iterator[int]:
    """Slice range ``task``, a slice at a time: ids, content keys and band buckets → a ValueError on a repeated
    id; exact removals, by the removed one's file group; the similar pairs, for ``resolve_near``."""
    exact, pairs = [], []
    with (
        spill.parts("ids", IDS) as ids,
        spill.parts("contents", CONTENTS) as contents,
        spill.parts("bands", BANDS) as bands,
    ):
        for part in tasks.ranges[task]:
            _check_ids(ids(part), paths)
            exact.append(_removals(*_all_but_first(_sorted(contents(part), "hi", "lo", "side", "id"), "hi", "lo"), 0))
            pairs.append(_near_pairs(_sorted(bands(part), "band", "side", "id"), threshold))
            progress.advance()
    removals = _concat(exact, REMOVALS)
    spill.write("removals", task, removals, tasks.group_of(_column(removals, "file")), len(tasks.groups))
    spill.put("pairs", task, _concat(pairs, PAIRS))
    yield task


def resolve_near(step: int, spill: Spill) -> Iterator[int]:
    """Every slice's similar pairs → the near removals (rule 2), whole, each naming the best survivor like it.

    One worker, once: a pair's documents can be in any slices, and whether a better document stays depends on
    pairs from other buckets. It holds the pairs as Arrow columns and each document in them as a number in
    priority order (``_numbered``): about 90 bytes a pair at the peak, never documents or signatures."""
    pairs = spill.read("pairs", 0, PAIRS)
    keys, numbers = _numbered(pairs)
    half = pairs.num_rows
    kept = nd.greedy_removals(numbers[:half], numbers[half:], keys.num_rows)
    gone = np.flatnonzero(kept >= 0)  # in priority order, as the keys
    file_of = np.zeros(keys.num_rows, dtype=np.int32)
    file_of[numbers[:half]] = _column(pairs, "file")
    by = pa.array(kept[gone])
    columns = [keys.column("id").take(pa.array(gone)), pa.array(np.ones(len(gone), np.int8)),
               keys.column("side").take(by), keys.column("id").take(by), pa.array(file_of[gone])]  # fmt: skip
    spill.put("near", 0, pa.table(columns, schema=REMOVALS))
    progress.advance()
    yield step


def _numbered(pairs: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """The pairs' documents, each once, sorted by (side, id): the priority order; and each pair's worse then
    better document as its row there (the first ``num_rows`` numbers are the worse ones)."""
    sides = np.concatenate([_column(pairs, "side"), _column(pairs, "kept_side")])
    # large_string: the two id columns together may pass the 2 GB that one string array can hold
    both = [pairs.column(name).cast(pa.large_string()).combine_chunks() for name in ("id", "kept_id")]
    codes = pa.concat_arrays(both).dictionary_encode()
    index = codes.indices.to_numpy(zero_copy_only=False)
    side_of = np.zeros(len(codes.dictionary), np.int8)
    side_of[index] = sides  # ids are unique across sides: one side each
    unique = pa.table({"side": side_of, "id": codes.dictionary.cast(STR)})
    order = pc.sort_indices(unique, sort_keys=[("side", "ascending"), ("id", "ascending")]).to_numpy()
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return unique.take(pa.array(order)), rank[index]


def _follow(exact: pa.Table, near: pa.Table) -> pa.Table:
    """Exact removals whose kept copy is itself a near duplicate → near removals naming that copy's survivor (the
    copies share its signature, so they are as like the survivor as it is), so a kept id always stays."""
    at = pc.index_in(exact.column("kept_id"), value_set=near.column("id"))
    moved = pc.is_valid(at)
    columns = [
        exact.column("id"),
        pc.if_else(moved, pa.scalar(1, I8), exact.column("rule")),
        pc.if_else(moved, pc.take(near.column("kept_side"), at), exact.column("kept_side")),
        pc.if_else(moved, pc.take(near.column("kept_id"), at), exact.column("kept_id")),
        exact.column("file"),
    ]
    return pa.table(columns, schema=REMOVALS)


def gather_removals(group: int, spill: Spill, tasks: Tasks) -> Iterator[int]:
    """File group ``group``'s exact removals and its share of the near ones → one per removed document (a
    survivor named), sorted by id; its survivors' passages → the passage slices."""
    near = spill.get("near", 0, REMOVALS)
    exact = _follow(spill.read("removals", group, REMOVALS), near)
    files_here = pa.array(list(tasks.groups[group]), I32)
    mine = near.filter(pc.is_in(near.column("file"), value_set=files_here))
    removed = _sorted(pa.concat_tables([exact, mine]).combine_chunks(), "id")  # a document is in one or the other
    spill.put("removed", group, removed)
    passages = spill.get("passages", group, PASSAGES)
    kept = passages.filter(pc.invert(pc.is_in(passages.column("id"), value_set=removed.column("id"))))
    spill.write("occurrences", group, kept, _slice_of(_column(kept, "lo"), tasks.slices), tasks.slices)
    progress.advance(len(tasks.groups[group]))
    yield group


def drop_shared_passages(task: int, spill: Spill, rule: PassageRule, tasks: Tasks) -> Iterator[int]:
    """Slice range ``task`` of surviving passages, a slice at a time → a drop per sentence of each shared
    passage's copies that go (``PassageRule.shared``), naming the document that keeps it, by file group."""
    drops = []
    with spill.parts("occurrences", PASSAGES) as occurrences:
        for part in tasks.ranges[task]:
            drops.append(_drops(_sorted(occurrences(part), "hi", "lo", "side", "id", "position"), rule))
            progress.advance()
    table = _concat(drops, DROPS)
    spill.write("drops", task, table, tasks.group_of(_column(table, "file")), len(tasks.groups))
    yield task


def _drops(found: pa.Table, rule: PassageRule) -> pa.Table:
    """A slice's passages, sorted by key then priority → one drop per sentence of each shared copy that goes."""
    side, ids = _column(found, "side"), found.column("id")
    gone, kept = rule.shared(_column(found, "hi"), _column(found, "lo"), side, ids.to_numpy(zero_copy_only=False))
    span = _column(found, "span")[gone]
    rows, kept = np.repeat(gone, span), np.repeat(kept, span)  # one drop per sentence a copy covers
    offset = np.arange(len(rows)) - np.repeat(np.cumsum(span) - span, span)
    position = (_column(found, "position")[rows] + offset).astype(np.int32)
    columns = [ids.take(rows), position, side[kept], ids.take(kept), _column(found, "file")[rows]]
    return pa.table(columns, schema=DROPS)


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
    COUNTERS.inc("shared_passage_sentences", len(samples))
    COUNTERS.inc("shared_passage_chars", sum(len(sample[-1]) for sample in samples))
    sentences = [s for i, s in enumerate(row["sentences"]) if i not in dropped]
    if not sentences:
        COUNTERS.inc("emptied_documents")
        return None, samples
    COUNTERS.inc("documents_kept")
    COUNTERS.inc("sentences_kept", len(sentences))
    COUNTERS.inc("held_out_documents_kept", int(is_held_out(row["id"], fraction)))
    return {**row, "sentences": sentences}, samples


def write_files(group: int, paths: list[str], spill: Spill, output: str, fraction: float,
                tasks: Tasks) -> Iterator[tuple]:  # fmt: skip
    """File group ``group`` and the decisions about its documents → each file's survivors written, a file at a
    time; yields sample candidates. A file whose documents all go is written too, with no rows."""
    removed = spill.get("removed", group, REMOVALS).to_pylist()
    removals = {row["id"]: (RULES[row["rule"]], row["kept_id"]) for row in removed}
    dropped = collections.defaultdict(dict)
    # A sentence in several shared passages is dropped once, naming the best document that keeps one of them.
    for row in _sorted(spill.read("drops", group, DROPS), "id", "position", "kept_side", "kept_id").to_pylist():
        dropped[row["id"]].setdefault(row["position"], row["kept_id"])
    for index in tasks.groups[group]:
        rows = []
        for row in files.read_parquet(paths[index]).to_pylist():
            kept, samples = _apply(row, removals.get(row["id"]), dropped.get(row["id"], {}), fraction)
            rows += [kept] if kept else []
            yield from samples
        out = files.join(output, file_name("sentences", index, len(paths)))
        files.write_parquet_atomically(out, documents.table_from_rows(rows, SENTENCES_SCHEMA))
        progress.advance()
