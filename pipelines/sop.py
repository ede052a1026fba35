"""Sentence pairs for the inter-sentence objective, as the reference builds them (pure).

Follows google-research/albert ``create_instances_from_document`` (albert_facts.md §3.3), with these deliberate
changes:

- the caller passes the generator, seeded per (seed, document, duplicate), so every pair is reproducible alone;
- SOP negatives are always swaps of two consecutive segments. A chunk holding one sentence is split inside that
  sentence (at a word start) instead of borrowing a random document as the reference does (its issue #234);
- an over-long pair is trimmed at its outer ends only (the start of the earlier part, the end of the later one),
  never between the two parts, so B is always the text right after A (the reference trims either end at random);
- the target length is drawn again for every chunk rather than once per document, so that ``short_seq_prob``
  is the share of pairs built for a shorter target, which is what BERT's comment promises;
- ``nsp`` mode keeps BERT's random-document negatives (for the paper's ablation); ``none`` never relabels.

Only ``rng.random()`` is drawn (see ``seeding.rng_for``), through ``randint`` below.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

__all__ = ["INTER_SENTENCE_MODES", "Pair", "PairConfig", "document_pairs", "randint", "truncate_pair"]

INTER_SENTENCE_MODES = ("sop", "nsp", "none")

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


@dataclass(frozen=True)
class Pair:
    tokens_a: list[int]
    tokens_b: list[int]
    label: int  # 0: B follows A in the document; 1: swapped (sop) or B from another document (nsp)
    target_length: int  # the target the chunk was built for (max_seq_length - 3 unless drawn shorter)


def randint(rng: random.Random, low: int, high: int) -> int:
    """Returns an integer in [low, high], inclusive, drawn with ``rng.random()`` only."""
    return low + int(rng.random() * (high - low + 1))


def document_pairs(
    segments: Sequence[Segment],
    rng: random.Random,
    config: PairConfig,
    random_document: Callable[[], Sequence[Segment]] | None = None,
) -> Iterator[Pair]:
    """Yields the sentence pairs of one document, in document order.

    Args:
        segments: the document's sentences as token ids (no special tokens).
        rng: the generator of this (seed, document, duplicate).
        config: lengths and the inter-sentence mode.
        random_document: returns another document's segments; required by ``nsp`` mode only.
    """
    max_num_tokens = config.max_seq_length - 3
    target = _draw_target(rng, config, max_num_tokens)
    chunk: list[Segment] = []
    length = 0
    i = 0
    while i < len(segments):
        chunk.append(segments[i])
        length += len(segments[i])
        if i == len(segments) - 1 or length >= target:
            if config.inter_sentence == "nsp":
                pair, unused = _nsp_pair(chunk, rng, target, random_document)
                i -= unused  # BERT puts the segments it did not use back
            else:
                pair = _ordered_pair(chunk, rng, target, swap=config.inter_sentence == "sop")
            if pair is not None:
                truncate_pair(pair.tokens_a, pair.tokens_b, max_num_tokens)
                swapped = config.inter_sentence == "sop" and pair.label == 1
                yield Pair(pair.tokens_b, pair.tokens_a, 1, target) if swapped else pair
            chunk, length = [], 0
            target = _draw_target(rng, config, max_num_tokens)
        i += 1


def _draw_target(rng: random.Random, config: PairConfig, max_num_tokens: int) -> int:
    if rng.random() < config.short_seq_prob:
        return randint(rng, 2, max_num_tokens)
    return max_num_tokens


def _ordered_pair(chunk: list[Segment], rng: random.Random, target: int, swap: bool) -> Pair | None:
    if len(chunk) >= 2:
        a_end = randint(rng, 1, len(chunk) - 1)
        tokens_a = [t for segment in chunk[:a_end] for t in segment]
        tokens_b = [t for segment in chunk[a_end:] for t in segment]
    elif len(chunk[0]) >= 2:  # one long sentence: the second part follows the first as a sentence would
        cut = randint(rng, 1, len(chunk[0]) - 1)
        tokens_a, tokens_b = list(chunk[0][:cut]), list(chunk[0][cut:])
    else:
        return None
    # In document order; the caller swaps after truncation, so trimming never cuts between the two parts.
    return Pair(tokens_a, tokens_b, int(swap and rng.random() < 0.5), target)


def _nsp_pair(
    chunk: list[Segment],
    rng: random.Random,
    target: int,
    random_document: Callable[[], Sequence[Segment]] | None,
) -> tuple[Pair | None, int]:
    if random_document is None:
        raise ValueError("inter_sentence='nsp' needs random_document to draw negatives from")
    a_end = 1 if len(chunk) == 1 else randint(rng, 1, len(chunk) - 1)
    tokens_a = [t for segment in chunk[:a_end] for t in segment]
    if len(chunk) == 1 or rng.random() < 0.5:
        other = random_document()
        tokens_b: list[int] = []
        for segment in other[randint(rng, 0, len(other) - 1) :] if other else []:
            tokens_b.extend(segment)
            if len(tokens_b) >= target - len(tokens_a):
                break
        pair = Pair(tokens_a, tokens_b, 1, target) if tokens_a and tokens_b else None
        return pair, len(chunk) - a_end
    tokens_b = [t for segment in chunk[a_end:] for t in segment]
    return Pair(tokens_a, tokens_b, 0, target), 0


def truncate_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int) -> None:
    """Trims a pair in document order until it fits, in place: the longer side loses tokens at its outer end.

    As the reference, the longer side is trimmed (so the shorter keeps its text); unlike it, only from A's start
    and B's end, so A and B stay adjacent text and the sentence order is all that a swap changes.
    """
    excess = len(tokens_a) + len(tokens_b) - max_num_tokens
    if excess <= 0:
        return
    # Taking from the longer side until both are equal, then alternately, is what the one-at-a-time loop does.
    gap = abs(len(tokens_a) - len(tokens_b))
    from_longer = min(excess, gap)
    rest = excess - from_longer
    cut_a = (from_longer if len(tokens_a) > len(tokens_b) else 0) + rest // 2  # on a tie B loses first
    cut_b = excess - cut_a
    del tokens_a[:cut_a]
    del tokens_b[len(tokens_b) - cut_b :]
