"""What a pretraining run leaves for DVC: curves as CSV (``dvc plots``), a PNG of them, and ``metrics.json``.

DVC's own plot page loads its charting scripts from the internet, so the PNG is the picture that opens offline.
"""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any

import lightning as L
import torch

from albert_lightning.model import num_parameters
from albert_lightning.pretraining.module import is_last_step

__all__ = ["PretrainingReport"]

VALIDATION_COLUMNS = ("mlm_loss", "mlm_accuracy", "sop_loss", "sop_accuracy")
TRAIN_CSV = ("step", "loss", "tokens_per_second")
VALIDATION_CSV = ("step", *VALIDATION_COLUMNS)


def _no_validation(trainer: L.Trainer) -> str:
    """Says why a run has no validation numbers: an empty validation split, or validation switched off."""
    data = trainer.datamodule
    if len(data.val_dataloader().dataset) == 0:
        return f"{getattr(data, 'data_dir', 'the data module')}: no validation rows"
    return f"no validation rows scored (limit_val_batches={trainer.limit_val_batches})"


class PretrainingReport(L.Callback):
    """Writes ``{folder}/curves/{train,validation}.csv``, ``{folder}/curves.png`` and ``{folder}/metrics.json``.

    Args:
        folder: where to write; None: the trainer's ``default_root_dir`` (the pretrain stage's output folder).
    """

    def __init__(self, folder: str | None = None) -> None:
        self.folder = folder
        self.train: list[dict[str, float]] = []
        self.validation: list[dict[str, float]] = []
        self._restored: dict[str, list[dict[str, float]]] | None = None

    def state_dict(self) -> dict[str, Any]:
        # The rows travel in every checkpoint: the CSV files are written at validations only, so a run killed
        # between a checkpoint and the next validation would otherwise lose the rows logged in between.
        return {"train": list(self.train), "validation": list(self.validation)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = state_dict

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.folder = self.folder or trainer.default_root_dir
        # Not in on_fit_start: the trainer restores global_step (and this callback's state) after that hook.
        step = trainer.global_step
        if step == 0:  # the curve starts where training starts, so "well below its start" can be read off it
            start = self._validate(trainer, pl_module)
            self.train, self.validation = [], [{"step": 0, **start}] if start else []
            return
        # A resumed run keeps the rows of the steps up to its checkpoint and logs the rest again. A checkpoint
        # written before this callback kept its rows has only the CSV files to go by.
        restored = self._restored or {name: self._read(name) for name in ("train", "validation")}
        self._restored = None  # a later fit with this callback starts from its own checkpoint
        self.train = [r for r in restored["train"] if r["step"] <= step]
        self.validation = [r for r in restored["validation"] if r["step"] <= step]
        # A validation due at the checkpoint's step runs after the checkpoint is written, and Lightning does not
        # repeat it on resume: its row is only in the CSV that validation wrote.
        if all(r["step"] != step for r in self.validation):
            self.validation += [r for r in self._read("validation") if r["step"] == step]

    @torch.no_grad()
    def _validate(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float] | None:
        """Scores the untrained model on the validation batches the trainer will use (Lightning has no step-0
        validation); every rank runs the same number of batches, and the means are averaged over ranks.

        Returns None when there is no validation batch (an empty split, or ``limit_val_batches=0``)."""
        limit = trainer.limit_val_batches
        pl_module.eval()
        totals = {c: 0.0 for c in VALIDATION_COLUMNS}
        batches = 0
        for i, batch in enumerate(trainer.datamodule.val_dataloader()):
            if isinstance(limit, int) and i >= limit:
                break
            metrics = pl_module.losses(pl_module.transfer_batch_to_device(batch, pl_module.device, 0))
            for column in VALIDATION_COLUMNS:
                totals[column] += float(metrics[column])
            batches += 1
        pl_module.train()
        if batches == 0:  # the same on every rank: the sampler gives each rank as many batches
            return None
        means = torch.tensor([totals[c] / batches for c in VALIDATION_COLUMNS], device=pl_module.device)
        means = trainer.strategy.reduce(means, reduce_op="mean")
        return dict(zip(VALIDATION_COLUMNS, means.tolist(), strict=True))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        metrics = trainer.callback_metrics
        logged = trainer.global_step % max(1, trainer.log_every_n_steps) == 0
        # The last step always has its row: the curve ends where training ends, and metrics.json reads its speed.
        if "train/loss" in metrics and (logged or is_last_step(trainer)):
            row = {"step": trainer.global_step, "loss": float(metrics["train/loss"])}
            if "train/tokens_per_second" in metrics:
                row["tokens_per_second"] = float(metrics["train/tokens_per_second"])
            self.train.append(row)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or "val/mlm_loss" not in trainer.callback_metrics:
            return
        row = {"step": trainer.global_step}
        row.update({c: float(trainer.callback_metrics[f"val/{c}"]) for c in VALIDATION_COLUMNS})
        self.validation = [r for r in self.validation if r["step"] != row["step"]] + [row]
        if trainer.is_global_zero:
            self._write()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        self._write()
        speeds = [r["tokens_per_second"] for r in self.train if "tokens_per_second" in r]
        metrics = {
            "steps": trainer.global_step,
            "parameters": num_parameters(pl_module.model),
            "tokens_per_second": speeds[-1] if speeds else None,
            "validation": None,  # no number at all rather than a 0.0 that reads as a perfect loss
            "validation_at_start": None,
        }
        if self.validation:
            metrics["validation"] = {c: self.validation[-1][c] for c in VALIDATION_COLUMNS}
            metrics["validation_at_start"] = {c: self.validation[0][c] for c in VALIDATION_COLUMNS}
        else:
            metrics["note"] = _no_validation(trainer)
        self._save(os.path.join(self.folder, "metrics.json"), json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        self._draw()

    def _path(self, name: str) -> str:
        return os.path.join(self.folder, "curves", f"{name}.csv")

    @staticmethod
    def _save(path: str, text: str) -> None:
        """Writes ``text`` to ``path`` whole (``files.write_text_atomically``)."""
        # Beam's file systems, imported at the first write rather than as every training run starts (~0.7 s)
        from pipelines.runtime import files

        files.write_text_atomically(path, text)

    def _read(self, name: str) -> list[dict[str, float]]:
        if not os.path.exists(self._path(name)):
            return []
        with open(self._path(name), newline="", encoding="utf-8") as f:
            # int(float()): files of earlier versions wrote some steps as "5.0"
            return [
                {k: int(float(v)) if k == "step" else float(v) for k, v in row.items() if v != ""}
                for row in csv.DictReader(f)
            ]

    def _write(self) -> None:
        # Written even without rows (a header only): a stale file of an earlier run must not stand in for them.
        for name, rows, columns in (("train", self.train, TRAIN_CSV), ("validation", self.validation, VALIDATION_CSV)):
            text = io.StringIO()
            writer = csv.DictWriter(text, columns)
            writer.writeheader()
            writer.writerows(rows)
            self._save(self._path(name), text.getvalue())

    def _draw(self) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from pipelines.runtime import files

        figure, (losses, accuracies) = plt.subplots(1, 2, figsize=(10, 4))
        if self.train:
            losses.plot([r["step"] for r in self.train], [r["loss"] for r in self.train], label="train loss", alpha=0.5)
        steps = [r["step"] for r in self.validation]
        for column, axis in (
            ("mlm_loss", losses),
            ("sop_loss", losses),
            ("mlm_accuracy", accuracies),
            ("sop_accuracy", accuracies),
        ):
            axis.plot(steps, [r[column] for r in self.validation], marker="o", label=f"validation {column}")
        losses.set_xlabel("optimizer step")
        accuracies.set_xlabel("optimizer step")
        losses.legend()
        accuracies.legend()
        figure.tight_layout()
        files.write_figure_atomically(os.path.join(self.folder, "curves.png"), figure, dpi=100)
        plt.close(figure)
