"""Intrinsic scores of a pretrained network: MLM and sentence-pair (SOP or NSP) accuracy on held-out shards.

The columns of the paper's Table 5, measured on the instances stage's evaluation shards (held-out documents
alone), so ``evaluate`` reports them with or without downstream tasks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from albert_lightning.model import AlbertForPreTraining
from albert_lightning.pretraining.data import IGNORE_INDEX, Rows, ShardDataset, collate
from albert_lightning.pretraining.module import prediction_hits
from pipelines.algorithms.masking import TokenClasses
from pipelines.algorithms.vocabulary import token_classes

__all__ = ["intrinsic_scores", "scored_batches", "word_hits"]


def scored_batches(
    model: AlbertForPreTraining, dataset: ShardDataset, batches: int, batch_size: int
) -> Iterator[tuple[Rows, dict[str, torch.Tensor], Any]]:
    """Yields the rows of each batch of the first ``batches`` × ``batch_size`` of ``dataset``, collated, with
    ``model``'s output on them (call under ``torch.no_grad``, the model in eval mode): what every held-out score
    reads."""
    for start in range(0, min(len(dataset), batches * batch_size), batch_size):
        rows = dataset.__getitems__(range(start, min(start + batch_size, len(dataset))))
        batch = collate(rows)
        inputs = (batch[name] for name in ("input_ids", "token_type_ids", "attention_mask", "masked_lm_positions"))
        yield rows, batch, model(*inputs)


def word_hits(rows: Rows, hits: np.ndarray, classes: TokenClasses) -> tuple[int, int]:
    """Counts the masked whole words of ``rows`` and those whose every masked piece the model got right.

    A word is the masker's (``TokenClasses.words``: the vocabulary's rule, joined by the shards' segmenter words
    where they carry them), so a jieba word of three characters counts once, however many of its pieces a
    character-level masker chose. ``hits`` is [rows, prediction slots], True where the top score is the label.
    """
    correct = words = 0
    for i in range(len(rows)):
        tokens = rows.input_ids[rows.offsets[i] : rows.offsets[i + 1]].astype(np.int64)
        predictions = slice(rows.prediction_offsets[i], rows.prediction_offsets[i + 1])
        positions = rows.masked_lm_positions[predictions]
        tokens[positions] = rows.masked_lm_ids[predictions]  # the row as it was before masking
        joins = None if rows.joins_word is None else rows.joins_word[rows.offsets[i] : rows.offsets[i + 1]]
        firsts = np.array([first for first, _, _ in classes.words(tokens, joins)], dtype=np.int64)
        word = np.searchsorted(firsts, positions, side="right") - 1  # masked pieces lie in candidate words alone
        missed = np.bincount(word, weights=~hits[i, : len(positions)], minlength=len(firsts))
        masked = np.bincount(word, minlength=len(firsts)) > 0
        words, correct = words + int(masked.sum()), correct + int((masked & (missed == 0)).sum())
    return correct, words


@torch.no_grad()
def intrinsic_scores(model: AlbertForPreTraining, shards: str, batches: int, batch_size: int) -> dict[str, Any]:
    """MLM accuracy and sentence-pair accuracy of ``model`` on the validation split of ``shards``.

    Returns:
        The accuracies with the counts behind them (``mlm_correct`` of ``mlm_predictions`` masked tokens,
        ``pair_correct`` of ``pairs``: what a proportion's interval needs), and ``mlm_most_frequent_accuracy``,
        the accuracy of always answering the most frequent masked token of the scored rows (``mlm_most_frequent_id``):
        no constant guess does better, so it is what a model that learnt only word frequencies scores; and
        ``mlm_word_accuracy``, ``mlm_word_correct`` of ``mlm_words`` masked whole words (``word_hits``): what
        compares maskers that cut the same text into other spans, a character-level and a whole-word one.
    """
    dataset = ShardDataset(shards, "validation")
    model.eval()
    classes = token_classes(dataset.manifest.vocabulary(dataset.folder))
    correct = masked = pair_correct = pairs = word_correct = words = 0
    targets: Counter[int] = Counter()
    for rows, batch, out in scored_batches(model, dataset, batches, batch_size):
        mlm_hits, pair_hits = prediction_hits(out, batch)
        slots = (out.prediction_logits.argmax(-1) == batch["masked_lm_ids"]).numpy()
        right, counted = word_hits(rows, slots, classes)
        word_correct, words = word_correct + right, words + counted
        correct, masked = correct + int(mlm_hits.sum()), masked + mlm_hits.numel()
        pair_correct, pairs = pair_correct + int(pair_hits.sum()), pairs + pair_hits.numel()
        targets.update(batch["masked_lm_ids"][batch["masked_lm_ids"] != IGNORE_INDEX].tolist())
    kind = dataset.manifest.inter_sentence
    # most_common breaks ties by first occurrence: the same id on every run over the same rows
    frequent_id, frequent_count = targets.most_common(1)[0] if targets else (None, 0)
    return {
        "shards": shards,
        "kind": kind,
        "mlm_accuracy": correct / max(masked, 1),
        f"{kind}_accuracy": pair_correct / max(pairs, 1),
        "mlm_correct": correct,
        "mlm_predictions": masked,
        "pair_correct": pair_correct,
        "pairs": pairs,
        "mlm_word_accuracy": word_correct / max(words, 1),
        "mlm_word_correct": word_correct,
        "mlm_words": words,
        "mlm_most_frequent_accuracy": frequent_count / max(masked, 1),
        "mlm_most_frequent_id": frequent_id,
    }
