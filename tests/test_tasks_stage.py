"""Tests for the tasks stage (pipelines.tasks) over the real corpus and segment stages on a slice of the default."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines import corpus, segment, tasks
from pipelines.algorithms import splits
from pipelines.contracts.documents import SENTENCES_SCHEMA, file_name, table_from_rows
from pipelines.runtime import files

LOCAL = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
NO_PARAMS = ["--params", os.devnull]
# Ten packages of very different sizes (json has ~11 documents, email ~90): some fall under the cut-offs below.
PACKAGES = "email asyncio xml logging http unittest json concurrent importlib urllib".split()
TASKS = ("package", "returns")  # the embedded default's: its package (docstring meta), and the span task
FLAGS = ["--num_classes=4", "--min_class_documents=12", "--seed=7", "--held_out_fraction=0.3"]


@pytest.fixture(scope="module")
def sentences(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """corpus → segment on ~380 documents of ten standard-library packages."""
    root = tmp_path_factory.mktemp("tasks")
    embedded = ["--embedded_max_documents=400", "--embedded_packages", *PACKAGES]
    corpus.run([*NO_PARAMS, "--output", str(root / "corpus"), *embedded, *LOCAL])
    segment.run([*NO_PARAMS, "--input", str(root / "corpus"), "--output", str(root / "sentences"), *LOCAL])
    return root / "sentences"


def _run(source: Path, out: Path, *beam: str) -> dict:
    # The segment stage's output: these tests are of the tasks stage alone (test_deduped_input runs it after dedup).
    argv = [*NO_PARAMS, "--input", str(source), "--output", str(out), "--allow_undeduped", *FLAGS]
    return tasks.run([*argv, *(beam or LOCAL)])


@pytest.fixture(scope="module")
def built(sentences: Path) -> tuple[Path, dict]:
    out = sentences.parent / "tasks"
    return out, _run(sentences, out)


def _rows(out: Path, task: str) -> dict[str, list[dict]]:
    if task in tasks.SPAN_TASKS:  # SQuAD's layout: the questions of every paragraph of every article
        return {s: _questions(json.loads((out / task / f"{s}.json").read_text())) for s in splits.SPLITS}
    return {s: [json.loads(line) for line in (out / task / f"{s}.jsonl").open()] for s in splits.SPLITS}


def _questions(squad: dict) -> list[dict]:
    return [
        {**question, "context": paragraph["context"], "title": article["title"]}
        for article in squad["data"]
        for paragraph in article["paragraphs"]
        for question in paragraph["qas"]
    ]


def _documents(sentences: Path) -> dict[str, dict]:
    rows = [r for p in sorted(sentences.glob("sentences-*.parquet")) for r in pq.read_table(p).to_pylist()]
    return {r["id"]: {"meta": json.loads(r["meta"]), "sentences": r["sentences"]} for r in rows}


def test_labels_come_from_the_documents_metadata(sentences: Path, built: tuple[Path, dict]):
    out, stats = built
    documents = _documents(sentences)
    package = [r for rows in _rows(out, "package").values() for r in rows]
    for row in package:
        assert row["label"] == documents[row["id"]]["meta"]["package"]
        assert row["text"] == " ".join(documents[row["id"]]["sentences"][:3])
    assert len(package) > 100
    counts = {}
    for doc in documents.values():
        counts[doc["meta"]["package"]] = counts.get(doc["meta"]["package"], 0) + 1
    spec = json.loads((out / "package" / "task.json").read_text())
    assert spec["labels"] == tasks.top_classes(counts, 4, 12) == sorted({r["label"] for r in package})
    assert spec["text_b"] is None and spec["primary"] == "accuracy"
    assert stats["counters"]["small_class_documents"] == counts["json"]  # json has fewer than 12 documents


def test_dev_and_test_come_only_from_held_out_documents(built: tuple[Path, dict]):
    """The one split: a task's train rows are training documents, its dev/test rows held-out ones (never pretrained
    on), each in the half ``splits.split_of`` gives it; so no document is in two splits."""
    out, _ = built
    seen: dict[str, str] = {}
    for task in TASKS:
        for split, rows in _rows(out, task).items():
            assert rows, (task, split)
            for row in rows:
                assert splits.split_of(row["id"], 0.3) == split, (task, row["id"])
                assert splits.is_held_out(row["id"], 0.3) == (split != "train")
                assert seen.setdefault(row["id"], split) == split, row["id"]


def test_an_input_split_at_another_fraction_is_refused(sentences: Path, tmp_path: Path):
    deduped = tmp_path / "deduped"
    deduped.mkdir()
    for path in sentences.iterdir():
        (deduped / path.name).write_bytes(path.read_bytes())
    stats = json.loads((sentences / "stats.json").read_text()) | {"held_out_fraction": 0.1}
    (deduped / "stats.json").write_text(json.dumps(stats))
    with pytest.raises(
        ValueError, match=r"stats.json: written with held_out_fraction 0.1, but this stage splits at 0.3"
    ):
        _run(deduped, tmp_path / "t")


def test_deterministic_across_runs_and_workers(sentences: Path, built: tuple[Path, dict], tmp_path: Path):
    out, _ = built
    _run(sentences, tmp_path / "again")
    _run(sentences, tmp_path / "parallel", "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    names = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert len(names) == 4 * len(TASKS) + 1 and not [n for n in names if ".tmp-" in n]
    for again in ("again", "parallel"):
        assert (
            sorted(str(p.relative_to(tmp_path / again)) for p in (tmp_path / again).rglob("*") if p.is_file()) == names
        )
        for name in names:
            assert (out / name).read_bytes() == (tmp_path / again / name).read_bytes(), (again, name)


def _sentences_folder(folder: Path, metas: dict[str, dict]) -> Path:
    rows = [{"id": i, "sentences": [f"text of {i}."], "meta": json.dumps(m)} for i, m in metas.items()]
    files.write_parquet_atomically(str(folder / file_name("sentences", 0, 1)), table_from_rows(rows, SENTENCES_SCHEMA))
    files.write_json_atomically(str(folder / "stats.json"), {})
    return folder


def test_a_corpus_without_labels_gives_an_empty_task_set_saying_why(tmp_path: Path):
    """No label_field and no docstring meta: no task, and no error either (evaluate reports intrinsic scores)."""
    source = _sentences_folder(tmp_path / "s", {f"a.txt:{i}": {"source": "a.txt"} for i in range(5)})
    stats = _run(source, tmp_path / "t")
    assert stats["tasks"] == {} and json.loads((tmp_path / "t" / "stats.json").read_text()) == stats
    assert "no label_field set and no embedded-default metadata" in stats["reason"]
    assert set(stats["skipped"]) == set(TASKS)
    assert [p.name for p in (tmp_path / "t").rglob("*.json*")] == ["stats.json"]  # no task file left behind


def test_documents_without_meta_are_counted_and_skipped(tmp_path: Path):
    metas = {f"m{i}": {"module": f"{'pq'[i % 2]}.m", "package": "pq"[i % 2]} for i in range(30)}
    metas |= {"user:0": {"source": "u.txt"}}
    stats = _run(_sentences_folder(tmp_path / "s", metas), tmp_path / "t")
    assert stats["counters"]["unlabelled_documents"] == 1 and stats["counters"]["documents"] == 31
    assert sum(s["examples"] for s in stats["tasks"]["package"].values()) == 30


def test_returns_asks_what_a_documented_function_returns_answered_by_its_docstring(
    sentences: Path, built: tuple[Path, dict]
):
    out, stats = built
    documents = _documents(sentences)
    questions = [q for rows in _rows(out, "returns").values() for q in rows]
    assert len(questions) >= 20 and stats["tasks"]["returns"]["train"]["examples"] > 0
    assert len({q["context"] for q in questions}) == len(questions)  # one question per distinct docstring
    for q in questions:
        meta = documents[q["id"]]["meta"]
        assert meta["kind"] in ("function", "method")
        assert q["question"] == f"what does {meta['module']}.{meta['qualname']} return?"
        (answer,) = q["answers"]
        start = answer["answer_start"]
        assert q["context"][start : start + len(answer["text"])] == answer["text"]
        # the answer is the object of a sentence of the docstring that starts "return(s)"
        sentence = next(s for s in documents[q["id"]]["sentences"] if answer["text"] in s)
        assert sentence.split()[0] in ("return", "returns") and sentence.rstrip(".").endswith(answer["text"])
    assert json.loads((out / "returns" / "task.json").read_text())["kind"] == "span"


def test_a_return_question_needs_a_function_a_return_sentence_and_a_short_phrase():
    from pipelines.algorithms.return_questions import return_question

    meta = {"kind": "function", "module": "os.path", "qualname": "basename"}
    doc = ["return the base name of pathname p.", "this is the second half of the pair returned by split(p)."]
    q = return_question("d", doc, meta, max_sentences=8)
    assert q["question"] == "what does os.path.basename return?"
    assert q["answers"] == [{"text": "the base name of pathname p", "answer_start": 7}]
    assert q["context"] == " ".join(doc)
    later = ["compute things.", "returns the sum of x and y."]
    assert return_question("d", later, meta, 8)["answers"][0]["answer_start"] == len("compute things. returns ")
    assert return_question("d", later, meta, max_sentences=1) is None  # beyond the passage
    assert return_question("d", doc, meta | {"kind": "class"}, 8) is None
    assert return_question("d", ["returns ------- out : ndarray the result."], meta, 8) is None  # numpy section
    assert return_question("d", ["returns x."], meta, 8) is None  # one word: not a phrase
    assert return_question("d", ["the returns are listed."], meta, 8) is None


def test_labels_of_another_field_than_the_stages_are_named_in_the_reason(tmp_path: Path):
    """The corpus stage labelled by 'folder', this stage was given no label_field: no task, and the reason says so."""
    metas = {f"d{i}": {"label": "ab"[i % 2], "label_field": "folder", "source": f"x/{i}.txt"} for i in range(30)}
    stats = _run(_sentences_folder(tmp_path / "s", metas), tmp_path / "t")
    assert stats["tasks"] == {} and stats["counters"]["other_field_documents"] == 30
    assert "no document has a 'package' label, but 30 have another field's" in stats["reason"]
    labelled = _run(_sentences_folder(tmp_path / "s", metas), tmp_path / "u", "--label_field=folder", *LOCAL)
    assert list(labelled["tasks"]) == ["folder"] and labelled["tasks"]["folder"]["train"]["labels"].keys() == {"a", "b"}


def _labelled_sentences(folder: Path, files_count: int, rng) -> int:
    """A finished sentences folder of ``files_count`` files of 400 labelled documents; returns its text bytes."""
    folder.mkdir()
    words, total = [f"word{i}" for i in range(5000)], 0
    for f in range(files_count):
        rows = []
        for d in range(400):
            sentences = [" ".join(rng.choice(words) for _ in range(25)) + "." for _ in range(12)]
            total += sum(map(len, sentences))
            meta = json.dumps({"label": f"class{d % 4}", "label_field": "topic"})
            rows.append({"id": f"doc-{f}-{d}", "sentences": sentences, "meta": meta})
        files.write_parquet_atomically(str(folder / file_name("sentences", f, files_count)),
                                       table_from_rows(rows, SENTENCES_SCHEMA))  # fmt: skip
    files.write_json_atomically(str(folder / "stats.json"), {"normalizer": {}, "files": files_count})
    return total


def test_the_stage_holds_a_slice_or_a_range_of_a_split_never_the_passages(tmp_path: Path):
    # Grouping passages by text, by class and by split in Beam kept every labelled passage in the local runner's
    # memory: 2.2 GB at 0.3 GB of text (bench/results/scale.md). Through spill files a worker holds one file's
    # candidates, one slice's or one range of a split's rows, whatever the corpus size.
    import random
    import tracemalloc

    rng, peaks, sizes = random.Random(0), [], []
    for count in (1, 4, 8):  # the first run pays the imports: it only warms up
        sizes.append(_labelled_sentences(tmp_path / f"in{count}", count, rng))
        argv = [*NO_PARAMS, "--input", str(tmp_path / f"in{count}"), "--output", str(tmp_path / f"out{count}")]
        tracemalloc.start()
        try:
            stats = tasks.run([*argv, "--allow_undeduped", "--label_field=topic", "--num_classes=4", *LOCAL])
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert stats["counters"]["classification_examples"] == 400 * count
    grown, more_text = peaks[2] - peaks[1], sizes[2] - sizes[1]
    assert grown < more_text / 8, f"{grown / 1e6:.1f} MB more Python objects for {more_text / 1e6:.1f} MB more text"
