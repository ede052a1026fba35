"""Tests for the dedup stage (pipelines.dedup) on tiny segment-stage folders written in tmp_path."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines import dedup, dedup_steps, files
from pipelines.documents import SENTENCES_SCHEMA, file_index, file_name, table_from_rows
from pipelines.splits import is_held_out

FRACTION = 0.5
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
TWO_WORKERS = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
NORMALIZER = {"lower_case": True, "strip_accents": True}
BOILERPLATE = "copyright the authors, all rights reserved."


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


def _docs() -> dict[str, list[str]]:
    docs = {doc_id: _text("exact") for doc_id in EXACT}
    docs[NEAR[0]], docs[NEAR[1]] = _text("near"), _one_word_changed(_text("near"))
    docs[HELD_NEAR[0]], docs[HELD_NEAR[1]] = _one_word_changed(_text("held")), _text("held")
    docs[DISTINCT] = _text("distinct")
    docs[REPEATS[0]] = [*_text("ra", 3)[:2], BOILERPLATE, _text("ra", 3)[2]]
    docs[REPEATS[1]] = [BOILERPLATE, *_text("rb", 2), BOILERPLATE]
    docs[REPEATS[2]] = [_text("rz", 1)[0], BOILERPLATE, *_text("rz2", 2)]
    docs[EMPTIED] = [BOILERPLATE, _text("distinct")[1]]
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


def test_repeated_sentences_stay_at_their_first_occurrence_held_out_first(deduped):
    _, stats, kept = deduped
    docs = _docs()
    assert kept[REPEATS[2]] == docs[REPEATS[2]]  # held out: keeps the boilerplate though its id is the largest
    assert kept[REPEATS[0]] == [s for s in docs[REPEATS[0]] if s != BOILERPLATE]
    assert kept[REPEATS[1]] == docs[REPEATS[1]][1:3]  # both copies of the document's own repeat go
    assert EMPTIED not in kept  # all its sentences occur in better documents
    counters = stats["counters"]
    assert counters["repeated_sentences"] == 5 and counters["emptied_documents"] == 1
    assert counters["repeated_sentence_chars"] == 4 * len(BOILERPLATE) + len(docs[EMPTIED][1])


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
    assert sorted(by_rule["repeated_sentence"]) == sorted(
        [(REPEATS[0], REPEATS[2]), (REPEATS[1], REPEATS[2]), (REPEATS[1], REPEATS[2]), (EMPTIED, REPEATS[2]),
         (EMPTIED, DISTINCT)]
    )  # fmt: skip
    exact = next(x for x in lines if x["rule"] == "exact_duplicate")
    assert exact["text"] == " ".join(_text("exact"))[:300]
    assert {x["text"] for x in lines if x["rule"] == "repeated_sentence"} == {BOILERPLATE, _text("distinct")[1]}


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


def test_a_failed_run_leaves_no_spill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    source = _sentences_folder(tmp_path / "s", _docs())

    def fail(*args, **kwargs):
        raise RuntimeError("a step failed")

    monkeypatch.setattr(dedup_steps, "drop_repeats", fail)  # after three steps have spilled their records
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
