"""One script for a Chinese corpus: ``segment.chinese_script`` converts with OpenCC, and the normaliser records it
through the shards, the vocabulary's hand-offs and the exported tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import opencc
import pytest
import sentencepiece as spm

from albert_lightning.interop.hf_tokenizer import write_tokenizer
from pipelines.algorithms.textnorm import Normalizer, hf_normalizer, normalizer_of, tokenizer_settings
from pipelines.runtime.files import read_parquet
from tests.conftest import LOCAL, NO_PARAMS

FIXTURE = Path(__file__).parent / "fixtures" / "zh"


def test_the_normaliser_converts_to_the_script_asked_and_keeps_it_by_default() -> None:
    traditional, simplified = "漢語軟體與臺灣的頭髮", "汉语软体与台湾的头发"
    assert Normalizer(chinese_script="simplified")(traditional) == simplified
    assert Normalizer(chinese_script="traditional")("汉语与头发") == "漢語與頭髮"
    assert Normalizer()(traditional) == traditional
    with pytest.raises(ValueError, match="chinese_script='cantonese': choose one of keep, simplified, traditional"):
        Normalizer(chinese_script="cantonese")


def test_the_switch_travels_in_tokenizer_config_and_back_and_the_default_writes_nothing_new() -> None:
    assert "chinese_script" not in tokenizer_settings(Normalizer())
    converting = Normalizer(lower_case=False, chinese_script="simplified")
    assert tokenizer_settings(converting)["chinese_script"] == "simplified"
    assert normalizer_of(tokenizer_settings(converting)) == converting
    with pytest.raises(ValueError, match="chinese_script='yes'"):
        normalizer_of({"chinese_script": "yes"})


def _traditional_copy(folder: Path) -> Path:
    """The fixture's chapters in traditional characters, as a Taiwanese or Hong Kong corpus would hold them."""
    convert = opencc.OpenCC("s2t").convert
    for path in sorted(FIXTURE.glob("*/*.txt")):
        target = folder / path.relative_to(FIXTURE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(convert(path.read_text(encoding="utf-8")), encoding="utf-8")
    return folder


def test_a_traditional_corpus_segments_to_simplified_sentences_and_the_record_says_so(tmp_path: Path) -> None:
    from pipelines import corpus, segment

    source = _traditional_copy(tmp_path / "trad")
    corpus.run([*NO_PARAMS, "--inputs", str(source / "*" / "*.txt"), "--output", str(tmp_path / "c"), *LOCAL])
    flags = ["--language=zh", "--input", str(tmp_path / "c"), *LOCAL]
    segment.run([*NO_PARAMS, *flags, "--output", str(tmp_path / "keep")])
    segment.run([*NO_PARAMS, *flags, "--output", str(tmp_path / "simple"), "--chinese_script=simplified"])

    def sentences(folder: Path) -> list[str]:
        return [s for p in sorted(folder.glob("sentences-*")) for d in read_parquet(str(p)).to_pylist()
                for s in d["sentences"]]  # fmt: skip

    kept, converted = sentences(tmp_path / "keep"), sentences(tmp_path / "simple")
    to_simplified = opencc.OpenCC("t2s").convert
    assert len(converted) > 500
    assert all(to_simplified(s) == s for s in converted)  # nothing left to convert
    assert sum(to_simplified(s) != s for s in kept) > 0.5 * len(kept)  # the corpus was traditional
    stats = json.loads((tmp_path / "simple" / "stats.json").read_text())
    assert stats["normalizer"]["chinese_script"] == "simplified"


@pytest.fixture(scope="module")
def zh_spiece(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A vocabulary trained on the fixture's simplified text, in ALBERT's id layout."""
    folder = tmp_path_factory.mktemp("zh_vocab")
    normalizer = Normalizer(chinese_script="simplified")
    lines = [line for p in sorted(FIXTURE.glob("*/*.txt")) for line in p.read_text(encoding="utf-8").splitlines()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([normalizer(line) for line in lines if line]), model_prefix=str(folder / "spiece"),
        vocab_size=2500, character_coverage=0.9995, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"], normalization_rule_name="identity", minloglevel=2,
    )  # fmt: skip
    return folder / "spiece.model"


def test_an_exported_tokenizer_records_the_conversion_and_transformers_loads_it(tmp_path: Path, zh_spiece) -> None:
    from transformers import AutoTokenizer

    normalizer = Normalizer(chinese_script="simplified")
    sp = spm.SentencePieceProcessor(model_file=str(zh_spiece))
    folder = tmp_path / "export"
    folder.mkdir()
    write_tokenizer(sp, zh_spiece, folder, 64, normalizer)
    assert hf_normalizer(folder) == normalizer  # fine-tuning from the export converts as pretraining did
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    text = "却說張飛拍馬趕到關下，不得進而回。"
    # transformers has no conversion step: its user converts first, and then gets our pipeline's ids.
    assert tokenizer(normalizer(text), add_special_tokens=False)["input_ids"] == sp.encode(normalizer(text))


PAIRS = [
    ("話說天下大勢，分久必合，合久必分。", "周末七國分爭，並入於秦。"),
    ("却说张飞拍马赶到关下，不得进而回。", "此开卷第一回也。"),
    ("宝玉听了，忙问：“这是什么话？”", None),
]


def test_an_exported_chinese_model_gives_transformers_our_ids_and_logits(tmp_path: Path, zh_spiece) -> None:
    import torch
    import transformers

    from albert_lightning.evaluation.finetuning import Encoder
    from albert_lightning.interop.hf import export_hf
    from albert_lightning.model import AlbertConfig, AlbertForPreTraining

    normalizer = Normalizer(chinese_script="simplified")
    torch.manual_seed(0)
    vocab = spm.SentencePieceProcessor(model_file=str(zh_spiece)).get_piece_size()
    model = AlbertForPreTraining(AlbertConfig.preset("tiny", vocab_size=vocab)).eval()
    folder = export_hf(model, model.config, tmp_path / "export", str(zh_spiece), normalizer)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    theirs = transformers.AlbertForPreTraining.from_pretrained(folder).eval()
    encode = Encoder(zh_spiece, model.config.max_position_embeddings, hf_normalizer(folder))
    for a, b in PAIRS:
        input_ids, token_type_ids = encode(a, b)
        assert 1 not in input_ids  # every character of the pairs is in the vocabulary (1: <unk>)
        converted = (normalizer(a), None if b is None else normalizer(b))
        batch = tokenizer(*[t for t in converted if t is not None], return_tensors="pt")
        assert batch["input_ids"][0].tolist() == input_ids and batch["token_type_ids"][0].tolist() == token_type_ids
        with torch.no_grad():
            ours, expected = model(**batch), theirs(**batch)
        torch.testing.assert_close(ours.prediction_logits, expected.prediction_logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours.sop_logits, expected.sop_logits, atol=1e-5, rtol=1e-5)
