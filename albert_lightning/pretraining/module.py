"""The ``AlbertPretraining`` LightningModule: MLM + sentence-order (or NSP, or no) loss, metrics, optimiser.

The model is built and sharded once, in ``configure_model`` (FSDP2 through ``sharding.shard_albert`` when a
device mesh is present, plain otherwise), so the same module runs on one CPU, under FSDP on CPU with gloo, and
on GPUs with NCCL.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_warn

from albert_lightning.interop.pretrained import read_start
from albert_lightning.model import AlbertConfig, AlbertForPreTraining, PreTrainingOutput
from albert_lightning.optim import build_optimizer, warmup_linear_decay
from albert_lightning.pretraining.data import IGNORE_INDEX, ShardDataModule
from albert_lightning.pretraining.start import check_shards, start_config
from albert_lightning.sharding import clip_grad_norm, shard_albert
from pipelines.algorithms.sop import INTER_SENTENCE_MODES
from pipelines.algorithms.textnorm import Normalizer

__all__ = ["AlbertPretraining", "is_last_step", "prediction_hits"]


def prediction_hits(out: PreTrainingOutput, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Whether each real masked token (padding left out) and each sentence pair got its label as the model's top
    score: the MLM and SOP (or NSP) accuracies' counts, for validation and for ``evaluate``'s intrinsic scores."""
    labels = batch["masked_lm_ids"]  # [B, P], IGNORE_INDEX at padding
    mlm = (out.prediction_logits.argmax(-1) == labels)[labels != IGNORE_INDEX]
    return mlm, out.sop_logits.argmax(-1) == batch["sentence_order_label"]


def is_last_step(trainer: L.Trainer) -> bool:
    """Whether the step that just ended is the run's last: ``max_steps`` reached, or the last epoch's last batch."""
    if 0 < trainer.max_steps <= trainer.global_step:
        return True
    last_epoch = trainer.max_epochs not in (None, -1) and trainer.current_epoch + 1 >= trainer.max_epochs
    return last_epoch and trainer.fit_loop.epoch_loop.batch_progress.is_last_batch


class AlbertPretraining(L.LightningModule):
    """ALBERT pretraining.

    Args:
        preset: an ``AlbertConfig`` preset ("tiny", "mini", "small", "base", "large", "xlarge", "xxlarge").
        vocab_size: the shards' vocabulary size (linked from the data module by ``fit``).
        config_overrides: fields of ``AlbertConfig`` to change from the preset (e.g. {"sharing": "ffn"}).
        inter_sentence: the shards' second objective: "sop", "nsp" (same head, other data) or "none" (no loss).
        normalizer: how the shards' text was normalised (``textnorm.Normalizer``'s fields, linked from the data
            module by ``fit``); export and evaluation normalise text the same way. None: the defaults.
        optimizer: "lamb" (the paper) or "adamw".
        lr: peak learning rate (paper: 0.00176 for batch 4096 with LAMB).
        weight_decay: applied to all weights but LayerNorm and biases.
        warmup_steps: optimizer steps of linear warm-up.
        total_steps: optimizer steps to decay to 0 over; None takes the trainer's estimate.
        gradient_clip_norm: clip the global gradient norm to this (works on sharded gradients); 0 disables it.
        activation_checkpointing: recompute each transformer layer in backward to save activation memory.
        gather_per_use: under FSDP, gather each sublayer for each of its L uses instead of each layer once per
            step (``sharding.shard_albert``): per-rank memory of a sublayer, not a layer and its gradient, for L×
            the all-gathers and reduce-scatters; for xxlarge-sized layers on ranks short of memory.
        init_from: a network to continue pretraining (a Hugging Face ALBERT folder, an export, or a pretraining
            checkpoint): its shape replaces ``preset`` (``config_overrides`` may change dropout only), its weights
            the random init; the shards must share its vocabulary and normalisation (``pretraining/start.py``).
        spiece_sha256: the hash of the shards' ``spiece.model`` (linked from the data module by ``fit``), recorded
            so that a run continued from this one can check its vocabulary.
    """

    def __init__(
        self,
        preset: str = "small",
        vocab_size: int = 30000,
        config_overrides: dict[str, Any] | None = None,
        inter_sentence: str = "sop",
        normalizer: dict[str, bool | str] | None = None,
        optimizer: str = "lamb",
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup_steps: int = 100,
        total_steps: int | None = None,
        gradient_clip_norm: float = 1.0,
        activation_checkpointing: bool = False,
        gather_per_use: bool = False,
        init_from: str | None = None,
        spiece_sha256: str | None = None,
    ) -> None:
        super().__init__()
        if inter_sentence not in INTER_SENTENCE_MODES:
            raise ValueError(f"inter_sentence={inter_sentence!r}: choose one of {INTER_SENTENCE_MODES}")
        # Read once, on every rank; configure_model copies the weights in before sharding, then lets go of them.
        self._start = read_start(init_from) if init_from else None
        if self._start is None:
            self.config = AlbertConfig.preset(preset, vocab_size=vocab_size, **(config_overrides or {}))
        else:
            self.config = start_config(self._start, config_overrides)
        self.save_hyperparameters()
        self.hparams["config"] = dataclasses.asdict(self.config)  # what export and evaluation rebuild from
        self.model: AlbertForPreTraining | None = None
        self._tokens_seen = 0
        self._started = time.perf_counter()

    def configure_model(self) -> None:
        if self.model is not None:  # called again by load_from_checkpoint and by later fits: keep the model
            return
        self.model = AlbertForPreTraining(self.config)
        self.model.init_weights()
        if self._start is not None:
            self._start.load_into(self.model)
            if self._start.missing:
                rank_zero_warn(f"{self._start.path} has no {self._start.missing}; initialised as a new model's")
            self._start = None
        mesh = getattr(self, "_device_mesh", None)
        if mesh is not None:
            h = self.hparams
            shard_albert(self.model, mesh["data_parallel"], h.activation_checkpointing, gather_per_use=h.gather_per_use)

    def setup(self, stage: str) -> None:
        # Before any step and before the weights are copied in: shards of another vocabulary or normalisation
        # would train the start on ids that mean other pieces.
        if self._start is not None:
            h = self.hparams
            shards = getattr(self.trainer.datamodule, "data_dir", None) or "the shards"
            check_shards(self._start, h.vocab_size, h.spiece_sha256, Normalizer(**(h.normalizer or {})), shards)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # The one hook that sees the whole checkpoint before Lightning restores its loops from it: a resume at
        # another global batch must count the epoch's batches as the resumed loader does (ShardDataModule).
        datamodule = self._trainer.datamodule if self._trainer is not None else None
        if isinstance(datamodule, ShardDataModule):
            datamodule.align_epoch_progress(checkpoint)

    def forward(self, batch: dict[str, torch.Tensor]):
        return self.model(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["masked_lm_positions"]
        )

    def losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Returns the loss to optimise and every metric (MLM/SOP losses and accuracies) of one batch."""
        out = self(batch)
        logits = out.prediction_logits.float()  # [B, P, V]
        labels = batch["masked_lm_ids"]  # [B, P], IGNORE_INDEX at padding
        mlm = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
        mlm_hits, pair_hits = prediction_hits(out, batch)
        metrics = {"mlm_loss": mlm, "mlm_accuracy": mlm_hits.float().mean()}
        metrics["sop_loss"] = F.cross_entropy(out.sop_logits.float(), batch["sentence_order_label"])
        metrics["sop_accuracy"] = pair_hits.float().mean()
        use_second = self.hparams.inter_sentence != "none"
        metrics["loss"] = mlm + metrics["sop_loss"] if use_second else mlm
        return metrics

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        metrics = self.losses(batch)
        self._tokens_seen += int(batch["attention_mask"].sum()) * self.trainer.world_size
        self.log_dict({f"train/{k}": v for k, v in metrics.items()}, prog_bar=False, sync_dist=False)
        self.log("loss", metrics["loss"], prog_bar=True, logger=False)
        return metrics["loss"]

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        # Measured after the update, from the first step on: every token trained so far over the time of all the
        # steps that trained them (timed in training_step, the last step's backward and update would be missing).
        rate = self._tokens_seen / max(time.perf_counter() - self._started, 1e-9)
        self.log("tok/s", rate, prog_bar=True, logger=False)
        self.log("train/tokens_per_second", rate)

    def on_train_start(self) -> None:
        self._tokens_seen, self._started = 0, time.perf_counter()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # Lightning validates every val_check_interval steps only, so a run ending in between (or before the first)
        # would report the validation of an earlier step as its result. A stop it is asked for runs validation.
        if is_last_step(self.trainer):
            self.trainer.should_stop = True

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        metrics = self.losses(batch)
        self.log_dict({f"val/{k}": v for k, v in metrics.items()}, sync_dist=True, batch_size=len(batch["index"]))

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        # The trainer's own norm clipping goes through the precision plugin, which FSDP refuses; this computes
        # the global norm over sharded (DTensor) gradients itself.
        if self.hparams.gradient_clip_norm > 0:
            norm = clip_grad_norm(self.model.parameters(), self.hparams.gradient_clip_norm)
            self.log("train/grad_norm", norm)

    def configure_optimizers(self) -> dict[str, Any]:
        h = self.hparams
        optimizer = build_optimizer(self.model, h.optimizer, h.lr, h.weight_decay)
        total = h.total_steps or int(self.trainer.estimated_stepping_batches)
        scheduler = warmup_linear_decay(optimizer, min(h.warmup_steps, total - 1), total)  # short test runs
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
