"""A test callback that logs which samples each rank trained on, step by step, for checking resumed runs.

Importable as ``tests.sample_log.SampleLog`` by ``python -m albert_lightning.fit`` run from the repository (or with
it on PYTHONPATH): ``--trainer.callbacks+=tests.sample_log.SampleLog``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np

from albert_lightning.pretraining.data import IGNORE_INDEX


class SampleLog(L.Callback):
    """Appends one JSON line per training step to ``{default_root_dir}/samples-rank{r}.jsonl``.

    A line holds the rank's sample ids, each the (shard file, row) the sample was read from, with the global row
    index the loader addresses it by; the rank's own MLM and SOP losses and its count of masked tokens (to
    combine the ranks' losses into the global batch's); and Lightning's position: ``step`` (after the update),
    ``epoch``, ``batch_idx`` in the epoch and ``is_last_batch``, which say whether Lightning counts the epoch's
    batches as the loader hands them out.
    """

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        shards = trainer.datamodule.manifest.split("train")
        self._files = [s.file for s in shards]
        self._starts = np.cumsum([0] + [s.rows for s in shards])

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        index = batch["index"].numpy()
        shard = np.searchsorted(self._starts, index, side="right") - 1
        metrics = trainer.callback_metrics  # this rank's own values: training_step logs with sync_dist=False
        line = {
            "step": trainer.global_step,
            "epoch": trainer.current_epoch,
            "batch_idx": batch_idx,
            "is_last_batch": bool(trainer.fit_loop.epoch_loop.batch_progress.is_last_batch),
            "world_size": trainer.world_size,
            "rank": trainer.global_rank,
            "ids": [[self._files[s], int(i - self._starts[s])] for s, i in zip(shard, index, strict=True)],
            "index": index.tolist(),
            "masked": int((batch["masked_lm_ids"] != IGNORE_INDEX).sum()),
            "mlm_loss": float(metrics["train/mlm_loss"]),
            "sop_loss": float(metrics["train/sop_loss"]),
        }
        with open(Path(trainer.default_root_dir) / f"samples-rank{trainer.global_rank}.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")


def read_log(root: str | Path) -> list[dict[str, Any]]:
    """Returns a run's steps in order, one dict per step: ``step``, ``epoch``, ``batch_idx``, ``is_last_batch``,
    ``world_size``; ``ids`` and ``index``, the global batch's samples in rank order (rank r's block r-th, as the
    loader splits a global batch); ``loss``, the global batch's loss (MLM over all its masked tokens, plus the
    ranks' mean SOP loss)."""
    files = sorted(Path(root).glob("samples-rank*.jsonl"), key=lambda p: int(p.stem.removeprefix("samples-rank")))
    ranks = [[json.loads(line) for line in path.read_text().splitlines()] for path in files]
    steps = []
    for lines in zip(*ranks, strict=True):
        first = lines[0]
        assert [line["rank"] for line in lines] == list(range(first["world_size"])) == list(range(len(ranks)))
        assert all(line["step"] == first["step"] and line["batch_idx"] == first["batch_idx"] for line in lines)
        masked = sum(line["masked"] for line in lines)
        mlm = sum(line["mlm_loss"] * line["masked"] for line in lines) / masked
        sop = sum(line["sop_loss"] for line in lines) / len(lines)
        steps.append(
            {
                **{key: first[key] for key in ("step", "epoch", "batch_idx", "is_last_batch", "world_size")},
                "ids": [tuple(i) for line in lines for i in line["ids"]],
                "index": [i for line in lines for i in line["index"]],
                "loss": mlm + sop,
            }
        )
    return steps
