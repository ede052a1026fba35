"""Words of Chinese text for whole word masking: which pieces continue a jieba word (pure but for jieba).

Chinese is written without spaces, so the vocabulary alone cannot say where a word ends and the masker takes each
CJK character as a word (``masking``). Chinese whole word masking (ymcui/Chinese-BERT-wwm) segments the text into
words and masks all characters of a chosen word together; ``piece_joins`` says, for each SentencePiece piece of a
sentence, whether it starts inside a jieba word of two or more CJK characters, which ``masking.mask_batch`` takes
as its ``joins``. A word with any other character (``T恤``, ``3D``) keeps the vocabulary's rule, as non-CJK text
does. A piece spanning two jieba words makes them one word: pieces are never split.

The words are jieba's (precise mode, its HMM for unknown words), cut by rjieba, the Rust implementation of jieba
(jieba-rs, with jieba's dictionary built in) that transformers' RoFormer tokenizer uses: 20 times faster than
jieba 0.42.1, and the same words on every one of the 49,094 sentences of bench/zh_corpus.py's novels
(tests/test_whole_word_masking.py compares them on the fixture). rjieba is pinned, its dictionary with it, and
each process builds its own segmenter, never the module's shared one that ``rjieba.add_word`` changes: the
words, and so the shards, are the same on every worker and machine.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Sequence

import numpy as np

from pipelines.algorithms.masking import CJK_RANGES

__all__ = ["RJIEBA_VERSION", "jieba_words", "piece_joins", "pieces_joins"]

RJIEBA_VERSION = "0.2.2"  # its built-in dictionary is the words: another version may segment differently


@functools.cache
def _segmenter():  # -> rjieba.Jieba, built once per process
    try:
        import rjieba
    except ImportError as err:
        raise ImportError("instances.word_segmenter=jieba needs rjieba: pip install -e '.[zh]'") from err
    version = importlib.metadata.version("rjieba")
    if version != RJIEBA_VERSION:
        raise ImportError(
            f"rjieba {version} is installed, not the pinned {RJIEBA_VERSION} whose dictionary the shards record; "
            "pip install -e '.[zh]', so every worker segments alike"
        )
    return rjieba.Jieba()


def jieba_words(text: str) -> list[str]:
    """Returns ``text`` cut into jieba words (precise mode with its HMM for unknown words), end to end."""
    return _segmenter().cut(text, True)


def piece_joins(text: str, begins: Sequence[int]) -> np.ndarray:
    """Returns, for each piece of ``text`` starting at UTF-8 byte ``begins[i]``, 1 if it starts inside a jieba
    word of two or more CJK characters (it continues the word of the piece before it), else 0 (int8).

    ``begins`` are SentencePiece's ``begin`` offsets into ``text`` as it was encoded.
    """
    begins = np.asarray(begins, dtype=np.int64)
    return pieces_joins([text], begins, np.array([len(begins)]))


def pieces_joins(texts: Sequence[str], begins: np.ndarray, counts: np.ndarray, unit: str = "byte") -> np.ndarray:
    """``piece_joins`` of many texts at once: ``begins`` holds every text's pieces' offsets end to end (each into
    its own text), ``counts`` each text's number of pieces; returns the joins end to end.

    ``unit`` is what the offsets count: "byte" (UTF-8 bytes, SentencePiece's ``begin``) or "char" (characters,
    the tokenizers library's offsets, which WordPiece encoding gives).

    Raises:
        ValueError: if jieba's words do not add up to the texts (they must, or the offsets would misalign).
    """
    words = [word for text in texts for word in jieba_words(text)]
    joined = "".join(texts)
    lengths = np.fromiter(map(len, words), np.int64, len(words))
    if lengths.sum() != len(joined):
        raise ValueError(f"jieba's words of {len(texts)} texts ({joined[:40]!r}…) do not add up to them")
    codes = np.frombuffer(joined.encode("utf-32-le"), np.uint32)
    cjk = np.zeros(len(codes), dtype=bool)
    for first, last in CJK_RANGES:
        cjk |= (codes >= first) & (codes <= last)
    starts = np.cumsum(lengths) - lengths  # each word's first character
    inside = np.zeros(len(codes) + 1, dtype=bool)  # per character: a later one of a CJK word; past the end, no
    if len(words):
        in_cjk_word = np.minimum.reduceat(cjk, starts) & (lengths > 1)
        inside[:-1] = np.repeat(in_cjk_word, lengths)
        inside[starts] = False
    begins = np.asarray(begins, dtype=np.int64)
    if unit == "char":
        text_chars = np.fromiter(map(len, texts), np.int64, len(texts))
        return inside[begins + np.repeat(np.cumsum(text_chars) - text_chars, counts)].astype(np.int8)
    if unit != "byte":
        raise ValueError(f"unit={unit!r}: choose byte or char")
    encoded = np.frombuffer(joined.encode("utf-8"), np.uint8)
    # The character each byte belongs to (UTF-8 continuation bytes are 10xxxxxx); past the end, "no character".
    char_of_byte = np.append(np.cumsum((encoded & 0xC0) != 0x80) - 1, len(codes))
    text_bytes = np.fromiter((len(text.encode("utf-8")) for text in texts), np.int64, len(texts))
    first_byte = np.repeat(np.cumsum(text_bytes) - text_bytes, counts)
    return inside[char_of_byte[begins + first_byte]].astype(np.int8)
