"""The rank's side of bench/model_sizes.py: a Lightning callback that ``fit`` loads by its class path
(``--trainer.callbacks+=model_sizes_callback.SizeRecorder``, with ``bench/`` on ``PYTHONPATH``).

Each rank writes ``{default_root_dir}/rank{r}.json``:

- ``vm_hwm_build_mb``: the rank's peak RSS up to the first step (``VmHWM``): Python, torch, the model built
  whole and then sharded (``AlbertPretraining.configure_model`` builds it unsharded on every rank);
- ``vm_hwm_train_mb``: its peak RSS over the training steps alone, ``VmHWM`` reset at the first step through
  ``/proc/self/clear_refs`` (Linux ≥ 4.0), so that the build's transient does not hide what the steps hold;
- ``param_bytes``, ``grad_bytes``, ``optimizer_bytes``: the bytes of the rank's own shards (``DTensor.to_local``)
  of the parameters, of their gradients and of the optimizer's state tensors, after the last step;
- ``step_cpu_s``, ``step_wall_s``: each step's CPU seconds of this process (all its threads) and wall seconds;
- ``vm_hwm_save_mb``: its peak RSS while the checkpoints are written, after training.

After training every rank takes part in writing two checkpoints of the same state: ``sharded.ckpt`` (a folder,
one file per rank: ``FSDP2Strategy(save_distributed_checkpoint=True)``) and ``full.ckpt`` (one file gathered
on rank 0, the strategy's default). The strategy reads the choice from its private attribute at each save, so
the bench flips it instead of running every fit twice.

The model's vocabulary has no flag of its own: ``fit`` links it to the shards', which a tiny corpus cannot fill
to the paper's 30,000 pieces. ``MODEL_SIZES_VOCAB`` in the environment sets it before the model is built
(``setup`` runs before ``configure_model``): the embedding table, the tied decoder, their optimizer state and the
logits at masked positions are then the paper's size, and the shards' ids (all below it) are valid inputs.
``MODEL_SIZES_CHECKPOINTS=0`` leaves the checkpoints out (``bench/gpu_mfu.sh`` wants the steps' figures only);
each step's rows, length and prediction slots, and its tokens, are recorded for its tokens/s and MFU, and on a
GPU the device's peak allocation.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch

__all__ = ["SizeRecorder"]

VOCAB_ENV = "MODEL_SIZES_VOCAB"
CHECKPOINTS_ENV = "MODEL_SIZES_CHECKPOINTS"


def _status_mb(field: str) -> float:
    """A memory field of /proc/self/status ("VmHWM", "VmRSS") in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def _reset_peak_rss() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    except OSError:  # a kernel or container without it: the peaks then include what came before
        pass


def _local_bytes(tensors: Any) -> int:
    """Bytes of the rank's own part of each tensor: a DTensor's local shard, a plain tensor whole."""
    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            local = t.to_local() if hasattr(t, "to_local") else t
            total += local.numel() * local.element_size()
    return total


class SizeRecorder(L.Callback):
    """Records the rank's memory, its shards' bytes and its steps' CPU time, then writes both checkpoints."""

    def __init__(self) -> None:
        self.record: dict[str, Any] = {"step_cpu_s": [], "step_wall_s": [], "step_positions": [], "step_tokens": []}
        self._cpu0 = self._wall0 = 0.0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        vocab = os.environ.get(VOCAB_ENV)
        if vocab and pl_module.model is None:
            pl_module.config = dataclasses.replace(pl_module.config, vocab_size=int(vocab))
            pl_module.hparams["vocab_size"] = int(vocab)
            pl_module.hparams["config"] = dataclasses.asdict(pl_module.config)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        if not self.record["step_cpu_s"]:
            self.record["vm_hwm_build_mb"] = _status_mb("VmHWM")
            _reset_peak_rss()
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           idx: int) -> None:  # fmt: skip
        if torch.cuda.is_available():  # the step's kernels finished, not just queued
            torch.cuda.synchronize()
        self.record["step_cpu_s"].append(time.process_time() - self._cpu0)
        self.record["step_wall_s"].append(time.perf_counter() - self._wall0)
        rows, length = batch["input_ids"].shape
        self.record["step_positions"].append([rows, length, batch["masked_lm_positions"].shape[1]])
        self.record["step_tokens"].append(int(batch["attention_mask"].sum()))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        params = list(pl_module.model.parameters())
        optimizer = trainer.optimizers[0]
        state = [v for s in optimizer.state.values() for v in s.values()]
        self.record.update(
            rank=trainer.global_rank,
            world_size=trainer.world_size,
            vm_hwm_train_mb=_status_mb("VmHWM"),
            param_bytes=_local_bytes(params),
            grad_bytes=_local_bytes(p.grad for p in params),
            optimizer_bytes=_local_bytes(state),
            parameters=sum(p.numel() for p in params),  # global: a DTensor's numel is the full tensor's
            vocab_size=pl_module.config.vocab_size,
            threads=torch.get_num_threads(),
            config=dataclasses.asdict(pl_module.config),
        )
        if torch.cuda.is_available():
            self.record["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated() / (1 << 20)
        root = Path(trainer.default_root_dir)
        if os.environ.get(CHECKPOINTS_ENV, "1") == "0":  # bench/gpu_mfu.sh: throughput only
            (root / f"rank{trainer.global_rank}.json").write_text(json.dumps(self.record, indent=1) + "\n")
            return
        _reset_peak_rss()
        strategy = trainer.strategy
        saved = strategy._save_distributed_checkpoint
        try:
            for name, distributed in (("sharded.ckpt", True), ("full.ckpt", False)):
                strategy._save_distributed_checkpoint = distributed
                start = time.perf_counter()
                trainer.save_checkpoint(root / name)
                self.record[f"save_{name.split('.')[0]}_wall_s"] = time.perf_counter() - start
        finally:
            strategy._save_distributed_checkpoint = saved
        self.record["vm_hwm_save_mb"] = _status_mb("VmHWM")
        (root / f"rank{trainer.global_rank}.json").write_text(json.dumps(self.record, indent=1) + "\n")
