"""The stages' vocabulary behind one interface: SentencePiece's ``spiece.model`` or BERT's WordPiece ``vocab.txt``
(pure but for the two tokenizer libraries).

The instances stage encodes sentences and masks words, the shard folder carries the vocabulary file, and training
masks again: each asks a ``Vocabulary`` for piece ids and the special ids, and ``token_classes`` for its word rule,
never which kind it holds. ``vocabulary_from_bytes`` picks the kind by file name.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from pipelines.algorithms.masking import TokenClasses
from pipelines.algorithms.vocab_layout import CLS_ID, MASK_ID, NUM_SPECIAL, PAD_ID, SEP_ID, UNK_ID, spiece_from_proto
from pipelines.algorithms.wordpiece import CONFIG, VOCAB_TXT, WordPieceVocab, read_config, wordpiece_from_bytes

__all__ = [
    "SPIECE_MODEL",
    "VOCAB_FILES",
    "VOCAB_TXT",
    "SentencePieceVocab",
    "Vocabulary",
    "load_vocabulary",
    "read_vocabulary",
    "token_classes",
    "vocabulary_file",
    "vocabulary_from_bytes",
]

SPIECE_MODEL = "spiece.model"
VOCAB_FILES = (SPIECE_MODEL, VOCAB_TXT)  # the names a vocabulary file has, in a vocab folder and a shard folder


class Vocabulary(Protocol):
    file: str  # SPIECE_MODEL or VOCAB_TXT
    source: str  # the path it was read from
    begins_unit: str  # what encode_with_begins' offsets count: "byte" or "char" (word_segments.pieces_joins)

    @property
    def vocab_size(self) -> int: ...
    @property
    def special_ids(self) -> dict[str, int]: ...  # pad_token, unk_token, cls_token, sep_token, mask_token
    @property
    def num_special(self) -> int: ...  # ids below it are never masked nor drawn as replacements
    @property
    def tokenizer(self) -> dict: ...  # the settings a shard manifest records (WordPiece's; {} for SentencePiece)
    def encode(self, texts: Sequence[str] | Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]: ...
    def encode_with_begins(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]: ...


class SentencePieceVocab:
    """An ALBERT ``spiece.model`` (its id layout checked); the text reaches it normalised by ``textnorm``."""

    file, begins_unit, num_special = SPIECE_MODEL, "byte", NUM_SPECIAL

    def __init__(self, data: bytes, source: str) -> None:
        self.sp = spiece_from_proto(data, source)
        self.source = source
        roles = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
        self.special_ids = dict(zip(roles, (PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID), strict=True))
        self.tokenizer: dict = {}  # SentencePiece's text arrives normalised: the manifest's normalizer says how

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, texts: Sequence[str] | Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """Returns ``sp.encode(texts)`` flattened: every text's piece ids end to end (int32) and each one's count."""
        # The C++ int32 buffers of SentencePiece's "numpy" output, without the per-text np.frombuffer of its
        # public wrapper (slower than lists, which make a Python int per piece). A private method of the pinned
        # sentencepiece==0.2.3, called as its Encode calls it for plain encoding; test_instances checks it is
        # sp.encode. One thread (workers are the parallelism), no sampling (nbest -1, alpha 0.1 unused), no BOS,
        # EOS or reversal.
        buffers = self.sp._processor._EncodeAsBufferBatch(list(texts), 1, None, False, -1, 0.1, False, False, False)
        # BytesIO.write copies a buffer and returns its size: one buffer request per text (a pybind11 call, the
        # costly part) where a length pass then a join made two.
        sink = io.BytesIO()
        sizes = np.fromiter(map(sink.write, buffers), np.int64, len(buffers))
        return np.frombuffer(sink.getbuffer(), dtype=np.int32), sizes // 4  # pieces, not bytes

    def encode_with_begins(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``encode``, and each piece's first UTF-8 byte in its text, from SentencePiece's proto output (a slower
        call, made only when a word segmenter needs the offsets)."""
        tokens, lengths = self.encode(texts)
        protos = self.sp.encode(list(texts), return_type="proto")
        begins = np.fromiter((piece.begin for proto in protos for piece in proto.pieces), np.int64, len(tokens))
        return tokens, lengths, begins

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """One text's ids and each piece's ``[begin, end)`` characters in it (a piece's ``▁`` spans the space
        before it): what fine-tuning maps answers through."""
        # offset_mapping on a str gives character offsets (the proto output's begin/end are UTF-8 bytes).
        encoded = self.sp.encode(text, out_type="offset_mapping", return_bytes=False)
        return list(encoded["ids"]), [tuple(offset) for offset in encoded["offsets"]]


def token_classes(vocab: Vocabulary) -> TokenClasses:
    """The masker's word rule for ``vocab``: SentencePiece's "▁" word starts, or a WordPiece piece and its ``##``
    continuations as one word (BERT's whole word masking)."""
    if isinstance(vocab, WordPieceVocab):
        return TokenClasses.from_wordpieces(vocab.pieces, vocab.special_ids, vocab.num_special)
    return TokenClasses.from_pieces([vocab.sp.id_to_piece(i) for i in range(vocab.vocab_size)])


def vocabulary_file(
    path: str,
    exists: Callable[[str], bool] = os.path.isfile,
    join: Callable[[str, str], str] = os.path.join,
) -> str:
    """Returns ``path`` when it names a vocabulary file, else the one vocabulary file in folder ``path`` (the vocab
    stage's output, a transformers folder); ``exists`` and ``join`` are the file system's (Beam's for a bucket).

    Raises:
        FileNotFoundError: naming the folder, when it holds no vocabulary file.
        ValueError: naming the folder, when it holds both kinds (which one was meant is unknowable).
    """
    if os.path.basename(path.rstrip("/")) in VOCAB_FILES:
        return path
    found = [name for name in VOCAB_FILES if exists(join(path, name))]
    if not found:
        raise FileNotFoundError(f"{path}: no {' or '.join(VOCAB_FILES)}; run the vocab stage first")
    if len(found) > 1:
        raise ValueError(f"{path}: holds both {' and '.join(found)}; name the vocabulary file itself")
    return join(path, found[0])


def load_vocabulary(path: str | os.PathLike, vocab_size: int | None = None, model: str = "the model") -> Vocabulary:
    """Loads a local vocabulary file: a ``spiece.model``, or a ``vocab.txt`` with the tokenizer_config.json beside
    it (BertTokenizer's defaults without one); for remote paths ``read_vocabulary`` with the bucket's file system.

    Args:
        path: the file, or a folder holding one (``vocabulary_file``).
        vocab_size: the piece count of the network that will read its ids; None checks the file only.
        model: what that network is, for the error (e.g. a checkpoint's path).

    Raises:
        FileNotFoundError: naming ``path``, a folder without a vocabulary file.
        ValueError: naming ``path``, for a file that is not a vocabulary of its kind, or another piece count than
            ``vocab_size`` (naming ``model``).
    """
    vocab = vocabulary_from_bytes(*read_vocabulary(os.fspath(path)))
    if vocab_size is not None and vocab.vocab_size != vocab_size:
        raise ValueError(f"{vocab.source}: {vocab.vocab_size} pieces, but {model} has vocab_size {vocab_size}")
    return vocab


def read_vocabulary(
    path: str,
    exists: Callable[[str], bool] = os.path.isfile,
    join: Callable[[str, str], str] = os.path.join,
    read_bytes: Callable[[str], bytes] = lambda local: Path(local).read_bytes(),
) -> tuple[str, bytes, dict | None, str]:
    """Reads the vocabulary file of ``path`` (``vocabulary_file``) and, for a vocab.txt, the tokenizer_config.json
    beside it: ``vocabulary_from_bytes``'s arguments. ``exists``, ``join`` and ``read_bytes`` are the file
    system's (Beam's for a bucket); a local folder of a vocabulary's name is not a file of it.

    Raises:
        FileNotFoundError: naming the folder, when it holds no vocabulary file.
        ValueError: naming the folder, when it holds both kinds; naming the config, when it is not a JSON object.
    """
    path = vocabulary_file(path, exists, join)
    name = os.path.basename(path)
    tokenizer = None
    if name == VOCAB_TXT:
        config = path[: -len(VOCAB_TXT)] + CONFIG  # beside it, on any file system's separator
        tokenizer = read_config(read_bytes(config), config) if exists(config) else None
    return name, read_bytes(path), tokenizer, path


def vocabulary_from_bytes(name: str, data: bytes, tokenizer: dict | None, source: str) -> Vocabulary:
    """Returns the vocabulary of file ``name`` (``spiece.model`` or ``vocab.txt``) from its bytes.

    Args:
        name: the file's base name, which says its kind.
        data: its bytes.
        tokenizer: WordPiece's settings (a ``tokenizer_config.json``'s, or a manifest's record); None: defaults.
        source: the file's path, for the errors.

    Raises:
        ValueError: naming ``source``, for another name or a file that is not a vocabulary of its kind.
    """
    if name == SPIECE_MODEL:
        return SentencePieceVocab(data, source)
    if name == VOCAB_TXT:
        return wordpiece_from_bytes(data, tokenizer, source)
    raise ValueError(f"{source}: a vocabulary is a file named {' or '.join(VOCAB_FILES)}, not {name!r}")
