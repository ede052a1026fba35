"""Tests for the dedup stage (pipelines.dedup) on tiny segment-stage folders written in tmp_path."""

from __future__ import annotations

import collections
import json
import os
import random
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import dedup
from pipelines.algorithms.near_duplicates import estimated_jaccard
from pipelines.algorithms.splits import is_held_out
from pipelines.contracts.documents import SENTENCES_SCHEMA, file_index, file_name, table_from_rows
from pipelines.runtime import files, spill
from pipelines.runtime.options import input_mb
from pipelines.steps import dedup as dedup_steps

FRACTION = 0.5
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
TWO_WORKERS = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
NORMALIZER = {"lower_case": True, "strip_accents": True}
# A licence block repeated across books: short lines between long ones, as in Project Gutenberg's licence.
LICENCE = [
    "section 1.",
    "this ebook is for the use of anyone anywhere at no cost and with almost no restrictions whatsoever.",
    "you may copy it, give it away or re-use it under the terms of the license included with this ebook.",
    "1.e.1.",
]
SPEAKERS = ["romeo.", "juliet.", "nurse.", "alas!", "scene ii."]  # a play's short lines, repeated everywhere
QUOTE = "the quality of mercy is not strained, it droppeth as the gentle rain from heaven."


def _id(prefix: str, held_out: bool, file: int | None = None, num_files: int = 1) -> str:
    """The first id ``{prefix}{i}`` on the given side of the split (and in the given file)."""
    for i in range(10_000):
        doc_id = f"{prefix}{i:03d}"
        in_file = file is None or file_index(doc_id, num_files) == file
        if is_held_out(doc_id, FRACTION) == held_out and in_file:
            return doc_id
    raise AssertionError("no such id")


def _text(seed: str, sentences: int = 5, words: int = 20) -> list[str]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(3000)]
    return [" ".join(rng.choice(vocab) for _ in range(words)) + "." for _ in range(sentences)]


def _one_word_changed(sentences: list[str]) -> list[str]:
    return [sentences[0].replace(sentences[0].split()[3], "changed", 1), *sentences[1:]]


def _sentences_folder(folder: Path, docs: dict[str, list[str]], num_files: int = 3) -> Path:
    """Writes a finished segment stage output holding ``docs`` (id → sentences)."""
    rows: list[list[dict]] = [[] for _ in range(num_files)]
    for doc_id, sentences in docs.items():
        rows[file_index(doc_id, num_files)].append({"id": doc_id, "sentences": sentences, "meta": "{}"})
    for i, file_rows in enumerate(rows):
        path = str(folder / file_name("sentences", i, num_files))
        files.write_parquet_atomically(path, table_from_rows(file_rows, SENTENCES_SCHEMA))
    files.write_json_atomically(str(folder / "stats.json"), {"normalizer": NORMALIZER, "files": num_files})
    return folder


def _run(source: Path, out: Path, *flags: str, beam: list[str] = IN_MEMORY) -> dict:
    argv = ["--input", str(source), "--output", str(out), "--params", str(out.parent / "none.yaml")]
    return dedup.run([*argv, f"--held_out_fraction={FRACTION}", *flags, *beam])


def _kept(out: Path) -> dict[str, list[str]]:
    tables = [pq.read_table(p).to_pylist() for p in sorted(out.glob("sentences-*.parquet"))]
    return {row["id"]: row["sentences"] for table in tables for row in table}


# The cases, by role: train (t) or held out (h). Training ids get small numbers, held-out ones may be larger.
EXACT = [_id("exact-a", False), _id("exact-b", False), _id("exact-z", True)]
NEAR = [_id("near-a", False), _id("near-b", False)]
HELD_NEAR = [_id("held-a", False), _id("held-z", True)]
DISTINCT = _id("distinct", False)
REPEATS = [_id("rep-a", False), _id("rep-b", False), _id("rep-z", True)]
EMPTIED = _id("empty", False)
PLAYS = [_id("play-a", False), _id("play-b", False), _id("play-c", False), _id("play-z", True)]
LEAK = [_id("leak-a", False), _id("leak-z", True)]  # a held-out long sentence quoted in one training document
PAIR = [_id("pair-a", False), _id("pair-b", False)]  # a long sentence quoted in two training documents only


def _play(seed: str) -> list[str]:
    """A play: each speaker line repeated inside it, between lines of its own."""
    lines = _text(seed, 2 * len(SPEAKERS))
    return [s for pair in zip(SPEAKERS + SPEAKERS, lines, strict=True) for s in pair]


def _docs() -> dict[str, list[str]]:
    docs = {doc_id: _text("exact") for doc_id in EXACT}
    docs[NEAR[0]], docs[NEAR[1]] = _text("near"), _one_word_changed(_text("near"))
    docs[HELD_NEAR[0]], docs[HELD_NEAR[1]] = _one_word_changed(_text("held")), _text("held")
    docs[DISTINCT] = _text("distinct")
    docs[REPEATS[0]] = [*_text("ra", 3)[:2], *LICENCE, _text("ra", 3)[2]]
    docs[REPEATS[1]] = [*LICENCE, *_text("rb", 3), LICENCE[1]]
    docs[REPEATS[2]] = [_text("rz", 1)[0], *LICENCE, *_text("rz2", 3)]
    docs[EMPTIED] = LICENCE
    docs |= {doc_id: _play(doc_id) for doc_id in PLAYS}
    docs[LEAK[0]], docs[LEAK[1]] = [*_text("la", 3), QUOTE], [QUOTE, *_text("lz", 3)]
    docs[PAIR[0]], docs[PAIR[1]] = [QUOTE.upper(), *_text("pa", 3)], [*_text("pb", 3), QUOTE.upper()]
    return docs


@pytest.fixture(scope="module")
def deduped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict[str, list[str]]]:
    root = tmp_path_factory.mktemp("dedup")
    stats = _run(_sentences_folder(root / "sentences", _docs()), root / "deduped")
    return root / "deduped", stats, _kept(root / "deduped")


def test_exact_duplicates_keep_the_held_out_copy(deduped):
    _, stats, kept = deduped
    assert EXACT[0] < EXACT[1] < EXACT[2]
    assert EXACT[2] in kept and EXACT[0] not in kept and EXACT[1] not in kept
    assert stats["counters"]["exact_duplicate_documents"] == 2


def test_near_duplicates_go_and_held_out_documents_win_over_smaller_training_ids(deduped):
    _, stats, kept = deduped
    assert NEAR[0] in kept and NEAR[1] not in kept and DISTINCT in kept
    assert HELD_NEAR[0] < HELD_NEAR[1] and HELD_NEAR[1] in kept and HELD_NEAR[0] not in kept
    assert stats["counters"]["near_duplicate_documents"] == 2


def test_boilerplate_shared_by_documents_stays_in_the_best_one_only_held_out_first(deduped):
    _, stats, kept = deduped
    docs = _docs()
    assert kept[REPEATS[2]] == docs[REPEATS[2]]  # held out: keeps the licence though its id is the largest
    assert kept[REPEATS[0]] == _text("ra", 3)  # its short lines go with the long ones around them
    assert kept[REPEATS[1]] == _text("rb", 3)  # both copies of the document's own repeat go
    assert EMPTIED not in kept  # all its sentences occur in a better document
    counters = stats["counters"]
    assert counters["shared_passage_sentences"] == 4 + 5 + 4 + 1 and counters["emptied_documents"] == 1
    assert counters["shared_passage_chars"] == 3 * sum(map(len, LICENCE)) + len(LICENCE[1]) + len(QUOTE)


def test_speaker_lines_stay_inside_a_play_and_across_plays(deduped):
    _, _, kept = deduped
    for doc_id in PLAYS:  # short lines, each twice in its play and in four plays, one held out
        assert kept[doc_id] == _play(doc_id)


def test_a_held_out_long_sentence_leaves_training_documents_and_a_pair_of_quotes_stays(deduped):
    _, _, kept = deduped
    assert kept[LEAK[1]] == [QUOTE, *_text("lz", 3)] and kept[LEAK[0]] == _text("la", 3)
    assert kept[PAIR[0]][0] == kept[PAIR[1]][-1] == QUOTE.upper()  # two documents: fewer than passage_documents


def test_stats_count_everything_and_carry_the_normalizer(deduped):
    out, stats, kept = deduped
    assert json.loads((out / "stats.json").read_text()) == stats
    assert stats["normalizer"] == NORMALIZER and stats["held_out_fraction"] == FRACTION and stats["files"] == 3
    counters, docs = stats["counters"], _docs()
    assert counters["documents"] == len(docs) and counters["sentences"] == sum(map(len, docs.values()))
    assert counters["documents_kept"] == len(kept) == len(docs) - 2 - 2 - 1
    assert counters["sentences_kept"] == sum(map(len, kept.values()))
    assert counters["held_out_documents_kept"] == sum(is_held_out(i, FRACTION) for i in kept)
    assert stats["config"]["jaccard_threshold"] == 0.8 and stats["config"]["num_perm"] == 128


def test_documents_stay_in_their_file_sorted_by_id(deduped):
    out, _, _ = deduped
    expected = ["removed.jsonl", *(file_name("sentences", i, 3) for i in range(3)), "stats.json"]
    assert sorted(p.name for p in out.iterdir()) == expected
    for i in range(3):
        ids = pq.read_table(out / file_name("sentences", i, 3)).column("id").to_pylist()
        assert ids == sorted(ids) and all(file_index(doc_id, 3) == i for doc_id in ids)


def test_removed_sample_names_each_removal_and_its_survivor(deduped):
    out, _, _ = deduped
    lines = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    by_rule = {rule: [(x["id"], x["kept_id"]) for x in lines if x["rule"] == rule] for rule in dedup.RULES}
    assert by_rule["exact_duplicate"] == [(EXACT[0], EXACT[2]), (EXACT[1], EXACT[2])]
    assert by_rule["near_duplicate"] == sorted([(NEAR[1], NEAR[0]), (HELD_NEAR[0], HELD_NEAR[1])])
    licence = [(doc_id, REPEATS[2]) for doc_id in (REPEATS[0], REPEATS[1], EMPTIED) for _ in LICENCE]
    assert sorted(by_rule["shared_passage"]) == sorted([*licence, (REPEATS[1], REPEATS[2]), (LEAK[0], LEAK[1])])
    exact = next(x for x in lines if x["rule"] == "exact_duplicate")
    assert exact["text"] == " ".join(_text("exact"))[:300]
    assert {x["text"] for x in lines if x["rule"] == "shared_passage"} == {*LICENCE, QUOTE}


def test_the_sample_keeps_sample_removed_items_per_rule(tmp_path: Path):
    source = _sentences_folder(tmp_path / "s", _docs())
    _run(source, tmp_path / "d", "--sample_removed=1")
    lines = [json.loads(line) for line in (tmp_path / "d" / "removed.jsonl").read_text().splitlines()]
    assert sorted(x["rule"] for x in lines) == sorted(dedup.RULES)


def test_a_file_left_without_documents_is_written_empty(tmp_path: Path):
    best = _id("best", True, file=0, num_files=2)
    copies = [_id(f"copy{k}-", False, file=1, num_files=2) for k in range(2)]
    source = _sentences_folder(tmp_path / "s", {i: _text("same") for i in [best, *copies]}, num_files=2)
    stats = _run(source, tmp_path / "d")
    assert pq.read_table(tmp_path / "d" / file_name("sentences", 1, 2)).num_rows == 0
    assert _kept(tmp_path / "d") == {best: _text("same")} and stats["counters"]["exact_duplicate_documents"] == 2


def test_two_runs_and_one_or_two_workers_write_the_same_bytes(tmp_path: Path):
    source = _sentences_folder(tmp_path / "s", _docs())
    _run(source, tmp_path / "one")
    _run(source, tmp_path / "again")
    _run(source, tmp_path / "two", beam=TWO_WORKERS)
    one = {p.name: p.read_bytes() for p in (tmp_path / "one").iterdir()}
    assert one == {p.name: p.read_bytes() for p in (tmp_path / "again").iterdir()}
    assert one == {p.name: p.read_bytes() for p in (tmp_path / "two").iterdir()}


def test_any_number_of_slices_writes_the_same_files_and_leaves_no_spill(tmp_path: Path):
    source = _sentences_folder(tmp_path / "s", _docs())
    one = _run(source, tmp_path / "one")  # the tiny input makes one slice
    many = _run(source, tmp_path / "many", "--slice_mb=0.0001", beam=TWO_WORKERS)  # dozens of slices
    assert one["counters"] == many["counters"] and many["config"]["slice_mb"] == 0.0001
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "many").iterdir())  # no .tmp-spill left behind
    assert not [n for n in names if n.startswith(".")]
    for name in names:
        if name != "stats.json":  # which records slice_mb
            assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes(), name


def _spill_opens(monkeypatch: pytest.MonkeyPatch) -> collections.Counter:
    """Counts each spill file's openings for reading in this process (the in-memory runner's)."""
    opened: collections.Counter = collections.Counter()
    real = spill.FileSystems.open

    def counting(path: str, *args, **kwargs):
        opened[path] += dedup.SPILL in path
        return real(path, *args, **kwargs)

    monkeypatch.setattr(spill.FileSystems, "open", staticmethod(counting))
    return opened


def test_each_spill_file_is_opened_once_per_reading_task_whatever_the_slices(tmp_path: Path, monkeypatch):
    # Each step used to write a spill file per input file or slice and read a slice's records from every one of
    # them: input files × slices openings (tens of millions of GETs on a bucket at 7 GB).
    source = _sentences_folder(tmp_path / "s", _docs(), num_files=12)
    opened, seen = _spill_opens(monkeypatch), {}
    for slice_mb in (0.001, 0.0001):
        opened.clear()
        _run(source, tmp_path / f"d{slice_mb}", f"--slice_mb={slice_mb}")
        seen[slice_mb] = sorted(opened.values())
    tasks = dedup.plan_tasks(12, input_mb(str(source), "sentences-*.parquet"), dedup.DedupConfig(slice_mb=0.0001))
    assert tasks.slices > 10 * dedup.MIN_TASKS and len(tasks.ranges) == len(tasks.groups) == dedup.MIN_TASKS
    assert seen[0.001] == seen[0.0001]  # ten times the slices, not one opening more
    assert max(seen[0.0001]) <= dedup.MIN_TASKS  # a spill file is opened by each task of the step reading it


def test_any_number_of_tasks_writes_the_same_files(tmp_path: Path):
    source = _sentences_folder(tmp_path / "s", _docs(), num_files=12)
    default = _run(source, tmp_path / "eight", "--slice_mb=0.0005")  # 8 file groups and slice ranges
    each = _run(source, tmp_path / "twelve", "--slice_mb=0.0005", "--task_mb=0.000001")  # a task per file
    assert default["counters"] == each["counters"]
    for path in sorted((tmp_path / "eight").iterdir()):
        if path.name != "stats.json":  # which records task_mb
            assert path.read_bytes() == (tmp_path / "twelve" / path.name).read_bytes(), path.name


def test_near_duplicate_resolution_holds_numbers_not_key_tuples_for_its_pairs(tmp_path: Path):
    # The one worker that resolves every bucket's pairs held a dict of sets of (side, id) tuples: ~600 bytes of
    # Python objects a pair, 0.6 GB per million pairs. Numbered documents take ~110.
    count = 100_000
    rng = np.random.default_rng(3)
    worse = rng.integers(1, 2 * count, count)
    better = (worse * rng.random(count)).astype(np.int64)
    ids = np.array([f"wiki/article-{i:07d}" for i in range(2 * count)], dtype=object)
    side = (np.arange(2 * count) % 5 == 0).astype(np.int8)
    pairs = pa.table([side[worse], ids[worse], (worse % 7).astype(np.int32), side[better], ids[better]],
                     schema=dedup_steps.PAIRS)  # fmt: skip
    store = spill.Spill(str(tmp_path / "spill"))
    store.put("pairs", 0, pairs)
    tracemalloc.start()
    try:
        list(dedup_steps.resolve_near(0, store))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak / count < 250, f"{peak / count:.0f} bytes of Python objects a pair"
    near = store.get("near", 0, dedup_steps.REMOVALS).to_pylist()
    # The rule on the keys themselves: in (side, id) order, a document goes iff a better one it is like stays.
    betters = collections.defaultdict(set)
    for w, b in zip(worse.tolist(), better.tolist(), strict=True):
        betters[(side[w], ids[w])].add((side[b], ids[b]))
    expected = {}
    for key in sorted(betters):
        survivors = [b for b in betters[key] if b not in expected]
        if survivors:
            expected[key] = min(survivors)
    assert [(r["id"], r["kept_side"], r["kept_id"], r["file"]) for r in near] == [
        (key[1], *expected[key], int(key[1][-7:]) % 7) for key in sorted(expected)
    ]


def test_a_failed_run_leaves_no_spill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    source = _sentences_folder(tmp_path / "s", _docs())

    def fail(*args, **kwargs):
        raise RuntimeError("a step failed")

    monkeypatch.setattr(dedup_steps, "drop_shared_passages", fail)  # after three steps have spilled their records
    with pytest.raises(RuntimeError, match="a step failed"):
        _run(source, tmp_path / "d")
    assert list((tmp_path / "d").iterdir()) == []


def test_an_unfinished_input_fails_naming_it_and_leaves_no_output(tmp_path: Path):
    source = _sentences_folder(tmp_path / "s", _docs())
    (source / "stats.json").unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(f"{source}: no stats.json")):
        _run(source, tmp_path / "d")
    files.write_json_atomically(str(source / "stats.json"), {})
    with pytest.raises(ValueError, match="no normalizer record"):
        _run(source, tmp_path / "d")


def test_bands_must_divide_num_perm(tmp_path: Path):
    source = _sentences_folder(tmp_path / "s", _docs())
    with pytest.raises(ValueError, match="not a multiple of bands=16"):
        _run(source, tmp_path / "d", "--num_perm=100")


def _words_doc(words: list[str]) -> list[str]:
    return [" ".join(words[i : i + 20]) + "." for i in range(0, len(words), 20)]


def _chain() -> list[list[str]]:
    """Three documents, B like A, C like B but unlike A (two disjoint 26-word edits of 400 words)."""
    rng = random.Random("chain1")
    a = [f"w{rng.randrange(100_000)}" for _ in range(400)]
    b = a[:50] + [f"b{i}" for i in range(26)] + a[76:]
    c = b[:250] + [f"c{i}" for i in range(26)] + b[276:]
    return [_words_doc(words) for words in (a, b, c)]


CHAIN = [_id("chain-a", False), _id("chain-b", False), _id("chain-c", False)]
# W held out; X like W; Y an exact copy of X: X goes for W, and Y, whose best copy X goes, follows X to W.
FOLLOW = [_id("follow-w", True), _id("follow-x", False), _id("follow-y", False)]
BLANK = [_id("blank-a", False), _id("blank-b", False), _id("blank-c", False)]  # no words at all


def _survivor_docs() -> dict[str, list[str]]:
    docs = dict(zip(CHAIN, _chain(), strict=True))
    docs[FOLLOW[0]], docs[FOLLOW[1]], docs[FOLLOW[2]] = _text("follow"), *[_one_word_changed(_text("follow"))] * 2
    docs.update(zip(BLANK, [[""], ["  "], ["", ""]], strict=True))
    return docs


def test_a_near_duplicate_goes_only_for_a_survivor_whatever_the_slices(tmp_path: Path):
    hasher = dedup.DedupConfig().hasher
    a, b, c = (hasher.signature(doc) for doc in _chain())
    assert min(estimated_jaccard(a, b), estimated_jaccard(b, c)) >= 0.83 > 0.75 > estimated_jaccard(a, c)
    assert set(hasher.band_keys(a)) & set(hasher.band_keys(b)) and set(hasher.band_keys(b)) & set(hasher.band_keys(c))
    source = _sentences_folder(tmp_path / "s", _survivor_docs())
    stats = _run(source, tmp_path / "one")
    kept = _kept(tmp_path / "one")
    assert sorted(kept) == sorted([CHAIN[0], CHAIN[2], FOLLOW[0], *BLANK])  # C is unlike A, the only survivor near
    lines = [json.loads(line) for line in (tmp_path / "one" / "removed.jsonl").read_text().splitlines()]
    assert [(x["rule"], x["id"], x["kept_id"]) for x in lines] == [
        ("near_duplicate", CHAIN[1], CHAIN[0]), ("near_duplicate", FOLLOW[1], FOLLOW[0]),
        ("near_duplicate", FOLLOW[2], FOLLOW[0]),
    ]  # fmt: skip
    assert stats["counters"]["exact_duplicate_documents"] == 0 and stats["counters"]["near_duplicate_documents"] == 3
    _run(source, tmp_path / "many", "--slice_mb=0.0001")  # dozens of slices: the pairs meet in one resolution
    for name in ["removed.jsonl", *(file_name("sentences", i, 3) for i in range(3))]:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes(), name


@pytest.mark.parametrize("files_of_copies", [(0, 1), (1, 1)])
def test_a_repeated_id_fails_naming_its_files(tmp_path: Path, files_of_copies: tuple[int, int]):
    docs = _docs()
    folder = _sentences_folder(tmp_path / "s", docs, num_files=2)
    twice = sorted(docs)[3]
    paths = [folder / file_name("sentences", i, 2) for i in range(2)]
    tables = [pq.read_table(path).to_pylist() for path in paths]
    tables = [[row for row in rows if row["id"] != twice] for rows in tables]
    for i, text in zip(files_of_copies, ("one text", "another text"), strict=True):
        tables[i].append({"id": twice, "sentences": [text], "meta": "{}"})
    for path, rows in zip(paths, tables, strict=True):
        files.write_parquet_atomically(str(path), table_from_rows(rows, SENTENCES_SCHEMA))
    named = ", ".join(str(paths[i]) for i in sorted(set(files_of_copies)))
    with pytest.raises(ValueError, match=re.escape(f"{named}: document id {twice!r} occurs 2 times")):
        _run(source=folder, out=tmp_path / "d", beam=IN_MEMORY)
    assert list((tmp_path / "d").iterdir()) == []


PROSE = Path(__file__).parent / "fixtures" / "prose"  # see its README.md: a play, and a licence in four books


def test_real_prose_keeps_a_plays_speaker_lines_and_drops_the_licence_repeated_across_books(tmp_path: Path):
    from pipelines import corpus, segment

    no_params = ["--params", os.devnull]
    corpus.run([*no_params, "--inputs", str(PROSE / "**" / "*.txt"), "--output", str(tmp_path / "c"), *IN_MEMORY])
    segment.run([*no_params, "--input", str(tmp_path / "c"), "--output", str(tmp_path / "s"), *IN_MEMORY])
    _run(tmp_path / "s", tmp_path / "d")
    before, after = _kept(tmp_path / "s"), _kept(tmp_path / "d")
    speakers = {"romeo.", "juliet.", "nurse.", "benvolio.", "capulet.", "ay me.", "alas, alas!"}
    play = [doc_id for doc_id in before if "romeo_and_juliet" in doc_id]
    lines = {doc_id: collections.Counter(s for s in before[doc_id] if s in speakers) for doc_id in play}
    assert sum(counts["nurse."] > 0 for counts in lines.values()) >= 3 and max(lines[d]["nurse."] for d in play) > 2
    for doc_id in play:  # repeated inside each scene and across scenes, and all kept
        assert collections.Counter(s for s in after[doc_id] if s in speakers) == lines[doc_id], doc_id
    where = collections.defaultdict(set)
    for doc_id, sentences in before.items():
        for sentence in sentences:
            if "gutenberg" in sentence and len(sentence.split()) >= 8:
                where[sentence].add(doc_id)
    licence = [sentence for sentence, docs in where.items() if len(docs) >= 4]
    assert len(licence) > 20  # the licence footer, byte-identical in the four books
    for sentence in licence:
        assert sum(sentence in sentences for sentences in after.values()) == 1, sentence
