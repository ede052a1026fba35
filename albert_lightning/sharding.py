"""How ALBERT is sharded: FSDP2 units, mixed precision, activation checkpointing, and the Lightning strategy.

The model file knows nothing of this (torchtitan's split of model and parallelize). Units, bottom-up:

- each *unique* transformer layer is one unit, wrapped once however many times sharing reuses it. It keeps
  its gathered parameters between the L uses in a forward (``reshard_after_forward=False``, i.e. SHARD_GRAD_OP):
  re-gathering it for every use costs L all-gathers for 7 M parameters (ALBERT-base) and saves nothing worth it;
- with ``attention``/``ffn`` sharing, parts of a layer are shared across layers, and FSDP2 refuses a parameter
  in two units, so the whole encoder is one unit;
- the root unit holds the rest: the word embedding and the MLM decoder are one tied tensor and must stay in
  one unit (FSDP2 raises "shared with a parameter already managed by another FSDP group" otherwise).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn
from torch.distributed._composable import checkpoint
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from albert_lightning.model import AlbertLayer, AlbertModel, AlbertTransformer

__all__ = ["FSDP2Strategy", "clip_grad_norm", "shard_albert"]

PARAM_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def shard_albert(
    model: nn.Module,
    mesh: DeviceMesh,
    activation_checkpointing: bool = False,
    param_dtype: str = "float32",
) -> nn.Module:
    """Applies FSDP2 to ``model`` in place over the data-parallel ``mesh`` and returns it.

    Args:
        model: the plain model holding one ALBERT encoder (``AlbertForPreTraining`` or a fine-tuning network),
            on its device, weights initialised; it becomes the root unit.
        mesh: the 1-D data-parallel device mesh.
        activation_checkpointing: recompute every transformer layer in backward (activations, not ALBERT's
            few parameters, are what fills memory).
        param_dtype: dtype of the gathered parameters for compute ("bfloat16" on GPUs); gradients are reduced in
            float32 and the sharded master weights stay float32.

    Raises:
        ValueError: an unknown ``param_dtype`` or sharing mode.
    """
    if param_dtype not in PARAM_DTYPES:
        raise ValueError(f"param_dtype={param_dtype!r}: choose one of {sorted(PARAM_DTYPES)}")
    policy = MixedPrecisionPolicy(param_dtype=PARAM_DTYPES[param_dtype], reduce_dtype=torch.float32)
    layers = list(dict.fromkeys(m for m in model.modules() if isinstance(m, AlbertLayer)))  # unique, in order
    if activation_checkpointing:
        for layer in layers:
            checkpoint(layer)
    encoder = next(m for m in model.modules() if isinstance(m, AlbertTransformer))
    sharing = next(m for m in model.modules() if isinstance(m, AlbertModel)).config.sharing
    if sharing in ("all", "none"):
        units = layers
    elif sharing in ("attention", "ffn"):
        units = [encoder]
    else:
        raise ValueError(f"sharing={sharing!r}: choose one of all, attention, ffn, none")
    for unit in units:
        fully_shard(unit, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def clip_grad_norm(parameters: Iterable[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clips gradients to a global L2 norm of ``max_norm``; correct for sharded (DTensor) and plain gradients.

    Returns:
        The total norm before clipping, a plain tensor.
    """
    parameters = [p for p in parameters if p.grad is not None]
    grads = [p.grad for p in parameters]
    total = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    if isinstance(total, DTensor):  # a pending reduction over the shards: complete it
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total)
    return total


class FSDP2Strategy(ModelParallelStrategy):
    """Lightning's ``ModelParallelStrategy`` as pure FSDP2: every process is a data-parallel rank.

    Lightning's ``FSDPStrategy`` (FSDP1) refuses CPUs; FSDP2 through this strategy runs unchanged on CPUs with
    gloo and on GPUs with NCCL, so the tested path is the production path. Checkpoints hold full (unsharded)
    state dicts by default, so ``albert_lightning.interop.export`` reads them directly.

    Args:
        save_distributed_checkpoint: write one file per rank instead of a full state dict on rank 0.
        timeout_s: seconds a collective waits for the other ranks before the run fails. A node that dies
            mid-step leaves the others blocked in a collective; this bounds the wait, after which the run ends
            with an error naming the timeout and can be resumed from its last checkpoint.
    """

    def __init__(
        self,
        save_distributed_checkpoint: bool = False,
        process_group_backend: str | None = None,
        timeout_s: float = 1800.0,
    ) -> None:
        super().__init__(
            data_parallel_size="auto",
            tensor_parallel_size=1,
            save_distributed_checkpoint=save_distributed_checkpoint,
            process_group_backend=process_group_backend,
            timeout=timedelta(seconds=timeout_s),
        )
        self.timeout_s = timeout_s

    def load_checkpoint(self, checkpoint_path: str | Path, weights_only: bool | None = None) -> dict[str, Any]:
        # Lightning 2.6 drops the ``weights_only`` given to ``Trainer.fit`` for strategies that restore after
        # setup, as this one does, and torch's default then follows TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: a resumed
        # checkpoint must never run code, whatever the environment says.
        return super().load_checkpoint(checkpoint_path, weights_only=True)

    def setup_environment(self) -> None:
        # ModelParallelStrategy resolves "auto" to the number of nodes; here every process is data parallel.
        self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()
