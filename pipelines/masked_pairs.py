"""Pretraining instances: sentence pairs (``sop``) made into masked sequences (``masking``), many at once (pure).

``[CLS] A [SEP] B [SEP]``, token types 0 for ``[CLS] A [SEP]`` and 1 for ``B [SEP]``, then whole-word n-gram
masks. The pairs of (seed, document id, duplicate index) come from that triple's generator and the masks of its
k-th pair from a row key derived from the triple and k, so an instance can be rebuilt alone, on any worker, in
any order, and a batch of instances is masked in one call.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pipelines.masking import MaskedBatch, MaskingConfig, TokenClasses, mask_batch
from pipelines.seeding import mix_keys, rng_for, stable_hash64
from pipelines.sop import PairConfig, document_pairs
from pipelines.vocab_layout import CLS_ID, SEP_ID

__all__ = ["Instances", "Item", "build_instances", "document_instances"]


class Item(NamedTuple):
    """One duplicate of one document: the unit whose pairs one generator draws."""

    segments: Sequence[Sequence[int]]  # the document's sentences as SentencePiece ids
    document_id: str  # the stable id that seeds the generator
    duplicate: int  # which of the dupe_factor passes this is (another seed, other pairs and masks)
    random_document: Callable[[], Sequence[Sequence[int]]] | None = None  # another document, for nsp mode


@dataclass
class Instances:
    """Instances as flat columns: row i's tokens are ``input_ids[offsets[i]:offsets[i + 1]]``."""

    input_ids: np.ndarray  # masks applied
    offsets: np.ndarray  # [rows + 1]
    num_a: np.ndarray  # tokens of [CLS] A [SEP]; the rest of the row has token type 1
    masked: MaskedBatch  # predictions: positions, original tokens, and the span-length draws
    sentence_order_label: np.ndarray
    target_length: np.ndarray
    item: np.ndarray  # which input item each row comes from
    keys: np.ndarray  # uint64 per row: seeds its masks, and orders rows in a shard

    def __len__(self) -> int:
        return len(self.num_a)

    @property
    def token_type_ids(self) -> np.ndarray:
        lengths = np.diff(self.offsets)
        position = np.arange(len(self.input_ids)) - np.repeat(self.offsets[:-1], lengths)
        return (position >= np.repeat(self.num_a, lengths)).astype(np.int8)

    def rows(self, column: np.ndarray, offsets: np.ndarray | None = None) -> list[list[int]]:
        """Returns a flat column as one list per row (for tests and small inspections)."""
        offsets = self.offsets if offsets is None else offsets
        return [column[offsets[i] : offsets[i + 1]].tolist() for i in range(len(self))]


def build_instances(
    items: Sequence[Item], seed: int, pairs: PairConfig, masking: MaskingConfig, classes: TokenClasses
) -> Instances:
    """Returns the instances of every item, in item order.

    Args:
        items: the (document, duplicate) units to build.
        seed: the run's seed.
        pairs: sequence length, short-target probability and inter-sentence mode.
        masking: the n-gram masking knobs.
        classes: the vocabulary's word-start facts.
    """
    sequences = _pair_sequences(items, seed, pairs)
    masked = mask_batch(sequences.tokens, sequences.offsets, sequences.keys, classes, masking)
    return Instances(
        input_ids=masked.input_ids,
        offsets=sequences.offsets,
        num_a=sequences.num_a,
        masked=masked,
        sentence_order_label=sequences.labels,
        target_length=sequences.targets,
        item=sequences.item,
        keys=sequences.keys,
    )


class _Sequences(NamedTuple):
    """Unmasked ``[CLS] A [SEP] B [SEP]`` rows as flat columns, each with the key that seeds its masks."""

    tokens: np.ndarray
    offsets: np.ndarray
    num_a: np.ndarray
    labels: np.ndarray
    targets: np.ndarray
    item: np.ndarray
    keys: np.ndarray


def _pair_sequences(items: Sequence[Item], seed: int, pairs: PairConfig) -> _Sequences:
    """Draws every item's sentence pairs from its own generator and lays them out as sequences."""
    tokens, ends = array("q"), [0]
    num_a, labels, targets, item_of, pair_of = [], [], [], [], []
    item_keys = np.empty(len(items), dtype=np.uint64)
    for i, item in enumerate(items):
        rng = rng_for(seed, item.document_id, item.duplicate)
        for k, pair in enumerate(document_pairs(item.segments, rng, pairs, item.random_document)):
            tokens.append(CLS_ID)
            tokens.extend(pair.tokens_a)
            tokens.append(SEP_ID)
            tokens.extend(pair.tokens_b)
            tokens.append(SEP_ID)
            ends.append(len(tokens))
            num_a.append(len(pair.tokens_a) + 2)
            labels.append(pair.label)
            targets.append(pair.target_length)
            item_of.append(i)
            pair_of.append(k)
        item_keys[i] = stable_hash64("masks", seed, item.document_id, item.duplicate)
    item_index = np.array(item_of, dtype=np.int64)
    return _Sequences(
        tokens=np.frombuffer(tokens, dtype=np.int64),
        offsets=np.array(ends, dtype=np.int64),
        num_a=np.array(num_a, dtype=np.int64),
        labels=np.array(labels, dtype=np.int8),
        targets=np.array(targets, dtype=np.int64),
        item=item_index,
        keys=mix_keys(item_keys[item_index], np.array(pair_of, dtype=np.uint64)),
    )


def document_instances(
    segments: Sequence[Sequence[int]],
    document_id: str,
    duplicate: int,
    seed: int,
    pairs: PairConfig,
    masking: MaskingConfig,
    classes: TokenClasses,
    random_document: Callable[[], Sequence[Sequence[int]]] | None = None,
) -> Instances:
    """Returns the instances of one duplicate of one document (``build_instances`` of one item)."""
    return build_instances([Item(segments, document_id, duplicate, random_document)], seed, pairs, masking, classes)
