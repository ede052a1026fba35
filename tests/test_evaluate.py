"""Downstream evaluation: every GLUE layout fine-tunes end to end, the report has its baselines, encoding."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import sentencepiece as spm

from albert_lightning import evaluate
from albert_lightning.finetuning import Encoder
from albert_lightning.hf import export_hf
from albert_lightning.model import AlbertConfig, AlbertForPreTraining
from albert_lightning.tasks import GLUE_TASKS
from pipelines.textnorm import Normalizer
from tests.conftest import PipelineRun
from tests.test_tasks import write_glue


@pytest.fixture(scope="module")
def random_export(pipeline_run: PipelineRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny ALBERT as a Hugging Face folder: evaluation starts from such folders as from checkpoints."""
    vocab = spm.SentencePieceProcessor(model_file=str(pipeline_run.spiece)).get_piece_size()
    config = AlbertConfig.preset("tiny", vocab_size=vocab)
    folder = tmp_path_factory.mktemp("export")
    export_hf(AlbertForPreTraining(config), config, folder)
    return folder


def _evaluate(run: PipelineRun, checkpoint: Path, output: Path, *flags: str) -> dict:
    return evaluate.main(
        [
            "--params", "/dev/null", "--checkpoint", str(checkpoint), "--spiece", str(run.spiece),
            "--shards", str(run.shards), "--output", str(output), "--max_steps", "2", "--batch_size", "4",
            "--intrinsic_batches", "1", *flags,
        ]
    )  # fmt: skip


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
        for baseline in ("pretrained", "random_init", "majority"):
            assert math.isfinite(scores[baseline][spec.primary])
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text()) == report
    assert f"| {task} |" in (tmp_path / "eval" / "report.md").read_text()


def test_intrinsic_scores_follow_the_shards_kind(
    pipeline_run: PipelineRun, random_export: Path, tmp_path: Path
) -> None:
    report = _evaluate(pipeline_run, random_export, tmp_path, "--tasks")
    scores = report["intrinsic"][pipeline_run.shards.name]
    assert scores["kind"] == "sop" and 0.0 <= scores["mlm_accuracy"] <= 1.0 and 0.0 <= scores["sop_accuracy"] <= 1.0


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
