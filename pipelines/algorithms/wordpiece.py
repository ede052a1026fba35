"""BERT's WordPiece vocabulary (``vocab.txt``): its special ids, ``BertTokenizer``'s tokenisation, and training one
(pure but for the tokenizers and sentencepiece libraries).

The Chinese ALBERTs in use (Google's Chinese releases, brightmart/albert_zh, the CLUE baselines) ship BERT's
``vocab.txt`` and are read by ``transformers.BertTokenizer``: a basic tokenizer (control characters dropped,
whitespace split, every CJK character a word of its own, punctuation split, lower-casing and accent stripping as
the folder's ``tokenizer_config.json`` says) and then greedy longest-match WordPiece, a word longer than 100
characters or with no matching piece becoming ``[UNK]``. ``WordPieceVocab.encode`` runs exactly those steps
through the Rust implementation ``BertTokenizer`` itself is built on (the tokenizers library's ``BertNormalizer``,
``BertPreTokenizer`` and ``WordPiece`` model), configured from the same file; tests/test_wordpiece.py checks the
ids against ``BertTokenizer`` and against transformers' pure-Python ``BertTokenizerLegacy`` (Google's algorithm)
on every sentence of the Chinese and English fixtures.

One deliberate difference: ``BertTokenizer`` matches its special tokens in the raw text (a literal "[SEP]" in a
document becomes the separator), which Google's ``create_pretraining_data`` never did. Text never yields a special
id here: a corpus cannot forge the structure the masker and the model rely on.

Every id below the last of the five special tokens is taken as special (BERT's vocabularies put [PAD], the
[unused] slots, [UNK], [CLS], [SEP] and [MASK] first), so the masker's rule "ids below ``num_special`` are never
masked nor drawn" holds for BERT's layout (``num_special`` 104) and for the layout trained here (the five first, in
ALBERT's order, so that a trained vocabulary has ALBERT's ids: ``num_special`` 5).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import itertools
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

__all__ = [
    "WordPieceSettings",
    "WordPieceVocab",
    "bert_words",
    "is_vocab_txt",
    "read_config",
    "train_wordpiece",
    "wordpiece_from_bytes",
]

# The special tokens' roles, in ALBERT's id order (pipelines.algorithms.vocab_layout): a trained vocabulary puts
# them first in this order, so its ids are ALBERT's.
ROLES = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
MAX_INPUT_CHARS_PER_WORD = 100  # BertTokenizer's: a longer word is one [UNK]
CONTINUATION = "##"
VOCAB_TXT, CONFIG = "vocab.txt", "tokenizer_config.json"  # the two files of a BertTokenizer folder read here
_BRACKETED = re.compile(r"\[[^\[\]]+\]")  # [PAD], [unused17], <S>-like slots are written [..] in BERT's files


@dataclass(frozen=True)
class WordPieceSettings:
    """The switches of a ``BertTokenizer`` (its ``tokenizer_config.json``), with its defaults."""

    do_lower_case: bool = True
    strip_accents: bool | None = None  # None: strip when lower-casing, as BERT does
    tokenize_chinese_chars: bool = True
    pad_token: str = "[PAD]"
    unk_token: str = "[UNK]"
    cls_token: str = "[CLS]"
    sep_token: str = "[SEP]"
    mask_token: str = "[MASK]"

    @classmethod
    def from_config(cls, config: dict, source: str) -> WordPieceSettings:
        """Reads the switches from a parsed ``tokenizer_config.json``; keys it lacks keep BertTokenizer's defaults.

        Raises:
            ValueError: naming ``source``, when a switch has the wrong type.
        """
        values = {}
        for name, default in ((f.name, f.default) for f in dataclasses.fields(cls)):
            if name not in config:
                continue
            value = config[name]
            if name in ROLES and isinstance(value, dict):  # an AddedToken, as newer transformers save it
                value = value.get("content")
            wanted = (bool, type(None)) if name == "strip_accents" else (type(default),)
            if not isinstance(value, wanted) or (isinstance(default, str) and not value):
                raise ValueError(f"{source}: {name}={value!r} is not a {' or '.join(t.__name__ for t in wanted)}")
            values[name] = value
        return cls(**values)

    def to_config(self) -> dict:
        """The ``tokenizer_config.json`` entries that make ``BertTokenizer`` tokenise as these settings do."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @property
    def special_tokens(self) -> tuple[str, ...]:
        return tuple(getattr(self, role) for role in ROLES)


@dataclass(frozen=True, eq=False)
class WordPieceVocab:
    """A ``vocab.txt`` (``pieces[i]`` is id i) with its settings; build it with ``wordpiece_from_bytes``."""

    pieces: tuple[str, ...] = field(repr=False)
    settings: WordPieceSettings
    source: str
    file: ClassVar[str] = VOCAB_TXT
    begins_unit: ClassVar[str] = "char"  # encode_with_begins counts characters (the tokenizers library's offsets)

    @functools.cached_property
    def ids(self) -> dict[str, int]:
        return {piece: i for i, piece in enumerate(self.pieces)}

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    @property
    def special_ids(self) -> dict[str, int]:
        """Each role's id (``pad_token`` → 0, ...), in the vocabulary's own layout."""
        return {role: self.ids[token] for role, token in zip(ROLES, self.settings.special_tokens, strict=True)}

    @property
    def num_special(self) -> int:
        """Ids below this are special: never masked, never drawn as a replacement."""
        return max(self.special_ids.values()) + 1

    @property
    def tokenizer(self) -> dict:
        """The settings as ``tokenizer_config.json`` writes them (what a shard manifest records)."""
        return self.settings.to_config()

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Returns every text's piece ids end to end (int32) and each text's count (int64), as BertTokenizer's
        ``input_ids`` without [CLS] and [SEP]."""
        encodings = self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        counts = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
        ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), np.int32, int(counts.sum()))
        return ids, counts

    def encode_with_begins(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``encode``, and each piece's first character in its text (int64): where a jieba word boundary falls."""
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        counts = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
        total = int(counts.sum())
        ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), np.int32, total)
        begins = np.fromiter((b for e in encodings for b, _ in e.offsets), np.int64, total)
        return ids, counts, begins

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """One text's ids and each piece's ``[begin, end)`` characters in it (an ``##`` piece's own characters)."""
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        return list(encoding.ids), list(encoding.offsets)

    @functools.cached_property
    def _tokenizer(self):  # -> tokenizers.Tokenizer, built once per process (not pickled: rebuilt from pieces)
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

        s = self.settings
        model = models.WordPiece(
            self.ids, unk_token=s.unk_token, max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
            continuing_subword_prefix=CONTINUATION,
        )  # fmt: skip
        tokenizer = Tokenizer(model)
        tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=s.tokenize_chinese_chars, strip_accents=s.strip_accents,
            lowercase=s.do_lower_case,
        )  # fmt: skip
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        return tokenizer

    def __getstate__(self) -> dict:  # Beam pickles the stage's functions: the Rust tokenizer is rebuilt per worker
        state = dict(self.__dict__)
        state.pop("_tokenizer", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def vocab_txt(self) -> bytes:
        """The ``vocab.txt`` bytes, one piece a line, as BERT writes it."""
        return "".join(piece + "\n" for piece in self.pieces).encode("utf-8")


def is_vocab_txt(name: str) -> bool:
    """True for a path naming a WordPiece ``vocab.txt`` (by name: the stages take a file or a folder)."""
    return name.rstrip("/").endswith(".txt")


def wordpiece_from_bytes(vocab: bytes, config: dict | None, source: str) -> WordPieceVocab:
    """Reads a ``vocab.txt`` (one piece a line, as transformers' ``load_vocab`` reads it) and its settings.

    Args:
        vocab: the file's bytes.
        config: the parsed ``tokenizer_config.json`` beside it, or None for BertTokenizer's defaults.
        source: the file's name, for the errors (the config's is taken to be beside it).

    Raises:
        ValueError: naming ``source`` and the line, when the file is not UTF-8, holds an empty or repeated piece
            (transformers would silently give two lines one id), lacks a special token, or puts a piece that is
            not written ``[...]`` below the last special token.
    """
    folder = source.rpartition("/")[0]
    settings = WordPieceSettings.from_config(config or {}, f"{folder}/{CONFIG}" if folder else CONFIG)
    try:
        text = vocab.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{source}: not UTF-8 ({err})") from err
    pieces = text.split("\n")
    if pieces and pieces[-1] == "":
        pieces.pop()  # the newline that ends the last line
    seen: dict[str, int] = {}
    for line, piece in enumerate(pieces, 1):
        if not piece.strip():
            raise ValueError(f"{source}: line {line} is empty or whitespace, not a piece")
        if piece in seen:
            raise ValueError(f"{source}: line {line} repeats {piece!r} of line {seen[piece]}")
        seen[piece] = line
    missing = [token for token in settings.special_tokens if token not in seen]
    if missing:
        raise ValueError(f"{source}: no {', '.join(missing)} (the special tokens BERT's layout needs)")
    vocab_ = WordPieceVocab(tuple(pieces), settings, source)
    specials = set(settings.special_tokens)
    for i in range(vocab_.num_special):
        if pieces[i] not in specials and not _BRACKETED.fullmatch(pieces[i]):
            raise ValueError(
                f"{source}: line {i + 1} holds {pieces[i]!r} below the special tokens' last id "
                f"{vocab_.num_special - 1}; every id below it is taken as special, so only [..] slots may be there"
            )
    return vocab_


def bert_words(texts: Iterable[str], settings: WordPieceSettings) -> Iterator[str]:
    """Yields each text as BERT's basic tokenizer cuts it (normalised as ``settings`` say), words joined by spaces."""
    tokenizer = WordPieceVocab(settings.special_tokens, settings, "words")._tokenizer
    for text in texts:
        words = tokenizer.pre_tokenizer.pre_tokenize_str(tokenizer.normalizer.normalize_str(text))
        yield " ".join(word for word, _ in words)


def train_wordpiece(
    sentences: Iterable[str],
    vocab_size: int,
    settings: WordPieceSettings | None = None,
    num_threads: int = 8,
) -> WordPieceVocab:
    """Trains a WordPiece vocabulary of at most ``vocab_size`` pieces on ``sentences``; the special tokens take ids
    0-4 in ALBERT's order.

    The pieces are SentencePiece BPE's over BERT's words (``bert_words``): a piece that begins a word is written
    bare, one inside a word with ``##``, as WordPiece writes them. The tokenizers library's ``WordPieceTrainer``
    is not used because it is not deterministic: three runs on one sample gave three vocabularies (its counts
    live in hash maps seeded per process), where SentencePiece with a fixed thread count gives the same bytes.
    Every character of the sample is a piece, and one that can sit inside a word is a ``##`` piece too, so a
    known character is never ``[UNK]``; a CJK character or a punctuation mark, which the basic tokenizer always
    cuts alone, is only the first, one piece per character as in BERT's Chinese vocabulary. The rest of the
    budget goes to longer pieces in SentencePiece's merge order.

    Raises:
        ValueError: when ``vocab_size`` cannot hold the special tokens and every character's pieces.
    """
    import sentencepiece as spm

    settings = settings or WordPieceSettings()
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=bert_words(sentences, settings), model_writer=model, model_type="bpe",
        vocab_size=vocab_size, hard_vocab_limit=False, character_coverage=1.0, normalization_rule_name="identity",
        split_by_whitespace=True, input_sentence_size=0, shuffle_input_sentence=False, num_threads=num_threads,
        bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2,
    )  # fmt: skip
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    learned = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if _is_normal(sp, i)]
    characters = [p for p in learned if len(p) == 1 and p != SPACE]
    inside = [CONTINUATION + c for c in characters if not _cut_alone(c, settings)]
    longer = [p[1:] if p.startswith(SPACE) else CONTINUATION + p for p in learned if len(p.lstrip(SPACE)) > 1]
    pieces = list(dict.fromkeys([*settings.special_tokens, *characters, *inside, *longer]))
    floor = len(settings.special_tokens) + len(characters) + len(inside)
    if vocab_size < floor:
        raise ValueError(
            f"vocab_size {vocab_size} is below the {floor} pieces the special tokens and the sample's "
            f"{len(characters)} characters need (each alone and, inside a word, as ##); raise vocab_size"
        )
    text = "".join(p + "\n" for p in pieces[:vocab_size])
    return wordpiece_from_bytes(text.encode("utf-8"), settings.to_config(), "trained")


SPACE = "\u2581"  # SentencePiece's word-start mark


def _is_normal(sp, i: int) -> bool:
    return not (sp.is_unknown(i) or sp.is_control(i) or sp.is_byte(i))


def _cut_alone(char: str, settings: WordPieceSettings) -> bool:
    """True for a character BERT's basic tokenizer always makes a word of its own (so never a ``##`` piece)."""
    code = ord(char)
    if settings.tokenize_chinese_chars and any(lo <= code <= hi for lo, hi in BERT_CHINESE_RANGES):
        return True
    ascii_punctuation = 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126
    return ascii_punctuation or unicodedata.category(char).startswith("P")


# BertTokenizer's _is_chinese_char: the CJK Unified Ideographs blocks (not kana, hangul or CJK punctuation).
BERT_CHINESE_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)  # fmt: skip


def read_config(data: bytes | None, source: str) -> dict | None:
    """Parses a ``tokenizer_config.json`` (None when there is none).

    Raises:
        ValueError: naming ``source``, when it is not a JSON object.
    """
    if data is None:
        return None
    try:
        config = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{source}: not JSON ({err})") from err
    if not isinstance(config, dict):
        raise ValueError(f"{source}: not a JSON object")
    return config
