"""The tasks stage's steps: passages and questions through ``spill`` files, each split written as a stream.

Grouping passages by text, then by class, then every example of a split in Beam kept every labelled passage
in the local runner's memory (2.2 GB at 0.3 GB of text, ``bench/results/scale.md``). Instead:

1. ``spill_candidates`` (per group of input files): each labelled document's passage, and each docstring's
   return question, keyed by the 128-bit key of its text (``near_duplicates.sentence_key``), by slice of the key;
2. ``keep_first`` (per slice range, a slice at a time): the smallest id of each text (equal texts in two splits
   would leak test passages into training), each survivor under its file order key, ``stable_hash64(seed, task,
   id)``, by split and by range of that key; yields the survivors' class counts;
3. ``judge_classes`` (once): the class counts → the classes of the task (``top_classes``);
4. ``write_split`` (per task and split): the split's survivors, a range of order keys at a time, sorted by
   (order key, id) and appended to the file: the rows, and the bytes, the stage wrote when it grouped in memory.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.algorithms.hashes import stable_hash64
from pipelines.algorithms.near_duplicates import sentence_key
from pipelines.algorithms.splits import SPLITS
from pipelines.runtime import files
from pipelines.runtime.spill import Spill
from pipelines.runtime.stage import Counters

__all__ = ["judge_classes", "keep_first", "spill_candidates", "write_split"]

# A candidate: its text's key, its document id, its row (JSON, without the split), its class ("" for a question)
# and its split's index in SPLITS. A survivor: its order key in place of the text's.
CANDIDATES = pa.schema([("hi", pa.uint64()), ("lo", pa.uint64()), ("id", pa.string()), ("row", pa.string()),
                        ("label", pa.string()), ("split", pa.int8())])  # fmt: skip
SURVIVORS = pa.schema([("order", pa.uint64()), ("id", pa.string()), ("row", pa.string()), ("label", pa.string())])
CLASSES = pa.schema([("label", pa.string())])
KINDS = ("passages", "questions")  # the classification task's candidates, the span task's


def spill_candidates(group: int, groups: list[range], read: Callable[[int], Iterator[tuple[str, str, dict, str,
                     str]]], spill: Spill, slices: int) -> Iterator[int]:  # fmt: skip
    """Input files ``groups[group]`` → their candidates, by kind and slice of their text's key. ``read(index)``
    yields (kind, text, row, label, split) for input file ``index``."""
    with spill.writer(KINDS[0], group, CANDIDATES, slices) as add_passages:
        with spill.writer(KINDS[1], group, CANDIDATES, slices) as add_questions:
            for index in groups[group]:
                found: dict[str, list] = {kind: [] for kind in KINDS}
                for kind, text, row, label, split in read(index):
                    key = sentence_key(text)
                    found[kind].append((key, row["id"], json.dumps(row, sort_keys=True, ensure_ascii=False), label,
                                        SPLITS.index(split)))  # fmt: skip
                for kind, add in zip(KINDS, (add_passages, add_questions), strict=True):
                    table = _candidates(found[kind])
                    add(table, (table.column("lo").to_numpy() % np.uint64(slices)).astype(np.int64))
    yield group


def _candidates(found: list[tuple]) -> pa.Table:
    keys, ids, rows, labels, splits = (list(c) for c in zip(*found, strict=True)) if found else ([],) * 5
    pairs = np.frombuffer(b"".join(keys), dtype="<u8").reshape(-1, 2)
    columns = [pairs[:, 0].copy(), pairs[:, 1].copy(), ids, rows, labels, np.array(splits, dtype=np.int8)]
    return pa.table(columns, schema=CANDIDATES)


def _order_part(order: np.ndarray, split: np.ndarray, parts: int) -> np.ndarray:
    """Part split·parts + r, r the range of the order key (monotone in it, so parts in order are sorted order)."""
    ranged = np.minimum((order.astype(np.float64) * (parts / 2.0**64)).astype(np.int64), parts - 1)
    return split.astype(np.int64) * parts + ranged


def keep_first(task: int, ranges: list[range], spill: Spill, names: tuple[str, str], seed: int, parts: int,
               counters: Counters) -> Iterator[dict[str, int]]:  # fmt: skip
    """Slice range ``task``: per kind, the smallest id of each text → survivors by split and order-key range
    (``names``: the classification task's name, the span task's); yields the surviving passages per class."""
    classes: Counter = Counter()
    for kind, name, counter in zip(KINDS, names, ("duplicate_passages", "duplicate_contexts"), strict=True):
        with spill.parts(kind, CANDIDATES) as read, spill.writer(f"{kind}-kept", task, SURVIVORS, 3 * parts) as add:
            for part in ranges[task]:
                table = read(part)
                table = table.take(pc.sort_indices(table, [(c, "ascending") for c in ("hi", "lo", "id")]))
                hi, lo = table.column("hi").to_numpy(), table.column("lo").to_numpy()
                first = np.flatnonzero(np.r_[True, (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])]) if len(hi) else []
                counters.inc(counter, table.num_rows - len(first))
                kept = table.take(pa.array(first, pa.int64()))
                ids = kept.column("id").to_pylist()
                order = np.array([stable_hash64(seed, name, doc_id) for doc_id in ids], dtype=np.uint64)
                survivors = pa.table([order, ids, kept.column("row"), kept.column("label")], schema=SURVIVORS)
                add(survivors, _order_part(order, kept.column("split").to_numpy(), parts))
                if kind == KINDS[0]:
                    classes.update(kept.column("label").to_pylist())
    yield dict(classes)


def judge_classes(counts: dict[str, int], spill: Spill, choose: Callable[[dict[str, int]], list[str]],
                  min_documents: int, counters: Counters) -> list[str]:  # fmt: skip
    """The surviving passages' class counts → the task's classes (``choose``), recorded; counts the documents of
    the classes too small or not among them."""
    labels = choose(counts)
    for label, n in counts.items():
        if label not in labels:
            counters.inc("small_class_documents" if n < min_documents else "other_class_documents", n)
    spill.put("classes", 0, pa.table({"label": labels}, schema=CLASSES))
    return labels


def write_split(element: tuple[int, str, str], spill: Spill, output: str, parts: int,
                counters: Counters) -> Iterator[str]:  # fmt: skip
    """(kind index, task, split) → ``<task>/<split>.jsonl`` (classification: rows of the task's classes) or
    ``<task>/<split>.json`` (span: SQuAD's layout), rows in (order key, id) order, a range at a time."""
    kind, task, split = element
    labels = spill.get("classes", 0, CLASSES).column("label") if kind == 0 else None
    path = files.join(output, task, f"{split}.jsonl" if kind == 0 else f"{split}.json")
    with files.open_atomically(path) as out, spill.parts(f"{KINDS[kind]}-kept", SURVIVORS) as read:
        out.write(b'{"data": [' if kind else b"")
        written = 0
        for r in range(parts):
            table = read(SPLITS.index(split) * parts + r)
            if labels is not None:
                table = table.filter(pc.is_in(table.column("label"), value_set=labels))
            table = table.take(pc.sort_indices(table, [("order", "ascending"), ("id", "ascending")]))
            rows = table.column("row").to_pylist()
            if kind == 0:
                counters.inc("classification_examples", len(rows))
                out.write("".join(row + "\n" for row in rows).encode("utf-8"))
            else:
                articles = [_article(json.loads(row)) for row in rows]
                out.write(((", " if written and articles else "") + ", ".join(articles)).encode("utf-8"))
            written += len(rows)
        out.write(b'], "version": "1.1"}' if kind else b"")
    yield path


def _article(question: dict) -> str:
    """SQuAD's article of one paragraph for one docstring's question, as ``json.dumps`` of the whole file has it."""
    qas = [{"id": question["id"], "question": question["question"], "answers": question["answers"]}]
    article = {"title": question["title"], "paragraphs": [{"context": question["context"], "qas": qas}]}
    return json.dumps(article, sort_keys=True, ensure_ascii=False)
