"""The tokenizer files of a Hugging Face ALBERT folder, as an export writes them: ``spiece.model``,
``tokenizer_config.json``, ``special_tokens_map.json`` and ``tokenizer.json`` (``tokenizers``' serialisation of
AlbertTokenizer's pipeline), each carrying the normalisation the text was pretrained under; or, for a WordPiece
vocabulary, BERT's ``vocab.txt`` with the ``BertTokenizer`` settings it was read with."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import sentencepiece

from pipelines.algorithms.textnorm import Normalizer, tokenizer_settings
from pipelines.algorithms.vocab_layout import SPECIAL_PIECES
from pipelines.algorithms.wordpiece import ROLES, WordPieceVocab

__all__ = ["SPECIAL_IDS", "SPECIAL_TOKENS", "write_tokenizer", "write_wordpiece_tokenizer"]

# ALBERT's special-token layout (pipelines/algorithms/vocab_layout.py), as AlbertTokenizer names them.
SPECIAL_TOKENS = {"pad_token": "<pad>", "unk_token": "<unk>", "cls_token": "[CLS]", "sep_token": "[SEP]"}
SPECIAL_TOKENS |= {"mask_token": "[MASK]", "bos_token": "[CLS]", "eos_token": "[SEP]"}
SPECIAL_IDS = {piece: i for i, piece in enumerate(SPECIAL_PIECES)}


def write_tokenizer(
    sp: sentencepiece.SentencePieceProcessor, spiece_model: Path, folder: Path, max_length: int, normalizer: Normalizer
) -> None:
    """Copies spiece.model and writes tokenizer_config.json, special_tokens_map.json and tokenizer.json.

    tokenizer.json spares transformers from parsing spiece.model with protobuf, which fails when the protobuf
    runtime is older than sentencepiece's generated code (protobuf 6 with sentencepiece 0.2.3, as here).
    Both files carry the normalisation: transformers 5's AlbertTokenizer rebuilds its normalizers from
    tokenizer_config.json, while ``tokenizers.Tokenizer`` and ``PreTrainedTokenizerFast`` use tokenizer.json's.
    """
    shutil.copyfile(spiece_model, folder / "spiece.model")
    settings = {**tokenizer_settings(normalizer), "remove_space": True, "model_max_length": max_length}
    # AlbertTokenizer's class default (["input_ids", "attention_mask"] in transformers 5) drops token_type_ids, so
    # model(**tok(a, b)) would read segment B as type 0; listing them makes tok(a, b) return our pipeline's ids.
    settings["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    tokenizer_config = {"tokenizer_class": "AlbertTokenizer", **settings, **SPECIAL_TOKENS}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    (folder / "special_tokens_map.json").write_text(json.dumps(SPECIAL_TOKENS, indent=2) + "\n")
    charsmap = _proto_bytes(_proto_bytes(sp.serialized_model_proto(), 3), 2)  # normalizer_spec.precompiled_charsmap
    tokenizer = _tokenizer_json(sp, charsmap, normalizer)
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False) + "\n")


def write_wordpiece_tokenizer(vocab: WordPieceVocab, folder: Path, max_length: int, normalizer: Normalizer) -> None:
    """Writes vocab.txt, tokenizer_config.json and special_tokens_map.json of a BERT WordPiece vocabulary, so that
    ``AutoTokenizer`` loads ``BertTokenizer`` with the settings the shards were cut with.

    The text before it kept its case and accents (the vocabulary lower-cases and strips as its settings say); a
    script conversion, ours alone, travels as ``chinese_script`` as it does for SentencePiece.
    """
    (folder / "vocab.txt").write_bytes(vocab.vocab_txt())
    settings = {"tokenizer_class": "BertTokenizer", **vocab.tokenizer, "model_max_length": max_length}
    settings["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    if normalizer.chinese_script != "keep":
        settings["chinese_script"] = normalizer.chinese_script
    special = {role: vocab.settings.special_tokens[i] for i, role in enumerate(ROLES)}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2, ensure_ascii=False) + "\n")


def _tokenizer_json(sp: sentencepiece.SentencePieceProcessor, charsmap: bytes, normalizer: Normalizer) -> dict:
    """The `tokenizers` serialisation of AlbertTokenizer's pipeline (as transformers builds it) for ``sp``."""
    metaspace = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added_tokens(),
        "normalizer": {"type": "Sequence", "normalizers": _normalizers(normalizer, charsmap)},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]},
        "post_processor": _post_processor(),
        "decoder": metaspace,
        "model": {
            "type": "Unigram",
            "unk_id": SPECIAL_IDS["<unk>"],
            "vocab": [[sp.id_to_piece(i), sp.get_score(i)] for i in range(sp.get_piece_size())],
            "byte_fallback": False,
        },
    }


def _normalizers(normalizer: Normalizer, charsmap: bytes) -> list[dict]:
    """``normalizer``'s steps as AlbertTokenizer's normalizers (transformers' AlbertConverter), then the charsmap."""
    steps = [
        {"type": "Replace", "pattern": {"String": "``"}, "content": '"'},
        {"type": "Replace", "pattern": {"String": "''"}, "content": '"'},
    ]
    if normalizer.strip_accents:
        steps += [{"type": "NFKD"}, {"type": "StripAccents"}]
    if normalizer.lower_case:
        steps.append({"type": "Lowercase"})
    if charsmap:
        steps.append({"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()})
    return steps


def _added_tokens() -> list[dict]:
    """ALBERT's special pieces, matched before normalisation; ``[MASK]`` takes the space before it along, as
    AlbertTokenizer's mask token does."""
    return [
        {
            "id": i,
            "content": piece,
            "single_word": False,
            "lstrip": piece == "[MASK]",
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for piece, i in SPECIAL_IDS.items()
    ]


def _post_processor() -> dict:
    """``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]``, B's part with token type 1."""

    def special(name: str, type_id: int) -> dict:
        return {"SpecialToken": {"id": name, "type_id": type_id}}

    def sequence(name: str, type_id: int) -> dict:
        return {"Sequence": {"id": name, "type_id": type_id}}

    return {
        "type": "TemplateProcessing",
        "single": [special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0)],
        "pair": [special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0), sequence("B", 1), special("[SEP]", 1)],
        "special_tokens": {t: {"id": t, "ids": [SPECIAL_IDS[t]], "tokens": [t]} for t in ("[CLS]", "[SEP]")},
    }


def _proto_bytes(message: bytes, number: int) -> bytes:
    """Returns length-delimited field ``number`` of a protobuf message (b"" if absent), reading the wire format
    directly: sentencepiece's generated protobuf module may not import (see ``write_tokenizer``)."""
    found, i = b"", 0
    while i < len(message):
        key, i = _varint(message, i)
        wire_type = key & 7
        if wire_type == 0:
            _, i = _varint(message, i)
        elif wire_type in (1, 5):
            i += 8 if wire_type == 1 else 4
        elif wire_type == 2:
            size, i = _varint(message, i)
            if key >> 3 == number:
                found = message[i : i + size]
            i += size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
    return found


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7
