"""Shared passages: the dedup stage's third rule, which removes boilerplate and keeps language (pure).

Imports neither Beam nor torch (numpy, and ``near_duplicates.first_of_runs``), so the stage, the leakage stage,
tests and benches call it directly.

A *passage* is text long enough to identify where it came from: one sentence of at least ``min_words`` words, or
``span`` consecutive sentences of at least ``min_words`` words together (so a licence's "1.e.1." goes with the
paragraph around it). A passage is *shared* when it occurs in ``min_documents`` documents or more (boilerplate:
licences, headers, inherited docstrings), or in a held-out document and a training document (held-out text must
stay unseen). A shared passage stays in the best of its documents, by the priority key ``(0 if held out else
1, id)``, and leaves every other one. Shorter text (a speaker's name, "alas!", "scene ii.") is never a passage,
and repeats inside one document are never shared, so a play keeps its speaker lines.

Where it comes from, and where it differs: C4 keeps one copy of every 3-sentence span that occurs more than once
(Raffel et al. 2020, "Exploring the limits of transfer learning"), whatever its length and inside a document
too; CCNet drops paragraphs repeated across documents (Wenzek et al. 2020) and RefinedWeb spans of 50 tokens or
more repeated across documents (Penedo et al. 2023); Gopher's repetition filters look inside one document and
drop the document, not lines (Rae et al. 2021). This rule takes the cross-document scope from CCNet and
RefinedWeb, C4's span, and a word floor that keeps "romeo." or "oh!" from counting as boilerplate;
``bench/dedup_rules.py`` measures the thresholds (``bench/results/dedup_rules.md``).

What it owns: ``word_count`` (the length every floor is measured in, shared with ``pipelines.leakage``);
``PassageRule.units``, a document → the keys of its passages; ``PassageRule.shared``, rows of passage occurrences
sorted by (key, priority) → which of them go.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Sequence

import numpy as np

from pipelines.algorithms.near_duplicates import first_of_runs

__all__ = ["PassageRule", "word_count"]


def word_count(sentence: str) -> int:
    """The words of a sentence, as every floor of the rule and of the leakage stage counts them."""
    return len(sentence.split())


def _key(sentences: Sequence[str]) -> bytes:
    """16 bytes standing for one passage (blake2b; a collision is ~2⁻¹²⁸ per pair). The person string keeps a
    single sentence's key apart from a span's."""
    person = b"sentence" if len(sentences) == 1 else b"span"
    return hashlib.blake2b("\n".join(sentences).encode("utf-8"), digest_size=16, person=person).digest()


@dataclasses.dataclass(frozen=True)
class PassageRule:
    """The third dedup rule's thresholds (params.yaml ``dedup``: ``passage_words``, ``passage_span``,
    ``passage_documents``)."""

    min_words: int = 8  # a sentence, or a span of sentences together, this long identifies a passage
    span: int = 3  # consecutive sentences per span (C4's 3)
    min_documents: int = 3  # a passage in this many documents is boilerplate

    def __post_init__(self) -> None:
        for name in ("min_words", "span"):
            if getattr(self, name) < 1:
                raise ValueError(f"passage_{name.removeprefix('min_')} must be at least 1, got {getattr(self, name)}")
        if self.min_documents < 2:
            raise ValueError(f"passage_documents must be at least 2, got {self.min_documents}")

    def units(self, sentences: Sequence[str]) -> Iterator[tuple[bytes, int, int]]:
        """Yields (key, first position, sentences) for each passage of a document: each sentence of at least
        ``min_words`` words, then each window of ``span`` sentences with as many words together."""
        words = [word_count(sentence) for sentence in sentences]
        for i, sentence in enumerate(sentences):
            if words[i] >= self.min_words:
                yield _key([sentence]), i, 1
        if self.span > 1:
            for i in range(len(sentences) - self.span + 1):
                if sum(words[i : i + self.span]) >= self.min_words:
                    yield _key(sentences[i : i + self.span]), i, self.span

    def shared(
        self, hi: np.ndarray, lo: np.ndarray, side: np.ndarray, ids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """For passage occurrences sorted by (hi, lo, side, id, …) (a key's two halves; side 0 held out, 1
        training): the rows that go, and for each of them the row of the copy that stays.

        A row goes when its document is not the first of its key's run and the run spans ``min_documents``
        documents, or the first document is held out and the row's is a training document.
        """
        first = first_of_runs(hi, lo)
        document = first_of_runs(hi, lo, ids)  # the first row of the same key in the same document
        run = np.cumsum(first == np.arange(len(first))) - 1
        documents = np.bincount(run, weights=document == np.arange(len(document))).astype(np.int64)[run]
        leaks = (side[first] == 0) & (side == 1)
        gone = np.flatnonzero((document != first) & ((documents >= self.min_documents) | leaks))
        return gone, first[gone]
