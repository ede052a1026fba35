"""Tests for albert_lightning.interop.hf and .export: parity with transformers both ways, checkpoints, the tokenizer."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import warnings
from dataclasses import asdict

import pytest
import torch

from albert_lightning.checkpoints import load_pretraining_checkpoint
from albert_lightning.evaluation.finetuning import Encoder
from albert_lightning.interop.export import main
from albert_lightning.interop.hf import export_hf, import_hf
from albert_lightning.model import AlbertConfig, AlbertForPreTraining
from pipelines.algorithms.textnorm import Normalizer

transformers = pytest.importorskip("transformers")

LAYOUTS = [
    dict(),
    dict(num_hidden_layers=3, num_hidden_groups=2, inner_group_num=2),
    dict(num_hidden_layers=3, sharing="none"),  # exported as 3 groups of one layer
]


def tiny(seed: int = 0, **overrides) -> AlbertForPreTraining:
    torch.manual_seed(seed)
    model = AlbertForPreTraining(AlbertConfig.preset("tiny", **overrides)).eval()
    with torch.no_grad():  # a non-zero output bias, so that the tied bias is really checked
        model.predictions.bias.normal_(std=0.1)
    return model


def padded_batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    input_ids = torch.randint(5, 1000, (3, 16), generator=g)
    token_type_ids = (torch.arange(16) >= 6).long().expand(3, 16).clone()
    attention_mask = torch.ones(3, 16, dtype=torch.long)
    attention_mask[1, 10:] = 0
    attention_mask[2, 4:] = 0
    input_ids[attention_mask == 0] = 0
    return dict(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)


def assert_same_outputs(ours: AlbertForPreTraining, theirs, inputs: dict | None = None) -> None:
    inputs = padded_batch() if inputs is None else inputs
    with torch.no_grad():
        expected = theirs.eval()(**inputs)
        got = ours.eval()(**inputs)
    torch.testing.assert_close(got.prediction_logits, expected.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.sop_logits, expected.sop_logits, atol=1e-5, rtol=1e-5)


def transformers_config(config: AlbertConfig, **overrides):
    fields = {k: v for k, v in asdict(config).items() if k != "sharing"}
    return transformers.AlbertConfig(**fields | overrides)


@pytest.mark.parametrize("overrides", LAYOUTS)
def test_export_loads_in_transformers_with_no_missing_keys_and_same_outputs(tmp_path, overrides):
    model = tiny(**overrides)
    export_hf(model, model.config, tmp_path)
    theirs, info = transformers.AlbertForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched keys, no errors
    assert_same_outputs(model, theirs)


@pytest.mark.parametrize("overrides", LAYOUTS[:2])
def test_import_reads_a_transformers_folder_with_same_outputs(tmp_path, overrides):
    config = AlbertConfig.preset("tiny", **overrides)
    torch.manual_seed(3)
    theirs = transformers.AlbertForPreTraining(transformers_config(config))
    theirs.save_pretrained(tmp_path)
    ours = import_hf(tmp_path)
    assert ours.config == config
    assert ours.predictions.decoder.weight is ours.albert.embeddings.word_embeddings.weight
    assert_same_outputs(ours, theirs)


def test_import_of_a_masked_lm_checkpoint_keeps_fresh_heads_with_a_warning(tmp_path):
    theirs = transformers.AlbertForMaskedLM(transformers_config(AlbertConfig.preset("tiny"))).eval()
    theirs.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="sop_classifier"):
        ours = import_hf(tmp_path)
    inputs = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(ours(**inputs).prediction_logits, theirs(**inputs).logits, atol=1e-4, rtol=1e-4)


def test_import_names_the_file_on_unexpected_keys_and_shapes(tmp_path):
    from safetensors.torch import load_file, save_file

    model = tiny()
    export_hf(model, model.config, tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    save_file({**weights, "albert.extra": torch.zeros(1)}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.safetensors.*unexpected keys \['albert\.extra'\]"):
        import_hf(tmp_path)
    weights["albert.pooler.bias"] = torch.zeros(3)
    save_file(weights, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.safetensors: albert\.pooler\.bias has shape \[3\]"):
        import_hf(tmp_path)


def test_export_refuses_sharing_modes_transformers_cannot_express(tmp_path):
    model = tiny(sharing="attention")
    with pytest.raises(ValueError, match="export needs 'all' or 'none'"):
        export_hf(model, model.config, tmp_path)


def test_hf_module_does_not_import_transformers():
    code = "import sys, albert_lightning.interop.hf, albert_lightning.interop.export\n"
    code += "assert 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def lightning_checkpoint(model: AlbertForPreTraining, path, with_config: bool = True):
    hyper_parameters = {"config": asdict(model.config), "learning_rate": 1e-3} if with_config else {}
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    torch.save({"state_dict": state, "hyper_parameters": hyper_parameters, "epoch": 0}, path)


def test_checkpoint_round_trip_through_the_export_cli(tmp_path):
    model = tiny(seed=5)
    lightning_checkpoint(model, tmp_path / "last.ckpt")
    loaded = load_pretraining_checkpoint(tmp_path / "last.ckpt")
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, rtol=0, atol=0)
    assert loaded.predictions.decoder.weight is loaded.albert.embeddings.word_embeddings.weight

    no_params = ["--params", str(tmp_path / "none.yaml")]  # the repository's would add its spiece.model
    main([*no_params, "--checkpoint", str(tmp_path / "last.ckpt"), "--output", str(tmp_path / "export")])
    assert_same_outputs(model, transformers.AlbertForPreTraining.from_pretrained(tmp_path / "export"))

    lightning_checkpoint(model, tmp_path / "bare.ckpt", with_config=False)
    with pytest.raises(ValueError, match=r"bare\.ckpt: hyper_parameters\['config'\]"):
        load_pretraining_checkpoint(tmp_path / "bare.ckpt")


SENTENCES = [
    "The Quick brown fox jumps over the lazy dog.",
    "A naïve café in Zürich serves crème brûlée, ``quoted'' twice.",
    "  Lists   and dicts:   Python's   TUPLES are immutable!  ",
]


@pytest.fixture(scope="module")
def spiece_model(tmp_path_factory) -> str:
    sentencepiece = pytest.importorskip("sentencepiece")
    folder = tmp_path_factory.mktemp("vocab")
    rng = random.Random(0)
    words = "the quick brown fox jumps over lazy dog café naïve zürich crème list dict tuple python is are".split()
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 15))) for _ in range(300)]
    (folder / "text.txt").write_text("\n".join(Normalizer()(line) for line in lines + SENTENCES) + "\n")
    sentencepiece.SentencePieceTrainer.train(
        input=str(folder / "text.txt"),
        model_prefix=str(folder / "spiece"),
        vocab_size=60,
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        minloglevel=2,
    )
    return str(folder / "spiece.model")


def test_exported_tokenizer_matches_sentencepiece_on_normalised_text(tmp_path, spiece_model):
    import sentencepiece

    model = tiny(vocab_size=60)  # the vocabulary's size: export refuses any other
    export_hf(model, model.config, tmp_path / "export", spiece_model=spiece_model)
    tokenizer = transformers.AlbertTokenizer.from_pretrained(tmp_path / "export")
    sp = sentencepiece.SentencePieceProcessor(model_file=spiece_model)
    for text in SENTENCES:
        ids = sp.encode(Normalizer()(text))
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == ids, text
        assert tokenizer(text)["input_ids"] == [2, *ids, 3]
    pair = tokenizer(SENTENCES[0], SENTENCES[1], return_token_type_ids=True)
    a, b = sp.encode(Normalizer()(SENTENCES[0])), sp.encode(Normalizer()(SENTENCES[1]))
    assert pair["input_ids"] == [2, *a, 3, *b, 3]
    assert pair["token_type_ids"] == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    assert tokenizer.convert_tokens_to_ids(["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]) == [0, 1, 2, 3, 4]


# Real pairs as a GLUE task gives them: punctuation, accents, quotes, runs of spaces, different lengths.
PAIRS = [
    (SENTENCES[0], SENTENCES[1]),
    (SENTENCES[2], "The dog is lazy."),
    ("Is the café in Zürich?", SENTENCES[0]),
]


@pytest.mark.parametrize("tokenizer_class", ["AlbertTokenizer", "AlbertTokenizerFast", "AutoTokenizer"])
def test_exported_tokenizer_encodes_pairs_as_we_do_so_transformers_gives_our_logits(
    tmp_path, spiece_model, tokenizer_class
):
    model = tiny(vocab_size=60)
    folder = export_hf(model, model.config, tmp_path / "export", spiece_model=spiece_model)
    tokenizer = getattr(transformers, tokenizer_class).from_pretrained(folder)
    theirs = transformers.AlbertForPreTraining.from_pretrained(folder)
    encode = Encoder(spiece_model, model.config.max_position_embeddings)
    for a, b in PAIRS:
        input_ids, token_type_ids = encode(a, b)
        ours = dict(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=[1] * len(input_ids))
        assert dict(tokenizer(a, b)) == ours, (a, b)
        # What a user writes: the tokenizer's output straight into the model.
        assert_same_outputs(model, theirs, dict(tokenizer(a, b, return_tensors="pt")))


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new", "gelu_pytorch_tanh"])
def test_activation_round_trips_by_name_with_the_same_function(tmp_path, hidden_act):
    # Wide weights put the FFN inputs where erf and tanh GELU differ by far more than the tolerance.
    config = AlbertConfig.preset("tiny", initializer_range=0.3)
    torch.manual_seed(4)
    theirs = transformers.AlbertForPreTraining(transformers_config(config, hidden_act=hidden_act))
    theirs.save_pretrained(tmp_path / "theirs")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the function is kept exactly: nothing to warn about
        ours = import_hf(tmp_path / "theirs")
    assert_same_outputs(ours, theirs)

    export_hf(ours, ours.config, tmp_path / "ours")
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["hidden_act"] == hidden_act
    assert_same_outputs(ours, transformers.AlbertForPreTraining.from_pretrained(tmp_path / "ours"))


def test_import_refuses_other_activations_naming_the_file(tmp_path):
    theirs = transformers.AlbertForPreTraining(transformers_config(AlbertConfig.preset("tiny"), hidden_act="relu"))
    theirs.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"config\.json: hidden_act 'relu' is not supported"):
        import_hf(tmp_path)


def test_checkpoint_saved_before_hidden_act_existed_loads_with_the_tanh_gelu_it_was_trained_with(tmp_path):
    model = tiny()
    lightning_checkpoint(model, tmp_path / "old.ckpt")
    checkpoint = torch.load(tmp_path / "old.ckpt", weights_only=True)
    del checkpoint["hyper_parameters"]["config"]["hidden_act"]
    torch.save(checkpoint, tmp_path / "old.ckpt")
    assert load_pretraining_checkpoint(tmp_path / "old.ckpt").config == model.config  # hidden_act="gelu_new"
