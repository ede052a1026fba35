"""Sentence pairs for the inter-sentence objective, as the reference builds them, many documents at once (pure).

Follows google-research/albert ``create_instances_from_document``, with these deliberate changes:

- each (seed, document, duplicate) has its own generator, so every pair is reproducible alone;
- SOP negatives are always swaps of two consecutive segments. A chunk holding one sentence is split inside that
  sentence (at a word start) instead of borrowing a random document as the reference does
  (google-research/albert issue 234);
- an over-long pair is trimmed at its outer ends only (the start of the earlier part, the end of the later one),
  never between the two parts, so B is always the text right after A (the reference trims either end at random);
- the target length is drawn again for every chunk rather than once per document, so that ``short_seq_prob``
  is the share of pairs built for a shorter target, which is what BERT's comment promises;
- ``nsp`` mode keeps BERT's random-document negatives (for the paper's ablation); ``none`` never relabels.

The generator is ``random.Random(seeding.stable_hash64("instances", seed, document_id, duplicate))`` and only its
``random()`` is drawn, through ``seeding.mersenne_random``: the same numbers, drawn in compiled code. The loop is
sequential within a document (a chunk ends where the drawn target is reached), so it is written as the plain
loop it is and compiled with numba; pairs come out as spans of the documents' flat tokens, not as copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import NamedTuple

import numba
import numpy as np

from pipelines.algorithms.seeding import mersenne_random, mersenne_seed, mersenne_states

__all__ = [
    "INTER_SENTENCE_MODES",
    "Documents",
    "Pair",
    "PairConfig",
    "PairSpans",
    "document_pairs",
    "pair_spans",
    "truncation",
]

INTER_SENTENCE_MODES = ("sop", "nsp", "none")
SOP, NSP, NONE = range(3)  # the modes as the compiled loop takes them

Segment = Sequence[int]


@dataclass(frozen=True)
class PairConfig:
    max_seq_length: int = 512  # [CLS] A [SEP] B [SEP] never exceeds this
    short_seq_prob: float = 0.1  # share of pairs built for a target drawn from [2, max_seq_length - 3]
    inter_sentence: str = "sop"  # sop: swapped pairs; nsp: BERT's random-document pairs; none: never negative

    def __post_init__(self) -> None:
        if self.inter_sentence not in INTER_SENTENCE_MODES:
            raise ValueError(f"inter_sentence={self.inter_sentence!r}: choose one of {INTER_SENTENCE_MODES}")
        if self.max_seq_length < 5:
            raise ValueError(f"max_seq_length={self.max_seq_length}: must leave room for 2 tokens and 3 specials")


class Documents(NamedTuple):
    """Documents as flat columns: sentence s is ``tokens[sentence_offsets[s]:sentence_offsets[s + 1]]`` and
    document d is sentences ``document_offsets[d]`` to ``document_offsets[d + 1]``. NSP negatives come from these."""

    tokens: np.ndarray  # int32 piece ids, every sentence end to end
    sentence_offsets: np.ndarray  # int64 [sentences + 1]
    document_offsets: np.ndarray  # int64 [documents + 1]
    joins: np.ndarray | None = None  # int8 as tokens: 1 where a piece continues a segmenter's word (word_segments)

    @classmethod
    def from_lengths(
        cls,
        tokens: np.ndarray,
        sentence_lengths: np.ndarray,
        sentences_per_document: np.ndarray,
        joins: np.ndarray | None = None,
    ) -> Documents:
        """Lays out the sentences of ``tokens`` (end to end, ``sentence_lengths`` pieces each), each document's
        sentences consecutive, ``sentences_per_document`` of them."""
        sentence_offsets = np.zeros(len(sentence_lengths) + 1, dtype=np.int64)
        document_offsets = np.zeros(len(sentences_per_document) + 1, dtype=np.int64)
        np.cumsum(sentence_lengths, out=sentence_offsets[1:])
        np.cumsum(sentences_per_document, out=document_offsets[1:])
        joins = None if joins is None else np.asarray(joins, dtype=np.int8)
        return cls(np.asarray(tokens, dtype=np.int32), sentence_offsets, document_offsets, joins)

    @classmethod
    def from_segments(cls, documents: Sequence[Sequence[Segment]]) -> Documents:
        """Lays out documents given as lists of sentences (lists of piece ids)."""
        sentences = [segment for document in documents for segment in document]
        lengths = np.fromiter(map(len, sentences), np.int64, len(sentences))
        tokens = np.fromiter(chain.from_iterable(sentences), np.int32, int(lengths.sum()))
        return cls.from_lengths(tokens, lengths, np.array([len(document) for document in documents], dtype=np.int64))

    def document_tokens(self) -> np.ndarray:
        """Returns each document's number of tokens."""
        return np.diff(self.sentence_offsets[self.document_offsets])


class PairSpans(NamedTuple):
    """Pairs as spans of ``Documents.tokens``: pair r is ``[CLS] tokens[first_lo:first_hi] [SEP]
    tokens[second_lo:second_hi] [SEP]``, in each item's pair order."""

    first_lo: np.ndarray
    first_hi: np.ndarray
    second_lo: np.ndarray
    second_hi: np.ndarray
    label: np.ndarray  # int8; 0: the second part follows the first in the document; 1: swapped (sop) or random (nsp)
    target_length: np.ndarray  # the target the chunk was built for (max_seq_length - 3 unless drawn shorter)
    item: np.ndarray  # which item the pair comes from
    index: np.ndarray  # the pair's number within its item


def pair_spans(
    documents: Documents,
    items: np.ndarray,
    seeds: np.ndarray,
    config: PairConfig,
    nsp_seeds: np.ndarray | None = None,
) -> PairSpans:
    """Returns the sentence pairs of every item, items in order and each item's pairs in document order.

    Args:
        documents: the documents the items and NSP negatives come from.
        items: int64 [items]: the document each item pairs.
        seeds: uint64 [items]: the seed of each item's generator.
        config: lengths and the inter-sentence mode.
        nsp_seeds: uint64 [items]: the seed of the generator choosing each item's random documents (``nsp`` only:
            another document of ``documents``, never the item's own).
    """
    mode = INTER_SENTENCE_MODES.index(config.inter_sentence)
    if mode == NSP and nsp_seeds is None:
        raise ValueError("inter_sentence='nsp' needs nsp_seeds to draw negatives with")
    items = np.asarray(items, dtype=np.int64)
    sentences = documents.document_offsets[items + 1] - documents.document_offsets[items]
    # A chunk is at least one sentence and makes at most one pair (nsp puts back only what follows A).
    rows = np.empty((8, int(sentences.sum())), dtype=np.int64)
    count = _pair_rows(
        documents.sentence_offsets, documents.document_offsets, items, np.asarray(seeds, dtype=np.uint64),
        np.zeros(len(items), np.uint64) if nsp_seeds is None else np.asarray(nsp_seeds, dtype=np.uint64), mode,
        config.short_seq_prob, config.max_seq_length, rows,
    )  # fmt: skip
    columns = rows[:, :count]
    return PairSpans(*columns[:4], columns[4].astype(np.int8), *columns[5:])


@dataclass(frozen=True)
class Pair:
    tokens_a: list[int]
    tokens_b: list[int]
    label: int  # 0: B follows A in the document; 1: swapped (sop) or B from another document (nsp)
    target_length: int  # the target the chunk was built for (max_seq_length - 3 unless drawn shorter)


def document_pairs(
    segments: Sequence[Segment],
    seed: int,
    config: PairConfig,
    others: Sequence[Sequence[Segment]] = (),
    nsp_seed: int = 0,
) -> list[Pair]:
    """Returns the sentence pairs of one document (``pair_spans`` of one item), as token lists.

    Args:
        segments: the document's sentences as token ids (no special tokens).
        seed: its generator's seed.
        config: lengths and the inter-sentence mode.
        others: the documents ``nsp`` mode draws negatives from, with ``nsp_seed``.
    """
    documents = Documents.from_segments([segments, *others])
    seeds, nsp_seeds = np.array([seed], np.uint64), np.array([nsp_seed], np.uint64)
    spans = pair_spans(documents, np.zeros(1, np.int64), seeds, config, nsp_seeds)
    tokens = documents.tokens.tolist()
    return [
        Pair(tokens[a:b], tokens[c:d], label, target)
        for a, b, c, d, label, target in zip(*(column.tolist() for column in spans[:6]), strict=True)
    ]


@numba.njit(cache=True, nogil=True)
def truncation(len_a, len_b, max_num_tokens):
    """Returns the tokens to trim from A's start and B's end so that the pair fits ``max_num_tokens``.

    As the reference, the longer side is trimmed (so the shorter keeps its text); unlike it, only from A's start
    and B's end, so A and B stay adjacent text and the sentence order is all that a swap changes.
    """
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return 0, 0
    # Taking from the longer side until both are equal, then alternately, is what the one-at-a-time loop does.
    from_longer = min(excess, abs(len_a - len_b))
    cut_a = (from_longer if len_a > len_b else 0) + (excess - from_longer) // 2  # on a tie B loses first
    return cut_a, excess - cut_a


@numba.njit(cache=True, nogil=True)
def _randint(rng, low, high):
    """An integer in [low, high], inclusive, from one ``random()``."""
    return low + int(mersenne_random(rng) * (high - low + 1))


@numba.njit(cache=True, nogil=True)
def _draw_target(rng, short_seq_prob, max_num_tokens):
    if mersenne_random(rng) < short_seq_prob:
        return _randint(rng, 2, max_num_tokens)
    return max_num_tokens


# The compiled loops below take the flat columns of ``Documents``; spans are (lo, hi) positions in its tokens and
# a pair is (valid, a_lo, a_hi, b_lo, b_hi, label, sentences put back), A and B in document order.


@numba.njit(cache=True, nogil=True)
def _ordered_pair(starts, lo, hi, rng, swap):
    """The pair of sentences lo..hi-1: A their first part, B the rest (sop and none modes)."""
    tok_lo, tok_hi = starts[lo], starts[hi]
    if hi - lo >= 2:
        split = starts[lo + _randint(rng, 1, hi - lo - 1)]
    elif tok_hi - tok_lo >= 2:  # one long sentence: the second part follows the first as a sentence would
        split = tok_lo + _randint(rng, 1, tok_hi - tok_lo - 1)
    else:
        return False, 0, 0, 0, 0, 0, 0
    # In document order; the caller swaps after truncation, so trimming never cuts between the two parts.
    return True, tok_lo, split, split, tok_hi, int(swap and mersenne_random(rng) < 0.5), 0


@numba.njit(cache=True, nogil=True)
def _nsp_pair(starts, document_offsets, lo, hi, rng, nsp_rng, target, position):
    """BERT's pair of sentences lo..hi-1 of document ``position``: B follows A, or half the time (always for one
    sentence) comes from a random other document and the sentences after A are put back."""
    count = hi - lo
    a_end = 1 if count == 1 else _randint(rng, 1, count - 1)
    tok_lo, split = starts[lo], starts[lo + a_end]
    if count > 1 and mersenne_random(rng) >= 0.5:
        return True, tok_lo, split, split, starts[hi], 0, 0
    b_lo = b_hi = 0
    if len(document_offsets) > 2:  # another document exists: it is drawn with the item's second generator
        pick = _randint(nsp_rng, 0, len(document_offsets) - 3)
        other = pick + (pick >= position)
        first, last = document_offsets[other], document_offsets[other + 1]
        if last > first:  # from a random sentence on, until B reaches the target's remainder
            start = first + _randint(rng, 0, last - first - 1)
            b_lo = starts[start]
            for s in range(start, last):
                b_hi = starts[s + 1]
                if b_hi - b_lo >= target - (split - tok_lo):
                    break
    return split > tok_lo and b_hi > b_lo, tok_lo, split, b_lo, b_hi, 1, count - a_end


GENERATORS = 8  # generators seeded side by side (``seeding.mersenne_seed``)


@numba.njit(cache=True, nogil=True)
def _pair_rows(starts, document_offsets, items, seeds, nsp_seeds, mode, short_seq_prob, max_seq_length, rows):
    """Writes every item's pairs to ``rows`` ([8, pairs]: first_lo, first_hi, second_lo, second_hi, label,
    target, item, index); returns their number."""
    rngs, nsp_rngs = mersenne_states(GENERATORS), mersenne_states(GENERATORS)
    count = 0
    for group in range(0, len(items), GENERATORS):
        end = min(group + GENERATORS, len(items))
        mersenne_seed(rngs, seeds[group:end])
        if mode == NSP:
            mersenne_seed(nsp_rngs, nsp_seeds[group:end])
        for item in range(group, end):
            rng, nsp_rng = rngs[item - group], nsp_rngs[item - group]
            count = _item_pairs(
                starts, document_offsets, items[item], item, rng, nsp_rng, mode, short_seq_prob, max_seq_length, rows,
                count,
            )  # fmt: skip
    return count


@numba.njit(cache=True, nogil=True)
def _item_pairs(
    starts, document_offsets, position, item, rng, nsp_rng, mode, short_seq_prob, max_seq_length, rows, count
):
    """Writes the pairs of one item (document ``position``) to ``rows`` from row ``count`` on; returns the rows
    written so far."""
    max_num_tokens = max_seq_length - 3
    first, last = document_offsets[position], document_offsets[position + 1]
    target = _draw_target(rng, short_seq_prob, max_num_tokens)
    chunk_lo, length, index, s = first, 0, 0, first
    while s < last:  # sentences join the chunk until it reaches the target or the document ends
        length += starts[s + 1] - starts[s]
        if s == last - 1 or length >= target:
            if mode == NSP:
                pair = _nsp_pair(starts, document_offsets, chunk_lo, s + 1, rng, nsp_rng, target, position)
            else:
                pair = _ordered_pair(starts, chunk_lo, s + 1, rng, mode == SOP)
            valid, a_lo, a_hi, b_lo, b_hi, label, put_back = pair
            s -= put_back  # BERT puts the segments it did not use back
            if valid:
                cut_a, cut_b = truncation(a_hi - a_lo, b_hi - b_lo, max_num_tokens)
                a_lo, b_hi = a_lo + cut_a, b_hi - cut_b
                if mode == SOP and label == 1:  # swapped after truncation: the same text, the other order
                    a_lo, a_hi, b_lo, b_hi = b_lo, b_hi, a_lo, a_hi
                rows[0, count], rows[1, count], rows[2, count], rows[3, count] = a_lo, a_hi, b_lo, b_hi
                rows[4, count], rows[5, count], rows[6, count], rows[7, count] = label, target, item, index
                count, index = count + 1, index + 1
            chunk_lo, length = s + 1, 0
            target = _draw_target(rng, short_seq_prob, max_num_tokens)
        s += 1
    return count
