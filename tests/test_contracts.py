"""Every hand-off refuses what breaks its contract, naming the file: a vocabulary with another id layout, a
shard that is not what the manifest says, a checkpoint written only in part, a vocabulary of another size."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import sentencepiece as spm
import torch

from albert_lightning.checkpoints import load_pretraining_checkpoint
from albert_lightning.evaluation.finetuning import Encoder
from albert_lightning.interop.hf import export_hf
from albert_lightning.model import AlbertConfig, AlbertForPreTraining
from albert_lightning.pretraining.data import ShardDataModule, ShardDataset
from pipelines.contracts.manifest import MANIFEST, SPIECE, Manifest
from tests.conftest import LOCAL, PipelineRun, run_instances


@pytest.fixture(scope="module")
def default_layout_spiece(pipeline_run: PipelineRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SentencePiece model trained with SentencePiece's own defaults: <unk>=0, <s>=1, </s>=2."""
    sentences = pq.read_table(sorted(pipeline_run.sentences.glob("sentences-*.parquet"))[0]).column("sentences")
    lines = [s for doc in sentences.to_pylist() for s in doc][:3000]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=300, minloglevel=2)
    path = tmp_path_factory.mktemp("foreign") / "spiece.model"
    path.write_bytes(model.getvalue())
    return path


def test_the_instances_stage_refuses_a_vocabulary_with_another_id_layout(
    pipeline_run: PipelineRun, default_layout_spiece: Path, tmp_path: Path
) -> None:
    foreign = PipelineRun(pipeline_run.corpus, pipeline_run.sentences, default_layout_spiece.parent, tmp_path)
    with pytest.raises(ValueError, match=rf"{default_layout_spiece}: not ALBERT's id layout.*id 0 is '<unk>'"):
        run_instances(foreign, tmp_path / "shards", *LOCAL)
    assert not (tmp_path / "shards").exists()  # refused before any worker wrote a shard


def test_fine_tuning_refuses_a_vocabulary_with_another_id_layout(default_layout_spiece: Path) -> None:
    with pytest.raises(ValueError, match=r"id 4 is .*expected '\[MASK\]'"):
        Encoder(default_layout_spiece, 64)


@pytest.fixture
def shards(pipeline_run: PipelineRun, tmp_path: Path) -> Path:
    folder = tmp_path / "shards"
    shutil.copytree(pipeline_run.shards, folder)
    return folder


def test_the_loader_refuses_a_truncated_shard_naming_it(shards: Path) -> None:
    victim = shards / Manifest.read(shards).split("train")[0].file
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    with pytest.raises(ValueError, match=rf"{victim.name}: \d+ bytes, .*truncated"):
        ShardDataModule(str(shards))
    with pytest.raises(ValueError, match=victim.name):
        ShardDataset(shards, "train")


def test_the_loader_refuses_a_shard_changed_in_place(shards: Path) -> None:
    victim = shards / Manifest.read(shards).split("validation")[0].file
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"{victim.name}: sha256 differs"):
        ShardDataModule(str(shards))


def test_the_loader_refuses_a_vocabulary_with_another_layout_even_when_the_manifest_agrees(
    shards: Path, default_layout_spiece: Path
) -> None:
    # As a hand-edited folder would be: the instances stage itself never writes one.
    shutil.copyfile(default_layout_spiece, shards / SPIECE)
    body = json.loads((shards / MANIFEST).read_text())
    body["vocab_sha256"] = hashlib.sha256(default_layout_spiece.read_bytes()).hexdigest()
    (shards / MANIFEST).write_text(json.dumps(body))
    with pytest.raises(ValueError, match=rf"{SPIECE}: not ALBERT's id layout"):
        ShardDataset(shards, "validation")


def test_export_refuses_a_vocabulary_of_another_size_and_leaves_no_folder(
    pipeline_run: PipelineRun, tmp_path: Path
) -> None:
    model = AlbertForPreTraining(AlbertConfig.preset("tiny", vocab_size=123))
    with pytest.raises(ValueError, match=r"spiece\.model: 2000 pieces, but the checkpoint has vocab_size 123"):
        export_hf(model, model.config, tmp_path / "export", str(pipeline_run.spiece))
    assert list(tmp_path.iterdir()) == []


def test_a_failed_export_leaves_the_previous_folder_and_no_partial_one(
    pipeline_run: PipelineRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = AlbertForPreTraining(AlbertConfig.preset("tiny", vocab_size=2000))
    export_hf(model, model.config, tmp_path / "export", str(pipeline_run.spiece))
    before = {p.name: p.read_bytes() for p in (tmp_path / "export").iterdir()}

    def disk_full(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr("albert_lightning.interop.hf_tokenizer._tokenizer_json", disk_full)
    retrained = AlbertForPreTraining(AlbertConfig.preset("tiny", vocab_size=2000))  # other random weights
    with pytest.raises(OSError, match="No space"):
        export_hf(retrained, retrained.config, tmp_path / "export", str(pipeline_run.spiece))
    assert [p.name for p in tmp_path.iterdir()] == ["export"]
    assert {p.name: p.read_bytes() for p in (tmp_path / "export").iterdir()} == before


def test_a_truncated_checkpoint_is_named(tmp_path: Path) -> None:
    model = AlbertForPreTraining(AlbertConfig.preset("tiny"))
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": state, "hyper_parameters": {"config": asdict(model.config)}}, path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"last\.ckpt: not a readable checkpoint .*written completely"):
        load_pretraining_checkpoint(path)
