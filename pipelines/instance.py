"""One document's pretraining instances: sentence pairs (``sop``) made into masked sequences (``masking``) (pure).

``[CLS] A [SEP] B [SEP]``, token types 0 for ``[CLS] A [SEP]`` and 1 for ``B [SEP]``, then whole-word n-gram
masks; every draw comes from the generator of (seed, document id, duplicate index), so an instance can be rebuilt
alone, on any worker, in any order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from pipelines.masking import MaskingConfig, TokenClasses, mask_ngrams
from pipelines.seeding import rng_for
from pipelines.sop import PairConfig, document_pairs
from pipelines.vocab_layout import CLS_ID, SEP_ID

__all__ = ["Instance", "document_instances"]


@dataclass
class Instance:
    input_ids: list[int]
    num_a: int  # tokens of [CLS] A [SEP]; the rest has token type 1
    masked_lm_positions: list[int]
    masked_lm_ids: list[int]
    sentence_order_label: int
    target_length: int
    draws: list[tuple[int, int]]  # span-length draws, kept for statistics

    @property
    def token_type_ids(self) -> list[int]:
        return [0] * self.num_a + [1] * (len(self.input_ids) - self.num_a)


def document_instances(
    segments: Sequence[Sequence[int]],
    document_id: str,
    duplicate: int,
    seed: int,
    pairs: PairConfig,
    masking: MaskingConfig,
    classes: TokenClasses,
    random_document: Callable[[], Sequence[Sequence[int]]] | None = None,
) -> Iterator[Instance]:
    """Yields the instances of one duplicate of one document.

    Args:
        segments: the document's sentences as SentencePiece ids.
        document_id: the stable id that seeds the generator.
        duplicate: which of the ``dupe_factor`` passes this is (another seed, other pairs and masks).
        seed: the run's seed.
        pairs: sequence length, short-target probability and inter-sentence mode.
        masking: the n-gram masking knobs.
        classes: the vocabulary's word-start facts.
        random_document: another document's segments, for ``nsp`` mode.
    """
    rng = rng_for(seed, document_id, duplicate)
    for pair in document_pairs(segments, rng, pairs, random_document):
        tokens = [CLS_ID, *pair.tokens_a, SEP_ID, *pair.tokens_b, SEP_ID]
        masked = mask_ngrams(tokens, classes, masking, rng)
        yield Instance(
            input_ids=masked.input_ids,
            num_a=len(pair.tokens_a) + 2,
            masked_lm_positions=masked.positions,
            masked_lm_ids=masked.labels,
            sentence_order_label=pair.label,
            target_length=pair.target_length,
            draws=masked.draws,
        )
