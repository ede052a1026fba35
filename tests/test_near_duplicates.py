"""Tests for the MinHash/LSH algorithm of the dedup stage (pipelines.algorithms.near_duplicates): no pipeline needed."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from pipelines.algorithms import near_duplicates
from pipelines.algorithms.near_duplicates import (
    MinHasher,
    compact,
    content_key,
    estimated_jaccard,
    first_of_runs,
    greedy_removals,
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
        "from pipelines.algorithms.near_duplicates import MinHasher; h = MinHasher(); "
        "s = h.signature(['é café, naïve words', "
        "'and more words here.']); print(s.tolist(), h.band_keys(s))"
    )
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    here = HASHER.signature(["é café, naïve words", "and more words here."])
    assert fresh.strip() == f"{here.tolist()} {HASHER.band_keys(here)}"


def _signature(*entries: int) -> bytes:
    return np.array(entries, dtype="<u4").tobytes()


def test_a_member_is_compared_with_every_representative_however_far_down_its_bucket():
    # Twenty mutually unlike held-out documents share the bucket; the copy of the 15th must still find it (a cap
    # on the better members compared with would miss every one after the 8th).
    held = [((0, f"h{i:02d}"), b"c%d" % i, _signature(i, 100 + i, 200 + i, 300 + i)) for i in range(20)]
    copy = ((1, "copy"), b"copy", _signature(14, 114, 214, 999))  # agrees with h14 on 3 of 4 entries
    assert list(similar_pairs([[copy, *held]], 0.75)) == [((1, "copy"), (0, "h14"))]


def test_a_bucket_of_near_identical_documents_costs_one_comparison_per_member():
    same = _signature(1, 2, 3, 4)
    bucket = [((1, f"d{i:05d}"), b"%d" % (i % 3000), same) for i in range(6000)] + [((0, "z"), b"held", same)]
    pairs = list(similar_pairs([bucket], 0.8))  # one representative (z): 3000 comparisons, not 3000²/2
    assert pairs == [((1, f"d{i:05d}"), (0, "z")) for i in range(3000)]  # the best of each content key only


def _removals(pairs: list[tuple[int, int]], count: int) -> dict[int, int]:
    kept = greedy_removals(np.array([w for w, _ in pairs], int), np.array([b for _, b in pairs], int), count)
    return {w: int(b) for w, b in enumerate(kept) if b >= 0}


def test_greedy_removals_name_a_survivor_and_break_chains():
    a, b, c, d, e = range(5)  # priority order
    # b is like a, c like b only: b goes for a, and c, like no survivor, stays.
    assert _removals([(b, a), (c, b)], 5) == {b: a}
    # d is like b (removed) and c (kept): it goes for c; e is like d only, so stays; repeats change nothing.
    assert _removals([(d, b), (b, a), (d, c), (e, d), (d, c)], 5) == {b: a, d: c}
    assert _removals([(c, a), (c, b)], 5) == {c: a}  # the best survivor is named
    assert _removals([], 3) == {}


def test_greedy_removals_decide_as_the_rule_says_on_random_graphs():
    # The rule, as written: in priority order, a document goes iff a better one it is like stays; kept is the best.
    rng = np.random.default_rng(7)
    for _ in range(50):
        count = int(rng.integers(2, 60))
        worse = rng.integers(1, count, int(rng.integers(0, 4 * count)))
        pairs = [(int(w), int(rng.integers(0, w))) for w in worse]
        expected: dict[int, int] = {}
        for w in range(count):
            survivors = [b for x, b in pairs if x == w and b not in expected]
            if survivors:
                expected[w] = min(survivors)
        assert _removals(pairs, count) == expected


def test_similar_pairs_keep_the_pairs_at_or_above_the_threshold():
    same, half, other = b"\x01" * 8, b"\x01" * 4 + b"\x02" * 4, b"\x03" * 8  # two 4-byte entries each
    bucket = [((1, "b"), b"cb", half), ((0, "a"), b"ca", same), ((1, "c"), b"cc", other)]
    assert list(similar_pairs([bucket], 0.5)) == [((1, "b"), (0, "a"))]  # b agrees with a on 1 of 2 entries
    assert list(similar_pairs([bucket], 0.6)) == []
    # At 0: b is like a, so not a representative; c is compared with a only.
    assert list(similar_pairs([bucket], 0.0)) == [((1, "b"), (0, "a")), ((1, "c"), (0, "a"))]


def test_a_document_without_words_has_no_band_keys_and_content_keys_tell_lists_apart():
    for empty in ([], [""], ["", "  "], [" \t"]):
        assert HASHER.band_keys(HASHER.signature(empty)) == []  # nobody's near duplicate, not each other's
    assert len(HASHER.band_keys(HASHER.signature(["x"]))) == HASHER.bands
    lists = [[], [""], ["", ""], ["a\nb"], ["a", "b"], ["ab"], ["a", "", "b"]]
    assert len({content_key(x) for x in lists}) == len(lists)
    assert content_key(["a", "b"]) == content_key(["a", "b"]) and len(content_key(["a"])) == 16


# sha256 of the signature bytes (first 16 hex digits), computed by the signature before words came in blocks: a
# change of hashing would change every stage output after dedup.
PINNED = {
    ("é café, naïve words", "and more words here."): "ecaf1817909839a4",
    ("two words",): "a922d29fc91bc8d6",
    (" ".join(f"w{i % 997}" for i in range(70_000)),): "7bbf721e9a2bf1a0",  # more than one block of words
    ("a b c d e f",): "76a3be624116d003",
}


def test_signatures_are_the_same_values_as_before_and_whatever_the_block_size(monkeypatch: pytest.MonkeyPatch):
    for doc, digest in PINNED.items():
        assert hashlib.sha256(HASHER.signature(list(doc)).astype("<u8").tobytes()).hexdigest()[:16] == digest
    docs = [["a b c d e f g h i j k"], ["x " * 23, "y z"], ["one two"], ["a b c d e"]]
    whole = [(HASHER.signature(doc), HASHER.shingles(doc)) for doc in docs]
    monkeypatch.setattr(near_duplicates, "WORDS_PER_BLOCK", 6)  # a block boundary every 6 words
    for doc, (signature, shingles) in zip(docs, whole, strict=True):
        assert (HASHER.signature(doc) == signature).all() and (HASHER.shingles(doc) == shingles).all()


def test_a_huge_document_is_hashed_in_bounded_memory(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(near_duplicates, "WORDS_PER_BLOCK", 8192)  # 14.6 MB peak, mostly the permutation block
    huge = [" ".join(f"word{i}" for i in range(200_000))]  # one 2.2 MB sentence of distinct words
    tracemalloc.start()
    try:
        signature = HASHER.signature(huge)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6, peak  # every word's list, hash cache and shingles at once: 31 MB, 303 MB at 2M words
    assert len(HASHER.band_keys(signature)) == HASHER.bands


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
