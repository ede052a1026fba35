"""Sentence-pair construction: order truth, lengths, modes, determinism, and the compiled loop against the
reference's Python loop."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from pipelines.algorithms.seeding import rng_for, stable_hash64
from pipelines.algorithms.sop import Documents, PairConfig, document_pairs, pair_spans, truncation


def _document(rng: random.Random, first: int) -> list[list[int]]:
    """Sentences of 3..30 tokens whose ids count up, so a token's id is its position in the document."""
    segments, next_id = [], first
    for _ in range(rng.randint(1, 12)):
        length = rng.randint(3, 30)
        segments.append(list(range(next_id, next_id + length)))
        next_id += length
    return segments


def _seed(seed: int, document_id: object, duplicate: int, purpose: str = "instances") -> int:
    """The seed of ``rng_for``'s generator: the pairs' generator in the stage."""
    return stable_hash64(purpose, seed, document_id, duplicate)


def _is_contiguous(tokens: list[int]) -> bool:
    return tokens == list(range(tokens[0], tokens[0] + len(tokens)))


@pytest.mark.parametrize("max_seq_length", [16, 64, 128])
def test_sop_pairs_are_consecutive_text_and_label_tells_the_order(max_seq_length: int) -> None:
    config = PairConfig(max_seq_length=max_seq_length, short_seq_prob=0.1)
    labels = []
    for d in range(3000):
        doc = _document(random.Random(d), first=1000)
        for pair in document_pairs(doc, _seed(1, f"doc{d}", 0), config):
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
        for pair in document_pairs(_document(random.Random(d), 1), _seed(2, str(d), 0), config)
    ]
    share = sum(t < 61 for t in targets) / len(targets)
    assert abs(share - 0.1) < 0.02, share


def test_pairs_are_reproducible_from_the_seed_alone() -> None:
    doc = _document(random.Random(5), 1)
    config = PairConfig(max_seq_length=32)
    first = document_pairs(doc, _seed(7, "d", 3), config)
    again = document_pairs(doc, _seed(7, "d", 3), config)
    other = document_pairs(doc, _seed(8, "d", 3), config)
    assert first == again and first != other


def test_nsp_negatives_come_from_another_document() -> None:
    config = PairConfig(max_seq_length=64, inter_sentence="nsp")
    other_doc = [list(range(-100, -80)), list(range(-80, -60))]
    labels = []
    for d in range(300):
        doc = _document(random.Random(d), 1)
        for pair in document_pairs(doc, _seed(3, str(d), 0), config, [other_doc], _seed(3, str(d), 0, "nsp")):
            labels.append(pair.label)
            assert all(t < 0 for t in pair.tokens_b) == (pair.label == 1)
    assert 0.4 < sum(labels) / len(labels) < 0.7  # one-segment chunks always take a random B, as in BERT
    with pytest.raises(ValueError, match="nsp_seeds"):
        pair_spans(Documents.from_segments([other_doc]), np.zeros(1, np.int64), np.zeros(1, np.uint64), config)


def test_none_mode_never_swaps_and_unknown_mode_is_refused() -> None:
    config = PairConfig(max_seq_length=64, inter_sentence="none")
    pairs = [p for d in range(50) for p in document_pairs(_document(random.Random(d), 1), _seed(0, d, 0), config)]
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
        cut_a, cut_b = truncation(len(a), len(b), limit)
        assert (a[cut_a:], b[: len(b) - cut_b]) == (want_a, want_b)


Tokens = list[int]


def _randint(rng: random.Random, low: int, high: int) -> int:
    return low + int(rng.random() * (high - low + 1))


def _reference_pairs(
    segments: list[Tokens],
    rng: random.Random,
    config: PairConfig,
    documents: list[list[Tokens]],
    position: int,
    nsp_rng: random.Random,
) -> list[tuple[Tokens, Tokens, int, int]]:
    """The sequential loop in plain Python, one token list at a time, as sop.py's docstring describes it: the
    compiled loop must give exactly these pairs from the same generators."""
    max_num_tokens = config.max_seq_length - 3
    pairs, chunk, i, target = [], [], 0, _reference_target(rng, config)
    while i < len(segments):
        chunk.append(segments[i])
        if i == len(segments) - 1 or sum(map(len, chunk)) >= target:
            if config.inter_sentence == "nsp":
                (a, b, label), put_back = _reference_nsp(chunk, rng, target, documents, position, nsp_rng)
                i -= put_back
            else:
                a, b, label = _reference_ordered(chunk, rng, config.inter_sentence == "sop")
            if a is not None:
                while len(a) + len(b) > max_num_tokens:  # the reference's loop, with the ends fixed
                    a, b = (a[1:], b) if len(a) > len(b) else (a, b[:-1])
                swapped = config.inter_sentence == "sop" and label == 1
                pairs.append((b, a, label, target) if swapped else (a, b, label, target))
            chunk, target = [], _reference_target(rng, config)
        i += 1
    return pairs


def _reference_target(rng: random.Random, config: PairConfig) -> int:
    max_num_tokens = config.max_seq_length - 3
    return _randint(rng, 2, max_num_tokens) if rng.random() < config.short_seq_prob else max_num_tokens


def _reference_ordered(chunk: list[Tokens], rng: random.Random, swap: bool) -> tuple:
    if len(chunk) >= 2:
        a_end = _randint(rng, 1, len(chunk) - 1)
        a, b = [t for s in chunk[:a_end] for t in s], [t for s in chunk[a_end:] for t in s]
    elif len(chunk[0]) >= 2:
        cut = _randint(rng, 1, len(chunk[0]) - 1)
        a, b = chunk[0][:cut], chunk[0][cut:]
    else:
        return None, None, 0
    return a, b, int(swap and rng.random() < 0.5)


def _reference_nsp(
    chunk: list[Tokens],
    rng: random.Random,
    target: int,
    documents: list[list[Tokens]],
    position: int,
    nsp_rng: random.Random,
) -> tuple[tuple, int]:
    a_end = 1 if len(chunk) == 1 else _randint(rng, 1, len(chunk) - 1)
    a = [t for s in chunk[:a_end] for t in s]
    if len(chunk) > 1 and rng.random() >= 0.5:
        return (a, [t for s in chunk[a_end:] for t in s], 0), 0
    other = []
    if len(documents) > 1:  # another document of the file, drawn with the item's second generator
        pick = _randint(nsp_rng, 0, len(documents) - 2)
        other = documents[pick + (pick >= position)]
    b = []
    for segment in other[_randint(rng, 0, len(other) - 1) :] if other else []:
        b.extend(segment)
        if len(b) >= target - len(a):
            break
    return ((a, b, 1) if a and b else (None, None, 1)), len(chunk) - a_end  # the sentences after A go back


def _ragged_document(rng: random.Random) -> list[list[int]]:
    """Up to 14 sentences of 0..70 tokens (empty ones too), numbered so that every token is distinct."""
    lengths = [rng.choice([0, 1, 1, 2, 3, 5, 10, 30, 70]) for _ in range(rng.randint(0, 14))]
    start = rng.randrange(10**6)
    ends = np.cumsum([start, *lengths]).tolist()
    return [list(range(lo, hi)) for lo, hi in itertools.pairwise(ends)]


@pytest.mark.parametrize("inter_sentence", ["sop", "nsp", "none"])
def test_the_compiled_loop_makes_the_reference_loops_pairs(inter_sentence: str) -> None:
    """Many items of one batch (a document several times, as duplicates) against the Python loop, item by item:
    empty sentences and documents, lengths that trim and short targets included."""
    rng = random.Random(inter_sentence)
    for max_seq_length, short_seq_prob in [(5, 0.5), (16, 0.1), (64, 0.0), (64, 1.0), (128, 0.1)]:
        config = PairConfig(max_seq_length, short_seq_prob, inter_sentence)
        documents = [_ragged_document(rng) for _ in range(rng.randint(1, 30))]
        items = [rng.randrange(len(documents)) for _ in range(rng.randint(1, 40))]  # 8 generators seeded at a time
        seeds = [_seed(5, f"{max_seq_length}/{d}", k) for k, d in enumerate(items)]
        nsp_seeds = [_seed(5, f"{max_seq_length}/{d}", k, "nsp") for k, d in enumerate(items)]
        flat = Documents.from_segments(documents)
        spans = pair_spans(flat, np.array(items), np.array(seeds, np.uint64), config, np.array(nsp_seeds, np.uint64))
        tokens = flat.tokens.tolist()
        got = [
            (tokens[a:b], tokens[c:d], label, target)
            for a, b, c, d, label, target in zip(*(column.tolist() for column in spans[:6]), strict=True)
        ]
        expected = []
        for item, (d, seed, nsp_seed) in enumerate(zip(items, seeds, nsp_seeds, strict=True)):
            reference = _reference_pairs(
                documents[d], random.Random(seed), config, documents, d, random.Random(nsp_seed)
            )
            expected += reference
            assert spans.index[spans.item == item].tolist() == list(range(len(reference)))
        assert got == expected, (max_seq_length, short_seq_prob)


def test_the_stage_generator_is_rng_for() -> None:
    """The seed ``_seed`` gives the compiled loop is the one of ``rng_for``'s generator, which documents it."""
    assert rng_for(7, "d", 3).random() == random.Random(_seed(7, "d", 3)).random()
