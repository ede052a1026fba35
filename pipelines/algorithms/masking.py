"""Whole-word n-gram masking, as the reference does it, over a whole batch at once (pure: numpy and numba).

Follows google-research/albert ``create_masked_lm_predictions``: candidates are whole words taken in a random
order; at each one a span of n ≤ ``ngram`` words is drawn with p(n) ∝ 1/n, shrunk while it would overflow the
prediction budget, skipped when it overlaps a chosen span; each chosen token becomes ``[MASK]`` (80 %), stays
(10 %) or becomes a random token (10 %). Deliberate changes:

- word starts are found for every script: a piece starting with "▁", a CJK character or punctuation starts a
  word, and so does any piece after one ending in CJK or punctuation, so each CJK character is a word
  (the reference counts every non-ASCII piece as a word start: google-research/albert issue 161);
- a word segmenter may join pieces the vocabulary would start words at: ``joins`` marks each token that
  continues the word of the token before it (a jieba word's later characters, ``word_segments``), which is
  Chinese whole word masking (ymcui/Chinese-BERT-wwm); without it each CJK character is a word, as above;
- a bare "▁" is the space of the word after it (SentencePiece writes " (" as "▁", "(" when "▁(" is not in the
  vocabulary), so the next piece joins its word even when it would start a word of its own. The reference's
  per-piece start test (which misgroups pieces, google-research/albert issue 161) makes "▁" a word alone;
  masking it asks the model to predict a space, which frequency alone teaches, in a scarce prediction slot
  (8 % of targets on wikitext), whereas BERT's WordPiece whole-word masking never exposes whitespace;
- a span never crosses a special token, so an n-gram never straddles ``[SEP]``;
- random replacements never draw a special token, and special tokens are never candidates;
- every number is a counter-based draw addressed by (row key, stream, word or position), see
  ``seeding.uniform``, so rows are masked together and a row's masks depend only on its key and its tokens,
  never on the batch it came in;
- candidate words come from a lazy Fisher-Yates shuffle, which stops as soon as the budget is met.

The choice is sequential within a row (a span taken early blocks later ones), so it cannot be vectorised; it is
written as the plain loop it is and compiled with numba, which masks a batch in a few microseconds a row.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

import numba
import numpy as np

from pipelines.algorithms.seeding import uniform
from pipelines.algorithms.vocab_layout import CLS_ID, MASK_ID, NUM_SPECIAL, SEP_ID

__all__ = [
    "CJK_RANGES",
    "WORD_SEGMENTERS",
    "MaskedBatch",
    "MaskedTokens",
    "MaskingConfig",
    "TokenClasses",
    "is_cjk",
    "mask_batch",
    "mask_ngrams",
]

WORD_SEGMENTERS = ("none", "jieba")  # implemented in word_segments.py

# Streams of a row key's draws (seeding.uniform): what each number decides.
ORDER, SPAN_LENGTH, MASK_OR_NOT, RANDOM_OR_KEEP, RANDOM_TOKEN = (np.uint64(s) for s in range(5))


@dataclass(frozen=True)
class MaskingConfig:
    masked_lm_prob: float = 0.15  # share of a sequence's tokens to predict (before the cap below)
    max_predictions_per_seq: int = 20  # the cap; the paper uses 20 at length 512
    ngram: int = 3  # longest span in words
    favor_shorter_ngram: bool = True  # p(n) ∝ 1/n; False reverses it (the reference flag)
    # Whose words the spans cover: "none" the vocabulary's (each CJK character a word), "jieba" jieba's words of
    # Chinese text; the shards then carry them per token (joins_word), so dynamic masking draws over the same words.
    word_segmenter: str = "none"

    def __post_init__(self) -> None:
        if self.word_segmenter not in WORD_SEGMENTERS:
            raise ValueError(f"word_segmenter={self.word_segmenter!r}: choose one of {', '.join(WORD_SEGMENTERS)}")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise ValueError(f"masked_lm_prob={self.masked_lm_prob}: must lie in (0, 1)")
        if self.ngram < 1 or self.max_predictions_per_seq < 1:
            raise ValueError("ngram and max_predictions_per_seq must be at least 1")

    @property
    def ngram_weights(self) -> list[float]:
        weights = [1.0 / n for n in range(1, self.ngram + 1)]
        return weights if self.favor_shorter_ngram else weights[::-1]

    def budgets(self, lengths: np.ndarray) -> np.ndarray:
        """Returns the number of tokens to predict for sequences of ``lengths`` (specials included)."""
        wanted = np.maximum(1, np.rint(np.asarray(lengths) * self.masked_lm_prob))  # half to even, as round()
        return np.minimum(self.max_predictions_per_seq, wanted).astype(np.int64)


# Scripts written without spaces between words, as (first, last) code points.
CJK_RANGES = (
    (0x3000, 0x30FF),  # CJK punctuation, Hiragana, Katakana
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0xFF00, 0xFFEF),  # full-width forms, e.g. ！？
    (0x20000, 0x2FA1F),
)


def is_cjk(char: str) -> bool:
    """True for characters of scripts written without spaces between words (Han, kana, CJK punctuation)."""
    code = ord(char)
    return any(first <= code <= last for first, last in CJK_RANGES)


def _is_boundary_char(char: str) -> bool:
    return is_cjk(char) or unicodedata.category(char).startswith("P")


@dataclass(frozen=True, eq=False)
class TokenClasses:
    """Per-vocabulary facts the masker needs, computed once from the SentencePiece pieces."""

    vocab_size: int
    mask_id: int
    num_special: int  # ids below this are special: never masked, never drawn as replacements
    starts_word: np.ndarray = field(repr=False)  # [vocab] the piece itself begins a word
    ends_word: np.ndarray = field(repr=False)  # [vocab] the piece ends in CJK/punctuation: the next begins a word
    bare_space: np.ndarray = field(repr=False)  # [vocab] the piece is whitespace alone: the next continues its word
    cls_id: int = CLS_ID  # the specials a pair is laid out with (masked_pairs): ALBERT's, or a vocab.txt's own
    sep_id: int = SEP_ID

    @classmethod
    def from_pieces(cls, pieces: Sequence[str], mask_id: int = MASK_ID, num_special: int = NUM_SPECIAL) -> TokenClasses:
        """Builds the classes from ``pieces[i]`` = the piece of id i (SentencePiece ``id_to_piece``)."""
        starts, ends, bare = [], [], []
        for i, piece in enumerate(pieces):
            text = piece.lstrip("▁")
            starts.append(i < num_special or piece.startswith("▁") or (bool(text) and _is_boundary_char(text[0])))
            ends.append(i < num_special or (bool(text) and _is_boundary_char(text[-1])))
            # "▁▁"… only exist in vocabularies trained to keep whitespace-only pieces; they are spaces all the same.
            bare.append(i >= num_special and bool(piece) and not text)
        arrays = (np.array(flags, dtype=bool) for flags in (starts, ends, bare))
        return cls(len(pieces), mask_id, num_special, *arrays)

    @classmethod
    def from_wordpieces(cls, pieces: Sequence[str], special_ids: dict[str, int], num_special: int) -> TokenClasses:
        """Builds the classes of a WordPiece vocabulary (``pieces[i]`` = the line of id i of its ``vocab.txt``,
        ``special_ids`` its pad/unk/cls/sep/mask_token ids).

        BERT's basic tokenizer has already cut the text into words (at spaces and punctuation, around every CJK
        character), so a word is a piece and its ``##`` continuations (Google's BERT whole word masking): a
        piece starts a word unless it begins with ``##``, and no piece ends one early.
        """
        starts = np.array([i < num_special or not p.startswith("##") for i, p in enumerate(pieces)], dtype=bool)
        ends = np.arange(len(pieces)) < num_special
        bare = np.zeros(len(pieces), dtype=bool)
        ids = special_ids["mask_token"], special_ids["cls_token"], special_ids["sep_token"]
        return cls(len(pieces), ids[0], num_special, starts, ends, bare, cls_id=ids[1], sep_id=ids[2])

    def words(self, tokens: Sequence[int], joins: Sequence[int] | None = None) -> list[tuple[int, int, int]]:
        """Returns one sequence's candidate words as (first position, end position, run).

        A word is a contiguous range of pieces; specials are never candidates and end a run, so a span of
        consecutive words of one run is a contiguous range that never crosses ``[SEP]``. A bare "▁" and the
        piece after it are one word, and so is a token with ``joins`` set and the one before it; a word that
        joins a special (an ``<unk>`` character inside a jieba word) is no candidate at all.
        """
        tokens = np.asarray(tokens, dtype=np.int64)
        joins = _joins(joins, len(tokens))
        first, end, run = (np.empty(len(tokens), dtype=np.int64) for _ in range(3))
        count = _row_words(
            tokens, joins, 0, len(tokens), self.starts_word, self.ends_word, self.bare_space, self.num_special, first,
            end, run,
        )  # fmt: skip
        return list(zip(first[:count].tolist(), end[:count].tolist(), run[:count].tolist(), strict=True))


@dataclass
class MaskedBatch:
    """The masked rows as flat columns: row b's predictions are ``positions[offsets[b]:offsets[b + 1]]``."""

    input_ids: np.ndarray  # the tokens with replacements applied, laid out as the input
    offsets: np.ndarray  # [rows + 1]
    positions: np.ndarray  # within its row, sorted in each row
    labels: np.ndarray  # the original tokens at those positions
    draws: np.ndarray  # [candidates considered, 2]: (drawn n, longest n available), for statistics


def mask_batch(
    tokens: np.ndarray,
    offsets: np.ndarray,
    keys: np.ndarray,
    classes: TokenClasses,
    config: MaskingConfig,
    joins: np.ndarray | None = None,
) -> MaskedBatch:
    """Chooses whole-word n-gram spans of every row to predict and applies 80/10/10 replacement.

    Args:
        tokens: the rows' tokens end to end, each a full sequence including ``[CLS]``/``[SEP]``.
        offsets: [rows + 1]; row b is ``tokens[offsets[b]:offsets[b + 1]]``.
        keys: [rows] uint64; all of a row's draws come from its key (``seeding.uniform``).
        classes: the vocabulary's word-start facts and special ids.
        config: budget and span-length distribution.
        joins: laid out as ``tokens``, nonzero where a token continues the word of the one before it (a word
            segmenter's words); None: the vocabulary's word starts alone.
    """
    tokens, offsets = np.asarray(tokens, dtype=np.int64), np.asarray(offsets, dtype=np.int64)
    joins = _joins(joins, len(tokens))
    keys = np.asarray(keys, dtype=np.uint64)
    if len(keys) != len(offsets) - 1:
        raise ValueError(f"{len(keys)} keys for {len(offsets) - 1} rows")
    budget = config.budgets(np.diff(offsets))
    output = tokens.copy()
    positions = np.empty(int(budget.sum()), dtype=np.int64)
    labels = np.empty_like(positions)
    row_ends = np.empty(len(keys), dtype=np.int64)
    draws = np.empty((len(tokens), 2), dtype=np.int64)  # a word is a candidate at most once
    predictions, considered = _mask_rows(
        tokens, joins, offsets, keys, budget, _length_steps(config.ngram_weights), classes.starts_word,
        classes.ends_word, classes.bare_space, classes.num_special, classes.vocab_size, classes.mask_id, output,
        positions, labels, row_ends, draws,
    )  # fmt: skip
    row_offsets = np.concatenate([[0], row_ends])
    return MaskedBatch(output, row_offsets, positions[:predictions], labels[:predictions], draws[:considered])


def _joins(joins: Sequence[int] | np.ndarray | None, length: int) -> np.ndarray:
    if joins is None:
        return np.zeros(length, dtype=np.int8)
    joins = np.asarray(joins, dtype=np.int8)
    if len(joins) != length:
        raise ValueError(f"{len(joins)} joins for {length} tokens")
    return joins


def _length_steps(weights: list[float]) -> np.ndarray:
    """Returns steps[a, m]: with a words available, a draw u ≥ steps[a, m] makes the span longer than m + 1
    words, so that p(n) ∝ weights[n - 1] over n ≤ a."""
    ngram = len(weights)
    steps = np.ones((ngram + 1, max(ngram - 1, 1)), dtype=np.float64)
    for a in range(1, ngram + 1):
        steps[a, : a - 1] = np.cumsum(weights[: a - 1]) / sum(weights[:a])
    return steps


# The compiled loops below are the reference's algorithm written out plainly: one row at a time, one candidate
# at a time. numba infers their types; their arguments are int64 except keys (uint64) and the class tables.


@numba.njit(cache=True, nogil=True)
def _row_words(tokens, joins, lo, hi, starts_word, ends_word, bare_space, num_special, first, end, run):
    """Writes the words of ``tokens[lo:hi]`` to first/end/run (positions relative to lo); returns their count."""
    count, current_run, in_word, previous_ends, previous_bare = 0, 0, False, True, False
    interrupted = False  # a special (an <unk> character) joins the word in progress: none of it is a candidate
    for p in range(lo, hi):
        token = tokens[p]
        if token < num_special:
            if in_word:
                if joins[p]:
                    count -= 1  # a word that holds a special cannot be masked whole, so it is not masked at all
                else:
                    end[count - 1] = p - lo
            current_run, in_word, previous_ends, previous_bare = current_run + 1, False, True, False
            interrupted = True
            continue
        if interrupted and joins[p]:  # the rest of a word holding a special
            previous_ends, previous_bare = ends_word[token], bare_space[token]
            continue
        interrupted = False
        # After a bare "▁" the piece is the rest of the word that space began, even "(" or a CJK character.
        if not in_word or (not previous_bare and not joins[p] and (previous_ends or starts_word[token])):
            if in_word:
                end[count - 1] = p - lo
            first[count], run[count] = p - lo, current_run
            count, in_word = count + 1, True
        previous_ends, previous_bare = ends_word[token], bare_space[token]
    if in_word:
        end[count - 1] = hi - lo
    return count


@numba.njit(cache=True, nogil=True)
def _mask_rows(
    tokens, joins, offsets, keys, budget, steps, starts_word, ends_word, bare_space, num_special, vocab_size,
    mask_id, output, positions, labels, row_ends, draws,
):  # fmt: skip
    """Masks every row into output/positions/labels; returns (predictions written, draws recorded)."""
    ngram = steps.shape[0] - 1
    longest = max(1, np.max(offsets[1:] - offsets[:-1])) if len(keys) else 1
    first, end, run = np.empty(longest, np.int64), np.empty(longest, np.int64), np.empty(longest, np.int64)
    available, order = np.empty(longest, np.int64), np.empty(longest, np.int64)
    chosen = np.zeros(longest, np.bool_)
    predictions = considered = 0
    for row in range(len(keys)):
        lo, hi, key = offsets[row], offsets[row + 1], keys[row]
        count = _row_words(tokens, joins, lo, hi, starts_word, ends_word, bare_space, num_special, first, end, run)
        for w in range(count - 1, -1, -1):  # the longest span from each word: up to ngram words of its run
            same_run = w + 1 < count and run[w + 1] == run[w]
            available[w] = min(ngram, available[w + 1] + 1) if same_run else 1
            order[w] = w
        chosen[: hi - lo] = False
        considered = _choose_spans(
            key, count, budget[row], steps, first, end, available, order, chosen, draws, considered
        )
        for p in range(hi - lo):  # per token, not per span, as the reference decides
            if chosen[p]:
                output[lo + p] = _replacement(key, p, tokens[lo + p], num_special, vocab_size, mask_id)
                positions[predictions], labels[predictions] = p, tokens[lo + p]
                predictions += 1
        row_ends[row] = predictions
    return predictions, considered


@numba.njit(cache=True, nogil=True)
def _choose_spans(key, count, room, steps, first, end, available, order, chosen, draws, considered):
    """Marks whole-word n-gram spans in ``chosen``, words in a random order, until ``room`` tokens are chosen;
    records each span-length draw; returns the number of draws recorded so far."""
    ngram = steps.shape[0] - 1
    for k in range(count):  # a lazy Fisher-Yates shuffle: stops when the budget is met
        if room <= 0:
            break
        j = k + int(uniform(key, ORDER, np.uint64(k)) * (count - k))
        order[k], order[j] = order[j], order[k]
        w = order[k]
        n, u = 1, uniform(key, SPAN_LENGTH, np.uint64(w))
        for m in range(ngram - 1):
            n += u >= steps[available[w], m]
        draws[considered, 0], draws[considered, 1] = n, available[w]
        considered += 1
        while n > 1 and end[w + n - 1] - first[w] > room:
            n -= 1  # shrink the span until it fits the budget, as the reference does
        start, stop = first[w], end[w + n - 1]
        if stop - start > room or chosen[start:stop].any():
            continue
        chosen[start:stop] = True
        room -= stop - start
    return considered


@numba.njit(cache=True, nogil=True)
def _replacement(key, p, token, num_special, vocab_size, mask_id):
    """What a chosen token becomes: [MASK] 80 % of the time, a random non-special token 10 %, itself 10 %."""
    if uniform(key, MASK_OR_NOT, np.uint64(p)) < 0.8:
        return mask_id
    if uniform(key, RANDOM_OR_KEEP, np.uint64(p)) >= 0.5:
        return num_special + int(uniform(key, RANDOM_TOKEN, np.uint64(p)) * (vocab_size - num_special))
    return token


@dataclass
class MaskedTokens:
    input_ids: list[int]  # the tokens with replacements applied
    positions: list[int]  # sorted positions of the tokens to predict
    labels: list[int]  # the original tokens at those positions
    draws: list[tuple[int, int]] = field(default_factory=list)  # (drawn n, longest n available): for tests


def mask_ngrams(
    tokens: Sequence[int], classes: TokenClasses, config: MaskingConfig, key: int, joins: Sequence[int] | None = None
) -> MaskedTokens:
    """Masks one sequence: ``mask_batch`` of a single row with uint64 ``key``."""
    row = np.array([0, len(tokens)])
    batch = mask_batch(np.asarray(tokens), row, np.array([key], np.uint64), classes, config, joins)
    draws = [(int(n), int(a)) for n, a in batch.draws]
    return MaskedTokens(batch.input_ids.tolist(), batch.positions.tolist(), batch.labels.tolist(), draws)
