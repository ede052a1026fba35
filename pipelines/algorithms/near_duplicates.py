"""Exact and near-duplicate detection for documents given as lists of sentences: the dedup stage's algorithm (pure).

Imports neither Beam nor torch (numpy only), so tests and benches call it directly. What it owns:

- ``content_key`` and ``sentence_key``: stable digests that stand for a document's sentence list (length-prefixed,
  so different lists never share a key but by a 2⁻¹²⁸ chance) and for one sentence, so the stage groups 16 bytes
  instead of text;
- ``MinHasher``: a document → its MinHash signature over word shingles, and the signature → its LSH band keys
  (none for a document with no word, which is nobody's near duplicate). Word hashes are 64-bit blake2b digests;
  a shingle is the words' hashes combined in numpy uint64 arithmetic then mixed (splitmix64's finaliser);
  permutation i is ``(a_i * x + b_i) mod 2**64`` with odd ``a_i``, ``a_i`` and ``b_i`` taken from sha256 of
  ``"minhash", i``: not from numpy's generators, whose streams numpy does not promise to keep across releases.
  Words pass through in blocks of ``WORDS_PER_BLOCK``, so a huge document costs bounded memory and the same
  signature (a minimum does not depend on how its inputs are split). Nothing depends on Python's salted
  ``hash()``, so every process and machine computes the same signature;
- ``estimated_jaccard`` (share of equal signature entries) and ``similar_pairs``, the similar (worse, better)
  pairs of each LSH bucket, each member compared with its bucket's representatives;
- ``greedy_removals``: the pairs of every bucket → the documents removed when documents are taken in priority
  order and each goes iff it is similar to a better one that stays;
- ``first_of_runs``: over rows sorted by key then priority, each row's run's first row, the copy every rule keeps.
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

__all__ = [
    "WORDS_PER_BLOCK",
    "MinHasher",
    "compact",
    "content_key",
    "estimated_jaccard",
    "first_of_runs",
    "greedy_removals",
    "sentence_key",
    "similar_pairs",
]

# Words hashed and shingled at a time, so the signature's own memory does not grow with the document: ~20 MB at
# the peak (tracemalloc) for one sentence of 400K or of 2M distinct words, where one list of all its words took
# 63 MB and 303 MB; the (num_perm, _CHUNK) permutation block is most of it. A normal document is one block.
WORDS_PER_BLOCK = 1 << 16
_LONG_SENTENCE = 1 << 20  # chars: a longer sentence is split lazily (re.finditer) rather than into one list
_WORD = re.compile(r"\S+")  # the words str.split() gives: \s and str.isspace() agree on every code point
_CHUNK = 4096  # shingles per block of the signature's (num_perm, chunk) uint64 matrix: 4 MB at 128 permutations
_SHINGLE_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd: position j's word hash is weighted by its power j
_MASK32 = np.uint64(0xFFFFFFFF)
_PAIRS_AT_A_TIME = 1 << 16  # pairs turned into Python ints at a time: bounded, whatever the number of pairs


def content_key(sentences: Sequence[str]) -> bytes:
    """Returns 16 bytes standing for the whole sentence list: equal lists, equal keys. sha256 of the count then
    each sentence's UTF-8 length and bytes: a join would give ``[]`` and ``[""]``, or ``["a\\nb"]`` and
    ``["a", "b"]``, one key."""
    digest = hashlib.sha256(len(sentences).to_bytes(8, "little"))
    for sentence in sentences:
        raw = sentence.encode("utf-8")
        digest.update(len(raw).to_bytes(8, "little"))
        digest.update(raw)
    return digest.digest()[:16]


def sentence_key(sentence: str) -> bytes:
    """Returns 16 bytes standing for one sentence (blake2b); a collision is ~2⁻¹²⁸ per pair."""
    return hashlib.blake2b(sentence.encode("utf-8"), digest_size=16).digest()


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64: every output bit depends on every input bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _word_hashes(words: list[str]) -> np.ndarray:
    """(len(words),) uint64: each distinct word hashed once with blake2b."""
    cache: dict[str, int] = {}
    for word in words:
        if word not in cache:
            cache[word] = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
    return np.array([cache[w] for w in words], dtype=np.uint64)


def _words(sentences: Sequence[str]) -> Iterator[str]:
    """A document's words in order, across its sentences, without one list of a huge sentence's words."""
    return itertools.chain.from_iterable(
        s.split() if len(s) <= _LONG_SENTENCE else (m.group() for m in _WORD.finditer(s)) for s in sentences
    )


def _permutation(i: int) -> tuple[int, int]:
    digest = hashlib.sha256(f"minhash\x1f{i}".encode()).digest()
    return int.from_bytes(digest[:8], "little") | 1, int.from_bytes(digest[8:16], "little")


@dataclasses.dataclass(frozen=True)
class MinHasher:
    """MinHash signatures over word shingles, and their LSH bands.

    Args:
        num_perm: signature length (permutations).
        bands: LSH bands; ``num_perm`` must be a multiple, each band ``num_perm // bands`` rows.
        shingle_words: words per shingle; a shorter document is one shingle of all its words.
    """

    num_perm: int = 128
    bands: int = 16
    shingle_words: int = 5
    _a: Any = dataclasses.field(init=False, repr=False, compare=False)  # (num_perm, 1) uint64, odd
    _b: Any = dataclasses.field(init=False, repr=False, compare=False)  # (num_perm, 1) uint64

    def __post_init__(self) -> None:
        if self.num_perm < 1 or self.bands < 1 or self.shingle_words < 1:
            raise ValueError(f"num_perm, bands and shingle_words must be positive: {self}")
        if self.num_perm % self.bands:
            raise ValueError(f"num_perm={self.num_perm} is not a multiple of bands={self.bands}")
        a, b = zip(*map(_permutation, range(self.num_perm)), strict=True)
        object.__setattr__(self, "_a", np.array(a, dtype=np.uint64)[:, None])
        object.__setattr__(self, "_b", np.array(b, dtype=np.uint64)[:, None])

    def _shingle_blocks(self, sentences: Sequence[str]) -> Iterator[np.ndarray]:
        """Yields the shingle hashes (uint64, unsorted, maybe repeated) of a document, block by block of
        ``WORDS_PER_BLOCK`` words; each block starts with the previous block's last ``shingle_words - 1`` word
        hashes, so the blocks' shingles together are the whole document's."""
        words, k = _words(sentences), self.shingle_words
        size = max(WORDS_PER_BLOCK, k)  # a block shorter than a shingle is the whole document
        block = list(itertools.islice(words, size))
        if len(block) < k:  # shorter than a shingle: one shingle of all its words, if any
            if block:
                yield self._shingle_hashes(_word_hashes(block), len(block))
            return
        carry = np.zeros(0, dtype=np.uint64)
        while block:
            hashes = np.concatenate([carry, _word_hashes(block)])
            yield self._shingle_hashes(hashes, k)
            carry = hashes[len(hashes) - k + 1 :]
            block = list(itertools.islice(words, size)) if len(block) == size else []

    @staticmethod
    def _shingle_hashes(hashes: np.ndarray, k: int) -> np.ndarray:
        count = len(hashes) - k + 1
        combined = np.zeros(count, dtype=np.uint64)
        for j in range(k):  # k vector steps, not a loop over shingles; uint64 products wrap mod 2**64
            combined = combined * _SHINGLE_MULTIPLIER + hashes[j : j + count]
        return _mix(combined)

    def shingles(self, sentences: Sequence[str]) -> np.ndarray:
        """Returns the distinct shingle hashes (uint64, sorted) of a document's words, across its sentences."""
        return np.unique(np.concatenate([np.zeros(0, dtype=np.uint64), *self._shingle_blocks(sentences)]))

    def signature(self, sentences: Sequence[str]) -> np.ndarray:
        """Returns the (num_perm,) uint64 MinHash signature; all ones (2**64 - 1) for a document with no word.

        Memory is bounded by a block of words and a (num_perm, 4096) matrix, whatever the document's length."""
        out = np.full(self.num_perm, np.iinfo(np.uint64).max, dtype=np.uint64)
        for block in self._shingle_blocks(sentences):
            shingles = np.unique(block)  # a repeated shingle (a repeated line) costs one column, not many
            for start in range(0, len(shingles), _CHUNK):
                columns = self._a * shingles[None, start : start + _CHUNK] + self._b  # (num_perm, chunk), mod 2**64
                np.minimum(out, columns.min(axis=1), out=out)
        return out

    def band_keys(self, signature: np.ndarray) -> list[int]:
        """Returns one 64-bit key per band: blake2b of the band's index and rows, so bands never share buckets.
        None for a document with no word (an all-ones signature, which no shingle gives but by a 2⁻⁶⁴ chance per
        entry): every such document would share every bucket, and empty text is nobody's near duplicate."""
        if (signature == np.iinfo(np.uint64).max).all():
            return []
        rows = self.num_perm // self.bands
        raw = signature.astype("<u8").tobytes()
        return [
            int.from_bytes(hashlib.blake2b(raw[8 * rows * j : 8 * rows * (j + 1)], digest_size=8,
                                           salt=j.to_bytes(16, "little")).digest(), "little")
            for j in range(self.bands)
        ]  # fmt: skip


def compact(signature: np.ndarray) -> bytes:
    """Returns the signature's low 32 bits per entry (little-endian): half the bytes to join, and two entries
    that differ still differ but for a 2⁻³² chance each, far below what the estimate resolves."""
    return (signature & _MASK32).astype("<u4").tobytes()


def estimated_jaccard(x: bytes | np.ndarray, y: bytes | np.ndarray) -> float:
    """Returns the share of equal entries of two signatures (``compact`` bytes or arrays of one dtype)."""
    if isinstance(x, bytes):
        x, y = np.frombuffer(x, dtype="<u4"), np.frombuffer(y, dtype="<u4")
    if len(x) != len(y) or not len(x):
        raise ValueError(f"signatures of lengths {len(x)} and {len(y)} cannot be compared")
    return float(np.count_nonzero(x == y)) / len(x)


def similar_pairs(buckets: Iterable[Sequence[tuple[Any, bytes, bytes]]], threshold: float) -> Iterator[tuple[Any, Any]]:
    """Yields the similar (worse, better) priority pairs of each LSH bucket: estimated Jaccard ≥ ``threshold``.

    A bucket's members are taken in priority order, only the best of each content key (exact duplicates are
    decided elsewhere). Each is compared with every *representative* before it (a member similar to none of
    them), is paired with each similar one, and is a representative itself when there is none: every member
    either has a pair to a better representative or is one. Not compared: a member X with a better
    non-representative Y. That matters only when Y's representatives are all removed through pairs from other
    buckets while Y stays, and no bucket pairs X with a survivor: then X stays though like Y. Comparing with
    every better member instead would cost n²/2 per bucket of near-identical documents.

    Cost: n members × r representatives signature comparisons (numpy, one row at a time). A bucket of thousands
    of near-identical documents (a licence, a template page) has one or a few representatives, so O(n); r grows
    only with members that share a whole band yet are unlike one another, which two documents of Jaccard J do
    per band with chance J^rows (0.5⁸ ≈ 0.4 % at the default 8 rows), so such buckets stay small.

    Args:
        buckets: each bucket's members as (priority key, content key, ``compact`` signature), any order.
        threshold: the estimated Jaccard at which a pair is similar.
    """
    for members in buckets:
        seen, best = set(), []
        for priority, content, signature in sorted(members):
            if content not in seen:
                seen.add(content)
                best.append((priority, signature))
        width = len(best[0][1]) // 4 if best else 0
        signatures = np.frombuffer(b"".join(sig for _, sig in best), dtype="<u4").reshape(len(best), width)
        representatives = np.empty_like(signatures)  # (r, width): the first r rows are the representatives'
        priorities, r = [], 0
        for (priority, _), row in zip(best, signatures, strict=True):
            shares = np.count_nonzero(representatives[:r] == row, axis=1) / width  # estimated_jaccard, per row
            similar = np.flatnonzero(shares >= threshold)
            yield from ((priority, priorities[i]) for i in similar)
            if not len(similar):
                representatives[r], r = row, r + 1
                priorities.append(priority)


def greedy_removals(worse: np.ndarray, better: np.ndarray, count: int) -> np.ndarray:
    """Returns, for documents ``0 … count-1`` numbered in priority order (0 is the best), the number of the
    document each is removed for, or -1 where it stays: documents taken in priority order, each removed iff some
    better document it is similar to stays, and then kept is the best such. A kept document is never removed,
    so no chain (A kept, B removed for A, C removed for B though unlike A) can form: C stays unless a survivor is
    like it.

    Numbers, not keys: 8 bytes a pair and a document at the peak (a dict of sets of key tuples took ~550 bytes a
    pair, 0.5 GB per million pairs, in the one worker that resolves every bucket's pairs).

    Args:
        worse, better: the (worse, better) numbers of each similar pair, from any buckets, repeats allowed.
        count: how many documents are numbered.
    """
    kept = array.array("q", [-1]) * count  # indexed one at a time below: an array's items are cheap to reach
    order = np.lexsort((better, worse))  # by worse: every better number comes first, so its fate is known
    for start in range(0, len(order), _PAIRS_AT_A_TIME):
        at = order[start : start + _PAIRS_AT_A_TIME]
        for w, b in zip(worse[at].tolist(), better[at].tolist(), strict=True):
            if kept[w] < 0 and kept[b] < 0 and b != w:  # by better within worse: the first survivor is the best
                kept[w] = b
    return np.frombuffer(kept, dtype=np.int64).copy() if count else np.full(0, -1, dtype=np.int64)


def first_of_runs(*keys: np.ndarray) -> np.ndarray:
    """Returns, for rows sorted by ``keys`` (equal-length arrays, then by priority), the index of the first row
    of each row's run of equal keys: the best copy, which a rule keeps, while a row ``i`` with ``first[i] != i``
    goes."""
    n = len(keys[0])
    starts = np.zeros(n, dtype=bool)
    starts[:1] = True
    for key in keys:
        starts[1:] |= key[1:] != key[:-1]
    return np.maximum.accumulate(np.where(starts, np.arange(n), 0))
