"""Two gloo ranks over a file store, run by test_sharding as a subprocess: what the CPU collectives return and
free, and how often a ``gather_per_use`` step reduces each sublayer and how many it holds gathered at once.

Usage: python tests/sharding_two_ranks.py REPORT.json (rank 0 writes the report).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

from albert_lightning import sharding
from albert_lightning.model import AlbertConfig, AlbertForPreTraining, AlbertLayer

WORLD = 2
LAYERS = 3


def collectives(rank: int) -> dict[str, bool]:
    """The in-place collectives against gloo's own, on the same inputs."""
    group = dist.group.WORLD
    torch.manual_seed(rank)
    shard = torch.randn(6)
    gathered, expected = torch.empty(6 * WORLD), torch.empty(6 * WORLD)
    sharding.InPlaceAllGather()(output_tensor=gathered, input_tensor=shard, group=group)
    dist.all_gather_into_tensor(expected, shard, group=group)
    report = {"all_gather": torch.equal(gathered, expected)}
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
        grads = torch.randn(6 * WORLD)
        expected = torch.empty(6)
        dist.reduce_scatter_tensor(expected, grads.clone(), op=dist.ReduceOp.SUM, group=group)
        if op == dist.ReduceOp.AVG:
            expected /= WORLD
        comm = sharding.InPlaceReduceScatter()
        buffer = comm.allocate((6 * WORLD,), dtype=torch.float32, device=torch.device("cpu"))
        buffer.copy_(grads)
        out = torch.empty(6)
        comm(output_tensor=out, input_tensor=buffer, group=group, op=op)
        report[f"reduce_scatter_{op}"] = torch.allclose(out, expected, rtol=1e-6, atol=0)
        report[f"reduce_scatter_{op}_freed_input"] = buffer.untyped_storage().nbytes() == 0
    return report


def per_use_step() -> dict[str, object]:
    """One forward and backward of gather_per_use with recomputation: reductions per sublayer unit, and the most
    other sublayer units already gathered whenever one is gathered in backward."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.preset("tiny", vocab_size=120, num_hidden_layers=LAYERS))
    model.init_weights()
    sharding.shard_albert(model, init_device_mesh("cpu", (WORLD,)), activation_checkpointing=True, gather_per_use=True)
    layer = next(m for m in model.modules() if isinstance(m, AlbertLayer))
    sublayers = {"attention": layer.attention, "ffn": layer.ffn, "ffn_output": layer.ffn_output}
    sizes = {name: sum(p.numel() for p in m.parameters()) for name, m in sublayers.items()}  # a unit's gathered size
    reductions: Counter[str] = Counter()
    in_backward = [False]
    most_gathered = [0]

    def gathered(module: torch.nn.Module) -> bool:
        return any(not isinstance(p, DTensor) for p in module._parameters.values() if p is not None) or any(
            gathered(child) for child in module.children()
        )

    all_gather, reduce_scatter = sharding.InPlaceAllGather.__call__, sharding.InPlaceReduceScatter.__call__

    def counting_all_gather(self, output_tensor, input_tensor, group, async_op=False):
        if in_backward[0]:
            most_gathered[0] = max(most_gathered[0], sum(gathered(m) for m in sublayers.values()))
        return all_gather(self, output_tensor=output_tensor, input_tensor=input_tensor, group=group)

    def counting_reduce_scatter(self, output_tensor, input_tensor, group, op, async_op=False):
        reductions.update(name for name, size in sizes.items() if input_tensor.numel() == size)
        return reduce_scatter(self, output_tensor=output_tensor, input_tensor=input_tensor, group=group, op=op)

    sharding.InPlaceAllGather.__call__ = counting_all_gather
    sharding.InPlaceReduceScatter.__call__ = counting_reduce_scatter
    ids = torch.randint(5, 120, (2, 16))
    out = model(ids, torch.zeros_like(ids), torch.ones_like(ids))
    in_backward[0] = True
    (out.prediction_logits.logsumexp(-1).mean() + out.sop_logits.mean()).backward()
    return {"layers": LAYERS, "reductions": dict(reductions), "most_gathered_in_backward": most_gathered[0]}


def main(rank: int, store: str, report_path: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        report = {"collectives": collectives(rank), "per_use": per_use_step()}
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(report_path).write_text(json.dumps(report))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        torch.multiprocessing.spawn(main, (f"{scratch}/store", sys.argv[1]), nprocs=WORLD)
