"""Which pretraining shape learns most per minute on this machine: the sweep behind configs/pretrain.yaml.

Run: ``python bench/sweep.py [--minutes 5] [--only mini-128 small-128] [--workdir DIR]``
after ``dvc repro`` has made ``data/deduped`` and ``data/vocab`` (or name them with ``--sentences`` and
``--spiece``). For each candidate (a model shape, sequence length, batch size, optimizer and learning rate):

1. shards of its sequence length come from the real instances stage (built once per length in the workdir,
   ``--dupe_factor`` passes, the project's other instance params);
2. a probe: ``python -m albert_lightning.fit`` for ``--probe_steps`` steps measures the CPU seconds of one
   optimizer step (the loader, forward, backward and update; validation excluded);
3. the run: the real ``fit`` CLI for as many steps as ``--minutes`` of this machine buy, with the learning rate
   decaying to zero at the last one, validated on held-out documents at ``--points`` evenly spaced steps.

"Minutes" are CPU seconds of the training process divided by ``--cores`` (torch keeps every core busy in a
step), so a loaded machine slows the sweep down without changing its figures. Each curve point is the held-out
MLM and SOP accuracy after that many minutes. ``most frequent`` is the MLM accuracy of always predicting the
training shards' most frequent masked token: a model that learnt only word frequencies scores about that.

Writes ``{results}/sweep.csv`` (every curve point), ``sweep.md`` (the table) and ``sweep.png`` (held-out
accuracy against minutes, one line per candidate).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import lightning as L

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Candidate:
    preset: str  # AlbertConfig preset the shape starts from
    seq_len: int  # max_seq_length of its shards
    batch_size: int  # sequences per optimizer step
    lr: float  # peak learning rate (10 % warm-up, linear decay to 0 at the budget's last step)
    optimizer: str = "adamw"
    overrides: dict = field(default_factory=dict)  # AlbertConfig fields changed from the preset


CANDIDATES = {
    "small-128": Candidate("small", 128, 32, 1e-3),  # the default before this sweep
    "mini-128": Candidate("mini", 128, 32, 2e-3),
    "mini-64": Candidate("mini", 64, 64, 2e-3),
    "mini-64-b32": Candidate("mini", 64, 32, 2e-3),
    "mini-64-lamb": Candidate("mini", 64, 64, 5e-3, optimizer="lamb"),
    "tiny-64": Candidate("tiny", 64, 64, 4e-3),
    "tiny-64-lamb": Candidate("tiny", 64, 64, 5e-3, optimizer="lamb"),
}


VALIDATION_SEQUENCES = 1024  # held-out pairs per curve point: ±1.5 points of SOP accuracy, ~15 k MLM targets


class SweepClock(L.Callback):
    """Lightning callback (loaded by the fit subprocess from this file): training CPU time at each validation.

    Validation's own CPU time is subtracted, so the clock counts what a step costs: loader, forward, backward,
    update. Rows go to ``{output}``, one JSON object a line: step, cpu_seconds, wall_seconds.
    """

    def __init__(self, output: str, mark_step: int = 0) -> None:
        self.output, self.mark_step = output, mark_step  # mark_step: also record after this step (probes)
        self._cpu = self._wall = self._val_cpu = self._val_wall = 0.0
        self._val_started: tuple[float, float] | None = None

    @staticmethod
    def _now() -> tuple[float, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime, time.perf_counter()

    def on_train_start(self, trainer, pl_module) -> None:
        self._cpu, self._wall = self._now()

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        if trainer.global_step == self.mark_step:
            self._record(trainer.global_step)

    def on_validation_start(self, trainer, pl_module) -> None:
        self._val_started = self._now()
        self._record(trainer.global_step)

    def on_validation_end(self, trainer, pl_module) -> None:
        cpu, wall = self._now()
        self._val_cpu += cpu - self._val_started[0]
        self._val_wall += wall - self._val_started[1]

    def on_train_end(self, trainer, pl_module) -> None:
        self._record(trainer.global_step)

    def _record(self, step: int) -> None:
        cpu, wall = self._now()
        row = {"step": step, "cpu_seconds": cpu - self._cpu - self._val_cpu, "wall_seconds": wall - self._wall}
        row["wall_seconds"] -= self._val_wall
        with open(self.output, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def _shards(args: argparse.Namespace, seq_len: int) -> Path:
    """Returns the workdir's shards of ``seq_len``, built by the real instances stage when missing."""
    folder = args.workdir / f"shards-{seq_len}"
    if not (folder / "manifest.json").exists():
        predictions = max(1, round(seq_len * 0.15 + 0.4))  # 20 at 128, as the paper's 20 at 512 is capped
        subprocess.run(
            [sys.executable, "-m", "pipelines.instances", "--input", args.sentences, "--spiece", args.spiece,
             "--output", str(folder), "--max_seq_length", str(seq_len), "--dupe_factor", str(args.dupe_factor),
             "--max_predictions_per_seq", str(min(20, predictions)), *args.beam_args.split()],
            check=True, cwd=REPO,
        )  # fmt: skip
    return folder


def _fit(name: str, c: Candidate, shards: Path, steps: int, every: int, folder: Path, mark: int = 0) -> list[dict]:
    """Runs the real ``fit`` CLI for ``steps`` steps, validating every ``every``; returns the clock's rows."""
    folder.mkdir(parents=True, exist_ok=True)
    clock = folder / "clock.jsonl"
    clock.unlink(missing_ok=True)
    callbacks = [
        {"class_path": "albert_lightning.pretraining.curves.PretrainingReport"},
        {"class_path": "sweep.SweepClock", "init_args": {"output": str(clock), "mark_step": mark}},
    ]
    overrides = {"trainer": {"callbacks": callbacks, "enable_checkpointing": False}}
    (folder / "sweep.yaml").write_text(json.dumps(overrides))
    validation_batches = max(1, VALIDATION_SEQUENCES // c.batch_size) if every < steps else 0
    command = [
        sys.executable, "-m", "albert_lightning.pretraining.cli", "--config", "configs/pretrain.yaml",
        "--config", str(folder / "sweep.yaml"), "--trainer.default_root_dir", str(folder),
        "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(every),
        "--trainer.limit_val_batches", str(validation_batches), "--trainer.enable_progress_bar", "false",
        "--data.data_dir", str(shards), "--data.batch_size", str(c.batch_size), "--model.preset", c.preset,
        "--model.config_overrides", json.dumps(c.overrides or None), "--model.optimizer", c.optimizer,
        "--model.lr", str(c.lr), "--model.warmup_steps", str(max(1, steps // 10)), "--model.total_steps", str(steps),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])}
    print(f"[{name}] {steps} steps, validating every {every}", flush=True)
    subprocess.run(command, check=True, cwd=REPO, env=env, stdout=subprocess.DEVNULL)
    return [json.loads(line) for line in clock.read_text().splitlines()]


def most_frequent_accuracy(shards: Path) -> float:
    """MLM accuracy of always answering the training split's most frequent masked token, on the validation split."""
    import numpy as np

    from albert_lightning.pretraining.data import ShardDataset

    def targets(split: str) -> np.ndarray:
        dataset = ShardDataset(shards, split)
        return dataset.__getitems__(list(range(len(dataset)))).masked_lm_ids

    top = np.bincount(targets("train")).argmax()
    return float((targets("validation") == top).mean())


def run_candidate(name: str, args: argparse.Namespace) -> list[dict]:
    c = CANDIDATES[name]
    shards = _shards(args, c.seq_len)
    warm = args.probe_steps // 3  # the first steps pay for allocation and numba's cache load
    probe = _fit(name, c, shards, args.probe_steps, args.probe_steps, args.workdir / "probe" / name, mark=warm)
    per_step = (probe[-1]["cpu_seconds"] - probe[0]["cpu_seconds"]) / max(1, probe[-1]["step"] - probe[0]["step"])
    steps = max(args.points, int(args.minutes * 60 * args.cores / per_step))
    folder = args.workdir / "runs" / name
    clock = {r["step"]: r for r in _fit(name, c, shards, steps, max(1, steps // args.points), folder)}
    with open(folder / "curves" / "validation.csv", newline="", encoding="utf-8") as f:
        validation = list(csv.DictReader(f))
    baseline = most_frequent_accuracy(shards)
    rows = []
    for v in validation:
        step = int(float(v["step"]))
        cpu = clock[step]["cpu_seconds"] if step in clock else 0.0
        wall = clock.get(step, {}).get("wall_seconds", 0.0)
        rows.append(
            {
                "candidate": name,
                "step": step,
                "minutes": round(cpu / args.cores / 60, 3),
                "wall_minutes": round(wall / 60, 3),
                **{k: round(float(v[k]), 4) for k in ("mlm_accuracy", "sop_accuracy", "mlm_loss")},
                "most_frequent": round(baseline, 4),
                "tokens_per_step": c.batch_size * c.seq_len,
                "cpu_seconds_per_step": round(per_step, 4),
            }
        )
    return rows


def _parameters(c: Candidate, vocab_size: int) -> int:
    import torch

    from albert_lightning.model import AlbertConfig, AlbertForPreTraining, num_parameters

    with torch.device("meta"):
        return num_parameters(AlbertForPreTraining(AlbertConfig.preset(c.preset, vocab_size=vocab_size, **c.overrides)))


def write_results(rows: list[dict], results: Path, minutes: float, vocab_size: int) -> None:
    results.mkdir(parents=True, exist_ok=True)
    with open(results / "sweep.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"Held-out accuracy after {minutes:g} minutes of 2 CPU cores (`python bench/sweep.py`; every point in "
        "bench/results/sweep.csv)",
        "",
        "| candidate | params | shape | seq × batch | optimizer, lr | steps | minutes | tokens/s | MLM acc "
        "| most frequent | MLM ÷ most frequent | SOP acc |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["candidate"] for r in rows):
        last = [r for r in rows if r["candidate"] == name][-1]
        c = CANDIDATES[name]
        shape = {**_preset(c.preset), **c.overrides}
        tokens = last["step"] * last["tokens_per_step"] / max(last["minutes"] * 60, 1e-9)  # per 2-core second
        lines.append(
            f"| {name} | {_parameters(c, vocab_size):,} | H{shape['hidden_size']} L{shape['num_hidden_layers']} "
            f"E{shape.get('embedding_size', 128)} | {c.seq_len} × {c.batch_size} | {c.optimizer} {c.lr:g} "
            f"| {last['step']} | {last['minutes']:.2f} | {tokens:,.0f} | {last['mlm_accuracy']:.3f} "
            f"| {last['most_frequent']:.3f} "
            f"| {last['mlm_accuracy'] / last['most_frequent']:.2f} | {last['sop_accuracy']:.3f} |"
        )
    (results / "sweep.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _draw(rows, results / "sweep.png")


def _preset(name: str) -> dict:
    from albert_lightning.model_config import PRESETS

    return PRESETS[name]


def _draw(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name in dict.fromkeys(r["candidate"] for r in rows):
        mine = [r for r in rows if r["candidate"] == name]
        for axis, column in zip(axes, ("mlm_accuracy", "sop_accuracy"), strict=True):
            axis.plot([r["minutes"] for r in mine], [r[column] for r in mine], marker="o", label=name)
    axes[0].axhline(rows[0]["most_frequent"], color="grey", linestyle="--", label="most frequent token")
    axes[1].axhline(0.5, color="grey", linestyle="--", label="chance")
    for axis, title in zip(axes, ("held-out MLM accuracy", "held-out SOP accuracy"), strict=True):
        axis.set_xlabel("minutes of 2 CPU cores (training CPU time / 2)")
        axis.set_title(title)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="budget per candidate, minutes of --cores")
    parser.add_argument("--only", nargs="*", default=list(CANDIDATES), choices=list(CANDIDATES))
    parser.add_argument("--sentences", default="data/deduped")  # the documents pretraining reads
    parser.add_argument("--spiece", default="data/vocab/spiece.model")
    # The workdir's files are trusted (configs naming classes to build, resumable rows): never a shared,
    # predictable /tmp path; by default a fresh private folder (mkdtemp: this user only), named on the console.
    parser.add_argument("--workdir", type=Path, default=None, help="resume from here (default: a new private folder)")
    parser.add_argument("--results", type=Path, default=BENCH / "results")
    parser.add_argument("--dupe_factor", type=int, default=4)
    parser.add_argument("--probe_steps", type=int, default=30)
    parser.add_argument("--points", type=int, default=4, help="validations per run (plus one at step 0)")
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--beam_args", default="--direct_running_mode=multi_processing --direct_num_workers=2")
    args = parser.parse_args(argv)
    if args.workdir is None:
        args.workdir = Path(tempfile.mkdtemp(prefix="albert-sweep-"))
        print(f"sweep: working in {args.workdir} (give it as --workdir to resume)")
    args.workdir.mkdir(parents=True, exist_ok=True)
    done = args.workdir / "rows.jsonl"  # the sweep resumes: a candidate already measured is not run again
    rows = [json.loads(line) for line in done.read_text().splitlines()] if done.exists() else []
    for name in args.only:
        if not any(r["candidate"] == name for r in rows):
            measured = run_candidate(name, args)
            with open(done, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in measured)
            rows += measured
    rows = [r for r in rows if r["candidate"] in args.only]
    manifest = _shards(args, CANDIDATES[args.only[0]].seq_len) / "manifest.json"
    vocab_size = json.loads(manifest.read_text())["vocab_size"]
    write_results(rows, args.results, args.minutes, vocab_size)
    print((args.results / "sweep.md").read_text())


if __name__ == "__main__":
    main()
