"""Pretraining across nodes: two torchrun "nodes" on loopback train with FSDP2 exactly as one node with two
processes does, and resume from their last checkpoint; a node that hangs makes the other fail within the
strategy's timeout, naming the checkpoint to resume from."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import torch

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


def _signal_node(node: subprocess.Popen, sig: int) -> None:
    # torchrun starts its workers in sessions of their own: signal the agent and each of its descendants.
    with contextlib.suppress(psutil.NoSuchProcess):
        agent = psutil.Process(node.pid)
        for process in [*agent.children(recursive=True), agent]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(sig)


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


HANG_TIMEOUT_S = 10  # the strategy's timeout in the hung-node test


def test_a_hung_node_fails_the_other_within_the_timeout_and_the_run_resumes(
    pipeline_run: PipelineRun, tmp_path: Path
) -> None:
    # Checkpoints every 2 steps, so one exists before the hang; steps enough that the run is mid-way when it comes.
    config = tmp_path / "checkpoint_often.yaml"
    config.write_text(
        "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        "      init_args: {every_n_train_steps: 2, save_last: true, save_top_k: -1, monitor: null}\n"
    )
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    args = ["--config", str(config), *fit_args(nodes, pipeline_run.shards, 4, 100_000)]
    node0, node1 = _two_nodes([*args, f"--trainer.strategy.init_args.timeout_s={HANG_TIMEOUT_S}"], nodes)
    last = nodes / "checkpoints" / "last.ckpt"
    try:
        deadline = time.monotonic() + NODE_TIMEOUT
        while not last.exists() and node0.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert last.exists(), (nodes / "node0.log").read_text()[-3000:]
        # SIGSTOP, not SIGKILL: a killed process closes its sockets and its peers fail at once; a node that hangs
        # or drops off the network keeps them open, and only the timeout ends the wait.
        _signal_node(node1, signal.SIGSTOP)
        stopped = time.monotonic()
        assert node0.wait(timeout=HANG_TIMEOUT_S + 90) != 0
        waited = time.monotonic() - stopped
    finally:
        for node in (node0, node1):
            _signal_node(node, signal.SIGKILL)
            node.wait()
    assert HANG_TIMEOUT_S <= waited < HANG_TIMEOUT_S + 90
    log = (nodes / "node0.log").read_text()
    assert f"did not answer within --trainer.strategy.init_args.timeout_s ({HANG_TIMEOUT_S} s)" in log, log[-3000:]
    assert f"--ckpt_path {last}" in log, log[-3000:]

    resumed_from = torch.load(last, map_location="cpu", weights_only=False)["global_step"]
    resume = [*fit_args(nodes, pipeline_run.shards, 4, resumed_from + 2), f"--ckpt_path={last}"]
    for rank, node in enumerate(_two_nodes(resume, nodes)):
        assert node.wait(timeout=NODE_TIMEOUT) == 0, (nodes / f"node{rank}.log").read_text()[-3000:]
    assert [r["step"] for r in recorded(nodes, 0)][-2:] == [resumed_from + 1, resumed_from + 2]
