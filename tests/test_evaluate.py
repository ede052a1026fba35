"""Downstream evaluation: every GLUE layout fine-tunes end to end, the report has its baselines, encoding,
and one checkpoint evaluated twice gives the same bytes."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import sentencepiece as spm

from albert_lightning import evaluate
from albert_lightning.eval_report import read_predictions
from albert_lightning.finetuning import Encoder
from albert_lightning.hf import export_hf
from albert_lightning.metrics import compute_metrics
from albert_lightning.model import AlbertConfig, AlbertForPreTraining
from albert_lightning.shard_loader import ShardDataset
from albert_lightning.tasks import GLUE_TASKS, TaskSpec, generic_task
from pipelines.textnorm import Normalizer
from tests.conftest import DISTRIBUTED_ENV, PipelineRun
from tests.test_tasks import write_glue


@pytest.fixture(scope="module")
def random_export(pipeline_run: PipelineRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny ALBERT as a Hugging Face folder: evaluation starts from such folders as from checkpoints."""
    vocab = spm.SentencePieceProcessor(model_file=str(pipeline_run.spiece)).get_piece_size()
    config = AlbertConfig.preset("tiny", vocab_size=vocab)
    folder = tmp_path_factory.mktemp("export")
    export_hf(AlbertForPreTraining(config), config, folder)
    return folder


def _argv(run: PipelineRun, checkpoint: Path, output: Path, *flags: str) -> list[str]:
    return [
        "--params", "/dev/null", "--checkpoint", str(checkpoint), "--spiece", str(run.spiece),
        "--shards", str(run.shards), "--output", str(output), "--max_steps", "2", "--batch_size", "4",
        "--intrinsic_batches", "1", "--seeds", "1", "--train_sizes", "0", "--min_steps", "1",
        "--bootstrap_resamples", "50", *flags,
    ]  # fmt: skip


def _evaluate(run: PipelineRun, checkpoint: Path, output: Path, *flags: str) -> dict:
    return evaluate.main(_argv(run, checkpoint, output, *flags))


@pytest.fixture(scope="module")
def toy_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generic two-class task: 12 training and 6 dev examples whose label is whether the text names a dog."""
    folder = tmp_path_factory.mktemp("tasks") / "toy"
    folder.mkdir()
    words = ["the quick brown fox", "a lazy dog sleeps", "return the value", "the dog barks twice", "import a module"]
    for split, count in (("train", 12), ("dev", 6)):
        rows = [f"{words[i % 5]} {i}\t{int('dog' in words[i % 5])}" for i in range(count)]
        (folder / f"{split}.tsv").write_text("text\tlabel\n" + "\n".join(rows) + "\n")
    return folder


def assert_predictions_reproduce_metrics(report: dict, output: Path, spec: TaskSpec) -> None:
    """Re-scores every run in the predictions files: each seed's primary score is the one metrics.json holds."""
    for split, scores in report["tasks"][spec.name]["splits"].items():
        lines = (output / "predictions" / spec.name / f"{split}.jsonl").read_text().splitlines()
        assert len(lines) == scores["examples"]
        assert [json.loads(line)["index"] for line in lines] == list(range(scores["examples"]))
        assert all(json.loads(line)["id"] is None for line in lines)
        dev = read_predictions(output / "predictions" / spec.name / f"{split}.jsonl")
        assert set(dev.starts) == set(next(iter(scores["sizes"].values()))["seeds"])
        for start, sizes in dev.starts.items():
            assert list(sizes) == list(scores["sizes"])
            for size, seeds in sizes.items():
                rescored = [round(compute_metrics(spec, row, dev.labels)[spec.primary], 4) for row in seeds]
                assert rescored == pytest.approx(scores["sizes"][size]["seeds"][start], abs=1e-4)


@pytest.mark.parametrize("task", sorted(GLUE_TASKS))
def test_every_glue_task_fine_tunes_from_its_distribution_layout(
    task: str, pipeline_run: PipelineRun, random_export: Path, tmp_path: Path
) -> None:
    write_glue(tmp_path / "glue", task)
    report = _evaluate(pipeline_run, random_export, tmp_path / "eval", "--glue_dir", str(tmp_path / "glue"),
                       "--tasks", task)  # fmt: skip
    spec = GLUE_TASKS[task]
    splits = report["tasks"][task]["splits"]
    assert set(splits) == set(spec.eval_splits)  # MNLI: matched and mismatched
    for scores in splits.values():
        assert math.isfinite(scores["majority"][spec.primary])
        (size,) = scores["sizes"].values()  # --train_sizes 0: every training example
        assert size["train_examples"] == report["tasks"][task]["train_examples"]
        for start in ("pretrained", "random_init"):
            assert math.isfinite(size[start][spec.primary]) and len(size["seeds"][start]) == 1
        assert size["gain"]["median"] == pytest.approx(
            size["pretrained"][spec.primary] - size["random_init"][spec.primary], abs=2e-4
        )
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text()) == report
    assert f"| {task} |" in (tmp_path / "eval" / "report.md").read_text()
    assert report["tasks"][task]["labels"] == list(spec.labels) and report["tasks"][task]["kind"] == spec.kind
    assert_predictions_reproduce_metrics(report, tmp_path / "eval", spec)  # label strings, scores, MNLI's two splits


def test_intrinsic_scores_follow_the_shards_kind(
    pipeline_run: PipelineRun, random_export: Path, tmp_path: Path
) -> None:
    report = _evaluate(pipeline_run, random_export, tmp_path, "--tasks")
    scores = report["intrinsic"][pipeline_run.shards.name]
    assert scores["kind"] == "sop" and 0.0 <= scores["mlm_accuracy"] <= 1.0 and 0.0 <= scores["sop_accuracy"] <= 1.0
    # The counts behind the accuracies: --intrinsic_batches 1 of --batch_size 4 scores the first 4 rows.
    rows = [ShardDataset(str(pipeline_run.shards), "validation")[i] for i in range(4)]
    targets = Counter(int(t) for row in rows for t in row["masked_lm_ids"])
    assert scores["pairs"] == 4 and scores["mlm_predictions"] == sum(targets.values())
    assert scores["mlm_accuracy"] == scores["mlm_correct"] / scores["mlm_predictions"]
    assert scores["sop_accuracy"] == scores["pair_correct"] / scores["pairs"]
    frequent_count = targets.most_common(1)[0][1]
    assert scores["mlm_most_frequent_accuracy"] == frequent_count / sum(targets.values())
    assert targets[scores["mlm_most_frequent_id"]] == frequent_count
    frequent_cell = f"| {scores['mlm_accuracy']:.3f} | {scores['mlm_most_frequent_accuracy']:.3f} | "
    assert frequent_cell in (tmp_path / "report.md").read_text()


def test_glue_name_without_glue_dir_is_refused(pipeline_run: PipelineRun, random_export: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="glue_dir"):
        _evaluate(pipeline_run, random_export, tmp_path, "--tasks", "CoLA")


def test_encoder_gives_the_pipeline_ids_and_fits_pairs(pipeline_run: PipelineRun) -> None:
    encoder = Encoder(pipeline_run.spiece, max_seq_length=16)
    sp = spm.SentencePieceProcessor(model_file=str(pipeline_run.spiece))
    text = "Return the Café's ``value'' of  X."
    ids, types = Encoder(pipeline_run.spiece, 128)(text)
    assert ids == [2, *sp.encode(Normalizer()(text)), 3] and types == [0] * len(ids)
    long = "the quick brown fox jumps over the lazy dog " * 10
    ids, types = encoder(long, "a short one")
    assert len(ids) == 16 and ids.count(3) == 2 and types[-1] == 1 and ids[0] == 2


TOY_FLAGS = ("--seeds", "2", "--train_sizes", "4", "0", "--epochs", "1", "--min_steps", "2", "--max_steps", "3")


def test_same_checkpoint_gives_the_same_bytes_and_a_learning_curve(
    pipeline_run: PipelineRun, random_export: Path, toy_task: Path, tmp_path: Path
) -> None:
    first = _evaluate(pipeline_run, random_export, tmp_path / "a", "--tasks", str(toy_task), *TOY_FLAGS)
    # A second process, whose global generator has drawn nothing that the first one drew before fine-tuning.
    argv = _argv(pipeline_run, random_export, tmp_path / "b", "--tasks", str(toy_task), *TOY_FLAGS)
    # Without the first run's MASTER_PORT and ranks, which name the process group this process still holds.
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    done = subprocess.run([sys.executable, "-m", "albert_lightning.evaluate", *argv], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert (tmp_path / "a/metrics.json").read_bytes() == (tmp_path / "b/metrics.json").read_bytes()
    sizes = first["tasks"]["toy"]["splits"]["dev"]["sizes"]
    assert list(sizes) == ["4", "12"]
    # steps: max(min_steps 2, ceil(1 epoch · n / batch 4)) capped at 3 → 2 for 4 examples, 3 for 12
    assert [(s["train_examples"], s["steps"]) for s in sizes.values()] == [(4, 2), (12, 3)]
    for size in sizes.values():
        seeds = size["seeds"]
        assert len(seeds["pretrained"]) == len(seeds["random_init"]) == 2
        assert size["pretrained"]["accuracy"] == pytest.approx(sum(seeds["pretrained"]) / 2, abs=1e-4)  # median of 2
        gain = size["gain"]
        assert gain["low"] <= gain["median"] <= gain["high"]
    with open(tmp_path / "a/learning_curve.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["task"], r["train_examples"]) for r in rows] == [("toy", "4"), ("toy", "12")]
    assert [float(r["pretrained"]) for r in rows] == [s["pretrained"]["accuracy"] for s in sizes.values()]
    assert {r["majority"] for r in rows} == {"0.6667"}  # 4 of the 12 train texts name a dog; dev: 2 of 6
    assert (tmp_path / "a/learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    report = (tmp_path / "a/report.md").read_text()
    assert "| toy | dev (6) | accuracy | 4 | " in report and "| toy | dev (6) | accuracy | 12 | " in report
    assert f"{sizes['12']['gain']['median']:+.3f} [" in report
    assert_predictions_reproduce_metrics(first, tmp_path / "a", generic_task(toy_task))
    line = json.loads((tmp_path / "a/predictions/toy/dev.jsonl").read_text().splitlines()[1])
    assert line["label"] == "1" and set(line["pretrained"]) == {"4", "12"} and len(line["random_init"]["4"]) == 2


def test_without_random_baseline_only_the_pretrained_scores(
    pipeline_run: PipelineRun, random_export: Path, toy_task: Path, tmp_path: Path
) -> None:
    report = _evaluate(pipeline_run, random_export, tmp_path, "--tasks", str(toy_task), "--random_baseline", "false")
    (size,) = report["tasks"]["toy"]["splits"]["dev"]["sizes"].values()
    assert set(size) == {"train_examples", "steps", "seeds", "pretrained"}
    assert list(size["seeds"]) == ["pretrained"]
    assert "| toy | dev (6) | accuracy | 12 | " in (tmp_path / "report.md").read_text()
    assert " | - | - | " in (tmp_path / "report.md").read_text()  # no random init, no gain
    line = json.loads((tmp_path / "predictions/toy/dev.jsonl").read_text().splitlines()[0])
    assert set(line) == {"index", "id", "label", "pretrained"}  # no random_init when it did not run
