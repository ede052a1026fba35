"""Proves that a run resumed on another number of processes trains on the uninterrupted run's samples, in order.

Run: ``python bench/elastic_resume.py [--data_dir data/shards] [--rows 96] [--batch_size 2] [--ranks 8 4 2 1]
[--steps 2 5 8 8] [--save sharded sharded full full]`` from the repository (``--data_dir``: any instances-stage
output with ``--rows`` training rows or more; ``dvc repro`` writes ``data/shards``). It is a proof, not a timing:
what it prints is the evidence, and it exits 1 if any check fails.

A tiny-preset run over the first ``--rows`` training rows, ``--batch_size`` rows per rank, starts on the first of
``--ranks`` processes (CPU, gloo, FSDP2) and is stopped and resumed from its checkpoint on each next number of
processes in turn, for ``--steps`` steps each (8 → 4 → 2 → 1 by default, the 2-rank run crossing an epoch's end).
``--save`` says what each run saves: a ``full`` checkpoint (one file, the default) or a ``sharded`` one (a folder
of one file per rank, resharded by the next run's load). An uninterrupted run on one process over as many
samples is the reference. Each run logs each rank's sample ids, (shard file, row), step by step
(``tests/sample_log.py``). Checks:

- the chain's samples, global batch after global batch, are the reference's, in the same order: none skipped,
  none seen twice, each epoch every row once;
- Lightning's count of the epoch's batches is the resumed loader's (its epoch ends at the loader's last batch);
- each resumed run's first loss is the loss of the weights its checkpoint saved, on that step's samples: the loss
  curve goes on from where it stopped.

``tests/test_elastic_resume.py`` checks the same on 4 → 2 → 1 → 2 processes, and that the optimizer state resumes
too: 8 processes are too many for the tests. Here they take ~4 GB together (4.1 GB peak PSS measured) and the
whole proof ~100 s on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import DISTRIBUTED_ENV  # noqa: E402
from tests.sample_log import read_log  # noqa: E402
from tests.test_elastic_resume import global_loss  # noqa: E402
from tests.test_pretraining import fit_args, free_port, write_subset  # noqa: E402


def fit(root: Path, data: Path, ranks: int, batch_size: int, max_steps: int, *extra: str) -> float:
    """Runs ``python -m albert_lightning.fit`` on ``ranks`` CPU processes; returns its wall seconds."""
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    env["MASTER_PORT"], env["PYTHONPATH"] = str(free_port()), str(REPO)
    env.setdefault("OMP_NUM_THREADS", "1")  # up to 8 processes on a few cores: one thread each
    args = fit_args(root, data, batch_size, max_steps, "--trainer.callbacks+=tests.sample_log.SampleLog", *extra)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "albert_lightning.fit", *args, f"--trainer.devices={ranks}"],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        sys.exit(f"{root.name}: fit failed:\n{done.stderr[-4000:]}")
    return time.perf_counter() - started


def check(ok: bool, claim: str) -> bool:
    print(f"  {'PASS' if ok else 'FAIL'}  {claim}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", type=Path, default=REPO / "data" / "shards")
    parser.add_argument("--rows", type=int, default=96, help="training rows: every global batch must divide it")
    parser.add_argument("--batch_size", type=int, default=2, help="rows per rank per step")
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 4, 2, 1], help="processes of each run, in turn")
    parser.add_argument("--steps", type=int, nargs="+", default=[2, 5, 8, 8], help="steps of each run")
    parser.add_argument("--save", nargs="+", choices=["full", "sharded"], help="the checkpoint each run saves")
    args = parser.parse_args(argv)
    rows, batch = args.rows, args.batch_size
    saves = args.save or ["full"] * len(args.ranks)
    if len(args.steps) != len(args.ranks) or len(saves) != len(args.ranks):
        parser.error("--steps, --save: one per run in --ranks")
    if any(rows % (batch * n) for n in args.ranks):
        parser.error(f"--rows {rows} must be a multiple of every global batch (batch_size × ranks)")

    with tempfile.TemporaryDirectory(prefix="elastic-") as tmp:
        root = Path(tmp)
        data = write_subset(args.data_dir, root / "shards", rows, 8)
        # By default 32 samples at 8 ranks, 40 at 4 (to sample 72), 32 at 2 (through the epoch's end, to sample 8
        # of the next), 16 at 1.
        names = [f"{n}-rank" for n in args.ranks]
        stops = [sum(args.steps[: i + 1]) for i in range(len(args.steps))]
        samples = sum(steps * batch * ranks for steps, ranks in zip(args.steps, args.ranks, strict=True))
        print(f"{rows} training rows of {args.data_dir}, {batch} per rank per step; runs (ranks: steps):")
        walls = {}
        for i, (name, ranks, stop) in enumerate(zip(names, args.ranks, stops, strict=True)):
            resume = [f"--ckpt_path={root / names[i - 1] / 'checkpoints' / 'last.ckpt'}"] if i else []
            sharded = ["--trainer.strategy.init_args.save_distributed_checkpoint=true"] if saves[i] == "sharded" else []
            walls[name] = fit(root / name, data, ranks, batch, stop, *resume, *sharded)
            last = root / name / "checkpoints" / "last.ckpt"
            if last.is_dir() != (saves[i] == "sharded"):
                sys.exit(f"{name}: saved {last}, not the {saves[i]} checkpoint asked for")
            print(f"  {name}: steps {(stops[i - 1] if i else 0) + 1}-{stop}, saves {saves[i]}, {walls[name]:.0f} s")
        walls["reference"] = fit(root / "reference", data, 1, batch, samples // batch)
        print(f"  reference, 1 rank uninterrupted: steps 1-{samples // batch}, {walls['reference']:.0f} s")

        runs = {name: read_log(root / name) for name in names}
        chain = [step for name in names for step in runs[name]]
        resumed = [i for step in chain for i in step["ids"]]
        reference = [i for step in read_log(root / "reference") for i in step["ids"]]
        epochs = [resumed[e * rows : (e + 1) * rows] for e in range(-(-len(resumed) // rows))]
        print(f"{len(resumed)} samples over {len(epochs)} epochs; checks:")
        results = [
            check([s["step"] for s in chain] == list(range(1, stops[-1] + 1)), "every step once, in order"),
            check(resumed == reference, "the chain's sample ids, in order, are the uninterrupted run's"),
            check(Counter(resumed) == Counter(reference), "each sample as often as in the uninterrupted run"),
            check(all(len(set(e)) == len(e) for e in epochs), "no sample twice within an epoch"),
            check(len(set(epochs[0])) == rows, "the first epoch is every row once"),
        ]
        position, aligned = 0, True
        for name, ranks in zip(names, args.ranks, strict=True):
            for step in runs[name]:
                aligned &= step["batch_idx"] == position // (batch * ranks)
                position = (position + batch * ranks) % rows
                aligned &= step["is_last_batch"] == (position == 0)
        results.append(check(aligned, "Lightning counts each epoch's batches in the resumed run's global batches"))
        print("the loss at each resume (the saved weights' loss on the resumed step's samples = its logged loss):")
        for before, after in pairwise(names):
            first = runs[after][0]
            saved = global_loss(root / before / "checkpoints" / "last.ckpt", data, first["index"])
            same = abs(first["loss"] - saved) <= 1e-5 * abs(saved)
            print(f"  {before} → {after}: last {runs[before][-1]['loss']:.5f}, saved weights {saved:.5f}, "
                  f"resumed first {first['loss']:.5f}")  # fmt: skip
            results.append(check(same, f"{after} starts from {before}'s saved weights"))
        print(f"  (the first step's loss, from the initial weights: {chain[0]['loss']:.5f})")
    print("all checks pass" if all(results) else "SOME CHECKS FAILED")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
