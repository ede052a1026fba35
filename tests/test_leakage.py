"""Tests for the leakage stage (pipelines.leakage): its counts against a brute-force count of the same files."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import dedup, leakage
from pipelines.algorithms import splits
from pipelines.algorithms.passages import word_count
from pipelines.contracts.documents import SENTENCES_SCHEMA, file_name, table_from_rows
from pipelines.contracts.manifest import Manifest
from pipelines.runtime import files
from tests.conftest import LOCAL, NO_PARAMS, PipelineRun

FRACTION = 0.05  # the fixture's shards hold out this share (conftest.INSTANCE_FLAGS)
WORDS = 8  # the dedup stage's default passage_words, the floor of the passage_* figures


def _documents(folder: Path) -> dict[str, list[str]]:
    rows = [r for p in sorted(folder.glob("sentences-*.parquet")) for r in pq.read_table(p).to_pylist()]
    return {r["id"]: r["sentences"] for r in rows}


def _training_ids(shards: Path) -> set[str]:
    manifest = Manifest.read(shards)
    ids: set[str] = set()
    for path in manifest.paths(shards, "train"):
        ids.update(pa.ipc.open_file(pa.memory_map(path)).read_all().column("document_id").to_pylist())
    return ids


def _tasks_folder(root: Path, rows: dict[tuple[str, str], list[str]]) -> Path:
    """A tasks folder in the tasks stage's layout: JSON Lines for ``package``, SQuAD's layout for ``returns``."""
    for (task, split), ids in rows.items():
        (root / task).mkdir(parents=True, exist_ok=True)
        if task == "returns":
            qas = [{"id": i, "question": "q", "answers": []} for i in ids]
            data = {"data": [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]}
            (root / task / f"{split}.json").write_text(json.dumps(data))
        else:
            (root / task / f"{split}.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
    (root / "stats.json").write_text(json.dumps({"tasks": {task: {} for task, _ in rows}}))
    return root


@pytest.fixture(scope="module")
def measured(pipeline_run: PipelineRun, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    root = tmp_path_factory.mktemp("leakage")
    deduped = root / "deduped"
    dedup.run(
        [
            *NO_PARAMS,
            "--input",
            str(pipeline_run.sentences),
            "--output",
            str(deduped),
            f"--held_out_fraction={FRACTION}",
            *LOCAL,
        ]
    )
    documents = _documents(deduped)
    trained = _training_ids(pipeline_run.shards)
    held_out = sorted(i for i in documents if splits.is_held_out(i, FRACTION))
    in_training = sorted(trained)[:3]  # a task that (wrongly) scores training documents
    tasks = _tasks_folder(
        root / "tasks",
        {("package", "dev"): held_out[:4] + in_training, ("returns", "test"): held_out[4:6] + in_training[:1]},
    )
    argv = ["--sentences", str(deduped), "--segmented", str(pipeline_run.sentences)]
    argv += ["--shards", str(pipeline_run.shards), "--tasks", str(tasks), "--output", str(root / "out")]
    metrics = leakage.run([*NO_PARAMS, *argv, f"--held_out_fraction={FRACTION}", *LOCAL])
    segmented = _documents(pipeline_run.sentences)
    known = {"documents": documents, "segmented": segmented, "trained": trained, "held_out": held_out, "root": root}
    return metrics, known


def _brute_force(documents: dict[str, list[str]], min_words: int) -> dict[str, int]:
    """The held-out sentences of at least ``min_words`` words, and those of them in a training document."""
    held, train = collections.Counter(), set()
    for document_id, sentences in documents.items():
        long = [s for s in sentences if word_count(s) >= min_words]
        if splits.is_held_out(document_id, FRACTION):
            held.update(long)
        else:
            train.update(sentences)
    seen = {s: n for s, n in held.items() if s in train}
    return {
        "held_out_sentences": sum(held.values()),
        "seen_in_training": sum(seen.values()),
        "held_out_chars": sum(n * len(s) for s, n in held.items()),
        "seen_chars": sum(n * len(s) for s, n in seen.items()),
    }


def test_held_out_sentences_seen_in_training_are_counted_exactly(measured: tuple[dict, dict]):
    metrics, known = measured
    for name, documents in (("sentences", known["documents"]), ("sentences_before_dedup", known["segmented"])):
        counts = metrics[name]
        assert counts["passage_words"] == WORDS
        for kind, floor in (("all", 0), ("passage", WORDS)):
            expected = _brute_force(documents, floor)
            assert {k: counts[f"{kind}_{k}"] for k in expected} == expected, (name, kind)
            share = expected["seen_in_training"] / expected["held_out_sentences"]
            assert counts[f"{kind}_share_seen"] == round(share, 6)
    before, after = metrics["sentences_before_dedup"], metrics["sentences"]
    assert before["passage_seen_in_training"] > 0  # the undeduplicated default repeats inherited docstrings
    assert after["passage_seen_in_training"] == 0  # dedup keeps held-out passages out of training
    assert after["all_seen_in_training"] > 0  # short sentences ("returns.", "parameters") stay shared


def _sentences_folder(folder: Path, docs: dict[str, list[str]], stats: dict) -> Path:
    """A one-file sentences folder holding ``docs`` (id → sentences), with ``stats`` as its stats.json."""
    rows = [{"id": doc_id, "sentences": sentences, "meta": "{}"} for doc_id, sentences in sorted(docs.items())]
    files.write_parquet_atomically(str(folder / file_name("sentences", 0, 1)), table_from_rows(rows, SENTENCES_SCHEMA))
    files.write_json_atomically(str(folder / "stats.json"), {"files": 1, **stats})
    return folder


def _side_id(held_out: bool, prefix: str) -> str:
    return next(f"{prefix}{i}" for i in range(10_000) if splits.is_held_out(f"{prefix}{i}", FRACTION) == held_out)


def test_short_shared_sentences_are_not_leakage_but_long_ones_are(pipeline_run: PipelineRun, tmp_path: Path):
    quote = "the quality of mercy is not strained, it droppeth as the gentle rain."  # 13 words
    unseen = "a held-out sentence of eight words or more, in no training document."
    docs = {
        _side_id(True, "held"): ["yes.", "romeo.", quote, unseen],
        _side_id(False, "train"): ["yes.", "romeo.", "nurse.", quote],
    }
    stats = {"config": {"passage_words": WORDS}, "held_out_fraction": FRACTION}
    folder = _sentences_folder(tmp_path / "sentences", docs, stats)
    (tmp_path / "tasks").mkdir()
    tasks = _tasks_folder(tmp_path / "tasks", {})
    argv = ["--sentences", str(folder), "--shards", str(pipeline_run.shards), "--tasks", str(tasks)]
    metrics = leakage.run(
        [*NO_PARAMS, *argv, "--output", str(tmp_path / "out"), f"--held_out_fraction={FRACTION}", *LOCAL]
    )
    counts = metrics["sentences"]
    assert (counts["passage_held_out_sentences"], counts["passage_seen_in_training"]) == (2, 1)
    assert counts["passage_share_seen"] == 0.5 and counts["passage_seen_chars"] == len(quote)
    assert (counts["all_held_out_sentences"], counts["all_seen_in_training"]) == (4, 3)
    assert "sentences_before_dedup" not in metrics


def test_sentences_without_a_dedup_config_are_refused(pipeline_run: PipelineRun, tmp_path: Path):
    argv = ["--sentences", str(pipeline_run.sentences), "--shards", str(pipeline_run.shards)]
    argv += ["--tasks", str(tmp_path / "t"), "--output", str(tmp_path / "out")]
    with pytest.raises(ValueError, match=r"stats\.json: no dedup config with passage_words"):
        leakage.run([*NO_PARAMS, *argv, f"--held_out_fraction={FRACTION}", *LOCAL])


def test_task_documents_in_the_training_shards_are_counted(measured: tuple[dict, dict]):
    metrics, known = measured
    assert metrics["tasks"] == {
        "package": {"dev": {"documents": 7, "in_training_shards": 3}},
        "returns": {"test": {"documents": 3, "in_training_shards": 1}},
    }
    assert metrics["held_out_in_training"] == 0  # the instances stage trains on training documents only
    assert not set(known["held_out"]) & known["trained"]
    written = json.loads((known["root"] / "out" / leakage.METRICS).read_text())
    assert written == metrics and written["held_out_fraction"] == FRACTION


def test_a_tasks_folder_without_stats_fails_naming_it(
    pipeline_run: PipelineRun, measured: tuple[dict, dict], tmp_path: Path
):
    argv = ["--sentences", str(measured[1]["root"] / "deduped"), "--shards", str(pipeline_run.shards)]
    argv += ["--tasks", str(tmp_path / "none"), "--output", str(tmp_path / "out")]
    with pytest.raises(FileNotFoundError, match="none"):
        leakage.run([*NO_PARAMS, *argv, f"--held_out_fraction={FRACTION}", *LOCAL])


def test_the_report_reads_the_metrics_back_and_refuses_a_foreign_file(measured: tuple[dict, dict], tmp_path: Path):
    from albert_lightning.evaluation.cli import read_leakage
    from albert_lightning.evaluation.report import leakage_lines

    metrics, known = measured
    read = read_leakage(str(known["root"] / "out" / leakage.METRICS))
    assert read == metrics
    lines = leakage_lines(read)
    assert any(line.startswith("| package dev documents in the training shards | 3 | 7 |") for line in lines)
    for name, body in (("missing.json", None), ("text.json", "not json"), ("shape.json", '{"sentences": 1}')):
        path = tmp_path / name
        if body is not None:
            path.write_text(body)
        with pytest.raises(ValueError, match=rf"{name}: not the leakage stage's metrics\.json"):
            read_leakage(str(path))


def test_sentences_deduplicated_at_another_split_are_refused(pipeline_run: PipelineRun, tmp_path: Path):
    deduped = tmp_path / "deduped"
    deduped.mkdir()
    for path in pipeline_run.sentences.iterdir():
        (deduped / path.name).write_bytes(path.read_bytes())
    stats = json.loads((pipeline_run.sentences / "stats.json").read_text()) | {"held_out_fraction": 0.3}
    (deduped / "stats.json").write_text(json.dumps(stats))
    argv = ["--sentences", str(deduped), "--shards", str(pipeline_run.shards), "--tasks", str(tmp_path / "t")]
    with pytest.raises(ValueError, match=r"written with held_out_fraction 0\.3, but this stage splits at 0\.05"):
        leakage.run([*NO_PARAMS, *argv, "--output", str(tmp_path / "out"), f"--held_out_fraction={FRACTION}", *LOCAL])
