"""One command per pretraining seed, side by side: ``python -m albert_lightning.ablations.replicates``.

Usage::

    python -m albert_lightning.ablations.replicates --seeds 3 --first_seed 12345 -- \\
        python -m albert_lightning.fit ... --seed_everything {seed} --data.seed {seed} \\
        --trainer.default_root_dir data/ablations/runs/baseline/pretrain/seed-{seed}

runs the command once per seed (12345, 12346, 12347), ``{seed}`` replaced in every argument. A pretraining
seed changes the initialisation and the data order; the shards stay the same bytes. The runs go side by side,
``--jobs`` at a time (default: all), each with ``cores // jobs`` threads (at least one): the tiny preset does not
fill two cores, so three one-thread runs on 2 cores take 2.1 times one two-thread run, not 3 (measured: 300 steps
of ``configs/ablation.yaml``, 29.6 s alone with 2 threads, 62 s for three at once with 1). The thread count is
part of a run's arithmetic (1 and 2 threads differ in the loss's last digits), so it depends on ``--jobs`` and
the machine's cores alone, and a rerun on one machine gives the same bytes.

Each run's output goes to a log in a private temporary folder; the console gets one line per run. If a run
fails, the others are stopped, the failed run's last lines are printed, and the command exits 1.
``--skip_first`` leaves out the first seed: the replicate a main pipeline has already run.
"""

from __future__ import annotations

import argparse
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Job",
    "jobs_for",
    "main",
    "seed_folders",
    "threads_per_job",
]

# Set by a distributed launch above us, they would make each child join that launch's process group.
_DISTRIBUTED = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK")
_THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class Job:
    seed: int
    argv: list[str]


def seed_folders(folder: Path, marker: str = "metrics.json") -> list[Path]:
    """The ``seed-<n>`` folders of ``folder`` that hold ``marker`` (a finished evaluation), in the order of n:
    how every report finds the runs this launcher's commands wrote."""
    found = [p for p in folder.glob("seed-*") if p.name.removeprefix("seed-").isdigit() and (p / marker).exists()]
    return sorted(found, key=lambda p: int(p.name.removeprefix("seed-")))


def jobs_for(template: list[str], seeds: list[int]) -> list[Job]:
    """One job per seed: the template with ``{seed}`` replaced in every argument (nothing else is formatted).

    Raises:
        ValueError: The template is empty or never mentions ``{seed}`` (every run would be the same).
    """
    if not template:
        raise ValueError("no command after --")
    if not any("{seed}" in arg for arg in template):
        raise ValueError("the command never mentions {seed}: every replicate would be the same run")
    return [Job(seed, [arg.replace("{seed}", str(seed)) for arg in template]) for seed in seeds]


def threads_per_job(cores: int, jobs: int) -> int:
    """The threads each of ``jobs`` simultaneous runs gets on ``cores``: an equal share, at least one."""
    return max(1, cores // max(1, jobs))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environment(threads: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DISTRIBUTED}
    env.update({name: str(threads) for name in _THREADS})
    env["MASTER_PORT"] = str(_free_port())  # side-by-side runs must not pick the same rendezvous port
    return env


def _stop(running: Iterable[tuple]) -> None:
    """Stops the runs still going (after another failed) and closes their logs."""
    running = list(running)
    for process, *_ in running:
        process.terminate()
    for process, log, *_ in running:
        process.wait()
        log.close()


def _last_lines(path: str, count: int = 20) -> str:
    """The log's last non-empty lines, progress-bar redraws (carriage returns) split into lines."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line for line in f.read().replace("\r", "\n").splitlines() if line.strip()]
    return "\n".join(lines[-count:])


def run(jobs: list[Job], parallel: int, cores: int) -> int:
    """Runs ``jobs``, ``parallel`` at a time; returns 0, or 1 after the first failure (the others stopped)."""
    threads = threads_per_job(cores, min(parallel, len(jobs)))
    logs = tempfile.mkdtemp(prefix="albert-replicates-")  # mkdtemp: readable by this user alone
    queue, running = list(jobs), {}
    at_once = min(parallel, len(jobs))
    print(f"replicates: {len(jobs)} runs, {at_once} at a time, {threads} thread(s) each; logs in {logs}")
    while queue or running:
        while queue and len(running) < parallel:
            job = queue.pop(0)
            log_path = os.path.join(logs, f"seed-{job.seed}.log")
            log = open(log_path, "w", encoding="utf-8")  # closed when its run ends
            process = subprocess.Popen(job.argv, stdout=log, stderr=subprocess.STDOUT, env=_environment(threads))
            running[job.seed] = (process, log, log_path, time.monotonic())
            print(f"seed {job.seed}: started: {shlex.join(job.argv)}", flush=True)
        time.sleep(0.5)
        for seed, (process, log, log_path, started) in list(running.items()):
            if process.poll() is None:
                continue
            log.close()
            del running[seed]
            if process.returncode != 0:
                _stop(running.values())
                print(_last_lines(log_path), file=sys.stderr)
                print(f"replicates: seed {seed} failed (exit {process.returncode}); log: {log_path}", file=sys.stderr)
                return 1
            print(f"seed {seed}: done in {time.monotonic() - started:.0f} s", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses ``--seeds N --first_seed S [--skip_first] [--jobs J] -- command ...`` and runs the replicates."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--" not in argv:
        print("replicates: give the command after --", file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="python -m albert_lightning.ablations.replicates", description=__doc__)
    parser.add_argument("--seeds", type=int, required=True, help="pretraining runs, one per seed")
    parser.add_argument("--first_seed", type=int, required=True, help="the first seed; the others follow it")
    parser.add_argument("--skip_first", action="store_true", help="leave out the first seed (already run)")
    parser.add_argument("--jobs", type=int, default=0, help="runs at a time (0: all of them)")
    args = parser.parse_args(argv[:split])
    if args.seeds < 1 or args.jobs < 0:
        parser.error("--seeds must be at least 1 and --jobs at least 0")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))[1 if args.skip_first else 0 :]
    try:
        jobs = jobs_for(argv[split + 1 :], seeds)
    except ValueError as e:
        print(f"replicates: {e}", file=sys.stderr)
        return 2
    if not jobs:
        print("replicates: no seed left to run")
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return run(jobs, args.jobs or len(jobs), cores)


if __name__ == "__main__":
    sys.exit(main())
