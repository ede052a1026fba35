"""What a shard folder is, as its readers check it: the shards' schema and names, and ``manifest.json``, the
typed index (``Manifest``) that the instances stage writes last and every reader opens first.

A folder without a manifest, or whose manifest does not match its files, is not a shard folder. The manifest is
read as hostile input (a bucket's writer wrote it): every field is checked for the type and shape the writer gives
it before any name is joined to a path. Everything a reader relies on is a typed field of ``Manifest``.
Pure: imports neither Beam nor torch. The writer is ``shards.ShardWriter``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import typing
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

import pyarrow as pa

from pipelines.algorithms.masking import MaskingConfig
from pipelines.algorithms.sop import INTER_SENTENCE_MODES
from pipelines.algorithms.textnorm import Normalizer
from pipelines.algorithms.vocabulary import SPIECE_MODEL, VOCAB_FILES, VOCAB_TXT, Vocabulary, vocabulary_from_bytes
from pipelines.algorithms.wordpiece import WordPieceSettings

__all__ = [
    "MANIFEST",
    "SCHEMA_VERSION",
    "SPIECE",
    "SPLITS",
    "Manifest",
    "ShardInfo",
    "file_mismatch",
    "shard_name",
    "shard_schema",
]

# 2: the manifest's typed reader fields (inter_sentence, masking, normalizer); 3: the vocabulary's kind
# (vocab_file: spiece.model or a WordPiece vocab.txt, with its tokenizer settings) in place of spiece_sha256
SCHEMA_VERSION = 3
MANIFEST = "manifest.json"
SPIECE = SPIECE_MODEL  # copied into the shard folder, so shards and the vocab that made them travel together
SPLITS = ("train", "validation")


def shard_schema(vocab_size: int, max_seq_length: int, word_segmenter: str = "none") -> pa.Schema:
    """Returns the Arrow schema of shards for a vocabulary and sequence length (ids in the narrowest type), with
    the ``joins_word`` column when a word segmenter made the words."""
    id_type = pa.uint16() if vocab_size <= 1 << 16 else pa.uint32()
    position_type = pa.int16() if max_seq_length <= 1 << 15 else pa.int32()
    # 1 where a token continues the segmenter's word of the token before it (masking.mask_batch's joins), laid out
    # as input_ids; int8 as token_type_ids are, so the writer's byte-stable batching handles it alike.
    joins = [pa.field("joins_word", pa.list_(pa.int8()), nullable=False)] if word_segmenter != "none" else []
    return pa.schema(
        [
            pa.field("input_ids", pa.list_(id_type), nullable=False),  # [CLS] A [SEP] B [SEP], masks applied
            pa.field("token_type_ids", pa.list_(pa.int8()), nullable=False),  # 0 for [CLS] A [SEP], 1 for B [SEP]
            pa.field("masked_lm_positions", pa.list_(position_type), nullable=False),  # sorted
            pa.field("masked_lm_ids", pa.list_(id_type), nullable=False),  # original tokens there
            pa.field("sentence_order_label", pa.int8(), nullable=False),  # 0 in order, 1 swapped/random
            # Provenance: which document and duplicate a row came from, and the length it was built for.
            pa.field("document_id", pa.string(), nullable=False),
            pa.field("duplicate", pa.int16(), nullable=False),
            pa.field("target_length", pa.int16(), nullable=False),
            *joins,
        ]
    )


def shard_name(split: str, index: int, count: int) -> str:
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: choose one of {SPLITS}")
    return f"{split}-{index:05d}-of-{count:05d}.arrow"


@dataclass(frozen=True)
class ShardInfo:
    file: str  # name inside the shard folder
    split: str
    rows: int
    tokens: int  # sum of sequence lengths
    bytes: int
    sha256: str


def _read_local(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@dataclass(frozen=True)
class Manifest:
    """The index of a shard folder: what each file holds, its hash, and what produced it.

    Readers rely on the typed fields only; ``params`` (the producing stage's whole config) and ``counters`` are
    provenance for people, so renaming a stage's config field can never break a reader mid-training.
    """

    schema_version: int
    shards: list[ShardInfo]
    vocab_size: int
    vocab_file: str  # the vocabulary copied beside the shards: spiece.model, or a WordPiece vocab.txt
    vocab_sha256: str
    tokenizer: dict[str, Any]  # a vocab.txt's settings (its tokenizer_config.json's); {} for spiece.model
    max_seq_length: int
    inter_sentence: str  # what sentence_order_label means: "sop" (swapped), "nsp" (random) or "none" (always 0)
    masking: MaskingConfig  # how the stored masks were drawn; dynamic masking draws new ones the same way
    normalizer: Normalizer  # how the text was normalised before SentencePiece; fine-tuning and export repeat it
    params: dict[str, Any]
    counters: dict[str, int]

    def __post_init__(self) -> None:
        if self.inter_sentence not in INTER_SENTENCE_MODES:
            raise ValueError(f"inter_sentence={self.inter_sentence!r}: choose one of {INTER_SENTENCE_MODES}")

    @property
    def schema(self) -> pa.Schema:
        return shard_schema(self.vocab_size, self.max_seq_length, self.masking.word_segmenter)

    def split(self, split: str) -> list[ShardInfo]:
        return [s for s in self.shards if s.split == split]

    def paths(self, folder: str | os.PathLike, split: str) -> list[str]:
        """Returns the local paths of a split's shards, in order."""
        return [os.path.join(folder, s.file) for s in self.split(split)]

    def to_bytes(self) -> bytes:
        """Returns the manifest as sorted, indented JSON: byte-stable for equal manifests."""
        return (json.dumps(asdict(self), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, body: Any) -> Manifest:
        """Returns the manifest of a parsed ``manifest.json``.

        Whoever can write to the bucket writes this, and the download cache joins its names and hashes to local
        paths, so every field must have the type and shape the writer gives it: shard names exactly as
        ``shard_name`` makes them (no separator, no ``..``), hashes of 64 lowercase hex digits.

        Raises:
            ValueError: one line naming the field (``shards[3].file``) and what is wrong with it.
        """
        if type(body) is not dict:
            raise ValueError(f"the manifest is {_shown(body)}, not a JSON object")
        version = body.get("schema_version")
        if type(version) is not int or version != SCHEMA_VERSION:
            raise ValueError(f"schema_version {_shown(version)}, expected {SCHEMA_VERSION}")
        names = {f.name for f in fields(cls)}
        if set(body) != names:
            raise ValueError(f"fields {sorted(set(body) ^ names)} missing or unknown")
        for name in ("vocab_size", "max_seq_length"):
            if _scalar(body[name], int, name) < 1:
                raise ValueError(f"{name} is {body[name]}, not a positive integer")
        _sha256(body["vocab_sha256"], "vocab_sha256")
        if _scalar(body["vocab_file"], str, "vocab_file") not in VOCAB_FILES:
            raise ValueError(f"vocab_file {_shown(body['vocab_file'])}, expected one of {VOCAB_FILES}")
        tokenizer = _scalar(body["tokenizer"], dict, "tokenizer")
        if body["vocab_file"] == VOCAB_TXT:
            WordPieceSettings.from_config(tokenizer, "tokenizer")  # every setting of the type BertTokenizer reads
        elif tokenizer:
            raise ValueError(f"tokenizer {sorted(tokenizer)}: settings for a vocab.txt, but vocab_file is spiece.model")
        _scalar(body["inter_sentence"], str, "inter_sentence")
        _scalar(body["params"], dict, "params")
        for name, value in _scalar(body["counters"], dict, "counters").items():
            _scalar(value, int, f"counters.{name}")
        nested = {"shards": _shard_entries(_scalar(body["shards"], list, "shards"))}
        nested |= {"masking": _record(MaskingConfig, body["masking"], "masking")}
        nested |= {"normalizer": _record(Normalizer, body["normalizer"], "normalizer")}
        return cls(**(body | nested))

    @classmethod
    def read(
        cls,
        folder: str | os.PathLike,
        verify: bool = False,
        read_bytes: Callable[[str], bytes] = _read_local,
        join: Callable[..., str] = os.path.join,
    ) -> Manifest:
        """Reads a folder's manifest; with ``verify``, checks every shard's size and sha256 against it.

        ``read_bytes`` and ``join`` are the file system's, local by default (as ``ShardWriter`` is handed its
        ``create``): a remote folder's manifest is read through them; ``verify`` checks local files only.

        Raises:
            FileNotFoundError: no manifest (the stage did not finish) or a listed shard is missing.
            ValueError: a manifest this version cannot read, or a shard that does not match its entry.
        """
        path = join(folder, MANIFEST)
        try:
            manifest = cls.from_json(json.loads(read_bytes(path)))
        except FileNotFoundError as err:
            raise FileNotFoundError(f"{path}: no shard manifest; run the instances stage to completion") from err
        # json's errors are ValueErrors too, and a RecursionError is how it refuses arrays nested thousands deep.
        except (ValueError, TypeError, RecursionError) as err:
            raise ValueError(f"{path}: not a readable shard manifest ({err}); rerun the instances stage") from err
        if verify:
            for name, size, sha256 in manifest.files():
                _check_file(os.path.join(folder, name), size, sha256, path)
        return manifest

    def files(self) -> list[tuple[str, int | None, str]]:
        """Returns (name, size in bytes or None when not recorded, sha256) of every file the manifest lists:
        the shards, then the vocabulary."""
        return [*((s.file, s.bytes, s.sha256) for s in self.shards), (self.vocab_file, None, self.vocab_sha256)]

    def vocabulary(self, folder: str | os.PathLike, read_bytes: Callable[[str], bytes] = _read_local) -> Vocabulary:
        """Loads the vocabulary the shards of ``folder`` were cut with (its file there, this manifest's settings).

        Raises:
            ValueError: naming the file, when it is not a vocabulary of its kind (or breaks its id layout), or
                holds another number of pieces than the shards' ``vocab_size``.
        """
        path = os.path.join(folder, self.vocab_file)
        vocabulary = vocabulary_from_bytes(self.vocab_file, read_bytes(path), self.tokenizer, path)
        if vocabulary.vocab_size != self.vocab_size:
            raise ValueError(f"{path}: {vocabulary.vocab_size} pieces, but the manifest says {self.vocab_size}")
        return vocabulary


_JSON_TYPES = {
    int: "an integer",
    float: "a number",
    bool: "true or false",
    str: "a string",
    list: "an array",
    dict: "an object",
}
_SHARD_FILE = re.compile(r"(?P<split>[a-z]+)-(?P<index>[0-9]{5,12})-of-(?P<count>[0-9]{5,12})\.arrow")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _shown(value: Any) -> str:
    """A JSON value for a one-line error: scalars as written (long ones cut), arrays and objects by kind."""
    if isinstance(value, list | dict):
        return f"an {'array' if isinstance(value, list) else 'object'}"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _scalar(value: Any, kind: type, where: str) -> Any:
    """Returns ``value`` when JSON gave it as ``kind``: an integer passes for a number, but true is no integer."""
    if type(value) is not kind and not (kind is float and type(value) is int):
        raise ValueError(f"{where} is {_shown(value)}, not {_JSON_TYPES[kind]}")
    return value


def _sha256(value: Any, where: str) -> str:
    if type(value) is not str or not _SHA256.fullmatch(value):
        raise ValueError(f"{where} is {_shown(value)}, not a sha256 (64 lowercase hex digits)")
    return value


def _record(cls: type, body: Any, where: str) -> Any:
    """Returns the dataclass ``cls`` of a JSON object holding exactly its fields, each of its scalar type."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in fields(cls)]
    # A field added since schema_version 1 may be absent: the manifest was written before it existed, and meant
    # its default.
    required = set(names) - ADDED_FIELDS
    given = set(_scalar(body, dict, where))
    if not required <= given <= set(names):
        raise ValueError(f"{where}: fields {sorted((required - given) | (given - set(names)))} missing or unknown")
    return cls(**{name: _scalar(body[name], hints[name], f"{where}.{name}") for name in names if name in given})


# Fields of the manifest's records added after its schema_version was last raised, each with a default.
ADDED_FIELDS = frozenset({"word_segmenter", "chinese_script"})


def _shard_entries(entries: list[Any]) -> list[ShardInfo]:
    """Returns the shards' entries, each as ``ShardWriter.write_shard`` makes it, together the set that
    ``ShardWriter.write_manifest`` insists on: shards 0 to count - 1 of each split, each once."""
    checked = [_shard_entry(entry, f"shards[{i}]") for i, entry in enumerate(entries)]
    shards, counts = [shard for shard, _ in checked], sorted({count for _, count in checked})
    twice = [name for name, n in Counter(shard.file for shard in shards).items() if n > 1]
    if len(counts) > 1 or twice:
        problem = f"{twice[0]!r} listed twice" if twice else f"names say {counts} shards per split, not one count"
        raise ValueError(f"shards: {problem}")
    if len(shards) != len(SPLITS) * sum(counts):
        raise ValueError(f"shards: {len(shards)} listed, but their names say {len(SPLITS)} splits of {sum(counts)}")
    return shards


def _shard_entry(entry: Any, where: str) -> tuple[ShardInfo, int]:
    """Returns a shard's entry and the number of shards per split its name says."""
    shard = _record(ShardInfo, entry, where)
    if shard.split not in SPLITS:
        raise ValueError(f"{where}.split is {_shown(shard.split)}, not one of {SPLITS}")
    for name in ("rows", "tokens", "bytes"):
        if getattr(shard, name) < 0:
            raise ValueError(f"{where}.{name} is {getattr(shard, name)}, not a non-negative integer")
    _sha256(shard.sha256, f"{where}.sha256")
    match = _SHARD_FILE.fullmatch(shard.file)
    index, count = (int(match["index"]), int(match["count"])) if match else (0, 0)
    if not match or index >= count or shard.file != shard_name(shard.split, index, count):
        expected = f"{shard.split}-NNNNN-of-NNNNN.arrow, numbered from 0"
        raise ValueError(f"{where}.file is {_shown(shard.file)}, not the name of a {shard.split} shard ({expected})")
    return shard, count


def file_mismatch(path: str | os.PathLike, size: int | None, sha256: str) -> str | None:
    """Returns None when the local file ``path`` has ``size`` bytes (None: any) and ``sha256``, else what
    differs: "size" (checked first: a truncated file costs no hashing) or "sha256"."""
    if size is not None and os.path.getsize(path) != size:
        return "size"
    with open(path, "rb") as f:
        return None if hashlib.file_digest(f, "sha256").hexdigest() == sha256 else "sha256"


def _check_file(path: str, size: int | None, sha256: str, manifest: str) -> None:
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: listed in {manifest} but missing; rerun the instances stage")
    mismatch = file_mismatch(path, size, sha256)
    if mismatch == "size":
        actual = os.path.getsize(path)
        raise ValueError(f"{path}: {actual} bytes, {manifest} says {size} (truncated?); rerun the instances stage")
    if mismatch == "sha256":
        raise ValueError(f"{path}: sha256 differs from {manifest} (changed after it was written)")
