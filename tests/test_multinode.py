"""Pretraining across nodes: two torchrun "nodes" on loopback train with FSDP2 exactly as one node with two
processes does, and resume from their last checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import DISTRIBUTED_ENV, PipelineRun
from tests.test_pretraining import REPO, fit_args, fit_subprocess, free_port, recorded

NODE_TIMEOUT = 240  # seconds a node may take; a hang fails the test instead of CI's job


def _start_node(rank: int, port: int, args: list[str], log: Path) -> subprocess.Popen:
    """One "node": torchrun with one process, rendezvous at 127.0.0.1:port, as a SLURM job step would start it."""
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), str(REPO), env.get("PYTHONPATH", "")])
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1", f"--node_rank={rank}",
        "--master_addr=127.0.0.1", f"--master_port={port}",
        "-m", "albert_lightning.fit", *args, "--trainer.num_nodes=2", "--trainer.devices=1",
    ]  # fmt: skip
    with log.open("w") as out:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def _two_nodes(args: list[str], root: Path) -> tuple[subprocess.Popen, subprocess.Popen]:
    port = free_port()
    return tuple(_start_node(rank, port, args, root / f"node{rank}.log") for rank in (0, 1))


def test_two_nodes_train_as_one_node_with_two_processes_and_resume(pipeline_run: PipelineRun, tmp_path: Path) -> None:
    nodes, local = tmp_path / "nodes", tmp_path / "local"
    nodes.mkdir()
    for node in _two_nodes(fit_args(nodes, pipeline_run.shards, 4, 3), nodes):
        assert node.wait(timeout=NODE_TIMEOUT) == 0, (nodes / "node0.log").read_text()[-3000:]
    last = str(nodes / "checkpoints" / "last.ckpt")
    for node in _two_nodes(fit_args(nodes, pipeline_run.shards, 4, 5, f"--ckpt_path={last}"), nodes):
        assert node.wait(timeout=NODE_TIMEOUT) == 0, (nodes / "node1.log").read_text()[-3000:]
    fit_subprocess(fit_args(local, pipeline_run.shards, 4, 3), devices=2)
    fit_subprocess(fit_args(local, pipeline_run.shards, 4, 5, f"--ckpt_path={local / 'checkpoints' / 'last.ckpt'}"), 2)
    for rank in (0, 1):
        across, within = recorded(nodes, rank), recorded(local, rank)
        assert [r["step"] for r in across] == [1, 2, 3, 4, 5]  # 3 steps, then 2 more after resuming
        assert all(r["world_size"] == 2 and r["fsdp"] for r in across)
        # The same global batches, the same sharding, the same reductions: the same losses, bit for bit.
        assert [(r["index"], r["loss"]) for r in across] == [(r["index"], r["loss"]) for r in within]
