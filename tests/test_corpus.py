"""Tests for the corpus stage (pipelines.corpus, pipelines.readers.sources, pipelines.readers.pydocs) on tiny real
files."""

from __future__ import annotations

import bz2
import gzip
import importlib.metadata
import json
import platform
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import corpus
from pipelines.contracts import documents
from pipelines.readers import pydocs, sources

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _run(out: Path, *flags: str, beam: list[str] = IN_MEMORY) -> dict:
    # --params points nowhere so a params.yaml in the working directory cannot change the test.
    return corpus.run(["--output", str(out), "--params", str(out.parent / "none.yaml"), *flags, *beam])


def _documents(out: Path) -> dict[str, dict]:
    rows = [row for path in sorted(out.glob("documents-*.parquet")) for row in pq.read_table(path).to_pylist()]
    return {row["id"]: {**row, "meta": json.loads(row["meta"])} for row in rows}


def _file_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.txt").write_text("A plain text file.\n\nIts second paragraph.\n", encoding="utf-8")
    lines = [{"text": "first json"}, {"text": ""}, {"text": "third json", "x": 1}]
    jsonl = "\n".join(map(json.dumps, lines)) + "\n\n"
    (data / "sub" / "b.jsonl.gz").write_bytes(gzip.compress(jsonl.encode()))
    (data / "sub" / "c.json.bz2").write_bytes(bz2.compress(b'{"body": "ignored", "text": "bz2 doc"}\n'))
    pq.write_table(pa.table({"text": ["row zero", None, "row two"]}), data / "d.parquet")
    (data / "empty.txt").write_bytes(b"")
    return data


def test_reads_every_format_with_ids_relative_to_the_glob(mixed: Path, tmp_path: Path):
    stats = _run(tmp_path / "out", "--inputs", f"{mixed}/**")
    docs = _documents(tmp_path / "out")
    assert {i: d["text"] for i, d in docs.items()} == {
        "a.txt:0": "A plain text file.\n\nIts second paragraph.",
        "sub/b.jsonl.gz:0": "first json",
        "sub/b.jsonl.gz:2": "third json",
        "sub/c.json.bz2:0": "bz2 doc",
        "d.parquet:0": "row zero",
        "d.parquet:2": "row two",
    }
    assert docs["sub/b.jsonl.gz:2"]["meta"] == {"format": "jsonl", "line": 3, "source": "sub/b.jsonl.gz"}
    assert not any(d["presegmented"] for d in docs.values())
    counters = stats["counters"]
    assert (counters["input_files"], counters["empty_files"], counters["empty_documents"]) == (5, 1, 2)
    assert counters["documents"] == 6
    assert json.loads((tmp_path / "out" / "stats.json").read_text()) == stats


def test_bert_layout_gives_presegmented_documents(tmp_path: Path):
    text = "\n\nFirst sentence.\nSecond sentence.\n\n\n \nOther document.\n"
    (tmp_path / "wiki.txt.gz").write_bytes(gzip.compress(text.encode()))
    _run(tmp_path / "out", "--inputs", str(tmp_path / "wiki.txt.gz"), "--format", "bert")
    docs = _documents(tmp_path / "out")
    assert {i: d["text"] for i, d in docs.items()} == {
        "wiki.txt.gz:0": "First sentence.\nSecond sentence.",
        "wiki.txt.gz:1": "Other document.",
    }
    assert all(d["presegmented"] for d in docs.values())
    assert docs["wiki.txt.gz:1"]["meta"]["line"] == 8


def test_ids_and_bytes_do_not_change_when_the_folder_moves(mixed: Path, tmp_path: Path):
    moved = shutil.copytree(mixed, tmp_path / "elsewhere" / "renamed")
    _run(tmp_path / "one", "--inputs", f"{mixed}/**")
    _run(tmp_path / "two", "--inputs", str(moved))  # a folder works like folder/**
    one, two = _file_bytes(tmp_path / "one"), _file_bytes(tmp_path / "two")
    assert one.pop("stats.json") != two.pop("stats.json")  # it records the inputs as given
    assert one == two


def test_plain_paths_are_named_by_basename_and_clashes_fail(tmp_path: Path):
    for folder in ("x", "y"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "same.txt").write_text(f"text of {folder}")
    _run(tmp_path / "out", "--inputs", str(tmp_path / "x" / "same.txt"))
    assert list(_documents(tmp_path / "out")) == ["same.txt:0"]
    with pytest.raises(ValueError, match="would share the document ids"):
        _run(tmp_path / "out", "--inputs", str(tmp_path / "x" / "same.txt"), str(tmp_path / "y" / "same.txt"))


def test_multiprocessing_runner_writes_the_same_bytes(mixed: Path, tmp_path: Path):
    _run(tmp_path / "one", "--inputs", f"{mixed}/**")
    multi = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    _run(tmp_path / "two", "--inputs", f"{mixed}/**", beam=multi)
    assert _file_bytes(tmp_path / "one") == _file_bytes(tmp_path / "two")


def test_embedded_default_is_deterministic_and_labelled(tmp_path: Path):
    flags = ["--embedded_packages", "json", "pydoc_data", "--embedded_max_documents", "12"]
    stats = _run(tmp_path / "one", *flags)
    _run(tmp_path / "two", *flags)
    assert _file_bytes(tmp_path / "one") == _file_bytes(tmp_path / "two")
    docs = _documents(tmp_path / "one")
    assert len(docs) == 12 == stats["counters"]["documents"]
    assert stats["counters"]["source_files"] == len(pydocs.stdlib_sources(["json", "pydoc_data"]))
    for doc_id, doc in docs.items():
        assert re.fullmatch(r"(pydoc:json[\w.]*(:[\w.~]+)?|topic:\S+)", doc_id)
        assert len(doc["text"]) > 300 and ">>>" not in doc["text"]
        meta = doc["meta"]
        assert meta["package"] == meta["module"].split(".")[0] in ("json", "pydoc_data")
        assert meta["kind"] in ("module", "class", "function", "method", "topic")


def test_stdlib_listing_skips_tests_and_tools():
    sources = pydocs.stdlib_sources()
    assert sources == sorted(sources) and "json/decoder.py" in sources and pydocs.TOPICS_SOURCE in sources
    for skipped in ("test/", "tests/", "idlelib/", "lib2to3/", "site-packages/"):
        assert not any(f"/{skipped}" in f"/{s}" for s in sources)


DEPENDENCY_SLICE = ["--embedded_packages", "sklearn.cluster", "numpy.linalg", "scipy.linalg"]
ALL_DOCUMENTS = ["--embedded_max_documents", "100000"]


@pytest.fixture(scope="module")
def dependency_slice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus stage over a slice of the dependencies' docs, at one worker."""
    out = tmp_path_factory.mktemp("slice") / "one"
    _run(out, "--embedded_sources", "dependencies", *DEPENDENCY_SLICE, *ALL_DOCUMENTS)
    return out


def test_dependency_docs_are_the_same_bytes_at_two_workers(dependency_slice: Path, tmp_path: Path):
    multi = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    _run(tmp_path / "two", "--embedded_sources", "dependencies", *DEPENDENCY_SLICE, *ALL_DOCUMENTS, beam=multi)
    one = _file_bytes(dependency_slice)
    assert len(one) > 2  # stats.json and several document files, so routing to files is compared too
    assert _file_bytes(tmp_path / "two") == one


def test_stats_record_each_library_version(dependency_slice: Path):
    stats = json.loads((dependency_slice / "stats.json").read_text())
    libraries = ("numpy", "scikit-learn", "scipy")
    assert stats["sources"] == {name: importlib.metadata.version(name) for name in libraries}
    assert stats["counters"]["unparsable_sources"] == 0 and stats["counters"]["documents"] > 100


def test_dependency_docs_name_their_library_and_version(dependency_slice: Path):
    docs = _documents(dependency_slice)
    assert "pydoc:sklearn.cluster._kmeans:KMeans" in docs
    for doc_id, doc in docs.items():
        meta = doc["meta"]
        assert set(meta) == {"kind", "library", "module", "package", "qualname", "source", "version"}
        assert meta["version"] == importlib.metadata.version(meta["library"])
        assert pydocs.DEPENDENCIES[meta["library"]] == meta["package"] == meta["module"].split(".")[0]
        assert meta["module"].startswith(("sklearn.cluster", "numpy.linalg", "scipy.linalg"))
        assert doc_id.startswith(f"pydoc:{meta['module']}") and meta["source"].startswith(f"{meta['package']}/")


def test_stdlib_source_has_no_dependency_docs_and_keeps_its_meta(tmp_path: Path):
    stats = _run(tmp_path / "stdlib", "--embedded_sources", "stdlib", "--embedded_packages", "json", *ALL_DOCUMENTS)
    _run(tmp_path / "both", "--embedded_sources", "both", "--embedded_packages", "json", "numpy.linalg", *ALL_DOCUMENTS)
    stdlib, both = _documents(tmp_path / "stdlib"), _documents(tmp_path / "both")
    assert stats["sources"] == {"python": platform.python_version()}
    assert stdlib and all(set(d["meta"]) == {"kind", "module", "package", "python", "qualname", "source"}
                          for d in stdlib.values())  # fmt: skip
    assert {i: d for i, d in both.items() if d["meta"]["package"] == "json"} == stdlib
    assert {d["meta"].get("library") for d in both.values()} == {None, "numpy"}


def test_unknown_embedded_sources_or_package_fails_naming_the_choices(tmp_path: Path):
    with pytest.raises(ValueError, match="embedded_sources must be one of stdlib, dependencies, both, got 'all'"):
        _run(tmp_path / "out", "--embedded_sources", "all")
    with pytest.raises(ValueError, match=r"\['numpy\.nowhere'\] match no module"):
        _run(tmp_path / "out", "--embedded_sources", "both", "--embedded_packages", "json", "numpy.nowhere")


def test_dependency_listing_skips_tests_vendored_code_and_benchmarks():
    sklearn, beam = pydocs.library_sources("scikit-learn"), pydocs.library_sources("apache-beam")
    assert "sklearn/cluster/_kmeans.py" in sklearn and "apache_beam/transforms/core.py" in beam
    for skipped in ("tests/", "externals/", "array_api_compat/", "testing/", "benchmarks/", "load_tests/"):
        assert not any(f"/{skipped}" in f"/{s}" for s in sklearn + beam)
    assert not any(s.endswith(("_test.py", "conftest.py")) or "/test_" in s for s in sklearn + beam)
    assert pydocs.stdlib_sources(["email.mime"]) == [s for s in pydocs.stdlib_sources() if s.startswith("email/mime/")]


def test_a_missing_dependency_or_a_module_in_two_libraries_fails_clearly(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(pydocs, "DEPENDENCIES", {"no-such-dist": "no_such_package"})
    with pytest.raises(ModuleNotFoundError, match="no-such-dist"):
        pydocs.library_version("no-such-dist")
    with pytest.raises(ModuleNotFoundError, match="no-such-dist"):
        pydocs.embedded_sources("dependencies")
    monkeypatch.setattr(pydocs, "DEPENDENCIES", {"fake-json": "json"})  # a "dependency" shadowing the stdlib's json
    with pytest.raises(ValueError, match="module json is in both python and fake-json"):
        pydocs.embedded_sources("both")


def test_a_worker_with_other_library_versions_refuses_to_parse():
    parse = corpus._ParseEmbeddedSource(300, {"numpy": "0.0.1", "python": platform.python_version()})
    found = importlib.metadata.version("numpy")
    with pytest.raises(RuntimeError, match=re.escape(f"has numpy {found}, the launcher 0.0.1")):
        parse.setup()


def test_docstrings_are_parsed_not_imported(tmp_path: Path):
    (tmp_path / "pkg").mkdir()
    source = '''"""Module doc."""
raise SystemExit("importing this would stop the test")
class Box:
    """Box doc.

    >>> Box().size
    3

    After the example."""
    def size(self):
        """Size doc."""
if True:
    def helper():
        """First helper."""
else:
    def helper():
        """Second helper."""
'''
    (tmp_path / "pkg" / "mod.py").write_text(source)
    docs = {d["id"]: d for d in pydocs.source_documents("pkg/mod.py", root=str(tmp_path))}
    assert list(docs) == ["pydoc:pkg.mod", "pydoc:pkg.mod:Box", "pydoc:pkg.mod:Box.size",
                          "pydoc:pkg.mod:helper", "pydoc:pkg.mod:helper~2"]  # fmt: skip
    assert docs["pydoc:pkg.mod:Box"]["text"] == "Box doc.\n\nAfter the example."
    assert json.loads(docs["pydoc:pkg.mod:Box.size"]["meta"])["kind"] == "method"
    assert json.loads(docs["pydoc:pkg.mod:helper~2"]["meta"])["package"] == "pkg"
    topics = pydocs.source_documents(pydocs.TOPICS_SOURCE)
    assert "topic:assert" in {d["id"] for d in topics}


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.txt", b"fine line\ncaf\xe9 latin-1\n", "line 2: invalid UTF-8"),
        ("image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "line 1: invalid UTF-8"),
        ("zeros.txt", b"text then\n\x00\x00\x00\x01", "line 2: contains NUL bytes"),
        ("rows.jsonl", b'{"text": "a"}\n\n{"body": "b"}\n', "line 3: no 'text' field"),
        ("rows.jsonl", b'{"text": "a"}\n{"text": \n', "line 2: invalid JSON"),
        ("rows.jsonl", b'{"text": ["a"]}\n', "line 1: 'text' is list"),
        ("broken.txt.gz", gzip.compress(b"some text")[:-12] + b"garbage!!", "cannot read"),
        ("truncated.jsonl.bz2", bz2.compress(b'{"text": "some text"}\n' * 50)[:-20], "cannot read"),
        ("table.parquet", b"PAR1 not really parquet", "cannot read"),
    ],
)
def test_bad_files_raise_naming_the_file(tmp_path: Path, name: str, content: bytes, message: str):
    (tmp_path / name).write_bytes(content)
    [source] = sources.plan_sources([str(tmp_path / name)])
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / name}: ")) as raised:
        list(sources.read_records(source, "text"))
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("name", "content"),
    [("bad.txt", b"fine line\ncaf\xe9 latin-1\n"), ("rows.jsonl", b'{"text": "a"}\n{"body": "b"}\n')],
)
def test_errors_in_workers_name_the_file_and_leave_no_output(tmp_path: Path, name: str, content: bytes):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "good.txt").write_text("fine")
    (tmp_path / "in" / name).write_bytes(content)
    out = tmp_path / "out"
    out.mkdir()
    (out / "documents-00000-of-00001.parquet").write_bytes(b"stale")
    (out / "stats.json").write_text("{}")
    with pytest.raises(Exception, match=re.escape(name)):
        _run(out, "--inputs", str(tmp_path / "in"))
    assert list(out.iterdir()) == []


def test_missing_path_or_unknown_extension_fails_before_the_pipeline(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match=r"nowhere\.txt"):
        _run(tmp_path / "out", "--inputs", str(tmp_path / "nowhere.txt"))
    (tmp_path / "notes.docx").write_bytes(b"PK")
    with pytest.raises(ValueError, match=r"notes\.docx.*--format"):
        _run(tmp_path / "out", "--inputs", str(tmp_path / "notes.docx"))
    with pytest.raises(ValueError, match="format must be one of"):
        _run(tmp_path / "out", "--inputs", str(tmp_path / "notes.docx"), "--format", "docx")


def test_parquet_without_the_text_column_names_file_and_column(tmp_path: Path):
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "t.parquet")
    with pytest.raises(Exception, match=r"t\.parquet: no text column 'text'"):
        _run(tmp_path / "out", "--inputs", str(tmp_path / "t.parquet"))
    _run(tmp_path / "out", "--inputs", str(tmp_path / "t.parquet"), "--text_field", "body")
    assert list(_documents(tmp_path / "out")) == ["t.parquet:0"]


def _files_and_rows(out: Path) -> dict[str, int]:
    return {p.name: pq.read_metadata(p).num_rows for p in sorted(out.glob("documents-*.parquet"))}


def test_no_empty_document_files_and_names_count_the_files_written(tmp_path: Path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "book.txt").write_text("A long sentence of the book. " * 25_000)  # 725 KB: 3 files' worth
    _run(tmp_path / "one", "--inputs", str(tmp_path / "in"))
    assert _files_and_rows(tmp_path / "one") == {"documents-00000-of-00001.parquet": 1}
    for i in range(4):
        (tmp_path / "in" / f"short{i}.txt").write_text(f"Short text {i}.")
    _run(tmp_path / "five", "--inputs", str(tmp_path / "in"))
    written = _files_and_rows(tmp_path / "five")
    assert all(written.values()) and sum(written.values()) == 5
    assert list(written) == [f"documents-{i:05d}-of-{len(written):05d}.parquet" for i in range(len(written))]


def test_inputs_without_text_fail_naming_them_and_leave_no_output(tmp_path: Path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "empty.txt").write_bytes(b"")
    (tmp_path / "in" / "blank.txt").write_text(" \n\t\n")
    (tmp_path / "in" / "rows.jsonl").write_text('{"text": ""}\n{"text": "  "}\n')
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "documents-00000-of-00001.parquet").write_bytes(b"stale")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'in'}: no text")):
        _run(tmp_path / "out", "--inputs", str(tmp_path / "in"))
    assert list((tmp_path / "out").iterdir()) == []


def test_files_grow_from_their_floor_to_their_cap_keeping_min_files_between():
    floor, cap, spread = documents.MIN_FILE_BYTES, documents.MAX_FILE_BYTES, documents.MIN_FILES
    totals = sorted({0, 1, floor, floor + 1, *range(1, 3 * spread * cap, 9_973_331), spread * floor, spread * cap})
    counts = [documents.files_for_bytes(total) for total in totals]
    assert counts == sorted(counts), "more text never makes fewer files"
    for total, n in zip(totals, counts, strict=True):
        assert n >= 1 and -(-total // n) <= cap, (total, n)  # no file over the cap
        if n > 1:
            assert total / n >= floor * (n - 1) / n, (total, n)  # none cut below the floor (but the rounding)
        if spread * floor <= total <= spread * cap:
            assert n == spread, (total, n)
    assert documents.files_for_bytes((spread - 1) * floor) == spread - 1  # small: files at the floor
    assert documents.files_for_bytes(spread * cap + 1) == spread + 1  # large: files at the cap


def _random_jsonl(folder: Path, files: int, rng) -> int:
    """``files`` JSON Lines files of 500 documents of 400 random words (~1.75 MB each); returns their text bytes."""
    folder.mkdir()
    words, total = [f"word{i}" for i in range(5000)], 0
    for f in range(files):
        texts = [" ".join(rng.choice(words) for _ in range(400)) + "." for _ in range(500)]
        total += sum(map(len, texts))
        lines = [json.dumps({"id": f"{f}-{d}", "text": text}) for d, text in enumerate(texts)]
        (folder / f"part-{f}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return total


def test_the_stage_holds_a_chunk_and_a_write_task_never_the_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # Grouping the documents by bucket in Beam held every document in the runner's memory: 3.7 GB at 0.3 GB of
    # text (bench/results/scale.md), and 2.5 bytes of Python objects per byte of text here. Through spill files a
    # worker holds a chunk, or one write task's buckets (1/8 of the corpus at least), whatever the corpus size.
    import random
    import tracemalloc

    from pipelines.steps import corpus as corpus_steps

    monkeypatch.setattr(corpus_steps, "CHUNK_BYTES", 256 << 10)
    rng, peaks, sizes = random.Random(0), [], []
    for files in (1, 4, 8):  # the first run pays the imports: it only warms up
        sizes.append(_random_jsonl(tmp_path / f"in{files}", files, rng))
        tracemalloc.start()
        try:
            stats = _run(tmp_path / f"out{files}", "--inputs", str(tmp_path / f"in{files}" / "*.jsonl"))
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert stats["counters"]["documents"] == 500 * files
    grown, more_text = peaks[2] - peaks[1], sizes[2] - sizes[1]
    assert grown < more_text / 4, f"{grown / 1e6:.1f} MB more Python objects for {more_text / 1e6:.1f} MB more text"
