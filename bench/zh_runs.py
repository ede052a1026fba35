"""What the Chinese comparisons share (bench/vocab_kinds.py, bench/word_masking_gain.py): the novels cut into
documents, the text stages run once, replicated pretraining runs of one arm and an evaluation of each, and the
intervals of a difference over the runs.

An arm is a folder ``work/<arm>`` holding ``shards`` and ``eval_shards`` (an instances stage's two outputs); its
runs go to ``work/runs/<arm>/{pretrain,eval}/seed-<n>``, where ``albert_lightning.ablations.report.collect``
reads them.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import subprocess
import sys
from pathlib import Path

from measure import REPO, machine

FIRST_SEED = 12345


def run(command: list[str], log: Path) -> None:
    print("$", " ".join(command), flush=True)
    with open(log, "a", encoding="utf-8") as out:
        done = subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"{command[2]} failed ({done.returncode}): see {log}")


def stage(name: str, *flags: str, log: Path) -> None:
    run([sys.executable, "-m", f"pipelines.{name}", *flags], log)


def cut_documents(inputs: str, out: Path, paragraphs: int) -> str:
    """Writes every input file's paragraphs (blank-line separated) as documents of ``paragraphs`` paragraphs, in
    a folder named as the file's: a chapter's first sentences name its characters, which makes telling the two
    books apart from a chapter's opening trivial (random weights score 1.0); a passage from inside a chapter is not,
    and there are ten times more of them. Returns the glob of the documents written."""
    for path in map(Path, sorted(glob.glob(inputs))):
        parts = [p for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
        folder = out / path.parent.name
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(0, len(parts), paragraphs):
            text = "\n\n".join(parts[k : k + paragraphs]).strip() + "\n"
            (folder / f"{path.stem}-{k // paragraphs:03d}.txt").write_text(text, encoding="utf-8")
    return f"{out}/*/*.txt"


def text_stages(inputs: str, work: Path, log: Path) -> None:
    """corpus (the folder, i.e. the book, is the label) → segment (zh, case and accents kept, as a vocab.txt
    needs) → dedup → tasks (which book a passage is from), each run once: a finished stage's output is kept."""
    steps = [
        ("corpus", work / "corpus", ["--inputs", inputs, "--label_field", "folder"]),
        ("segment", work / "sentences", ["--input", str(work / "corpus"), "--language", "zh", "--lower_case", "false",
                                         "--strip_accents", "false"]),
        ("dedup", work / "deduped", ["--input", str(work / "sentences")]),
        ("tasks", work / "tasks", ["--input", str(work / "deduped"), "--label_field", "folder"]),
    ]  # fmt: skip
    for name, output, flags in steps:
        if not any(output.glob("*")):
            stage(name, *flags, "--output", str(output), log=log)


def instances(work: Path, arm: str, vocab: Path, log: Path, *flags: str) -> None:
    """The instances stage into ``work/<arm>`` (shards and held-out eval shards), unless it finished there."""
    if not (work / arm / "shards" / "manifest.json").exists():
        outputs = ["--output", str(work / arm / "shards"), "--eval_output", str(work / arm / "eval_shards")]
        stage("instances", "--input", str(work / "deduped"), "--spiece", str(vocab), *outputs, *flags, log=log)


def _replicates(runs: int, template: list[str], log: Path) -> None:
    command = [sys.executable, "-m", "albert_lightning.ablations.replicates", "--seeds", str(runs), "--first_seed",
               str(FIRST_SEED), "--", *template]  # fmt: skip
    run(command, log)


def seeds(runs: int) -> list[str]:
    return [f"seed-{FIRST_SEED + i}" for i in range(runs)]


def train_and_evaluate(work: Path, arm: str, vocab: Path, runs: int, steps: int, log: Path) -> None:
    """``runs`` pretraining runs of ``arm``'s shards (``configs/pretrain.yaml``, ``steps`` steps, side by side)
    and an evaluation of each on ``work/tasks`` and the arm's held-out SOP shards, in ``work/runs/<arm>``."""
    folder = work / "runs" / arm
    if not all((folder / "pretrain" / s / "checkpoints" / "last.ckpt").exists() for s in seeds(runs)):
        fit = [sys.executable, "-m", "albert_lightning.fit", "--config", "configs/pretrain.yaml",
               "--data.data_dir", str(work / arm / "shards"), "--trainer.max_steps", str(steps),
               "--trainer.val_check_interval", str(steps), "--model.warmup_steps", str(max(1, steps // 10)),
               "--seed_everything", "{seed}", "--data.seed", "{seed}", "--trainer.enable_progress_bar", "false",
               "--trainer.default_root_dir", f"{folder}/pretrain/seed-{{seed}}"]  # fmt: skip
        _replicates(runs, fit, log)
    if not all((folder / "eval" / s / "metrics.json").exists() for s in seeds(runs)):
        evaluate = [sys.executable, "-m", "albert_lightning.evaluate", "--params", "/dev/null",
                    "--checkpoint", f"{folder}/pretrain/seed-{{seed}}/checkpoints/last.ckpt",
                    "--spiece", str(vocab), "--tasks", str(work / "tasks"),
                    "--shards", str(work / arm / "eval_shards" / "sop"), "--output", f"{folder}/eval/seed-{{seed}}",
                    "--seeds", "3", "--train_sizes", "32", "128", "--max_steps", "100", "--min_steps", "30",
                    "--lrs", "0.002", "--batch_size", "32", "--intrinsic_batches", "64",
                    "--bootstrap_resamples", "1000"]  # fmt: skip
        _replicates(runs, evaluate, log)


def welch(first: list[float], second: list[float]) -> dict[str, float]:
    """first − second with its 95 % Welch t interval over the runs."""
    from scipy import stats

    difference = statistics.mean(first) - statistics.mean(second)
    v1, v2 = statistics.variance(first) / len(first), statistics.variance(second) / len(second)
    se = (v1 + v2) ** 0.5
    df = (v1 + v2) ** 2 / (v1**2 / (len(first) - 1) + v2**2 / (len(second) - 1)) if se else 1.0
    half = float(stats.t.ppf(0.975, df)) * se
    return {"difference": difference, "low": difference - half, "high": difference + half}


def downstream(evaluation: dict) -> dict[str, float]:
    """The task's dev accuracy at the largest training set: pretrained, random_init (medians over seeds)."""
    # The book: the tasks stage's classification task (a span task needs docstrings, which novels lack)
    task = next(t for t in evaluation["tasks"].values() if t["kind"] == "classification")
    sizes = task["splits"]["dev"]["sizes"]
    size = sizes[max(sizes, key=int)]
    return {start: size[start][task["primary"]] for start in ("pretrained", "random_init")}


def mean_sd(values: list[float]) -> str:
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def arguments(doc: str, add: dict[str, tuple[type, object, str]]) -> argparse.Namespace:
    """Parses a comparison's command line: the corpus, work folder, documents, runs and steps, and ``add``'s
    options (name → type, default, help)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", required=True, help="glob of the corpus's text files, e.g. '/work/zh/*/*.txt'")
    parser.add_argument("--work", type=Path, required=True, help="folder for the stages' outputs and the runs")
    for name, (kind, default, text) in add.items():
        parser.add_argument(f"--{name}", type=kind, default=default, help=text)
    parser.add_argument("--paragraphs", type=int, default=6, help="paragraphs per document (0: a file each)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    return parser.parse_args()


def documents(args: argparse.Namespace) -> tuple[str, Path]:
    """Makes the work folder and cuts the documents; returns their glob and the stages' log."""
    args.work.mkdir(parents=True, exist_ok=True)
    inputs = cut_documents(args.inputs, args.work / "text", args.paragraphs) if args.paragraphs else args.inputs
    return inputs, args.work / "log.txt"


def write_results(name: str, args: argparse.Namespace, settings: list[str], figures: dict, lines: list[str]) -> None:
    """Prints ``lines`` and writes bench/results/<name>.json (with ``settings``' values) and .md."""
    for line in lines:
        print(line)
    values = {key: getattr(args, key) for key in ["inputs", "paragraphs", *settings, "runs", "steps"]}
    result = {"machine": machine(sys.argv), "settings": values, **figures}
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    text = "\n".join([f"`python bench/{name}.py {' '.join(sys.argv[1:])}`", "", *lines]) + "\n"
    (args.results / f"{name}.md").write_text(text)
