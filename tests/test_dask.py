"""Every Beam stage on Beam's Dask runner, against a real ``distributed`` cluster, writes the local runner's bytes.

A scheduler and two single-threaded worker processes start on a free 127.0.0.1 port, as docs/cluster.md's "Dask"
section starts them. The six stages run on a slice of the embedded default (two files from the corpus stage on)
on the local runner, each from the one before; then each runs on the cluster from the same inputs, and every file
it writes must equal the local run's, byte for byte. Beam 2.77's Dask runner has no metrics, drops what
``finish_bundle`` emits (``Top``) and gets side inputs wrong, so these fail for a stage that counts through runner
metrics or uses either (``pipelines.runtime.stage``).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import INSTANCE_FLAGS, LOCAL, NO_PARAMS

distributed = pytest.importorskip("distributed", reason="the Dask runner needs the [dask] extra (dask, distributed)")

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
# ~450 documents, ~300 KB of text: two corpus files, so two sentence files and four shards.
PACKAGES = "email asyncio xml logging http unittest json concurrent importlib urllib tkinter multiprocessing".split()
STAGES = ("corpus", "segment", "dedup", "vocab", "instances", "tasks")
OUTPUT = {"corpus": "corpus", "segment": "sentences", "dedup": "deduped", "vocab": "vocab", "instances": "shards",
          "tasks": "tasks"}  # fmt: skip


def _stage_args(stage: str, inputs: Path, outputs: Path) -> list[str]:
    """The stage's flags on the slice: it reads its upstream's folder under ``inputs``, writes under ``outputs``."""
    sentences, out = str(inputs / "sentences"), ["--output", str(outputs / OUTPUT[stage])]
    undeduped = ["--input", sentences, "--allow_undeduped"]  # runner equality, not held-out text, is tested here
    return [*NO_PARAMS, *out] + {
        "corpus": ["--embedded_max_documents=450", "--embedded_packages", *PACKAGES],
        "segment": ["--input", str(inputs / "corpus")],
        "dedup": ["--input", sentences],  # its output is compared here; the later stages still read the sentences
        "vocab": [*undeduped, "--vocab_size=800"],
        "instances": [*undeduped, "--spiece", str(inputs / "vocab/spiece.model"), *INSTANCE_FLAGS],
        "tasks": [*undeduped, "--num_classes=4", "--min_class_documents=12", "--seed=7"],
    }[stage]


def _run(stage: str, inputs: Path, outputs: Path, beam: list[str]) -> None:
    importlib.import_module(f"pipelines.{stage}").run([*_stage_args(stage, inputs, outputs), *beam])


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip


def _free_port() -> int:
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    except OSError as err:
        pytest.skip(f"cannot open a port on 127.0.0.1 for the Dask scheduler: {err}")


def _stop(process: subprocess.Popen) -> None:
    # Each command leads its own process group: the worker command's nannies and workers go with it.
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=30)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _start(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        argv = [sys.executable, "-m", *command, "--no-dashboard"]
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A scheduler and two worker processes of one thread each, started as docs/cluster.md says; yields its address."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = tmp_path_factory.mktemp("dask")
    # The workers unpickle the stages' DoFns, so they import `pipelines` from this checkout.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    scheduler_command = ["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port)]
    workers_command = ["distributed.cli.dask_worker", address, "--nworkers", "2", "--nthreads", "1"]
    processes = [_start(scheduler_command, logs / "scheduler.log", env)]
    try:
        # --local-directory: the workers' scratch folder, not the working directory.
        processes.append(_start([*workers_command, "--local-directory", str(logs)], logs / "workers.log", env))
        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        assert _open_clients() == 0, "a stage left its Dask client open"
        for process in reversed(processes):
            _stop(process)


def _open_clients() -> int:
    """Clients of this process still open: each would try to reconnect to the stopped scheduler at exit."""
    count = 0
    while True:
        try:
            distributed.default_client().close()  # closed, so the next one shows, and none outlives the test
        except ValueError:  # no client left
            return count
        count += 1


def _tasks_done(address: str) -> dict[str, int]:
    """Tasks each worker has run so far, by worker address."""
    with distributed.Client(address, timeout=30) as client:
        return client.run(lambda dask_worker: dask_worker.state.executed_count)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every stage on the local runner, each from the one before."""
    root = tmp_path_factory.mktemp("local")
    for stage in STAGES:
        _run(stage, root, root, LOCAL)
    return root


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_on_a_dask_cluster_writes_the_local_runners_bytes(
    stage: str, local: Path, scheduler: str, tmp_path: Path
) -> None:
    before = _tasks_done(scheduler)
    # Four partitions per Beam Create: Dask's default (128 elements each) would put a few files on one worker.
    _run(stage, local, tmp_path, ["--runner", RUNNER, "--dask_client_address", scheduler, "--dask_npartitions=4"])
    after = _tasks_done(scheduler)
    written, expected = _digests(tmp_path / OUTPUT[stage]), _digests(local / OUTPUT[stage])
    assert written == expected  # every file, counters (stats.json, manifest.json) included, and no other file
    assert all(after[worker] > before.get(worker, 0) for worker in after), (before, after)  # both workers ran it
