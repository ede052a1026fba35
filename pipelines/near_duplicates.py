"""Exact and near-duplicate detection for documents given as lists of sentences: the dedup stage's algorithm (pure).

Imports neither Beam nor torch (numpy only), so tests and benches call it directly. What it owns:

- ``content_key`` and ``sentence_key``: stable digests that stand for a document's sentence list and for one
  sentence, so the stage groups 16 bytes instead of text;
- ``MinHasher``: a document → its MinHash signature over word shingles, and the signature → its LSH band keys.
  Word hashes are 64-bit blake2b digests (each distinct word of a document hashed once); a shingle is the words'
  hashes combined in numpy uint64 arithmetic then mixed (splitmix64's finaliser); permutation i is
  ``(a_i * x + b_i) mod 2**64`` with odd ``a_i``, ``a_i`` and ``b_i`` taken from sha256 of ``"minhash", i``: not
  from numpy's generators, whose streams numpy does not promise to keep across releases. Nothing depends on
  Python's salted ``hash()``, so every process and machine computes the same signature;
- ``estimated_jaccard`` (share of equal signature entries) and ``bucket_pairs``, the bounded candidate pairs of
  one LSH bucket, which ``similar_pairs`` compares;
- ``first_of_runs``: over rows sorted by key then priority, each row's run's first row, the copy every rule keeps.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

__all__ = [
    "MAX_BETTER",
    "MinHasher",
    "bucket_pairs",
    "compact",
    "content_key",
    "estimated_jaccard",
    "first_of_runs",
    "sentence_key",
    "similar_pairs",
]

# A bucket member is compared with at most this many better members, the best first. A bucket of thousands of
# near-identical documents (a licence, a template page) would otherwise give n²/2 pairs; a member that shares a
# whole band with the best members of its bucket is, when it is a near-duplicate at all, almost always one of the
# first it is compared with, so a few comparisons decide it at O(n · MAX_BETTER) per bucket.
MAX_BETTER = 8
_CHUNK = 4096  # shingles per block of the signature's (num_perm, chunk) uint64 matrix: 4 MB at 128 permutations
_SHINGLE_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd: position j's word hash is weighted by its power j
_MASK32 = np.uint64(0xFFFFFFFF)


def content_key(sentences: Sequence[str]) -> bytes:
    """Returns 16 bytes standing for the whole sentence list: equal lists, equal keys (sha256 of the lines)."""
    return hashlib.sha256("\n".join(sentences).encode("utf-8")).digest()[:16]


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

    def shingles(self, sentences: Sequence[str]) -> np.ndarray:
        """Returns the distinct shingle hashes (uint64, sorted) of a document's words, across its sentences."""
        words = [w for s in sentences for w in s.split()]
        if not words:
            return np.zeros(0, dtype=np.uint64)
        hashes = _word_hashes(words)
        k = min(self.shingle_words, len(words))
        count = len(words) - k + 1
        combined = np.zeros(count, dtype=np.uint64)
        for j in range(k):  # k vector steps, not a loop over shingles; uint64 products wrap mod 2**64
            combined = combined * _SHINGLE_MULTIPLIER + hashes[j : j + count]
        return np.unique(_mix(combined))

    def signature(self, sentences: Sequence[str]) -> np.ndarray:
        """Returns the (num_perm,) uint64 MinHash signature; all ones (2**64 - 1) for a document with no word."""
        shingles = self.shingles(sentences)
        out = np.full(self.num_perm, np.iinfo(np.uint64).max, dtype=np.uint64)
        for start in range(0, len(shingles), _CHUNK):
            block = self._a * shingles[None, start : start + _CHUNK] + self._b  # (num_perm, chunk), mod 2**64
            np.minimum(out, block.min(axis=1), out=out)
        return out

    def band_keys(self, signature: np.ndarray) -> list[int]:
        """Returns one 64-bit key per band: blake2b of the band's index and rows, so bands never share buckets."""
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


def bucket_pairs(members: Sequence[tuple[Any, bytes]], max_better: int = MAX_BETTER) -> list[tuple[Any, Any]]:
    """Returns the (worse, better) priority pairs of one LSH bucket to compare.

    Args:
        members: (priority key, content key) of each document in the bucket, any order. Documents with one
            content key are exact duplicates, decided elsewhere: only the best of each takes part.
        max_better: each member is paired with at most this many better members, the best first.
    """
    seen, kept = set(), []
    for priority, content in sorted(members):
        if content not in seen:
            seen.add(content)
            kept.append(priority)
    return [(worse, better) for i, worse in enumerate(kept) for better in kept[: min(i, max_better)]]


def similar_pairs(
    buckets: Iterable[Sequence[tuple[Any, bytes, bytes]]], threshold: float, max_better: int = MAX_BETTER
) -> Iterator[tuple[Any, Any]]:
    """Yields the (worse, better) priority pairs of ``bucket_pairs`` whose signatures agree on ≥ ``threshold``.

    Args:
        buckets: each bucket's members as (priority key, content key, ``compact`` signature).
    """
    for members in buckets:
        signatures = {priority: signature for priority, _, signature in members}
        for worse, better in bucket_pairs([member[:2] for member in members], max_better):
            if estimated_jaccard(signatures[worse], signatures[better]) >= threshold:
                yield worse, better


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
