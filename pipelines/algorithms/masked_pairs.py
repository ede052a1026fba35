"""Pretraining instances: sentence pairs (``sop``) made into masked sequences (``masking``), many at once (pure).

``[CLS] A [SEP] B [SEP]``, token types 0 for ``[CLS] A [SEP]`` and 1 for ``B [SEP]``, then whole-word n-gram
masks. The pairs of (seed, document id, duplicate index) come from that triple's generator and the masks of its
k-th pair from a row key derived from the triple and k, so an instance can be rebuilt alone, on any worker, in
any order, and a batch of instances is paired and masked in one call each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np
import pyarrow as pa

from pipelines.algorithms.batch_hashes import stable_hashes64
from pipelines.algorithms.masking import MaskedBatch, MaskingConfig, TokenClasses, mask_batch
from pipelines.algorithms.seeding import mix_keys
from pipelines.algorithms.sop import INTER_SENTENCE_MODES, NSP, Documents, PairConfig, PairSpans, pair_spans

__all__ = ["Instances", "Items", "PairPlan", "build_instances", "build_planned", "document_instances", "plan_pairs"]


class Items(NamedTuple):
    """Duplicates of documents, as columns: the units whose pairs one generator draws."""

    document: np.ndarray  # int64: the document's index in the ``Documents`` built from
    document_id: Sequence[str] | pa.Array  # the stable id that seeds the generator, one per item
    duplicate: np.ndarray  # int64: which of the dupe_factor passes this is (another seed, other pairs and masks)


@dataclass
class Instances:
    """Instances as flat columns: row i's tokens are ``input_ids[offsets[i]:offsets[i + 1]]``."""

    input_ids: np.ndarray  # masks applied
    offsets: np.ndarray  # [rows + 1]
    token_type_ids: np.ndarray  # int8, laid out as input_ids: 0 for [CLS] A [SEP], 1 for B [SEP]
    num_a: np.ndarray  # tokens of [CLS] A [SEP]
    masked: MaskedBatch  # predictions: positions, original tokens, and the span-length draws
    joins: np.ndarray | None  # int8, laid out as input_ids, when the documents carry a segmenter's words
    sentence_order_label: np.ndarray
    target_length: np.ndarray
    item: np.ndarray  # which input item each row comes from
    keys: np.ndarray  # uint64 per row: seeds its masks, and orders rows in a shard

    def __len__(self) -> int:
        return len(self.num_a)

    def rows(self, column: np.ndarray, offsets: np.ndarray | None = None) -> list[list[int]]:
        """Returns a flat column as one list per row (for tests and small inspections)."""
        offsets = self.offsets if offsets is None else offsets
        return [column[offsets[i] : offsets[i + 1]].tolist() for i in range(len(self))]


def build_instances(
    documents: Documents, items: Items, seed: int, pairs: PairConfig, masking: MaskingConfig, classes: TokenClasses
) -> Instances:
    """Returns the instances of every item, ordered by their keys: the order a shard stores its rows in.

    Args:
        documents: the documents the items point into (and ``nsp`` negatives come from).
        items: the (document, duplicate) units to build.
        seed: the run's seed.
        pairs: sequence length, short-target probability and inter-sentence mode.
        masking: the n-gram masking knobs.
        classes: the vocabulary's word-start facts.
    """
    return build_planned(documents, plan_pairs(documents, items, seed, pairs), masking, classes)


class PairPlan(NamedTuple):
    """Sentence pairs drawn but not yet laid out: spans of the documents' tokens, in key order."""

    spans: PairSpans
    keys: np.ndarray  # uint64 per pair, ascending: seeds its masks, and orders rows in a shard

    def __len__(self) -> int:
        return len(self.keys)

    def row_tokens(self) -> np.ndarray:
        """Returns each row's tokens once laid out: ``[CLS] A [SEP] B [SEP]``."""
        s = self.spans
        return s.first_hi - s.first_lo + s.second_hi - s.second_lo + 3

    def rows(self, selection: slice | np.ndarray) -> PairPlan:
        """Returns the plan of the selected rows (a slice or an index array), in the selection's order."""
        return PairPlan(PairSpans(*(column[selection] for column in self.spans)), self.keys[selection])


def plan_pairs(documents: Documents, items: Items, seed: int, pairs: PairConfig) -> PairPlan:
    """Draws every item's sentence pairs from its own generator; returns them in key order, so that consecutive
    rows of the plan, built in any number of calls, are the rows of a shard in their final order."""
    nsp = pairs.inter_sentence == INTER_SENTENCE_MODES[NSP]
    spans = pair_spans(
        documents, items.document, _seeds("instances", seed, items), pairs, _seeds("nsp", seed, items) if nsp else None
    )
    keys = mix_keys(_seeds("masks", seed, items)[spans.item], spans.index.astype(np.uint64))
    order = np.argsort(keys, kind="stable")  # a pair's key and masks do not depend on where it is laid out
    return PairPlan(spans, keys).rows(order)


def build_planned(documents: Documents, plan: PairPlan, masking: MaskingConfig, classes: TokenClasses) -> Instances:
    """Lays out and masks the pairs of ``plan`` (or a run of its rows), in its order."""
    offsets, num_a = _row_offsets(plan)
    tokens, types = np.empty(offsets[-1], dtype=np.int64), np.empty(offsets[-1], dtype=np.int8)
    _lay_out(documents.tokens, *plan.spans[:4], offsets, tokens, types, classes.cls_id, classes.sep_id)
    joins = None
    if documents.joins is not None:
        joins = np.zeros(offsets[-1], dtype=np.int8)  # 0 at the specials: a word never continues across one
        _lay_out_joins(documents.joins, *plan.spans[:4], offsets, joins)
    masked = mask_batch(tokens, offsets, plan.keys, classes, masking, joins)
    return Instances(
        input_ids=masked.input_ids,
        offsets=offsets,
        token_type_ids=types,
        num_a=num_a,
        masked=masked,
        joins=joins,
        sentence_order_label=plan.spans.label,
        target_length=plan.spans.target_length,
        item=plan.spans.item,
        keys=plan.keys,
    )


def _seeds(purpose: str, seed: int, items: Items) -> np.ndarray:
    """Returns ``stable_hash64(purpose, seed, document_id, duplicate)`` of every item, as uint64."""
    return stable_hashes64((purpose, seed), items.document_id, items.duplicate)


def _row_offsets(plan: PairPlan) -> tuple[np.ndarray, np.ndarray]:
    """Returns the rows' offsets ([rows + 1]) and tokens of ``[CLS] A [SEP]``."""
    offsets = np.zeros(len(plan) + 1, dtype=np.int64)
    np.cumsum(plan.row_tokens(), out=offsets[1:])
    return offsets, plan.spans.first_hi - plan.spans.first_lo + 2


@numba.njit(cache=True, nogil=True)
def _lay_out(source, first_lo, first_hi, second_lo, second_hi, offsets, tokens, types, cls_id, sep_id):
    """Writes row r as ``[CLS] source[first_lo:first_hi] [SEP] source[second_lo:second_hi] [SEP]`` and its
    token types."""
    for r in range(len(first_lo)):
        start, split, end = offsets[r], offsets[r] + 2 + first_hi[r] - first_lo[r], offsets[r + 1]
        tokens[start] = cls_id
        tokens[start + 1 : split - 1] = source[first_lo[r] : first_hi[r]]
        tokens[split - 1] = sep_id
        tokens[split : end - 1] = source[second_lo[r] : second_hi[r]]
        tokens[end - 1] = sep_id
        types[start:split], types[split:end] = 0, 1


@numba.njit(cache=True, nogil=True)
def _lay_out_joins(source, first_lo, first_hi, second_lo, second_hi, offsets, out):
    """Writes the joins of row r's tokens where ``_lay_out`` writes them; the first token of each segment joins
    nothing, as it follows a special (its word's start may have been cut off with the segment's start)."""
    for r in range(len(first_lo)):
        start, split, end = offsets[r], offsets[r] + 2 + first_hi[r] - first_lo[r], offsets[r + 1]
        out[start + 1 : split - 1] = source[first_lo[r] : first_hi[r]]
        out[split : end - 1] = source[second_lo[r] : second_hi[r]]
        out[start + 1] = out[split] = 0


def document_instances(
    segments: Sequence[Sequence[int]],
    document_id: str,
    duplicate: int,
    seed: int,
    pairs: PairConfig,
    masking: MaskingConfig,
    classes: TokenClasses,
) -> Instances:
    """Returns the instances of one duplicate of one document (``build_instances`` of one item)."""
    items = Items(np.zeros(1, np.int64), [document_id], np.array([duplicate], np.int64))
    return build_instances(Documents.from_segments([segments]), items, seed, pairs, masking, classes)
