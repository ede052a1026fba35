"""Continued pretraining: what a run started from an existing network (``--model.init_from``, read by
``interop/pretrained.read_start``) must agree with.

The start's shape is the run's; its vocabulary and normalisation must be the shards', since ids mean pieces
and pieces were cut from text normalised one way: a mismatch is refused before any step, naming both sides.
Only weights carry over (``Start.load_into``): the optimizer, its schedule and the step count start fresh
(``--ckpt_path`` resumes).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from albert_lightning.interop.pretrained import Start
from albert_lightning.model import AlbertConfig
from pipelines.algorithms.textnorm import Normalizer, tokenizer_settings

FROM_VOCAB = "vocab.from_spiece, or vocab.from_wordpiece for a vocab.txt"

__all__ = ["TRAINING_FIELDS", "check_shards", "start_config"]

# AlbertConfig fields a continued run may change: how it trains, not what the weights mean.
TRAINING_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout_prob")


def start_config(start: Start, overrides: dict[str, Any] | None) -> AlbertConfig:
    """The run's shape: the start's, with ``overrides`` of training-only fields applied.

    Raises:
        ValueError: for an override of any other field that differs from the start's (one line naming both).
    """
    overrides = overrides or {}
    for name, value in overrides.items():
        if name not in TRAINING_FIELDS and getattr(start.config, name, None) != value:
            raise ValueError(
                f"--model.config_overrides {name}={value!r} contradicts {start.path}'s {name}="
                f"{getattr(start.config, name, None)!r}: a continued run keeps its start's shape"
            )
    return dataclasses.replace(start.config, **overrides)


def check_shards(start: Start, vocab_size: int, spiece_sha256: str | None, normalizer: Normalizer, shards: str) -> None:
    """Refuses shards cut with another vocabulary or normalisation than the start's, naming both.

    Raises:
        ValueError: one line naming the start and the shards, and what differs.
    """
    if vocab_size != start.config.vocab_size:
        raise ValueError(
            f"{shards} has vocab_size {vocab_size}, but {start.path} has {start.config.vocab_size}: "
            f"make the shards with the start's vocabulary ({FROM_VOCAB})"
        )
    if spiece_sha256 and start.spiece_sha256 and spiece_sha256 != start.spiece_sha256:
        raise ValueError(
            f"{shards} was cut with a vocabulary (spiece.model or vocab.txt) sha256 {spiece_sha256[:12]}, but "
            f"{start.path}'s is {start.spiece_sha256[:12]}: make the shards with the start's vocabulary ({FROM_VOCAB})"
        )
    if normalizer != start.normalizer:
        raise ValueError(
            f"{shards} normalises text as {tokenizer_settings(normalizer)}, but {start.path} as "
            f"{tokenizer_settings(start.normalizer)}: segment with the start's (segment.normalization_from)"
        )
