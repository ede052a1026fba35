"""Shared fixtures: one small run of the real stages over the embedded default corpus, reused by many tests."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

# Beam's in-memory runner keeps unit tests quick; tests that check parallel equality ask for processes.
LOCAL = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
NO_PARAMS = ["--params", os.devnull]  # tests set every knob they rely on, whatever params.yaml holds
# The shared run feeds segment's sentences to vocab and instances: tests of those stages alone, not of held-out text
# (tests/test_deduped_input.py runs them on the dedup stage's output, without this flag).
UNDEDUPED = "--allow_undeduped"


@dataclass(frozen=True)
class PipelineRun:
    corpus: Path
    sentences: Path
    vocab: Path
    shards: Path

    @property
    def spiece(self) -> Path:
        return self.vocab / "spiece.model"


INSTANCE_FLAGS = [
    "--max_seq_length=128",
    "--dupe_factor=4",
    "--held_out_fraction=0.05",
    "--seed=7",
]


def run_instances(run: PipelineRun, output: Path, *extra: str) -> None:
    from pipelines import instances

    argv = [*NO_PARAMS, "--input", str(run.sentences), "--spiece", str(run.spiece), "--output", str(output)]
    instances.run([*argv, UNDEDUPED, *INSTANCE_FLAGS, *extra])


@pytest.fixture(scope="session")
def pipeline_run(tmp_path_factory: pytest.TempPathFactory) -> PipelineRun:
    """corpus → segment → vocab → instances on 600 documents of the embedded default, through each stage's run()."""
    from pipelines import corpus, segment, vocab

    root = tmp_path_factory.mktemp("pipeline")
    run = PipelineRun(root / "corpus", root / "sentences", root / "vocab", root / "shards")
    corpus.run([*NO_PARAMS, "--output", str(run.corpus), "--embedded_max_documents=600", *LOCAL])
    segment.run([*NO_PARAMS, "--input", str(run.corpus), "--output", str(run.sentences), *LOCAL])
    vocab.run([*NO_PARAMS, "--input", str(run.sentences), "--output", str(run.vocab), UNDEDUPED, "--vocab_size=2000",
               *LOCAL])  # fmt: skip
    run_instances(run, run.shards, *LOCAL)
    return run


DISTRIBUTED_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK")


@pytest.fixture(autouse=True)
def no_distributed_state_leaks():
    """An in-process Trainer (FSDP2 over gloo) leaves a process group and MASTER_PORT behind: remove both."""
    saved = {k: os.environ.get(k) for k in DISTRIBUTED_ENV}
    yield
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(autouse=True, scope="session")
def temporary_files_under_basetemp(tmp_path_factory: pytest.TempPathFactory):
    """Beam makes a temporary folder for every Pipeline object and deletes it only when the pipeline runs, so each
    test that builds one without running it would leave a folder in /tmp: the tests' go under pytest's own."""
    saved = tempfile.tempdir
    tempfile.tempdir = str(tmp_path_factory.mktemp("tempfile"))
    yield
    tempfile.tempdir = saved


@pytest.fixture(scope="module")
def random_export(pipeline_run: PipelineRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny ALBERT as a Hugging Face folder: evaluation starts from such folders as from checkpoints."""
    import sentencepiece as spm

    from albert_lightning.interop.hf import export_hf
    from albert_lightning.model import AlbertConfig, AlbertForPreTraining

    vocab = spm.SentencePieceProcessor(model_file=str(pipeline_run.spiece)).get_piece_size()
    config = AlbertConfig.preset("tiny", vocab_size=vocab)
    folder = tmp_path_factory.mktemp("export")
    export_hf(AlbertForPreTraining(config), config, folder)
    return folder
