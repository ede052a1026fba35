"""Whole-word n-gram masking, as the reference does it (pure; shared by the Beam stage and dynamic masking).

Follows google-research/albert ``create_masked_lm_predictions`` (albert_facts.md §3.4): candidates are whole
words, a span of n ≤ ``ngram`` words is drawn with p(n) ∝ 1/n, shrunk when it would overflow the prediction
budget, skipped when it overlaps a chosen one; each chosen token becomes ``[MASK]`` (80 %), stays (10 %) or
becomes a random token (10 %). Deliberate changes:

- word starts are found for every script: a piece starting with "▁", a CJK character or punctuation starts a
  word, and so does any piece after one ending in CJK or punctuation, so each CJK character is a word
  (the reference counts every non-ASCII piece as a word start, its issue #161);
- a span never crosses a special token, so an n-gram never straddles ``[SEP]``;
- random replacements never draw a special token, and special tokens are never candidates;
- start words are drawn by a lazy Fisher-Yates shuffle, which stops as soon as the budget is met.
"""

from __future__ import annotations

import random
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from pipelines.vocab_layout import MASK_ID, NUM_SPECIAL

__all__ = ["MaskedTokens", "MaskingConfig", "TokenClasses", "is_cjk", "mask_ngrams"]


@dataclass(frozen=True)
class MaskingConfig:
    masked_lm_prob: float = 0.15  # share of a sequence's tokens to predict (before the cap below)
    max_predictions_per_seq: int = 20  # the cap; the paper uses 20 at length 512
    ngram: int = 3  # longest span in words
    favor_shorter_ngram: bool = True  # p(n) ∝ 1/n; False reverses it (the reference flag)

    def __post_init__(self) -> None:
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise ValueError(f"masked_lm_prob={self.masked_lm_prob}: must lie in (0, 1)")
        if self.ngram < 1 or self.max_predictions_per_seq < 1:
            raise ValueError("ngram and max_predictions_per_seq must be at least 1")

    @property
    def ngram_weights(self) -> list[float]:
        weights = [1.0 / n for n in range(1, self.ngram + 1)]
        return weights if self.favor_shorter_ngram else weights[::-1]


def is_cjk(char: str) -> bool:
    """True for characters of scripts written without spaces between words (Han, kana, CJK punctuation)."""
    code = ord(char)
    return (
        0x3000 <= code <= 0x30FF  # CJK punctuation, Hiragana, Katakana
        or 0x3400 <= code <= 0x4DBF
        or 0x4E00 <= code <= 0x9FFF
        or 0xF900 <= code <= 0xFAFF
        or 0xFF00 <= code <= 0xFFEF  # full-width forms, e.g. ！？
        or 0x20000 <= code <= 0x2FA1F
    )


def _is_boundary_char(char: str) -> bool:
    return is_cjk(char) or unicodedata.category(char).startswith("P")


@dataclass(frozen=True)
class TokenClasses:
    """Per-vocabulary facts the masker needs, computed once from the SentencePiece pieces."""

    vocab_size: int
    mask_id: int
    num_special: int  # ids below this are special: never masked, never drawn as replacements
    starts_word: tuple[bool, ...] = field(repr=False)  # the piece itself begins a word
    ends_word: tuple[bool, ...] = field(repr=False)  # the piece ends in CJK/punctuation: the next one begins a word

    @classmethod
    def from_pieces(cls, pieces: Sequence[str], mask_id: int = MASK_ID, num_special: int = NUM_SPECIAL) -> TokenClasses:
        """Builds the classes from ``pieces[i]`` = the piece of id i (SentencePiece ``id_to_piece``)."""
        starts, ends = [], []
        for i, piece in enumerate(pieces):
            text = piece.lstrip("▁")
            starts.append(i < num_special or piece.startswith("▁") or (bool(text) and _is_boundary_char(text[0])))
            ends.append(i < num_special or (bool(text) and _is_boundary_char(text[-1])))
        return cls(len(pieces), mask_id, num_special, tuple(starts), tuple(ends))

    def words(self, tokens: Sequence[int]) -> list[tuple[int, int, int]]:
        """Returns the candidate words as (first position, end position, run): a word is a contiguous range of
        pieces; specials are never candidates and end a run, so a span of consecutive words of one run is a
        contiguous range that never crosses a special token."""
        starts_word, ends_word, num_special = self.starts_word, self.ends_word, self.num_special
        words: list[tuple[int, int, int]] = []
        run = 0
        first = -1  # first position of the word being read, -1 between words
        previous_ends = True
        for position, token in enumerate(tokens):
            if token < num_special:
                if first >= 0:
                    words.append((first, position, run))
                first, previous_ends, run = -1, True, run + 1
                continue
            if previous_ends or starts_word[token] or first < 0:
                if first >= 0:
                    words.append((first, position, run))
                first = position
            previous_ends = ends_word[token]
        if first >= 0:
            words.append((first, len(tokens), run))
        return words


@dataclass
class MaskedTokens:
    input_ids: list[int]  # the tokens with replacements applied
    positions: list[int]  # sorted positions of the tokens to predict
    labels: list[int]  # the original tokens at those positions
    draws: list[tuple[int, int]] = field(default_factory=list)  # (drawn n, longest n available): for tests


def mask_ngrams(
    tokens: Sequence[int], classes: TokenClasses, config: MaskingConfig, rng: random.Random
) -> MaskedTokens:
    """Chooses whole-word n-gram spans of ``tokens`` to predict and applies 80/10/10 replacement.

    Args:
        tokens: a full sequence including ``[CLS]``/``[SEP]``.
        classes: the vocabulary's word-start facts and special ids.
        config: budget and span-length distribution.
        rng: the generator of this instance; only ``rng.random()`` is drawn.
    """
    num_to_predict = min(config.max_predictions_per_seq, max(1, round(len(tokens) * config.masked_lm_prob)))
    words = classes.words(tokens)
    order = list(range(len(words)))
    weights, ngram, random = config.ngram_weights, config.ngram, rng.random
    covered = bytearray(len(tokens))  # 1 where a chosen span lies: overlap is one C-level search
    chosen: list[int] = []
    draws: list[tuple[int, int]] = []
    for k in range(len(order)):
        if len(chosen) >= num_to_predict:
            break
        j = k + int(random() * (len(order) - k))  # lazy Fisher-Yates: the k-th start of a shuffle
        order[k], order[j] = order[j], order[k]
        first = order[k]
        run = words[first][2]
        available = 1
        while available < ngram and first + available < len(words) and words[first + available][2] == run:
            available += 1
        n = _draw_length(weights[:available], rng)
        draws.append((n, available))
        lo = words[first][0]
        while n > 1 and len(chosen) + words[first + n - 1][1] - lo > num_to_predict:
            n -= 1  # shrink the span until it fits the budget, as the reference does
        hi = words[first + n - 1][1]
        if len(chosen) + hi - lo > num_to_predict or covered.find(1, lo, hi) >= 0:
            continue
        covered[lo:hi] = b"\x01" * (hi - lo)
        chosen.extend(range(lo, hi))
    return _replace(tokens, sorted(chosen), classes, rng, draws)


def _draw_length(weights: list[float], rng: random.Random) -> int:
    threshold = rng.random() * sum(weights)
    for n, weight in enumerate(weights, start=1):
        threshold -= weight
        if threshold < 0:
            return n
    return len(weights)


def _replace(
    tokens: Sequence[int], positions: list[int], classes: TokenClasses, rng: random.Random, draws: list
) -> MaskedTokens:
    output = list(tokens)
    # Decided per token, not per span, as the reference does; the draws happen in position order.
    for position in positions:
        if rng.random() < 0.8:
            output[position] = classes.mask_id
        elif rng.random() >= 0.5:
            output[position] = classes.num_special + int(rng.random() * (classes.vocab_size - classes.num_special))
    return MaskedTokens(output, positions, [tokens[p] for p in positions], draws)
