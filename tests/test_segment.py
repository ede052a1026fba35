"""Tests for the segment stage (pipelines.segment) on tiny corpus folders written in tmp_path."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines import corpus, segment
from pipelines.contracts.documents import DOCUMENT_SCHEMA, file_index, file_name, table_from_rows
from pipelines.runtime import files

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _corpus(folder: Path, texts: dict[str, str], num_files: int = 1, presegmented: bool = False) -> Path:
    """Writes a finished corpus stage output holding ``texts`` (id → text)."""
    rows: list[list[dict]] = [[] for _ in range(num_files)]
    for doc_id, text in texts.items():
        meta = json.dumps({"source": doc_id})
        row = {"id": doc_id, "text": text, "presegmented": presegmented, "meta": meta}
        rows[file_index(doc_id, num_files)].append(row)
    for i, file_rows in enumerate(rows):
        path = str(folder / file_name("documents", i, num_files))
        files.write_parquet_atomically(path, table_from_rows(file_rows, DOCUMENT_SCHEMA))
    files.write_json_atomically(str(folder / "stats.json"), {})
    return folder


def _run(source: Path, out: Path, *flags: str, beam: list[str] = IN_MEMORY) -> dict:
    params = str(out.parent / "none.yaml")  # so a params.yaml in the working directory cannot change the test
    return segment.run(["--input", str(source), "--output", str(out), "--params", params, *flags, *beam])


def _sentences(out: Path) -> dict[str, list[str]]:
    tables = [pq.read_table(p).to_pylist() for p in sorted(out.glob("sentences-*.parquet"))]
    return {row["id"]: row["sentences"] for table in tables for row in table}


def test_segments_raw_text_then_normalises(tmp_path: Path):
    texts = {
        "en": "Dr. Smith paid $3.50 for it. He left at 5 p.m. on Monday.\n\nÇa va? Très BIEN!",
        "zh": "你好。我很好！你呢？",
        "quotes": "He said ``hi'' to me.",
    }
    stats = _run(_corpus(tmp_path / "c", texts), tmp_path / "s")
    assert _sentences(tmp_path / "s") == {
        "en": ["dr. smith paid $3.50 for it.", "he left at 5 p.m. on monday.", "ca va?", "tres bien!"],
        "zh": ["你好。", "我很好!", "你呢?"],  # split at full-width ！？, which NFKD then folds to ! ?
        "quotes": ['he said "hi" to me.'],
    }
    assert stats["counters"]["sentences"] == 8 and stats["counters"]["documents"] == 3


def test_normalisation_switches(tmp_path: Path):
    _run(_corpus(tmp_path / "c", {"d": "Très BIEN."}), tmp_path / "s", "--lower_case", "false")
    assert _sentences(tmp_path / "s") == {"d": ["Tres BIEN."]}
    _run(tmp_path / "c", tmp_path / "s", "--strip_accents", "false")
    assert _sentences(tmp_path / "s") == {"d": ["très bien."]}


def test_presegmented_lines_are_kept_and_long_ones_cut(tmp_path: Path):
    texts = {"doc": "One line. Not split.\nseven words are far too many here"}
    stats = _run(_corpus(tmp_path / "c", texts, presegmented=True), tmp_path / "s", "--max_sentence_words", "3")
    assert _sentences(tmp_path / "s") == {
        "doc": ["one line. not", "split.", "seven words are", "far too many", "here"],
    }
    assert stats["counters"]["long_sentences_split"] == 2


def test_empty_documents_and_sentences_are_dropped_and_counted(tmp_path: Path):
    accents = "\u0301\u0301"  # combining marks alone: nothing is left once accents are stripped
    texts = {"empty": accents, "half": f"Kept line.\n{accents}"}
    stats = _run(_corpus(tmp_path / "c", texts, presegmented=True), tmp_path / "s")
    assert _sentences(tmp_path / "s") == {"half": ["kept line."]}
    counters = json.loads((tmp_path / "s" / "stats.json").read_text())["counters"]
    assert counters == stats["counters"]
    assert (counters["documents"], counters["empty_documents"], counters["empty_sentences"]) == (2, 1, 2)


def test_keeps_the_file_of_each_document(tmp_path: Path):
    texts = {f"doc{i}": f"Sentence number {i}." for i in range(12)}
    _run(_corpus(tmp_path / "c", texts, num_files=3), tmp_path / "s")
    for i in range(3):
        documents = pq.read_table(tmp_path / "c" / file_name("documents", i, 3)).column("id").to_pylist()
        sentences = pq.read_table(tmp_path / "s" / file_name("sentences", i, 3)).column("id").to_pylist()
        assert sentences == documents and documents


def test_five_megabyte_line_without_punctuation_end_to_end(tmp_path: Path):
    (tmp_path / "huge.txt").write_text("lorem ipsum dolor sit amet " * 200_000)
    corpus.run(["--inputs", str(tmp_path / "huge.txt"), "--output", str(tmp_path / "c"), *IN_MEMORY])
    stats = _run(tmp_path / "c", tmp_path / "s")
    [sentences] = _sentences(tmp_path / "s").values()
    assert len(sentences) == 5000 and all(len(s.split()) == 200 for s in sentences)
    assert stats["counters"]["long_sentences_split"] == 1


def test_multiprocessing_runner_writes_the_same_bytes(tmp_path: Path):
    source = _corpus(tmp_path / "c", {f"d{i}": f"Text {i}. More text, Mr. X." for i in range(20)}, num_files=2)
    _run(source, tmp_path / "one")
    _run(source, tmp_path / "two", beam=["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    one = {p.name: p.read_bytes() for p in (tmp_path / "one").iterdir()}
    assert one == {p.name: p.read_bytes() for p in (tmp_path / "two").iterdir()}
    assert sorted(one) == ["sentences-00000-of-00002.parquet", "sentences-00001-of-00002.parquet", "stats.json"]


def test_unfinished_or_incomplete_corpus_fails_before_the_pipeline(tmp_path: Path):
    source = _corpus(tmp_path / "c", {"a": "x.", "b": "y.", "c": "z."}, num_files=2)
    (source / "stats.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"no stats\.json"):
        _run(source, tmp_path / "s")
    (source / "stats.json").write_text("{}")
    (source / file_name("documents", 1, 2)).unlink()
    with pytest.raises(ValueError, match="not one complete set of 2 files"):
        _run(source, tmp_path / "s")


def test_unreadable_document_file_fails_naming_it_and_leaves_no_output(tmp_path: Path):
    source = _corpus(tmp_path / "c", {"a": "Fine."}, num_files=1)
    (source / file_name("documents", 0, 1)).write_bytes(b"not parquet")
    out = tmp_path / "s"
    out.mkdir()
    (out / "sentences-00000-of-00001.parquet").write_bytes(b"stale")
    with pytest.raises(Exception, match=r"documents-00000-of-00001\.parquet"):
        _run(source, out)
    assert list(out.iterdir()) == []


def test_a_corpus_that_gives_no_sentences_fails_and_leaves_no_output(tmp_path: Path):
    accents = "\u0301\u0301"  # combining marks alone: nothing is left once accents are stripped
    source = _corpus(tmp_path / "c", {"a": accents, "b": f"{accents}\n{accents}"}, presegmented=True)
    with pytest.raises(ValueError, match=re.escape(f"{source}: no sentences")):
        _run(source, tmp_path / "s")
    assert list((tmp_path / "s").iterdir()) == []
