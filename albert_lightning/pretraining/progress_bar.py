"""The pretraining run's progress: optimizer steps of the whole run, not batches of an epoch. A live bar on a
terminal (``StepProgressBar``); in a log, a line at the pace of ``pipelines.runtime.pace`` (``StepProgressLines``):
a tqdm bar redirected to a file writes every one of its updates, several MB of carriage returns per run."""

from __future__ import annotations

import sys
import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

from pipelines.runtime.pace import Pace, clock, rate_and_left

__all__ = ["StepProgressBar", "StepProgressLines", "figure", "step_progress"]


def step_progress() -> ProgressBar:
    """The bar for where stderr goes: a live one on a terminal, paced lines otherwise."""
    return StepProgressBar() if sys.stderr.isatty() else StepProgressLines()


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


def figure(value: float) -> str:
    """A metric as a log line shows it: four significant digits, whole numbers from 1,000 up with separators
    (``tok/s 47,680``, not ``4.768e+04``)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


class StepProgressLines(ProgressBar):
    """Prints ``steps: 1,200/12,000 (10%), 3.1 steps/s, 58:05 left, loss 5.43, tok/s 2,730`` to stderr when a
    ``Pace`` says (30 s or 5 % of ``max_steps`` since the last line), and a last line with the run's time.

    Only on global rank 0 (``ProgressBar.setup`` disables the others) and only for a run bounded by
    ``max_steps``; the rate and time left count this run's steps, from the step it started or resumed at.
    Validation prints nothing: its figures go to the run's curves and ``metrics.json``.
    """

    def __init__(self) -> None:
        super().__init__()
        self._enabled = True
        self._pace: Pace | None = None
        self._since = (0.0, 0)
        self.lines = 0

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.max_steps > 0:
            now = time.monotonic()
            self._pace, self._since = Pace(trainer.max_steps, now), (now, trainer.global_step)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        step, now = trainer.global_step, time.monotonic()
        if self._enabled and self._pace is not None and step < trainer.max_steps and self._pace.due(step, now):
            self._print(trainer, pl_module, step, now)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._enabled and self._pace is not None:
            self._print(trainer, pl_module, trainer.global_step, time.monotonic(), final=True)

    def _print(self, trainer: L.Trainer, pl_module: L.LightningModule, step: int, now: float,
               final: bool = False) -> None:  # fmt: skip
        total = trainer.max_steps
        parts = [f"steps: {step:,}/{total:,} ({step / total:.0%})"]
        if final:
            parts[0] += f" in {clock(now - self._since[0])}"
        elif rate := rate_and_left(step, total, self._since, now, "steps"):
            parts.append(rate)
        for name, value in self.get_metrics(trainer, pl_module).items():
            if name != "v_num":
                parts.append(f"{name} {figure(value)}" if isinstance(value, float) else f"{name} {value}")
        print(", ".join(parts), file=sys.stderr, flush=True)
        self.lines += 1
