"""ALBERT (Lan et al., 2019, arXiv 1909.11942) in plain torch: modules, heads, init, tied weights.

Knows nothing of distribution: ``sharding.py`` wraps the model (a test greps this file and ``model_config.py``,
which holds ``AlbertConfig`` and its presets; re-exported here as the model's public name). Names follow
``transformers.AlbertForPreTraining``, so for ``sharing="all"`` ``interop/hf.py`` is a one-to-one name map.
Deliberate differences from transformers: the MLM head runs only at ``masked_positions`` when given (as TF
gathers first; about 20 of 512 positions need V-wide logits); the SOP head has no dropout (as TF); the padding
row of the word embeddings is an ordinary row (as TF); ``sharing`` adds the paper's Table 4 ablations.
Build on the meta device, then ``to_empty`` and ``init_weights()`` (torchtitan's order), or build directly.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from albert_lightning.model_config import ACTIVATIONS, SHARING, AlbertConfig

__all__ = [
    "TIED_WEIGHTS",
    "AlbertConfig",
    "AlbertForPreTraining",
    "AlbertLayer",
    "AlbertModel",
    "AlbertModelOutput",
    "PreTrainingOutput",
    "num_parameters",
    "with_tied_weights",
]

# Parameters that are the same tensor as another one (transformers' `_tied_weights_keys`): the MLM decoder
# reuses the word embeddings, and its bias is the head's V-sized bias. Checkpoint code writes these once.
TIED_WEIGHTS = {
    "predictions.decoder.weight": "albert.embeddings.word_embeddings.weight",
    "predictions.decoder.bias": "predictions.bias",
}


class AlbertModelOutput(NamedTuple):
    sequence_output: torch.Tensor  # [B, T, H] last layer
    pooled_output: torch.Tensor  # [B, H] tanh(Linear(first position)), the [CLS] summary


class PreTrainingOutput(NamedTuple):
    prediction_logits: torch.Tensor  # [B, P, V] at masked_positions, or [B, T, V] without them
    sop_logits: torch.Tensor  # [B, 2] sentence-order logits (0 = original order, 1 = swapped)


class AlbertEmbeddings(nn.Module):
    """Word + position + token-type embeddings of width E (factorised: V·E instead of V·H parameters)."""

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.embedding_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.embedding_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.embedding_size)
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.size(1), device=input_ids.device)  # [T]
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)  # [B, T, E]
        x = x + self.position_embeddings(positions)
        return self.dropout(self.LayerNorm(x))


class AlbertAttention(nn.Module):
    """Multi-head self-attention with its residual and post-LayerNorm (transformers' layout)."""

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.attention_dropout = config.attention_probs_dropout_prob
        self.output_dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        B, T, H = x.shape
        # [B, T, H] -> [B, heads, T, H/heads]
        q, k, v = (
            proj(x).view(B, T, self.num_heads, -1).transpose(1, 2) for proj in (self.query, self.key, self.value)
        )
        dropout = self.attention_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)  # [B, heads, T, H/heads]
        y = y.transpose(1, 2).reshape(B, T, H)
        return self.LayerNorm(x + self.output_dropout(self.dense(y)))


class AlbertLayer(nn.Module):
    """One post-LN transformer block: attention, then FFN (H→I→H, hidden_act) with residual and LayerNorm.

    The unit that sharing repeats, and the unit that ``sharding.py`` wraps (once per unique instance).
    """

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.attention = AlbertAttention(config)
        self.ffn = nn.Linear(config.hidden_size, config.intermediate_size)
        self.ffn_output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.full_layer_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.activation = ACTIVATIONS[config.hidden_act]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.attention(x, mask)  # [B, T, H]
        y = self.ffn_output(self.activation(self.ffn(x)))  # [B, T, I] inside
        return self.full_layer_layer_norm(x + self.dropout(y))


class AlbertLayerGroup(nn.Module):
    """``inner_group_num`` unique layers that run in sequence each time the group is used."""

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.albert_layers = nn.ModuleList(AlbertLayer(config) for _ in range(config.inner_group_num))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        for layer in self.albert_layers:
            x = layer(x, mask)
        return x


class AlbertTransformer(nn.Module):
    """Projection E→H, then L layer applications over shared groups.

    sharing="all": G groups (transformers' layout). "attention"/"ffn"/"none": L groups of one layer each, and
    for "attention"/"ffn" every layer's shared part is layer 0's module (so those parameters exist once; a
    sharding wrapper must then treat the whole encoder as one unit).
    """

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        L, G = config.num_hidden_layers, config.num_hidden_groups
        if config.sharing != "all":
            G = L
        self.embedding_hidden_mapping_in = nn.Linear(config.embedding_size, config.hidden_size)
        self.albert_layer_groups = nn.ModuleList(AlbertLayerGroup(config) for _ in range(G))
        first = self.albert_layer_groups[0].albert_layers[0]
        for group in self.albert_layer_groups[1:]:
            for name in SHARING[config.sharing]:
                setattr(group.albert_layers[0], name, getattr(first, name))
        # transformers' float expression for ⌊i·G/L⌋, kept verbatim so rounding edge cases (L=14, G=6) agree.
        self.group_of_layer = [int(i / (L / G)) for i in range(L)]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.embedding_hidden_mapping_in(x)  # [B, T, E] -> [B, T, H]
        for group in self.group_of_layer:
            x = self.albert_layer_groups[group](x, mask)
        return x


class AlbertModel(nn.Module):
    """The encoder: embeddings, shared transformer, pooler. Fine-tuning heads reuse it as ``.albert``."""

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = AlbertEmbeddings(config)
        self.encoder = AlbertTransformer(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> AlbertModelOutput:
        """Encodes a batch.

        Args:
            input_ids: [B, T] token ids.
            token_type_ids: [B, T] 0 for segment A, 1 for B; zeros when None.
            attention_mask: [B, T], 1 (or True) for real tokens and 0 for padding; all real when None.

        Returns:
            ``AlbertModelOutput(sequence_output [B, T, H], pooled_output [B, H])``.
        """
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        mask = None
        if attention_mask is not None:
            keep = attention_mask.bool()[:, None, None, :]  # [B, 1, 1, T] broadcast over heads and queries
            # An all-padding row attends everywhere instead of softmaxing over nothing (NaN); transformers'
            # additive mask gives the same uniform attention there.
            mask = keep | ~keep.any(dim=-1, keepdim=True)
        x = self.encoder(self.embeddings(input_ids, token_type_ids), mask)  # [B, T, H]
        return AlbertModelOutput(x, torch.tanh(self.pooler(x[:, 0])))


class AlbertMLMHead(nn.Module):
    """H→E dense, hidden_act, LayerNorm(E), then the decoder E→V tied to the word embeddings, plus a V bias."""

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.embedding_size)
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        # The weight is replaced by the word embeddings in AlbertForPreTraining.tie_weights; it stays a Linear
        # so that the tied tensor is used inside this module's forward (where a sharding wrapper gathers it).
        self.decoder = nn.Linear(config.embedding_size, config.vocab_size, bias=False)
        self.decoder.bias = self.bias
        self.activation = ACTIVATIONS[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.LayerNorm(self.activation(self.dense(x)))  # [B, P, H] -> [B, P, E]
        # Not self.decoder(h): on a 3-D input with a bias, Linear runs addmm on the flattened input and returns
        # a view of it, and a view as the output of the FSDP2 root is unsafe (an in-place op on it drops the
        # pre-backward hook; FSDP2 warns every step). matmul's reshape is not a view; the bias add is as cheap.
        return torch.matmul(h, self.decoder.weight.t()) + self.decoder.bias  # [B, P, V]


class AlbertSOPHead(nn.Module):
    """Sentence-order prediction: Linear(H, 2) on the pooled output, no dropout (as TF pretraining)."""

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.classifier = nn.Linear(config.hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(pooled)  # [B, H] -> [B, 2]


class AlbertForPreTraining(nn.Module):
    """ALBERT with its two pretraining heads: masked LM and sentence-order prediction."""

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config)
        self.predictions = AlbertMLMHead(config)
        self.sop_classifier = AlbertSOPHead(config)
        self.init_weights()

    def tie_weights(self) -> None:
        """Makes the MLM decoder use the word embeddings (again: ``to_empty`` creates separate tensors)."""
        self.predictions.decoder.weight = self.albert.embeddings.word_embeddings.weight
        self.predictions.decoder.bias = self.predictions.bias

    @torch.no_grad()
    def init_weights(self) -> None:
        """Initialises every parameter in place: normal(0, initializer_range) weights, zero biases, unit LayerNorms.

        Separate from construction so the model can be built on the meta device, moved with ``to_empty`` and
        initialised afterwards (torchtitan's order). Re-ties the decoder first if the tie was lost.
        """
        if self.predictions.decoder.weight is not self.albert.embeddings.word_embeddings.weight:
            self.tie_weights()
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            if isinstance(module, (nn.Linear, nn.LayerNorm)) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        masked_positions: torch.Tensor | None = None,
    ) -> PreTrainingOutput:
        """Runs the encoder and both heads.

        Args:
            input_ids: [B, T] token ids.
            token_type_ids: [B, T] segment ids; zeros when None.
            attention_mask: [B, T], 1 for real tokens and 0 for padding; all real when None.
            masked_positions: [B, P] integer positions to predict. Rows with fewer predictions are padded with 0
                (the [CLS] position): their logits are computed and must be ignored by the loss (label -100).
                When None, logits are computed at every position.

        Returns:
            ``PreTrainingOutput(prediction_logits [B, P, V] (or [B, T, V]), sop_logits [B, 2])``.
        """
        x, pooled = self.albert(input_ids, token_type_ids, attention_mask)  # [B, T, H], [B, H]
        if masked_positions is not None:
            # Gather before the head: V-wide logits for ~15% of positions, not all T (as the TF original).
            index = masked_positions.long()[:, :, None].expand(-1, -1, x.size(-1))  # shards store int16/int32
            x = x.gather(1, index)  # [B, P, H]
        return PreTrainingOutput(self.predictions(x), self.sop_classifier(pooled))


def with_tied_weights(state: dict[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    """Returns ``state`` holding both names of every tied pair, from whichever one a file stored.

    Exports keep one copy of a tied tensor, Lightning checkpoints both; two copies that differ cannot load into
    one tied parameter and are refused, naming ``where`` (the file).
    """
    state = dict(state)
    for tied, source in TIED_WEIGHTS.items():
        if tied in state and source in state and not torch.equal(state[tied], state[source]):
            raise ValueError(f"{where}: {tied} differs from {source}, but the model ties them")
        value = state.get(source, state.get(tied))
        if value is not None:
            state[source] = state[tied] = value
    return state


def num_parameters(model: nn.Module) -> int:
    """Returns the number of unique parameters (tied and shared tensors counted once), as the paper counts."""
    return sum(p.numel() for p in model.parameters())  # parameters() already skips repeated tensors
