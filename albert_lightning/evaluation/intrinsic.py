"""Intrinsic scores of a pretrained network: MLM and sentence-pair (SOP or NSP) accuracy on held-out shards.

The columns of the paper's Table 5, measured on the instances stage's evaluation shards (held-out documents
alone), so ``evaluate`` reports them with or without downstream tasks.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from albert_lightning.model import AlbertForPreTraining
from albert_lightning.pretraining.data import IGNORE_INDEX, ShardDataset, collate
from albert_lightning.pretraining.module import prediction_hits

__all__ = ["intrinsic_scores"]


@torch.no_grad()
def intrinsic_scores(model: AlbertForPreTraining, shards: str, batches: int, batch_size: int) -> dict[str, Any]:
    """MLM accuracy and sentence-pair accuracy of ``model`` on the validation split of ``shards``.

    Returns:
        The accuracies with the counts behind them (``mlm_correct`` of ``mlm_predictions`` masked tokens,
        ``pair_correct`` of ``pairs``: what a proportion's interval needs), and ``mlm_most_frequent_accuracy``,
        the accuracy of always answering the most frequent masked token of the scored rows (``mlm_most_frequent_id``):
        no constant guess does better, so it is what a model that learnt only word frequencies scores.
    """
    dataset = ShardDataset(shards, "validation")
    model.eval()
    correct = masked = pair_correct = pairs = 0
    targets: Counter[int] = Counter()
    for start in range(0, min(len(dataset), batches * batch_size), batch_size):
        batch = collate([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
        out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["masked_lm_positions"])
        mlm_hits, pair_hits = prediction_hits(out, batch)
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
        "mlm_most_frequent_accuracy": frequent_count / max(masked, 1),
        "mlm_most_frequent_id": frequent_id,
    }
