"""WordPiece vocab.txt: BertTokenizer's ids on every fixture sentence, the special-id layout, training, bad files."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from pipelines.algorithms.sentences import split_sentences
from pipelines.algorithms.vocabulary import token_classes
from pipelines.algorithms.word_segments import pieces_joins
from pipelines.algorithms.wordpiece import (
    WordPieceSettings,
    WordPieceVocab,
    read_config,
    train_wordpiece,
    wordpiece_from_bytes,
)

FIXTURES = Path(__file__).parent / "fixtures"
# What a basic tokenizer can trip on: accents, control and zero-width characters, full-width forms, kana and
# hangul, a word past 100 characters, symbols, an emoji, a mixed Chinese-Latin word.
HARD = [
    "Café déjà vu, naïve Zoë — résumé of the Ångström.",
    "tab\there\x00nul\u200bzero-width\ufeffbom and \x7fdel",
    "ＦＵＬＬ－ＷＩＤＴＨ １２３ and ①②",
    "カタカナとひらがな、한국어 텍스트。",
    "a" * 101 + " short",
    "T恤3D打印，iPhone 15售价5999元！",
    "x² ≥ ½ · π ≈ 3.14159 🙂 ## #hash",
    "İstanbul ΣΊΣΥΦΟΣ straße ǅemal",
]


def _sentences(folder: str, language: str, separator: str) -> list[str]:
    return [
        sentence
        for path in sorted((FIXTURES / folder).rglob("*"))
        if path.is_file() and path.name != "README.md"
        for paragraph in path.read_text(encoding="utf-8").split(separator)
        if paragraph.strip()
        for sentence in split_sentences(paragraph, language)
    ]


@pytest.fixture(scope="module")
def sentences() -> dict[str, list[str]]:
    return {"zh": _sentences("zh", "zh", "\n"), "en": _sentences("prose", "en", "\n\n")}


@pytest.fixture(scope="module")
def trained(sentences) -> WordPieceVocab:
    return train_wordpiece([*sentences["zh"], *sentences["en"]], vocab_size=3000)


def _bert_layout(vocab: WordPieceVocab) -> bytes:
    """The trained pieces in BERT's layout: [PAD], 99 [unused] slots, [UNK], [CLS], [SEP], [MASK], the rest."""
    head = ["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return "".join(p + "\n" for p in [*head, *vocab.pieces[5:]]).encode("utf-8")


def _write_folder(folder: Path, vocab_txt: bytes, config: dict) -> Path:
    import json

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_bytes(vocab_txt)
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "BertTokenizer"}))
    return folder


SETTINGS = {
    "uncased": {"do_lower_case": True},
    "cased": {"do_lower_case": False},
    "cased_stripped": {"do_lower_case": False, "strip_accents": True},
    "uncased_accents": {"do_lower_case": True, "strip_accents": False},
    "no_chinese_split": {"do_lower_case": True, "tokenize_chinese_chars": False},
}


@pytest.mark.parametrize("layout", ["trained", "bert"])
@pytest.mark.parametrize("name", list(SETTINGS))
def test_ids_equal_bert_tokenizers_on_every_sentence(sentences, tmp_path, layout, name):
    from transformers import BertTokenizer
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    settings = WordPieceSettings.from_config(SETTINGS[name], name)
    size = 6000 if name == "no_chinese_split" else 3000  # a CJK character inside a word is a ## piece too
    trained = train_wordpiece([*sentences["zh"], *sentences["en"]], vocab_size=size, settings=settings)
    vocab_txt = trained.vocab_txt() if layout == "trained" else _bert_layout(trained)
    folder = _write_folder(tmp_path / name, vocab_txt, SETTINGS[name])
    ours = wordpiece_from_bytes(vocab_txt, read_config((folder / "tokenizer_config.json").read_bytes(), "t"), "t")
    texts = [*sentences["zh"], *sentences["en"], *HARD]
    assert len(sentences["zh"]) > 900 and len(sentences["en"]) > 4000  # every fixture sentence, not a handful
    ids, counts = ours.encode(texts)
    ours_per_text = np.split(ids, np.cumsum(counts)[:-1])
    for reference in (BertTokenizer.from_pretrained(folder), BertTokenizerLegacy.from_pretrained(folder)):
        expected = reference(texts, add_special_tokens=False)["input_ids"]
        mismatches = [t for t, a, b in zip(texts, ours_per_text, expected, strict=True) if a.tolist() != b]
        assert not mismatches, f"{type(reference).__name__}: {len(mismatches)} of {len(texts)}: {mismatches[:3]}"
    # Enough of the text is in the vocabulary for the comparison to mean something, and the hard cases reach
    # [UNK] (the 101-character word). Unsplit, a Chinese sentence is one word, often past 100 characters.
    unk_rate = np.mean(ids == ours.special_ids["unk_token"])
    assert 0 < unk_rate < (0.2 if name == "no_chinese_split" else 0.01)
    assert ours.num_special == (5 if layout == "trained" else 104)


def test_ids_and_begins_agree_and_survive_pickling(trained, sentences):
    texts = sentences["zh"][:200] + HARD
    ids, counts = trained.encode(texts)
    ids2, counts2, begins = trained.encode_with_begins(texts)
    assert np.array_equal(ids, ids2) and np.array_equal(counts, counts2)
    first = np.cumsum(counts) - counts
    assert np.all(begins[first[counts > 0]] >= 0) and len(begins) == len(ids)
    clone = pickle.loads(pickle.dumps(trained))  # how Beam ships it to a worker
    assert np.array_equal(clone.encode(texts)[0], ids)


def test_training_is_deterministic_and_keeps_every_cjk_character(sentences):
    sample = [*sentences["zh"], *sentences["en"]]
    first = train_wordpiece(sample, vocab_size=2500)
    again = train_wordpiece(list(reversed(sample)), vocab_size=2500)  # the sample is a set: order must not matter
    assert first.vocab_txt() == again.vocab_txt()
    assert first.pieces[:5] == ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ALBERT's ids
    characters = {c for s in sentences["zh"] for c in s if "\u4e00" <= c <= "\u9fff"}
    assert len(characters) > 1000 and characters <= set(first.pieces)  # one piece per CJK character of the sample
    assert not any(p.startswith("##") and "\u4e00" <= p[2:3] <= "\u9fff" for p in first.pieces)  # never needed


def test_a_word_is_a_piece_and_its_continuations(trained):
    classes = token_classes(trained)
    text = "Whatsoever befell 贾雨村, unbelievably."
    ids, _ = trained.encode([text])
    pieces = [trained.pieces[i] for i in ids]
    words = ["".join(pieces[a:b]).replace("##", "") for a, b, _ in classes.words(ids)]
    assert words == ["whatsoever", "befell", "贾", "雨", "村", ",", "unbelievably", "."]
    assert any(p.startswith("##") for p in pieces)  # a continuation was there to be joined


def test_jieba_joins_from_character_offsets_match_byte_offsets(trained):
    pytest.importorskip("rjieba")
    texts = ["甄士隐梦幻识通灵，贾雨村风尘怀闺秀。", "iPhone 15售价5999元，𠮷野家的牛丼很好吃。"]  # 𠮷: 4 UTF-8 bytes
    ids, counts, begins = trained.encode_with_begins(texts)
    text_of = np.repeat(np.arange(len(texts)), counts)
    byte_begins = np.array([len(texts[t][:b].encode("utf-8")) for t, b in zip(text_of, begins, strict=True)])
    by_char = pieces_joins(texts, begins, counts, unit="char")
    assert np.array_equal(by_char, pieces_joins(texts, byte_begins, counts, unit="byte"))
    first_text = [trained.pieces[i] for i in ids[: counts[0]]]
    assert first_text[:3] == ["甄", "士", "隐"] and by_char[:3].tolist() == [0, 1, 1]  # 甄士隐, one jieba word


def _vocab(*lines: str) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@pytest.mark.parametrize(
    ("data", "config", "message"),
    [
        (b"[PAD]\n\xff\xfe\n", None, "not UTF-8"),
        (_vocab(*SPECIALS, "a", "b", "a"), None, "line 8 repeats 'a' of line 6"),
        (_vocab(*SPECIALS, "a", "", "b"), None, "line 7 is empty"),
        (_vocab("[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"), None, "no [MASK]"),
        (_vocab("[PAD]", "the", "[UNK]", "[CLS]", "[SEP]", "[MASK]"), None, "line 2 holds 'the' below"),
        (_vocab(*SPECIALS, "a"), {"do_lower_case": "yes"}, "do_lower_case='yes'"),
        (_vocab(*SPECIALS, "a"), {"unk_token": "<unk>"}, "no <unk>"),
    ],
)
def test_a_bad_vocab_names_the_file_and_the_problem(data, config, message):
    with pytest.raises(ValueError, match=r"zh/(vocab\.txt|tokenizer_config\.json): ") as err:
        wordpiece_from_bytes(data, config, "zh/vocab.txt")
    assert message in str(err.value)


def test_settings_round_trip_through_the_config_and_accept_added_tokens():
    settings = WordPieceSettings(do_lower_case=False, strip_accents=True, tokenize_chinese_chars=False)
    assert WordPieceSettings.from_config(settings.to_config(), "t") == settings
    added = {"mask_token": {"content": "[MASK]", "lstrip": True, "__type": "AddedToken"}}
    assert WordPieceSettings.from_config(added, "t").mask_token == "[MASK]"
    with pytest.raises(ValueError, match=r"tokenizer_config\.json: not a JSON object"):
        read_config(b"[1, 2]", "f/tokenizer_config.json")


def test_text_never_forges_a_special_id(trained):
    ids, _ = trained.encode(["a [SEP] b [MASK] [CLS]"])
    assert not set(ids.tolist()) & {2, 3, 4}  # BertTokenizer would give the specials; Google's BERT never did


def test_fine_tuning_encodes_pairs_and_answer_spans_as_bert_tokenizer_in_berts_layout(trained, sentences, tmp_path):
    """evaluate's Encoder and reading windows on a vocab.txt with BERT's ids ([CLS] 101, [SEP] 102): the pairs'
    ids and each piece's character span are BertTokenizer's on every fixture sentence."""
    from transformers import BertTokenizer

    from albert_lightning.evaluation.finetuning import Encoder
    from albert_lightning.evaluation.reading.spans import tokenize_with_offsets
    from albert_lightning.evaluation.reading.windows import make_windows
    from pipelines.algorithms.textnorm import Normalizer

    folder = _write_folder(tmp_path / "bert", _bert_layout(trained), SETTINGS["uncased"])
    encoder = Encoder(folder / "vocab.txt", 512, Normalizer(lower_case=False, strip_accents=False))
    reference = BertTokenizer.from_pretrained(folder)
    # textnorm merges `` and '' into one quote (as pretraining saw them); BertTokenizer splits them: other ids
    texts = [t for t in [*sentences["zh"], *sentences["en"], *HARD] if "``" not in t and "''" not in t]
    pairs = list(zip(texts[::2], texts[1::2], strict=False))
    assert len(pairs) > 2000
    for a, b in pairs:
        expected = reference(a, b)
        if len(expected["input_ids"]) <= encoder.max_seq_length:  # longer: cut, as a reference cut needs asking
            assert encoder(a, b) == (expected["input_ids"], expected["token_type_ids"]), (a, b)
    for text in texts:
        ids, offsets = tokenize_with_offsets(encoder, text)
        expected = reference(text, add_special_tokens=False, return_offsets_mapping=True)
        assert (ids, offsets) == (expected["input_ids"], [tuple(o) for o in expected["offset_mapping"]]), text
    context = sentences["zh"][0]
    answer = (4, 8)  # 甄士隐梦, after "第1章 ": four characters, one piece each
    (window,) = make_windows(encoder, "谁？", context, [answer], max_seq_length=512)
    assert window.input_ids[0] == 101 and window.input_ids.count(102) == 2
    start, end = window.context_offsets[window.start_position], window.context_offsets[window.end_position]
    assert (start[0], end[1]) == answer


def test_a_vocabulary_is_a_file_or_the_one_file_of_a_folder(trained, tmp_path):
    from pipelines.algorithms.vocabulary import load_vocabulary

    folder = tmp_path / "vocab"
    folder.mkdir()
    with pytest.raises(FileNotFoundError, match=rf"{folder}: no spiece\.model or vocab\.txt"):
        load_vocabulary(folder)
    (folder / "vocab.txt").write_bytes(trained.vocab_txt())
    (folder / "tokenizer_config.json").mkdir()  # a folder of the config's name is no config: defaults, not a crash
    (folder / "spiece.model").mkdir()  # nor is a folder of a vocabulary's name a second vocabulary
    assert load_vocabulary(folder).pieces == load_vocabulary(folder / "vocab.txt").pieces == trained.pieces
    (folder / "spiece.model").rmdir()
    with pytest.raises(ValueError, match=rf"vocab\.txt: {trained.vocab_size} pieces, but ckpt has vocab_size 30000"):
        load_vocabulary(folder, 30000, "ckpt")
    (folder / "spiece.model").write_bytes(b"")
    with pytest.raises(ValueError, match=rf"{folder}: holds both spiece\.model and vocab\.txt; name the vocabulary"):
        load_vocabulary(folder)
