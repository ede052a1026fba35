"""Tests for albert_lightning.sharding's FSDP2 units: what a rank holds gathered when, and that it changes no
gradient. One rank, in this process, over a file store (no port), except the CPU collectives and per-use reductions
on two ranks (``sharding_two_ranks.py``, a subprocess); the multi-rank training runs are in test_pretraining."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor

from albert_lightning.model import AlbertConfig, AlbertForPreTraining, AlbertLayer
from albert_lightning.sharding import shard_albert
from tests.conftest import DISTRIBUTED_ENV


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[DeviceMesh]:
    if dist.is_initialized():
        pytest.skip("needs no live process group")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def sharded_model(config: AlbertConfig, mesh: DeviceMesh, gather_per_use: bool, ac: bool) -> AlbertForPreTraining:
    torch.manual_seed(0)
    model = AlbertForPreTraining(config)
    model.init_weights()
    return shard_albert(model, mesh, activation_checkpointing=ac, gather_per_use=gather_per_use)


def gathered_after_each_use(model: AlbertForPreTraining, batch: tuple[torch.Tensor, ...]) -> list[list[bool]]:
    """Runs forward and backward; for each layer call, whether its attention, FFN and FFN output weights were
    still gathered (plain tensors, not the rank's DTensor shard) when the layer returned; and the number of
    attention calls (a recomputed sublayer runs again in backward)."""
    seen: list[list[bool]] = []
    attention_calls = []

    def record(layer: AlbertLayer, args, output) -> None:
        weights = (layer.attention.query.weight, layer.ffn.weight, layer.ffn_output.weight)
        seen.append([not isinstance(w, DTensor) for w in weights])

    layers = [m for m in model.modules() if isinstance(m, AlbertLayer)]
    hooks = [m.register_forward_hook(record) for m in layers]
    attentions = dict.fromkeys(m.attention for m in layers)  # one module under "attention" sharing
    hooks += [a.register_forward_pre_hook(lambda *_: attention_calls.append(1)) for a in attentions]
    out = model(*batch)
    (out.prediction_logits.logsumexp(-1).mean() + out.sop_logits.mean()).backward()
    for hook in hooks:
        hook.remove()
    return seen, len(attention_calls)


@pytest.mark.parametrize(("sharing", "ac"), [("all", False), ("ffn", False), ("all", True)])
def test_gathering_per_use_frees_each_sublayer_after_each_use_and_gives_the_same_gradients(mesh, sharing, ac):
    config = AlbertConfig.preset("tiny", vocab_size=120, num_hidden_layers=3, sharing=sharing)
    torch.manual_seed(1)
    ids = torch.randint(5, 120, (4, 16))
    batch = (ids, torch.zeros_like(ids), torch.ones_like(ids), torch.arange(3).repeat(4, 1))
    once, per_use = sharded_model(config, mesh, False, ac), sharded_model(config, mesh, True, ac)

    # Gathered once per step, a layer's weights stay gathered across its uses; per use, each use frees them.
    # With recomputation the whole layer runs again in backward, or, per use, each sublayer on its own (one
    # gathered at a time); either way the attention runs twice per use.
    calls = 3 * (2 if ac else 1)
    assert gathered_after_each_use(once, batch) == ([[True, True, True]] * 3, calls)
    assert gathered_after_each_use(per_use, batch) == ([[False, False, False]] * 3, calls)
    # The gradient reduce-scattered after each use sums to the one reduced at the end.
    for (name, a), (_, b) in zip(once.named_parameters(), per_use.named_parameters(), strict=True):
        torch.testing.assert_close(b.grad.full_tensor(), a.grad.full_tensor(), rtol=1e-5, atol=1e-7, msg=name)


def test_two_cpu_ranks_collect_in_place_reduce_each_use_at_once_and_gather_one_sublayer_at_a_time(tmp_path):
    report_path = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    script = Path(__file__).with_name("sharding_two_ranks.py")
    subprocess.run([sys.executable, str(script), str(report_path)], env=env, check=True, timeout=600)
    report = json.loads(report_path.read_text())
    # The same sums as gloo's collectives, and FSDP2's reduce-scatter input is freed when the call returns.
    assert report["collectives"] == dict.fromkeys(
        ["all_gather", *(f"reduce_scatter_{op}{freed}" for op in ("RedOpType.SUM", "RedOpType.AVG")
                         for freed in ("", "_freed_input"))], True)  # fmt: skip
    # Each shared sublayer's gradient is reduce-scattered after each of its L uses (FSDP2 alone: once, at the
    # end), and no sublayer is still or already gathered when another is gathered in backward (no prefetch).
    layers = report["per_use"]["layers"]
    assert report["per_use"]["reductions"] == {"attention": layers, "ffn": layers, "ffn_output": layers}
    assert report["per_use"]["most_gathered_in_backward"] == 0
