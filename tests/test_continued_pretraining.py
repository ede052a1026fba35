"""Continued pretraining (``--model.init_from``): a ``transformers`` AlbertForPreTraining folder, its own
spiece.model and normalisation carried through the data stages, and training that starts from its weights
exactly, on one process and under FSDP2 on two."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from albert_lightning.checkpoints import load_pretraining_checkpoint
from albert_lightning.interop.export import main as export_main
from albert_lightning.pretraining.data import IGNORE_INDEX, ShardDataset, collate
from albert_lightning.pretraining.module import AlbertPretraining
from pipelines import segment, vocab
from pipelines.contracts.manifest import Manifest
from tests.conftest import LOCAL, NO_PARAMS
from tests.test_pretraining import cli_in_process, fit_args, fit_subprocess, recorded

transformers = pytest.importorskip("transformers")


def hf_folder(folder: Path, spiece: Path | None, vocab_size: int, **tokenizer: bool) -> Path:
    """A random ``transformers`` AlbertForPreTraining saved as a Hugging Face folder, with ``spiece`` and a
    tokenizer_config.json holding ``tokenizer``'s switches."""
    torch.manual_seed(3)
    config = transformers.AlbertConfig(
        vocab_size=vocab_size,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = transformers.AlbertForPreTraining(config)
    with torch.no_grad():  # a non-zero output bias, so that the tied bias is carried too
        model.predictions.bias.normal_(std=0.1)
    model.save_pretrained(folder)
    if spiece is not None:
        shutil.copyfile(spiece, folder / "spiece.model")
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "AlbertTokenizer", **tokenizer}))
    return folder


@pytest.fixture(scope="module")
def start(pipeline_run, tmp_path_factory) -> Path:
    """A folder at the shards' vocabulary (their spiece.model) and normalisation (AlbertTokenizer's defaults)."""
    size = Manifest.read(pipeline_run.shards).vocab_size
    return hf_folder(tmp_path_factory.mktemp("start"), pipeline_run.spiece, size, do_lower_case=True)


def hf_losses(folder: Path, batch: dict[str, torch.Tensor]) -> tuple[float, float]:
    """transformers' MLM loss and total loss (MLM + sentence order) on one of our batches."""
    model = transformers.AlbertForPreTraining.from_pretrained(folder).eval()
    labels = torch.full_like(batch["input_ids"], -100)
    real = batch["masked_lm_ids"] != IGNORE_INDEX
    rows = torch.arange(len(labels))[:, None].expand_as(real)
    labels[rows[real], batch["masked_lm_positions"].long()[real]] = batch["masked_lm_ids"].long()[real]
    with torch.no_grad():
        out = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
            labels=labels,
            sentence_order_label=batch["sentence_order_label"],
        )
    mlm = F.cross_entropy(out.prediction_logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    return float(mlm), float(out.loss)


def test_the_first_step_trains_the_transformers_model_itself(start, pipeline_run):
    manifest = Manifest.read(pipeline_run.shards)
    module = AlbertPretraining(
        init_from=str(start),
        vocab_size=manifest.vocab_size,
        normalizer={"lower_case": True, "strip_accents": True},
        spiece_sha256=manifest.vocab_sha256,
        preset="base",  # the start's shape wins over the preset
    )
    module.configure_model()
    assert (module.config.hidden_size, module.config.embedding_size) == (32, 16)
    dataset = ShardDataset(pipeline_run.shards, "train")
    batch = collate([dataset[i] for i in range(16)])
    with torch.no_grad():
        ours = module.eval().losses(batch)
    mlm, total = hf_losses(start, batch)
    assert float(ours["mlm_loss"]) == pytest.approx(mlm, rel=1e-5)
    assert float(ours["loss"]) == pytest.approx(total, rel=1e-5)


def test_fsdp2_on_two_processes_continues_from_the_start_and_the_export_loads_back(start, pipeline_run, tmp_path):
    root = tmp_path / "run"
    # lr 0: the checkpoint must hold the start's weights exactly, through the sharded load and the gather.
    args = fit_args(root, pipeline_run.shards, 4, 2, f"--model.init_from={start}", "--model.lr=0")
    fit_subprocess(args, devices=2)

    steps = [recorded(root, 0)[0], recorded(root, 1)[0]]  # step 1's losses: the start's own, before any update
    assert all(r["fsdp"] and r["world_size"] == 2 for r in steps)
    dataset = ShardDataset(pipeline_run.shards, "train")
    batch = collate([dataset[i] for i in steps[0]["index"] + steps[1]["index"]])
    mlm = sum(r["mlm_loss"] * r["masked"] for r in steps) / sum(r["masked"] for r in steps)
    assert mlm == pytest.approx(hf_losses(start, batch)[0], rel=1e-5)

    continued = load_pretraining_checkpoint(root / "checkpoints" / "last.ckpt")
    theirs = transformers.AlbertForPreTraining.from_pretrained(start)
    ours = continued.state_dict()
    for name, tensor in theirs.state_dict().items():
        if name in ours:
            torch.testing.assert_close(ours[name], tensor, rtol=0, atol=0, msg=name)

    export_main(
        [*NO_PARAMS, "--checkpoint", str(root / "checkpoints" / "last.ckpt"), "--output", str(tmp_path / "export")]
    )
    back = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "export").eval()
    with torch.no_grad():
        got = continued.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        expected = back(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"]
        )
    torch.testing.assert_close(got.prediction_logits, expected.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.sop_logits, expected.sop_logits, atol=1e-5, rtol=1e-5)


def test_a_start_without_a_sentence_order_head_gets_a_new_one_and_says_so(start, pipeline_run, tmp_path):
    folder = tmp_path / "masked_lm"
    shutil.copytree(start, folder)
    masked_lm = transformers.AlbertForMaskedLM.from_pretrained(start)
    masked_lm.save_pretrained(folder)  # a released checkpoint's layout: no sop_classifier
    manifest = Manifest.read(pipeline_run.shards)
    module = AlbertPretraining(init_from=str(folder), vocab_size=manifest.vocab_size)
    with pytest.warns(
        UserWarning, match=r"has no \['albert.pooler.bias', 'albert.pooler.weight', 'sop_classifier.classifier.bias', "
    ):
        module.configure_model()
    assert 0 < float(module.model.sop_classifier.classifier.weight.std()) < 0.05  # initialised as ours: normal(0, 0.02)
    encoder = dict(masked_lm.state_dict())
    torch.testing.assert_close(
        module.model.albert.embeddings.word_embeddings.weight, encoder["albert.embeddings.word_embeddings.weight"]
    )


# --------------------------------------------------------------------------------------------------- refusals


def refusal(args: list[str]) -> str:
    with pytest.raises(ValueError) as info, cli_in_process(args):
        pass
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_start_with_another_vocabulary_size_is_refused_naming_both(pipeline_run, tmp_path):
    folder = hf_folder(tmp_path / "big", None, 2500)
    message = refusal(fit_args(tmp_path / "run", pipeline_run.shards, 4, 1, f"--model.init_from={folder}"))
    assert message.startswith(f"{pipeline_run.shards} has vocab_size 2000, but {folder} has 2500")


def test_a_start_with_another_spiece_model_of_the_same_size_is_refused(start, pipeline_run, tmp_path):
    folder = tmp_path / "other"
    shutil.copytree(start, folder)
    (folder / "spiece.model").write_bytes((folder / "spiece.model").read_bytes() + b"\0")
    message = refusal(fit_args(tmp_path / "run", pipeline_run.shards, 4, 1, f"--model.init_from={folder}"))
    assert f"{pipeline_run.shards} was cut with a vocabulary (spiece.model or vocab.txt) sha256" in message
    assert f"{folder}'s is" in message


def test_a_start_with_another_normalisation_is_refused(start, pipeline_run, tmp_path):
    folder = tmp_path / "cased"
    shutil.copytree(start, folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "keep_accents": True}))
    message = refusal(fit_args(tmp_path / "run", pipeline_run.shards, 4, 1, f"--model.init_from={folder}"))
    assert "'do_lower_case': True" in message and f"but {folder} as {{'do_lower_case': False" in message


def test_overrides_that_contradict_the_start_are_refused_and_dropout_is_not(start, pipeline_run, tmp_path):
    args = fit_args(tmp_path / "run", pipeline_run.shards, 4, 1, f"--model.init_from={start}")
    message = refusal([*args, '--model.config_overrides={"hidden_size": 64}'])
    assert message.startswith(f"--model.config_overrides hidden_size=64 contradicts {start}'s hidden_size=32")
    with cli_in_process([*args, '--model.config_overrides={"hidden_dropout_prob": 0.1}']) as cli:
        assert cli.model.config.hidden_dropout_prob == 0.1 and cli.model.config.hidden_size == 32


# ------------------------------------------------------------------------------------- the data stages' side


def test_vocab_copies_the_starts_spiece_model_instead_of_training(start, pipeline_run, tmp_path):
    stats = vocab.run([*NO_PARAMS, "--input", str(pipeline_run.sentences), "--output", str(tmp_path / "vocab"),
                       f"--from_spiece={start}", *LOCAL])  # fmt: skip
    assert (tmp_path / "vocab" / "spiece.model").read_bytes() == (start / "spiece.model").read_bytes()
    assert stats["from_spiece"] == str(start / "spiece.model") and stats["vocab_size"] == 2000
    (tmp_path / "bad.model").write_bytes(b"not a sentencepiece model")
    with pytest.raises(ValueError, match=r"bad\.model"):
        vocab.run([*NO_PARAMS, "--input", str(pipeline_run.sentences), "--output", str(tmp_path / "vocab2"),
                   f"--from_spiece={tmp_path / 'bad.model'}", *LOCAL])  # fmt: skip


def test_segment_normalises_as_the_starts_tokenizer_config_says(pipeline_run, tmp_path):
    folder = tmp_path / "cased"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "keep_accents": True}))
    out = tmp_path / "sentences"
    stats = segment.run([*NO_PARAMS, "--input", str(pipeline_run.corpus), "--output", str(out),
                         f"--normalization_from={folder}", *LOCAL])  # fmt: skip
    assert stats["normalizer"] == {"lower_case": False, "strip_accents": False, "chinese_script": "keep"}
    import pyarrow.parquet as pq

    documents = pq.read_table(next(out.glob("sentences-*.parquet"))).column("sentences").to_pylist()[:50]
    text = " ".join(s for document in documents for s in document)
    assert any(c.isupper() for c in text)
