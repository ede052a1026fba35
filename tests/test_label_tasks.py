"""A corpus of your own gives its own task: ``tasks.label_field`` through the real corpus → segment → dedup → tasks
stages, the leakage stage over the tasks written, and evaluate scoring them; a corpus without labels gives an
empty task set, and evaluate still reports the intrinsic scores."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from albert_lightning.evaluation import cli as evaluate
from pipelines import corpus, dedup, leakage, segment, tasks
from pipelines.algorithms import splits
from pipelines.readers.sources import plan_sources, read_records
from tests.conftest import LOCAL, NO_PARAMS, PipelineRun
from tests.test_evaluate import _argv  # the same tiny evaluate run

FRACTION = 0.3
WORDS = "river stone music paint goal match vote court cloud light bread salt wheel engine poem novel".split()
CLASSES = ("arts", "science", "sports")
TASK_FLAGS = ["--min_class_documents=3", "--num_classes=2", f"--held_out_fraction={FRACTION}", "--seed=3"]


def _prose(rng: random.Random, topic: str) -> str:
    """Four sentences of random words: no two documents share a sentence, so dedup keeps them all."""
    return " ".join(
        f"{topic.title()} {' '.join(rng.choice(WORDS) for _ in range(9))} {rng.randrange(10**6)}." for _ in range(4)
    )


def _stages(root: Path, params: dict | None = None, *flags: str) -> Path:
    """corpus (under ``params``, a params.yaml of its own, plus ``flags``) → segment → dedup → tasks; the tasks
    folder."""
    params_file = root / "params.yaml"
    params_file.write_text(yaml.safe_dump(params or {}))
    corpus.run(["--params", str(params_file), "--output", str(root / "corpus"), *flags, *LOCAL])
    segment.run([*NO_PARAMS, "--input", str(root / "corpus"), "--output", str(root / "sentences"), *LOCAL])
    dedup_flags = [f"--held_out_fraction={FRACTION}"]
    dedup.run([*NO_PARAMS, "--input", str(root / "sentences"), "--output", str(root / "deduped"), *dedup_flags, *LOCAL])
    tasks_params = ["--params", str(params_file), "--input", str(root / "deduped"), "--output", str(root / "tasks")]
    tasks.run([*tasks_params, *TASK_FLAGS, *LOCAL])
    return root / "tasks"


@pytest.fixture(scope="module")
def jsonl_tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 JSON Lines records in three categories, and three without one; the field set in params.yaml's tasks."""
    root = tmp_path_factory.mktemp("jsonl")
    rng = random.Random(1)
    records = [{"text": _prose(rng, CLASSES[i % 3]), "category": CLASSES[i % 3]} for i in range(60)]
    records += [{"text": _prose(rng, "none")} for _ in range(3)]
    (root / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    params = {"corpus": {"inputs": [str(root / "docs.jsonl")]}, "tasks": {"label_field": "category"}}
    return _stages(root, params)


@pytest.fixture(scope="module")
def folder_tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Text files sorted into one folder per class: 20 in each of three folders."""
    root = tmp_path_factory.mktemp("folders")
    rng = random.Random(2)
    for i in range(60):
        folder = root / "prose" / CLASSES[i % 3]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i}.txt").write_text(_prose(rng, CLASSES[i % 3]))
    return _stages(root, {"tasks": {"label_field": "folder"}}, "--inputs", str(root / "prose/*/*.txt"))


@pytest.fixture(scope="module")
def unlabelled_tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("prose")
    rng = random.Random(3)
    for i in range(12):
        (root / f"{i}.txt").write_text(_prose(rng, "plain"))
    return _stages(root, {"corpus": {"inputs": [str(root / "*.txt")]}})


def _documents(root: Path) -> dict[str, dict]:
    rows = [r for p in sorted((root / "deduped").glob("sentences-*.parquet")) for r in pq.read_table(p).to_pylist()]
    return {r["id"]: json.loads(r["meta"]) for r in rows}


@pytest.mark.parametrize(("fixture", "task"), [("jsonl_tasks", "category"), ("folder_tasks", "folder")])
def test_a_labelled_corpus_gives_a_classification_task_named_for_its_field(
    fixture: str, task: str, request: pytest.FixtureRequest
):
    out: Path = request.getfixturevalue(fixture)
    stats = json.loads((out / "stats.json").read_text())
    assert list(stats["tasks"]) == [task] and "reason" not in stats and "returns" in stats["skipped"]
    assert not (out / "returns").exists() or not list((out / "returns").iterdir())  # no docstrings: no span task
    spec = json.loads((out / task / "task.json").read_text())
    # the two largest of three equal classes, ties by name (num_classes 2)
    assert spec["kind"] == "classification" and spec["labels"] == ["arts", "science"]
    metas = _documents(out.parent)
    for split in splits.SPLITS:
        rows = [json.loads(line) for line in (out / task / f"{split}.jsonl").read_text().splitlines()]
        assert rows and stats["tasks"][task][split]["examples"] == len(rows)
        for row in rows:
            assert splits.split_of(row["id"], FRACTION) == split
            assert row["label"] == metas[row["id"]]["label"] and metas[row["id"]]["label_field"] == task
            assert row["text"].startswith(row["label"] + " ")  # the labelled document's passage (lower-cased)
    assert stats["counters"]["other_class_documents"] > 0  # sports: a class beyond num_classes


def test_the_corpus_carries_the_label_and_counts_records_without_one(jsonl_tasks: Path):
    stats = json.loads((jsonl_tasks.parent / "corpus" / "stats.json").read_text())
    assert stats["config"]["label_field"] == "category"  # read from params.yaml's tasks section
    assert (stats["counters"]["labelled_documents"], stats["counters"]["unlabelled_documents"]) == (60, 3)
    metas = _documents(jsonl_tasks.parent)
    assert sum("label" in m for m in metas.values()) == 60
    assert {m["label"] for m in metas.values() if "label" in m} == set(CLASSES)


def test_a_label_field_no_record_has_fails_naming_it_and_a_file(tmp_path: Path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "one. two."}) + "\n")
    argv = [*NO_PARAMS, "--output", str(tmp_path / "c"), "--inputs", str(tmp_path / "a.jsonl"), *LOCAL]
    with pytest.raises(ValueError, match=r"a\.jsonl: no record of the 1 input file\(s\) has the label field 'topic'"):
        corpus.run([*argv, "--label_field", "topic"])
    assert not list((tmp_path / "c").glob("*"))  # no output left under a final name
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "one. two.", "topic": {"a": 1}}) + "\n")
    with pytest.raises(ValueError, match=r"a\.jsonl: line 1: 'topic' is a dict, not a class label"):
        corpus.run([*argv, "--label_field", "topic"])


def test_labels_are_strings_integers_or_booleans_from_a_key_or_a_column(tmp_path: Path):
    values = ["x", 3, True, None, "", 0]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": "t", "c": v}) + "\n" for v in values))
    (source,) = plan_sources([str(tmp_path / "a.jsonl")])
    labels = [where.get("label") for _, where in read_records(source, "text", label_field="c")]
    assert labels == ["x", "3", "true", None, None, "0"]  # as JSON spells them; null and empty: no label
    pq.write_table(pa.table({"text": ["a", "b"], "c": [7, None]}), tmp_path / "b.parquet")
    (source,) = plan_sources([str(tmp_path / "b.parquet")])
    assert [w.get("label") for _, w in read_records(source, "text", label_field="c")] == ["7", None]
    pq.write_table(pa.table({"text": ["a"], "c": [[1, 2]]}), tmp_path / "c.parquet")
    (source,) = plan_sources([str(tmp_path / "c.parquet")])
    with pytest.raises(ValueError, match=r"c\.parquet: column 'c' is list<\w+: int64>, not class labels"):
        list(read_records(source, "text", label_field="c"))
    with pytest.raises(ValueError, match="label_field 'a/b' names the task's folder"):
        corpus.CorpusConfig(label_field="a/b")


def test_an_unlabelled_corpus_gives_an_empty_task_set_saying_why(unlabelled_tasks: Path):
    stats = json.loads((unlabelled_tasks / "stats.json").read_text())
    assert stats["tasks"] == {}
    assert stats["reason"].startswith("no label_field set and no embedded-default metadata")
    assert [p.name for p in unlabelled_tasks.rglob("*") if p.is_file()] == ["stats.json"]


def _leakage(root: Path, shards: Path) -> dict:
    argv = ["--sentences", str(root / "deduped"), "--shards", str(shards), "--tasks", str(root / "tasks")]
    return leakage.run([*NO_PARAMS, *argv, "--output", str(root / "leakage"), f"--held_out_fraction={FRACTION}"])


def test_leakage_covers_a_labelled_task_and_an_empty_task_set(
    jsonl_tasks: Path, unlabelled_tasks: Path, pipeline_run: PipelineRun
):
    # Another corpus's training shards: none of these documents is in them, which the counts must say.
    metrics = _leakage(jsonl_tasks.parent, pipeline_run.shards)
    stats = json.loads((jsonl_tasks / "stats.json").read_text())
    assert set(metrics["tasks"]) == {"category"}
    for split in splits.HELD_OUT:
        counts = metrics["tasks"]["category"][split]
        assert counts == {"documents": stats["tasks"]["category"][split]["examples"], "in_training_shards": 0}
    assert _leakage(unlabelled_tasks.parent, pipeline_run.shards)["tasks"] == {}


def test_evaluate_scores_every_task_a_tasks_folder_lists(
    jsonl_tasks: Path, folder_tasks: Path, pipeline_run: PipelineRun, random_export: Path, tmp_path: Path
):
    # Both folders, and one of their tasks again: every task once, in the order named.
    names = [str(jsonl_tasks), str(folder_tasks), str(folder_tasks / "folder")]
    report = evaluate.main(_argv(pipeline_run, random_export, tmp_path, "--tasks", *names))
    assert list(report["tasks"]) == ["category", "folder"] and "no_tasks" not in report
    for task, out in (("category", jsonl_tasks), ("folder", folder_tasks)):
        dev = json.loads((out / "stats.json").read_text())["tasks"][task]["dev"]["examples"]
        assert report["tasks"][task]["splits"]["dev"]["examples"] == dev
        assert len((tmp_path / "predictions" / task / "dev.jsonl").read_text().splitlines()) == dev
        assert f"| {task} | dev ({dev}) | accuracy |" in (tmp_path / "report.md").read_text()


def test_evaluate_without_any_task_reports_the_intrinsic_scores_and_how_to_add_one(
    unlabelled_tasks: Path, pipeline_run: PipelineRun, random_export: Path, tmp_path: Path
):
    metrics = _leakage(unlabelled_tasks.parent, pipeline_run.shards)
    flags = ["--tasks", str(unlabelled_tasks), "--leakage", str(unlabelled_tasks.parent / "leakage/metrics.json")]
    report = evaluate.main(_argv(pipeline_run, random_export, tmp_path, *flags))
    assert report["tasks"] == {} and report["leakage"] == metrics
    assert "no label_field set and no embedded-default metadata" in report["no_tasks"]
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("No downstream task: the corpus gave no downstream task")
    assert "tasks.label_field" in text and "glue_dir" in text and "| task | split |" not in text
    scores = report["intrinsic"][pipeline_run.shards.name]
    assert f"| {pipeline_run.shards.name} | sop | {scores['mlm_accuracy']:.3f} |" in text
    assert "| leakage (pipelines/leakage.py) |" in text
    # Every out dvc.yaml's evaluate stage declares exists, or `dvc repro` would fail after the run.
    stage = yaml.safe_load((Path(__file__).parents[1] / "dvc.yaml").read_text())["stages"]["evaluate"]
    outs = [next(iter(o)) if isinstance(o, dict) else o for kind in ("outs", "metrics", "plots") for o in stage[kind]]
    assert outs and [o for o in outs if not (tmp_path / o.removeprefix("data/eval/")).exists()] == []
    with open(tmp_path / "learning_curve.csv", newline="") as f:
        assert list(csv.reader(f)) == [["task", "train_examples", "pretrained", "random_init", "majority"]]
    assert json.loads((tmp_path / "metrics.json").read_text()) == report
