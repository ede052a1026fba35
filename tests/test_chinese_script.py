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


def test_an_exported_tokenizer_records_the_conversion_and_transformers_loads_it(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    lines = [line for p in sorted(FIXTURE.glob("*/*.txt")) for line in p.read_text(encoding="utf-8").splitlines()]
    normalizer = Normalizer(chinese_script="simplified")
    model = tmp_path / "spiece.model"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([normalizer(line) for line in lines if line]), model_prefix=str(tmp_path / "spiece"),
        vocab_size=2500, character_coverage=0.9995, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"], normalization_rule_name="identity", minloglevel=2,
    )  # fmt: skip
    sp = spm.SentencePieceProcessor(model_file=str(model))
    folder = tmp_path / "export"
    folder.mkdir()
    write_tokenizer(sp, model, folder, 64, normalizer)
    assert hf_normalizer(folder) == normalizer  # fine-tuning from the export converts as pretraining did
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    text = "却說張飛拍馬趕到關下，不得進而回。"
    # transformers has no conversion step: its user converts first, and then gets our pipeline's ids.
    assert tokenizer(normalizer(text), add_special_tokens=False)["input_ids"] == sp.encode(normalizer(text))
