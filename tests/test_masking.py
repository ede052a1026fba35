"""Whole-word n-gram masking: word starts in every script, span statistics, budget and replacement, and the
batched rounds against a one-candidate-at-a-time oracle."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from pipelines.algorithms.masking import (
    ORDER,
    SPAN_LENGTH,
    MaskingConfig,
    TokenClasses,
    _length_steps,
    mask_batch,
    mask_ngrams,
)
from pipelines.algorithms.seeding import uniforms

SPECIALS = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
ORDINARY = ["▁the", "▁cat", "s", "▁sat", ",", "中", "文", "▁", "▁on", "ma", "t", "。", "▁a", "b", "c", "(", ")"]
PIECES = [*SPECIALS, *ORDINARY]
CLASSES = TokenClasses.from_pieces(PIECES)
ID = {p: i for i, p in enumerate(PIECES)}


def _ids(*pieces: str) -> list[int]:
    return [ID[p] for p in pieces]


def test_words_join_continuation_pieces_and_split_cjk_characters() -> None:
    tokens = _ids("[CLS]", "▁cat", "s", "▁sat", ",", "▁", "中", "文", "。", "▁on", "[SEP]", "ma", "t", "[SEP]")
    words = CLASSES.words(tokens)
    # The bare "▁" is the space of "中": one word (see the test below).
    assert [(first, end) for first, end, _ in words] == [(1, 3), (3, 4), (4, 5), (5, 7), (7, 8), (8, 9), (9, 10),
                                                          (11, 13)]  # fmt: skip
    # Specials are never part of a word and end a run, so no span runs across [SEP].
    runs = [run for _, _, run in words]
    assert runs[:-1] == [runs[0]] * 7 and runs[-1] != runs[0]


def test_a_bare_space_joins_the_piece_after_it_even_punctuation() -> None:
    # "▁" alone is the space before a word that starts with punctuation or CJK ("▁", "(" for " ("): it belongs
    # to that word, so whole-word masking never asks the model to predict a space on its own.
    tokens = _ids("[CLS]", "▁sat", "▁", "(", "▁on", ")", "▁", "中", "文", "▁", "[SEP]")
    words = CLASSES.words(tokens)
    assert [(first, end) for first, end, _ in words] == [(1, 2), (2, 4), (4, 5), (5, 6), (6, 8), (8, 9), (9, 10)]


def test_a_bare_space_and_the_piece_after_it_are_masked_together() -> None:
    config = MaskingConfig(max_predictions_per_seq=8)
    rng = random.Random(7)
    for key in range(2000):
        body = [rng.choice([_ids("▁", "("), _ids("▁sat"), _ids("▁", "中"), _ids("▁on", ",")]) for _ in range(12)]
        tokens = [ID["[CLS]"], *(t for pieces in body for t in pieces), ID["[SEP]"]]
        masked = set(mask_ngrams(tokens, CLASSES, config, key=key).positions)
        for p in (p for p, t in enumerate(tokens) if t == ID["▁"]):
            assert (p in masked) == (p + 1 in masked), (key, p, tokens)


def _random_sequence(rng: random.Random, length: int) -> list[int]:
    body = [rng.choice(range(5, len(PIECES))) for _ in range(length)]
    cut = rng.randint(1, length - 1)
    return [ID["[CLS]"], *body[:cut], ID["[SEP]"], *body[cut:], ID["[SEP]"]]


@pytest.mark.parametrize("ngram", [1, 3])
def test_span_lengths_follow_one_over_n_where_all_lengths_are_possible(ngram: int) -> None:
    config = MaskingConfig(ngram=ngram, max_predictions_per_seq=20)
    draws: Counter[int] = Counter()
    for i in range(3000):
        masked = mask_ngrams(_random_sequence(random.Random(i), 60), CLASSES, config, key=i)
        draws.update(n for n, available in masked.draws if available == ngram)
    total = sum(draws.values())
    expected = [w / sum(config.ngram_weights) for w in config.ngram_weights]
    for n, p in enumerate(expected, start=1):
        assert abs(draws[n] / total - p) < 0.01, (n, draws[n] / total, p)


def test_budget_positions_specials_and_replacements() -> None:
    config = MaskingConfig(masked_lm_prob=0.15, max_predictions_per_seq=12)
    outcome: Counter[str] = Counter()
    for i in range(3000):
        rng = random.Random(i)
        tokens = _random_sequence(rng, rng.randint(3, 120))
        masked = mask_ngrams(tokens, CLASSES, config, key=i)
        budget = min(12, max(1, round(len(tokens) * 0.15)))
        assert len(masked.positions) <= budget  # 0 when every word is longer than a budget of 1
        assert masked.positions == sorted(set(masked.positions))
        assert all(0 <= p < len(tokens) and tokens[p] >= 5 for p in masked.positions)
        assert masked.labels == [tokens[p] for p in masked.positions]
        assert [t for p, t in enumerate(masked.input_ids) if p not in masked.positions] == [
            t for p, t in enumerate(tokens) if p not in masked.positions
        ]
        for position, label in zip(masked.positions, masked.labels, strict=True):
            new = masked.input_ids[position]
            assert new == ID["[MASK]"] or new >= 5  # a random replacement never draws a special token
            outcome["mask" if new == ID["[MASK]"] else "keep" if new == label else "random"] += 1
    total = sum(outcome.values())
    # A random draw equals the original 1 time in len(ORDINARY), which moves that share from random to keep.
    assert abs(outcome["mask"] / total - 0.80) < 0.01
    assert abs(outcome["keep"] / total - (0.10 + 0.10 / len(ORDINARY))) < 0.01


def test_masks_depend_on_the_key_alone_not_on_the_batch() -> None:
    rng = random.Random(0)
    rows = [_random_sequence(rng, rng.randint(3, 80)) for _ in range(40)]
    config = MaskingConfig()
    alone = [mask_ngrams(row, CLASSES, config, key=1000 + i) for i, row in enumerate(rows)]
    assert alone[0] == mask_ngrams(rows[0], CLASSES, config, key=1000)
    assert alone[0] != mask_ngrams(rows[0], CLASSES, config, key=1001)
    offsets = np.cumsum([0] + [len(r) for r in rows])
    batch = mask_batch(np.concatenate(rows), offsets, np.arange(1000, 1040, dtype=np.uint64), CLASSES, config)
    assert batch.input_ids.tolist() == [t for m in alone for t in m.input_ids]
    for i, m in enumerate(alone):
        span = slice(batch.offsets[i], batch.offsets[i + 1])
        assert batch.positions[span].tolist() == m.positions and batch.labels[span].tolist() == m.labels


def _one_candidate_at_a_time(tokens: list[int], key: int, config: MaskingConfig) -> list[int]:
    """The reference's loop, literally: every candidate in turn, shrink to the budget, skip overlaps."""
    words = CLASSES.words(tokens)
    keys = np.full(len(words), key, dtype=np.uint64)
    ranks = np.arange(len(words))
    order = list(range(len(words)))
    for k, swap in enumerate(uniforms(keys, int(ORDER), ranks)):  # a whole Fisher-Yates shuffle
        j = k + int(swap * (len(words) - k))
        order[k], order[j] = order[j], order[k]
    available = [
        next(n for n in range(config.ngram, 0, -1) if w + n <= len(words) and words[w + n - 1][2] == words[w][2])
        for w in range(len(words))
    ]
    steps = _length_steps(config.ngram_weights)
    drawn = [
        1 + sum(u >= steps[a, : a - 1]) for u, a in zip(uniforms(keys, int(SPAN_LENGTH), ranks), available, strict=True)
    ]
    budget = int(config.budgets(np.array([len(tokens)]))[0])
    chosen: list[int] = []
    for w in order:
        if len(chosen) >= budget:
            break
        n = int(drawn[w])
        while n > 1 and len(chosen) + words[w + n - 1][1] - words[w][0] > budget:
            n -= 1
        span = range(words[w][0], words[w + n - 1][1])
        if len(chosen) + len(span) > budget or set(span) & set(chosen):
            continue
        chosen.extend(span)
    return sorted(chosen)


@pytest.mark.parametrize("ngram", [1, 2, 3])
def test_batched_rounds_choose_what_the_sequential_loop_chooses(ngram: int) -> None:
    config = MaskingConfig(ngram=ngram, max_predictions_per_seq=12)
    rng = random.Random(ngram)
    rows = [_random_sequence(rng, rng.randint(3, 120)) for _ in range(300)]
    offsets = np.cumsum([0] + [len(r) for r in rows])
    keys = np.arange(len(rows), dtype=np.uint64) * 7919
    batch = mask_batch(np.concatenate(rows), offsets, keys, CLASSES, config)
    for i, row in enumerate(rows):
        expected = _one_candidate_at_a_time(row, int(keys[i]), config)
        assert batch.positions[batch.offsets[i] : batch.offsets[i + 1]].tolist() == expected, i


def test_invalid_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="masked_lm_prob"):
        MaskingConfig(masked_lm_prob=1.5)
    with pytest.raises(ValueError, match="ngram"):
        MaskingConfig(ngram=0)
