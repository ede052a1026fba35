"""ALBERT's hyper-parameters: ``AlbertConfig``, its presets from "tiny" to "xxlarge", and the choices it names.

Plain torch, as the model it configures (``model.py``): ``ACTIVATIONS`` maps ``hidden_act`` to its function and
``SHARING`` the paper's Table 4 cross-layer sharing strategies to the parts of a layer they share. Field names are
transformers' ``AlbertConfig``'s, so a ``config.json`` maps onto it by name (``interop/hf.py``).
Tests: ``python -m pytest tests/test_model.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["ACTIVATIONS", "PRESETS", "SHARING", "AlbertConfig", "gelu_new"]

# Cross-layer sharing strategies of the paper's Table 4, mapped to the parts of an AlbertLayer that all layers
# share. "all" is handled by the group layout instead (num_hidden_groups × inner_group_num unique layers).
SHARING: dict[str, tuple[str, ...]] = {
    "all": (),
    "attention": ("attention",),
    "ffn": ("ffn", "ffn_output", "full_layer_layer_norm"),
    "none": (),
}


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """The tanh approximation of GELU: TF ALBERT's "gelu", transformers' "gelu_new" and "gelu_pytorch_tanh"."""
    return F.gelu(x, approximate="tanh")


# The activations of released ALBERT checkpoints, under transformers' names so that a config.json round-trips by
# name. "gelu" is the exact erf form (some v1 configs say it): computing it as the tanh form would change outputs.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "gelu_new": gelu_new,
    "gelu_pytorch_tanh": gelu_new,
}

# Sizes from the paper's Table 1; xlarge uses 16 heads as the released checkpoints do (the paper's rule,
# H/64, would give 32). "tiny" (E=32, H=64, 2 layers) serves the tests and is the CPU default of the embedded
# corpus: bench/sweep.py measured it to learn most per minute on 2 cores (bench/results/sweep.md). "mini"
# (L=4/H=128, BERT-Tiny's width at BERT-Mini's depth, Turc et al. 2019; 4.2M parameters at V=30000) and "small"
# (BERT-Mini's L=4/H=256) are the next sizes up, for longer CPU runs.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        vocab_size=1000,
        embedding_size=32,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=128,
    ),
    "mini": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=2, intermediate_size=512),
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
    "xlarge": dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=16, intermediate_size=8192),
    "xxlarge": dict(hidden_size=4096, num_hidden_layers=12, num_attention_heads=64, intermediate_size=16384),
}


@dataclass
class AlbertConfig:
    """ALBERT hyper-parameters; the defaults are ALBERT-base (field names as transformers' AlbertConfig)."""

    vocab_size: int = 30000  # V: SentencePiece vocabulary size
    embedding_size: int = 128  # E: factorised embedding width (paper §3.1)
    hidden_size: int = 768  # H: transformer width
    num_hidden_layers: int = 12  # L: layers applied (each may reuse shared weights)
    num_attention_heads: int = 12  # heads per attention block; must divide H
    intermediate_size: int = 3072  # I: FFN inner width
    num_hidden_groups: int = 1  # G: groups of unique layers for sharing="all"; layer i uses group ⌊i·G/L⌋
    inner_group_num: int = 1  # K: unique layers inside a group, all run each time the group is used
    sharing: str = "all"  # cross-layer sharing: "all" | "attention" | "ffn" | "none" (paper Table 4)
    hidden_dropout_prob: float = 0.0  # dropout on embeddings and residual branches (0, as ALBERT v2)
    attention_probs_dropout_prob: float = 0.0  # dropout on attention probabilities (0, as ALBERT v2)
    classifier_dropout_prob: float = 0.1  # dropout before fine-tuning classifiers only; not used in pretraining
    max_position_embeddings: int = 512  # longest sequence the position table covers
    type_vocab_size: int = 2  # token types (segment A / B)
    initializer_range: float = 0.02  # std of the normal initialiser
    layer_norm_eps: float = 1e-12  # LayerNorm epsilon (TF and transformers)
    pad_token_id: int = 0  # id of <pad>; written to exported configs, not special inside the model
    # FFN and MLM-head activation, by transformers' name (see ACTIVATIONS). The default is what every checkpoint
    # before this field was trained with, so their hyper_parameters keep their meaning.
    hidden_act: str = "gelu_new"

    def __post_init__(self) -> None:
        if self.sharing not in SHARING:
            raise ValueError(f"sharing={self.sharing!r} is not one of {', '.join(map(repr, SHARING))}")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act={self.hidden_act!r} is not one of {', '.join(map(repr, ACTIVATIONS))}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of {self.num_attention_heads} heads")
        if self.sharing != "all" and (self.num_hidden_groups, self.inner_group_num) != (1, 1):
            raise ValueError(f"num_hidden_groups and inner_group_num apply to sharing='all', not {self.sharing!r}")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> AlbertConfig:
        """Returns the named preset with ``overrides`` applied.

        Args:
            name: one of ``PRESETS``: tiny, mini, small, base, large, xlarge, xxlarge.
            **overrides: AlbertConfig fields to change, e.g. ``vocab_size=8000``.

        Raises:
            ValueError: if ``name`` is not a preset.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})
