"""How ALBERT is sharded: FSDP2 units, mixed precision, activation checkpointing, and the Lightning strategy.

The model file knows nothing of this (torchtitan's split of model and parallelize). Units, bottom-up:

- each *unique* transformer layer is one unit, wrapped once however many times sharing reuses it. It keeps
  its gathered parameters between the L uses in a forward (``reshard_after_forward=False``, i.e. SHARD_GRAD_OP):
  re-gathering it for every use costs L all-gathers for 7 M parameters (ALBERT-base) and saves nothing worth it;
- with ``attention``/``ffn`` sharing, parts of a layer are shared across layers, and FSDP2 refuses a parameter
  in two units, so the whole encoder is one unit;
- the root unit holds the rest: the word embedding and the MLM decoder are one tied tensor and must stay in
  one unit (FSDP2 raises "shared with a parameter already managed by another FSDP group" otherwise).

Gathered once per step, a layer costs every rank its whole weights and their whole gradient (plus the reduce-scatter
buffer) at once, whatever the number of ranks: 2.4 GB of xxlarge's fixed 4 GB a rank. ``gather_per_use`` makes
each unique attention block, FFN input and FFN output projection a unit of its own, gathered for each of its L uses
and freed after it, and turns off FSDP2's backward prefetch of the next unit: a rank then holds one sublayer's weights
(H×I, a third of xxlarge's layer) at a time, for L times the all-gathers and reduce-scatters of a step. Its gradient
is reduce-scattered after each use too, which FSDP2 alone does not do: autograd sums a parameter's gradient over all
its uses before it hands it to anyone, so every shared sublayer's whole gradient would stay on every rank until the
end of backward (``HandGradientToFSDP``).

On CPUs (gloo) the units' collectives are ``InPlaceAllGather`` and ``InPlaceReduceScatter``: gloo's own all-gather
and reduce-scatter each stage a whole gathered unit in a temporary, and FSDP2 keeps the last reduce-scatter's input
alive to order CUDA streams that a CPU does not have. Between them that is two to three units' bytes more a rank,
for the same sums.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn
from torch.distributed._composable import checkpoint
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter
from torch.distributed.tensor import DTensor

from albert_lightning.checkpoints import LIGHTNING_META, METADATA, load_checkpoint, read_sharded
from albert_lightning.model import AlbertLayer, AlbertModel, AlbertTransformer

__all__ = [
    "FSDP2Strategy",
    "HandGradientToFSDP",
    "InPlaceAllGather",
    "InPlaceReduceScatter",
    "clip_grad_norm",
    "shard_albert",
]

PARAM_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
VIEW_OUTPUT = r"FSDP2-wrapped module \(FSDPLinear\) returned a view tensor"


def shard_albert(
    model: nn.Module,
    mesh: DeviceMesh,
    activation_checkpointing: bool = False,
    param_dtype: str = "float32",
    gather_per_use: bool = False,
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
        gather_per_use: make each sublayer a unit gathered for each use and freed after it (module docstring):
            for a layer whose weights and gradient do not fit a rank together, at L times the collectives.

    Raises:
        ValueError: an unknown ``param_dtype`` or sharing mode.
    """
    if param_dtype not in PARAM_DTYPES:
        raise ValueError(f"param_dtype={param_dtype!r}: choose one of {sorted(PARAM_DTYPES)}")
    policy = MixedPrecisionPolicy(param_dtype=PARAM_DTYPES[param_dtype], reduce_dtype=torch.float32)
    layers = list(dict.fromkeys(m for m in model.modules() if isinstance(m, AlbertLayer)))  # unique, in order
    sublayers = list(dict.fromkeys(m for layer in layers for m in (layer.attention, layer.ffn, layer.ffn_output)))
    if activation_checkpointing:
        # A recomputed layer gathers all its sublayers at once in backward (FSDP2 does not reshard inside a
        # recomputation), undoing gather_per_use; recomputing each sublayer keeps one gathered at a time.
        for module in sublayers if gather_per_use else layers:
            checkpoint(module)
    encoder = next(m for m in model.modules() if isinstance(m, AlbertTransformer))
    sharing = next(m for m in model.modules() if isinstance(m, AlbertModel)).config.sharing
    if sharing in ("all", "none"):
        units = layers
    elif sharing in ("attention", "ffn"):
        units = [encoder]
    else:
        raise ValueError(f"sharing={sharing!r}: choose one of all, attention, ffn, none")
    if gather_per_use:
        # The FFN projections return views (a 3-D linear is a reshaped matmul); FSDP2 warns that an in-place op
        # on such an output would skip its pre-backward all-gather. The model applies none (activation, residual
        # and dropout are out of place), and the gradients are tested equal to gathering once per step.
        warnings.filterwarnings("ignore", VIEW_OUTPUT, UserWarning)
        for sublayer in sublayers:  # unique: a sublayer shared by layers ("attention"/"ffn") is one unit
            fully_shard(sublayer, mesh=mesh, mp_policy=policy, reshard_after_forward=True)
    for unit in units:
        fully_shard(unit, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    fsdp_units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if gather_per_use:
        # By default FSDP2 gathers the unit that runs next in backward while this one runs: two sublayers at once.
        # A unit told to prefetch only itself prefetches nothing (it is gathered already when its backward begins).
        for unit in fsdp_units:
            unit.set_modules_to_backward_prefetch([unit])
        for sublayer in sublayers:
            sublayer.register_forward_pre_hook(hand_gradients_to_fsdp_per_use)  # after FSDP2's own, which gathers
    if mesh.device_type == "cpu":
        for unit in fsdp_units:
            unit.set_custom_all_gather(InPlaceAllGather())
            unit.set_custom_reduce_scatter(InPlaceReduceScatter())
    return model


class HandGradientToFSDP(torch.autograd.Function):
    """Identity on a gathered parameter, for one use; its backward makes that use's gradient the parameter's ``.grad``.

    FSDP2 reduce-scatters a unit's ``.grad`` after each use's backward, but autograd accumulates a parameter's
    gradient over all its uses before setting ``.grad``: for a unit used L times, the first L-1 reductions find
    nothing and the whole gradient waits until the end. Through this function each use's gradient is ``.grad`` at
    once. Autograd runs the function's backward before FSDP2's post-backward of the same use (it was created
    after it, and autograd runs the later-created of two ready nodes first); were it ever later, FSDP2's next
    post-backward or its final callback would reduce the gradient instead: the sum is the same, the memory not.
    """

    @staticmethod
    def forward(param: torch.Tensor) -> torch.Tensor:
        return param.view_as(param)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
        (ctx.param,) = inputs

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> None:
        param = ctx.param
        param.grad = grad if param.grad is None else param.grad + grad
        return None


def hand_gradients_to_fsdp_per_use(module: nn.Module, args: Any) -> None:
    """Forward pre-hook of a ``gather_per_use`` unit: routes each gathered parameter through ``HandGradientToFSDP``.

    The parameter goes back into the module as it was when FSDP2 reshards the unit (after forward; after backward
    for a recomputed use), since FSDP2 then sets its own tensors in place of whatever the module holds.
    """
    if not torch.is_grad_enabled():
        return
    for owner in module.modules():
        for name, param in owner._parameters.items():
            if isinstance(param, nn.Parameter) and not isinstance(param, DTensor) and param.requires_grad:
                owner._parameters[name] = HandGradientToFSDP.apply(param)


class InPlaceAllGather(DefaultAllGather):
    """FSDP2's all-gather on CPU ranks, written straight into FSDP2's output: each rank broadcasts its slot.

    Gloo's ``all_gather_into_tensor`` gathers into a temporary of the whole output and copies it over, so a rank
    gathering a 268 MB unit (xxlarge's FFN) held 536 MB for it. Returns no work: the broadcasts have finished.
    """

    def __call__(
        self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup, async_op: bool = False
    ) -> None:
        slots = output_tensor.view(group.size(), -1)
        mine = slots[group.rank()]
        if mine.data_ptr() != input_tensor.data_ptr():  # FSDP2 copies its input into the rank's slot already
            mine.copy_(input_tensor.view(-1))
        for rank in range(group.size()):
            dist.broadcast(slots[rank], group=group, group_src=rank)


class InPlaceReduceScatter(DefaultReduceScatter):
    """FSDP2's reduce-scatter on CPU ranks: an in-place all-reduce of FSDP2's input, whose storage is then freed.

    The input is FSDP2's own copy of the unsharded gradients, read by nothing after this call; gloo's
    ``reduce_scatter_tensor`` would reduce a temporary copy of it, and FSDP2 keeps the input alive until the next
    reduce-scatter (for CUDA streams). Freed here, a rank holds no gradient bytes beyond its shard once the call
    returns. Operations other than SUM and AVG (PREMUL_SUM, chosen only for a custom gradient divisor) go to gloo.
    """

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        op: Any,
        async_op: bool = False,
    ) -> None:
        if op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            super().__call__(output_tensor, input_tensor, group, op)
            return
        dist.all_reduce(input_tensor, op=dist.ReduceOp.SUM, group=group)
        mine = input_tensor.view(group.size(), -1)[group.rank()]
        if op == dist.ReduceOp.AVG:
            torch.div(mine, group.size(), out=output_tensor.view(-1))
        else:
            output_tensor.view(-1).copy_(mine)
        input_tensor.untyped_storage().resize_(0)


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
    state dicts by default, one file written by rank 0. Either kind resumes on any number of ranks, and
    ``albert_lightning.interop.export`` and ``evaluate`` read either.

    Args:
        save_distributed_checkpoint: write a folder of one file per rank instead (``torch.distributed.checkpoint``):
            no rank gathers the whole state, the way to checkpoint a model whose state does not fit one host.
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

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str | Path, storage_options: Any = None) -> None:
        if not self._save_distributed_checkpoint:
            return super().save_checkpoint(checkpoint, filepath, storage_options)
        # Lightning writes a sharded checkpoint into its folder in place: a save cut off part-way (a pre-empted
        # node) would leave last.ckpt's new shards beside its old index, a folder that reads as a whole one.
        # Written beside it and swapped in once every rank has finished, the folder is always one save's.
        path = Path(self.broadcast(str(filepath)))
        partial = path.with_name(f".{path.name}.partial")
        if self.global_rank == 0 and partial.exists():
            shutil.rmtree(partial)  # an earlier save's, cut off: this name is this method's alone
        self.barrier()
        super().save_checkpoint(checkpoint, partial, storage_options)
        self.barrier()
        if self.global_rank == 0:
            replace_folder(partial, path)
        self.barrier()

    def load_checkpoint(self, checkpoint_path: str | Path, weights_only: bool | None = None) -> dict[str, Any]:
        path = Path(self.broadcast(checkpoint_path))  # every rank reads the folder rank 0 resolved
        if path.is_dir():
            return self._load_sharded(path)
        # Lightning 2.6 drops the ``weights_only`` given to ``Trainer.fit`` for strategies that restore after
        # setup, as this one does, and torch's default then follows TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: a resumed
        # checkpoint must never run code, whatever the environment says.
        return super().load_checkpoint(path, weights_only=True)

    def _load_sharded(self, folder: Path) -> dict[str, Any]:
        # Lightning's own load of a folder (fabric's _load_checkpoint) unpickles DCP's index and values in full;
        # this is that load, resharded to this world size, through the weights-only reader and planner.
        module = self.lightning_module
        state = {"state_dict": get_model_state_dict(module)}
        for index, optimizer in enumerate(self.optimizers):  # "optimizer_<i>": the names Lightning's save gives
            state[f"optimizer_{index}"] = get_optimizer_state_dict(module, optimizer)
        read_sharded(state, folder)  # one pass over the shards for the weights and every optimizer
        module.load_state_dict(state["state_dict"], strict=module.strict_loading)
        options = StateDictOptions(cpu_offload=True)
        for index, optimizer in enumerate(self.optimizers):
            set_optimizer_state_dict(module, optimizer, optim_state_dict=state[f"optimizer_{index}"], options=options)
        return load_checkpoint(folder / LIGHTNING_META)  # the loops', callbacks' and data module's state

    def setup_environment(self) -> None:
        # ModelParallelStrategy resolves "auto" to the number of nodes; here every process is data parallel.
        self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()


def replace_folder(new: Path, path: Path) -> None:
    """Puts the finished sharded checkpoint ``new`` at ``path``, removing the checkpoint that was there.

    A directory cannot be renamed over a full one, so the old one moves aside first: a crash between the two
    renames leaves it whole, as ``.<name>.old`` beside the folder, and never a mix of two saves.

    Raises:
        IsADirectoryError: when ``path`` is a folder that is not a checkpoint, which is not removed.
    """
    if path.is_file():
        path.unlink()  # a full checkpoint of the same name, as Lightning's own sharded save replaces it
    elif path.is_dir():
        if not (path / METADATA).is_file() and not (path / LIGHTNING_META).is_file():
            raise IsADirectoryError(f"{path}: a folder that is not a sharded checkpoint; not replaced")
        old = path.with_name(f".{path.name}.old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(path, old)
        os.replace(new, path)
        shutil.rmtree(old)
        return
    os.replace(new, path)
