"""The pretraining run's progress bar: optimizer steps of the whole run, not batches of an epoch."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar

__all__ = ["StepProgressBar"]


class StepProgressBar(TQDMProgressBar):
    """Counts optimizer steps out of ``max_steps`` over the whole run (from the checkpoint's step on a resume).

    Lightning's bars count the batches of each epoch under "Epoch 0/-2" (``max_epochs`` is -1 when ``max_steps``
    ends the run). A run bounded by epochs only keeps Lightning's bar.
    """

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        if trainer.max_steps > 0:
            bar = self.train_progress_bar
            bar.reset(total=trainer.max_steps)
            bar.initial = bar.n = trainer.global_step  # the rate counts this run's steps only

    def on_train_epoch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.max_steps <= 0:
            super().on_train_epoch_start(trainer, *args)
            return
        self.train_progress_bar.set_description(f"Steps (epoch {trainer.current_epoch})")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if trainer.max_steps <= 0:
            super().on_train_batch_end(trainer, pl_module, *args)
            return
        bar = self.train_progress_bar
        if self._should_update(trainer.global_step, bar.total):
            bar.n = trainer.global_step
            bar.refresh()
            bar.set_postfix(self.get_metrics(trainer, pl_module))
