"""Sentence-pair construction: order truth, lengths, modes and determinism."""

from __future__ import annotations

import random

import pytest

from pipelines.seeding import rng_for
from pipelines.sop import PairConfig, document_pairs, truncate_pair


def _document(rng: random.Random, first: int) -> list[list[int]]:
    """Sentences of 3..30 tokens whose ids count up, so a token's id is its position in the document."""
    segments, next_id = [], first
    for _ in range(rng.randint(1, 12)):
        length = rng.randint(3, 30)
        segments.append(list(range(next_id, next_id + length)))
        next_id += length
    return segments


def _is_contiguous(tokens: list[int]) -> bool:
    return tokens == list(range(tokens[0], tokens[0] + len(tokens)))


@pytest.mark.parametrize("max_seq_length", [16, 64, 128])
def test_sop_pairs_are_consecutive_text_and_label_tells_the_order(max_seq_length: int) -> None:
    config = PairConfig(max_seq_length=max_seq_length, short_seq_prob=0.1)
    labels = []
    for d in range(3000):
        doc = _document(random.Random(d), first=1000)
        for pair in document_pairs(doc, rng_for(1, f"doc{d}", 0), config):
            assert pair.tokens_a and pair.tokens_b
            assert len(pair.tokens_a) + len(pair.tokens_b) <= max_seq_length - 3
            first, second = (pair.tokens_a, pair.tokens_b) if pair.label == 0 else (pair.tokens_b, pair.tokens_a)
            # In document order the two parts are consecutive text: truncation only trims the outer ends.
            assert _is_contiguous(first) and _is_contiguous(second)
            assert second[0] == first[-1] + 1  # B is the text right after A: trimming never cuts between them
            labels.append(pair.label)
    assert abs(sum(labels) / len(labels) - 0.5) < 4 * (0.25 / len(labels)) ** 0.5  # 4 standard errors


def test_short_target_share_matches_short_seq_prob() -> None:
    config = PairConfig(max_seq_length=64, short_seq_prob=0.1)
    targets = [
        pair.target_length
        for d in range(1500)
        for pair in document_pairs(_document(random.Random(d), 1), rng_for(2, str(d), 0), config)
    ]
    share = sum(t < 61 for t in targets) / len(targets)
    assert abs(share - 0.1) < 0.02, share


def test_pairs_are_reproducible_from_the_seed_alone() -> None:
    doc = _document(random.Random(5), 1)
    config = PairConfig(max_seq_length=32)
    first = list(document_pairs(doc, rng_for(7, "d", 3), config))
    again = list(document_pairs(doc, rng_for(7, "d", 3), config))
    other = list(document_pairs(doc, rng_for(8, "d", 3), config))
    assert first == again and first != other


def test_nsp_negatives_come_from_another_document() -> None:
    config = PairConfig(max_seq_length=64, inter_sentence="nsp")
    other_doc = [list(range(-100, -80)), list(range(-80, -60))]
    labels = []
    for d in range(300):
        doc = _document(random.Random(d), 1)
        for pair in document_pairs(doc, rng_for(3, str(d), 0), config, lambda: other_doc):
            labels.append(pair.label)
            assert all(t < 0 for t in pair.tokens_b) == (pair.label == 1)
    assert 0.4 < sum(labels) / len(labels) < 0.7  # one-segment chunks always take a random B, as in BERT


def test_none_mode_never_swaps_and_unknown_mode_is_refused() -> None:
    config = PairConfig(max_seq_length=64, inter_sentence="none")
    pairs = [p for d in range(50) for p in document_pairs(_document(random.Random(d), 1), rng_for(0, d, 0), config)]
    assert pairs and all(p.label == 0 and p.tokens_a[-1] < p.tokens_b[0] for p in pairs)
    with pytest.raises(ValueError, match="sop"):
        PairConfig(inter_sentence="next")


def test_truncation_trims_the_longer_side_at_its_outer_end() -> None:
    for trial in range(2000):
        rng = random.Random(trial)
        a, b = list(range(rng.randint(1, 60))), list(range(100, 100 + rng.randint(1, 60)))
        limit = rng.randint(2, 130)
        want_a, want_b = list(a), list(b)
        while len(want_a) + len(want_b) > limit:  # the reference's loop, with the ends fixed
            if len(want_a) > len(want_b):
                del want_a[0]
            else:
                want_b.pop()
        truncate_pair(a, b, limit)
        assert (a, b) == (want_a, want_b)
