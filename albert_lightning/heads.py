"""Fine-tuning heads on the ALBERT encoder, laid out as transformers' task models so an export loads as them.

- ``SequenceClassifier`` (``AlbertForSequenceClassification``): dropout and a linear layer on the pooled [CLS].
- ``SpanExtractor`` (``AlbertForQuestionAnswering``): a linear layer giving every position a start and an end
  logit (SQuAD).
- ``MultipleChoice`` (``AlbertForMultipleChoice``): each (passage, question, option) encoded alone, one score per
  option from its pooled [CLS], compared across the options (RACE).

Each is the unit ``sharding.shard_albert`` shards whole; parameter names are transformers', so ``interop.hf.export_hf``
writes them as they are.
"""

from __future__ import annotations

import torch
from torch import nn

from albert_lightning.model import AlbertConfig, AlbertModel

__all__ = ["HEADS", "MultipleChoice", "SequenceClassifier", "SpanExtractor", "make_head"]

# head → the transformers class an export of it loads as
HEADS = {
    "classification": "AlbertForSequenceClassification",
    "span": "AlbertForQuestionAnswering",
    "choice": "AlbertForMultipleChoice",
}


class SequenceClassifier(nn.Module):
    """The encoder, dropout and a linear classifier on the pooled output."""

    def __init__(self, config: AlbertConfig, num_labels: int, classifier_dropout: float) -> None:
        super().__init__()
        self.albert = AlbertModel(config)
        self.dropout = nn.Dropout(classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, num_labels)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor):
        pooled = self.albert(input_ids, token_type_ids, attention_mask).pooled_output  # [B, H]
        return self.classifier(self.dropout(pooled))  # [B, num_labels]


class SpanExtractor(nn.Module):
    """The encoder and a linear layer scoring each position as an answer's start and as its end.

    No dropout before the layer, as transformers' AlbertForQuestionAnswering and the reference's SQuAD head.
    """

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.albert = AlbertModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor):
        sequence = self.albert(input_ids, token_type_ids, attention_mask).sequence_output  # [B, T, H]
        return self.qa_outputs(sequence).transpose(1, 2)  # [B, 2, T]: start logits, end logits


class MultipleChoice(nn.Module):
    """The encoder, dropout and one score per option from its pooled output: inputs are [B, options, T]."""

    def __init__(self, config: AlbertConfig, classifier_dropout: float) -> None:
        super().__init__()
        self.albert = AlbertModel(config)
        self.dropout = nn.Dropout(classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, 1)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor):
        batch, options, length = input_ids.shape
        flat = [t.reshape(batch * options, length) for t in (input_ids, token_type_ids, attention_mask)]
        pooled = self.albert(*flat).pooled_output  # [B * options, H]
        return self.classifier(self.dropout(pooled)).view(batch, options)  # [B, options]


def make_head(head: str, config: AlbertConfig, num_labels: int, classifier_dropout: float) -> nn.Module:
    """Returns the network of a head kind (``HEADS``) on a fresh encoder of ``config``."""
    if head == "classification":
        return SequenceClassifier(config, num_labels, classifier_dropout)
    if head == "span":
        return SpanExtractor(config)
    if head == "choice":
        return MultipleChoice(config, classifier_dropout)
    raise ValueError(f"head={head!r}: choose one of {', '.join(HEADS)}")
