"""Tests for the MinHash/LSH algorithm of the dedup stage (pipelines.near_duplicates): no pipeline needed."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pipelines.near_duplicates import (
    MinHasher,
    bucket_pairs,
    compact,
    content_key,
    estimated_jaccard,
    first_of_runs,
    similar_pairs,
)

HASHER = MinHasher()
WORDS = 400


def _pair(target: float, seed: int) -> tuple[list[str], list[str], float]:
    """Two documents sharing a prefix of words chosen so that their shingle Jaccard is about ``target``; returns
    them with their true shingle Jaccard."""
    k, n = HASHER.shingle_words, WORDS
    shingles = n - k + 1
    shared = round(2 * shingles * target / (1 + target))  # J = s / (2S - s)
    a = [f"a{seed}x{i}" for i in range(n)]
    b = a[: shared + k - 1] + [f"b{seed}x{i}" for i in range(n - shared - k + 1)]
    x, y = set(HASHER.shingles([" ".join(a)]).tolist()), set(HASHER.shingles([" ".join(b)]).tolist())
    return [" ".join(a[:200]), " ".join(a[200:])], [" ".join(b)], len(x & y) / len(x | y)


@pytest.mark.parametrize("target", [0.3, 0.6, 0.9])
def test_estimated_jaccard_tracks_the_shingle_jaccard(target: float):
    for seed in range(3):
        a, b, true = _pair(target, seed)
        assert abs(true - target) < 0.01
        estimate = estimated_jaccard(HASHER.signature(a), HASHER.signature(b))
        assert abs(estimate - true) < 0.1, (seed, estimate, true)
        assert estimated_jaccard(compact(HASHER.signature(a)), compact(HASHER.signature(b))) == estimate


def test_equal_words_give_equal_signatures_however_split_into_sentences():
    text = "the quick brown fox jumps over the lazy dog again and again"
    one, two = (
        HASHER.signature([text]),
        HASHER.signature(["the quick brown fox jumps", "over the lazy dog again and again"]),
    )
    assert one.dtype == np.uint64 and one.shape == (128,) and (one == two).all()
    assert content_key([text]) != content_key(text.split(" jumps "))  # exact duplicates need equal sentence lists


def test_a_document_shorter_than_a_shingle_is_one_shingle():
    assert len(HASHER.shingles(["two words"])) == 1 and len(HASHER.shingles([""])) == 0
    assert estimated_jaccard(HASHER.signature(["two words"]), HASHER.signature(["two wordz"])) < 0.1
    assert len(HASHER.shingles(["a b c d e f"])) == 2


def test_lsh_buckets_catch_close_pairs_and_miss_far_ones():
    for seed in range(5):
        close, far = _pair(0.9, seed), _pair(0.3, seed + 10)
        keys = [set(HASHER.band_keys(HASHER.signature(doc))) for doc in (*close[:2], *far[:2])]
        assert keys[0] & keys[1]  # P(no shared band) at J=0.9: (1 - 0.9⁸)¹⁶ ≈ 1e-4
        assert not keys[2] & keys[3]  # P(a shared band) at J=0.3: ≈ 16 × 0.3⁸ ≈ 1e-3
    assert len(HASHER.band_keys(HASHER.signature(["x y z"]))) == 16


def test_signatures_and_band_keys_are_the_same_in_a_fresh_process():
    code = (
        "from pipelines.near_duplicates import MinHasher; h = MinHasher(); s = h.signature(['é café, naïve words', "
        "'and more words here.']); print(s.tolist(), h.band_keys(s))"
    )
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    here = HASHER.signature(["é café, naïve words", "and more words here."])
    assert fresh.strip() == f"{here.tolist()} {HASHER.band_keys(here)}"


def test_bucket_pairs_are_bounded_best_first_and_skip_exact_duplicates():
    members = [((1, f"d{i:04d}"), bytes([i % 250])) for i in range(1000)] + [((0, "z"), b"held")]
    pairs = bucket_pairs(members, max_better=3)
    assert len(pairs) <= 3 * 1001
    assert pairs[:3] == [((1, "d0000"), (0, "z")), ((1, "d0001"), (0, "z")), ((1, "d0001"), (1, "d0000"))]
    assert {worse for worse, _ in pairs} == {(1, f"d{i:04d}") for i in range(250)}  # one per content key


def test_similar_pairs_keep_the_pairs_at_or_above_the_threshold():
    same, half, other = b"\x01" * 8, b"\x01" * 4 + b"\x02" * 4, b"\x03" * 8  # two 4-byte entries each
    bucket = [((1, "b"), b"cb", half), ((0, "a"), b"ca", same), ((1, "c"), b"cc", other)]
    assert list(similar_pairs([bucket], 0.5)) == [((1, "b"), (0, "a"))]  # b agrees with a on 1 of 2 entries
    assert list(similar_pairs([bucket], 0.6)) == []
    assert list(similar_pairs([bucket], 0.0)) == [((1, "b"), (0, "a")), ((1, "c"), (0, "a")), ((1, "c"), (1, "b"))]


def test_first_of_runs_points_each_row_at_the_first_of_its_equal_keys():
    hi = np.array([1, 1, 1, 2, 2, 3], dtype=np.uint64)
    lo = np.array([5, 5, 6, 6, 6, 6], dtype=np.uint64)
    assert first_of_runs(hi).tolist() == [0, 0, 0, 3, 3, 5]
    assert first_of_runs(hi, lo).tolist() == [0, 0, 2, 3, 3, 5]  # a run ends where either key changes
    assert first_of_runs(np.array(["x", "x", "y"], dtype=object)).tolist() == [0, 0, 2]


def test_num_perm_must_be_a_multiple_of_bands():
    with pytest.raises(ValueError, match="not a multiple of bands=16"):
        MinHasher(num_perm=100)
    assert MinHasher(num_perm=64, bands=8).signature(["a b c d e"]).shape == (64,)
