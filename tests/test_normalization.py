"""Tokeniser parity for every normalisation the segment stage offers (``lower_case`` × ``strip_accents``): an
exported tokenizer, fine-tuning's encoder and evaluation normalise as the shards were, from checkpoint to export."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from albert_lightning import checkpoints
from albert_lightning.evaluation import cli as evaluate
from albert_lightning.evaluation.finetuning import Encoder
from albert_lightning.interop import export
from albert_lightning.interop.hf import export_hf
from albert_lightning.interop.pretrained import load_pretrained
from albert_lightning.model import AlbertConfig, AlbertForPreTraining
from albert_lightning.pretraining.module import AlbertPretraining
from pipelines.algorithms.textnorm import Normalizer
from pipelines.contracts.manifest import MANIFEST, Manifest
from pipelines.vocab import VocabConfig, train_vocab

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

NORMALIZERS = [Normalizer(lower_case, strip_accents) for lower_case in (True, False) for strip_accents in (True, False)]
IDS = [f"lower_case={n.lower_case}-strip_accents={n.strip_accents}" for n in NORMALIZERS]
# Capitals, accents (precomposed and not), a ligature, ``quotes'' and runs of whitespace: each switch shows.
TEXTS = [
    "Café Ünïcode ÅNGSTRÖM naïve résumé",
    "``Quoted'' TEXT,   with \t extra\n whitespace and Capitals.",
    "  Zürich's CRÈME brûlée: a ﬁne façade, Cafe\u0301 again  ",
]
WORDS = "the quick Brown fox Café Ünïcode ÅNGSTRÖM naïve résumé Zürich CRÈME brûlée ﬁne façade TEXT Capitals"


@pytest.fixture(scope="module")
def spiece(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A vocabulary trained by the vocab stage's trainer on the words under every normalisation, so that each
    normalisation's characters are pieces (not all ``<unk>``, which would hide a difference)."""
    folder = tmp_path_factory.mktemp("vocab")
    lines = [normalize(f"{WORDS} {text}") for normalize in NORMALIZERS for text in TEXTS for _ in range(20)]
    (folder / "sentences.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    train_vocab(str(folder / "sentences.txt"), str(folder / "spiece"), VocabConfig(vocab_size=100, num_threads=1))
    return str(folder / "spiece.model")


def tiny(vocab_size: int) -> AlbertForPreTraining:
    return AlbertForPreTraining(AlbertConfig.preset("tiny", vocab_size=vocab_size))


def transformers_tokenizers(folder: Path) -> dict:
    """Every way to load the folder's tokenizer: transformers 5's AlbertTokenizer rebuilds its normalizers from
    tokenizer_config.json; PreTrainedTokenizerFast and ``tokenizers`` run tokenizer.json as written."""
    return {
        "AlbertTokenizer": transformers.AlbertTokenizer.from_pretrained(folder),
        "AutoTokenizer": transformers.AutoTokenizer.from_pretrained(folder),
        "PreTrainedTokenizerFast": transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json")),
    }


def assert_same_ids(folder: Path, encoder: Encoder) -> None:
    for name, tokenizer in transformers_tokenizers(folder).items():
        for text in TEXTS:
            assert tokenizer(text)["input_ids"] == encoder(text)[0], (name, text)
        pair = tokenizer(TEXTS[0], TEXTS[1], return_token_type_ids=True)
        assert [pair["input_ids"], pair["token_type_ids"]] == list(encoder(TEXTS[0], TEXTS[1])), name
    raw = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert [raw.encode(text).ids for text in TEXTS] == [encoder(text)[0] for text in TEXTS]


def test_the_texts_tell_every_normalisation_apart(spiece):
    encoded = {tuple(Encoder(spiece, 128, n)(TEXTS[0])[0]) for n in NORMALIZERS}
    assert len(encoded) == len(NORMALIZERS)


@pytest.mark.parametrize("normalizer", NORMALIZERS, ids=IDS)
def test_exported_tokenizer_gives_the_encoders_ids(tmp_path, spiece, normalizer):
    model = tiny(Encoder(spiece, 128).vocab.vocab_size)
    folder = export_hf(model, model.config, tmp_path / "export", spiece, normalizer)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    assert settings["do_lower_case"] == normalizer.lower_case
    assert settings["keep_accents"] == (not normalizer.strip_accents)
    assert_same_ids(folder, Encoder(spiece, model.config.max_position_embeddings, normalizer))


def pretraining_checkpoint(path: Path, vocab_size: int, normalizer: Normalizer | None) -> None:
    """What Lightning saves of ``AlbertPretraining``: its weights under ``model.`` and its hparams."""
    hparams = None if normalizer is None else dataclasses.asdict(normalizer)
    module = AlbertPretraining(preset="tiny", vocab_size=vocab_size, normalizer=hparams)
    module.configure_model()
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, path)


@pytest.mark.parametrize("normalizer", NORMALIZERS, ids=IDS)
def test_checkpoint_export_and_evaluation_normalise_as_the_shards_were(tmp_path, spiece, normalizer):
    vocab_size = Encoder(spiece, 128).vocab.vocab_size
    pretraining_checkpoint(tmp_path / "last.ckpt", vocab_size, normalizer)
    assert load_pretrained(tmp_path / "last.ckpt")[1] == normalizer

    export.main(["--checkpoint", str(tmp_path / "last.ckpt"), "--spiece", spiece, "--output", str(tmp_path / "hf")])
    assert load_pretrained(tmp_path / "hf")[1] == normalizer  # evaluation may start from the export, too
    assert_same_ids(tmp_path / "hf", Encoder(spiece, 512, normalizer))

    for start in ("last.ckpt", "hf"):
        config = evaluate.EvaluateConfig(checkpoint=str(tmp_path / start), spiece=spiece, max_seq_length=64)
        _, encoder = evaluate.load_checkpoint(config)
        assert encoder.normalize == normalizer, start


def test_fit_records_the_shards_normalisation_in_the_checkpoint(pipeline_run, tmp_path):
    from tests.test_pretraining import cli_in_process, fit_args, write_subset

    shards = write_subset(pipeline_run.shards, tmp_path / "shards", 8)
    recorded = Normalizer(lower_case=False, strip_accents=False)
    manifest = dataclasses.replace(Manifest.read(shards), normalizer=recorded)
    (shards / MANIFEST).write_bytes(manifest.to_bytes())
    with cli_in_process(fit_args(tmp_path, shards, 4, 1)) as cli:
        assert cli.model.hparams.normalizer == dataclasses.asdict(recorded)
    assert checkpoints.read_pretraining_checkpoint(tmp_path / "checkpoints" / "last.ckpt")[1] == recorded


def test_starts_that_record_no_normalisation_get_the_defaults_every_earlier_run_used(tmp_path, spiece):
    vocab_size = Encoder(spiece, 128).vocab.vocab_size
    pretraining_checkpoint(tmp_path / "unset.ckpt", vocab_size, None)
    checkpoint = torch.load(tmp_path / "unset.ckpt", weights_only=False)
    del checkpoint["hyper_parameters"]["normalizer"]  # as written before the key existed
    torch.save(checkpoint, tmp_path / "old.ckpt")
    model = tiny(vocab_size)
    export_hf(model, model.config, tmp_path / "hf")  # no spiece: no tokenizer_config.json
    for start in ("unset.ckpt", "old.ckpt", "hf"):
        assert load_pretrained(tmp_path / start)[1] == Normalizer(), start
