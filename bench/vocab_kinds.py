"""Which vocabulary for Chinese: a SentencePiece ``spiece.model`` against a WordPiece ``vocab.txt`` of the same size.

    python bench/vocab_kinds.py --inputs '/work/zh/*/*.txt' --work /work/vocab_kinds [--runs 3] [--steps 2000]

On a Chinese corpus (bench/zh_corpus.py's two novels, for the recorded figures), its files' paragraphs cut into
documents of ``--paragraphs`` (``cut_documents``), through the real stages: corpus (``--label_field folder``: the
book is the label) → segment (zh, case and accents kept, as a vocab.txt needs) → dedup → vocab twice:
``--kind wordpiece`` first, then ``--kind sentencepiece`` at the piece count the WordPiece vocabulary reached (on
Chinese every CJK character is a word of its own, so WordPiece stops short of its budget; same count, same
embedding parameters) → instances for each (``--word_segmenter jieba``, whole word masking as Chinese users mask,
with held-out shards) → tasks (which book a passage is from). Then ``--runs`` pretraining runs of each
(``configs/pretrain.yaml``, ``--steps`` steps, seeds 12345…, side by side through
``albert_lightning.ablations.replicates``) and ``evaluate`` on each.

Reported, per vocabulary, mean and between-run SD over the runs:

- held-out MLM **per character**: every masked piece of the held-out SOP shards weighted by the characters it
  covers (accuracy), and the MLM loss summed over masked pieces divided by their characters (nats per character).
  Per-piece accuracies are not comparable: the two vocabularies cut the text into different pieces;
- the downstream task's dev accuracy (median over fine-tuning seeds, largest training set) pretrained and from
  random weights of the same shape, and the gain;
- the two differences (WordPiece − SentencePiece) with 95 % intervals: per character, Welch's t over the runs;
  downstream, ``ablations.findings``' hierarchical bootstrap (pretraining runs, fine-tuning seeds, dev examples).

Not representative of: a modern, many-author corpus, ALBERT's full pretraining (the ``tiny`` preset for a few
thousand steps), or the CLUE tasks, whose files are not fetched here. Writes bench/results/vocab_kinds.{json,md}.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from measure import REPO, machine

from albert_lightning.ablations.findings import Finding, check
from albert_lightning.ablations.report import collect
from albert_lightning.evaluation.intrinsic import scored_batches
from albert_lightning.interop.pretrained import load_pretrained
from albert_lightning.pretraining.data import IGNORE_INDEX, ShardDataset
from pipelines.algorithms.vocabulary import SentencePieceVocab, load_vocabulary

KINDS = ("sentencepiece", "wordpiece")
FIRST_SEED = 12345
CLAIM = "google-research/albert#58: WordPiece did better than SentencePiece on Chinese reading comprehension"
FINDING = Finding("wordpiece vs sentencepiece", CLAIM, "downstream", "wordpiece", "sentencepiece", kind="none")


def _run(command: list[str], log: Path) -> None:
    print("$", " ".join(command), flush=True)
    with open(log, "a", encoding="utf-8") as out:
        done = subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"{command[2]} failed ({done.returncode}): see {log}")


def _stage(name: str, *flags: str, log: Path) -> None:
    _run([sys.executable, "-m", f"pipelines.{name}", *flags], log)


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


def data_stages(inputs: str, work: Path, budget: int, log: Path) -> dict[str, int]:
    """Runs the data stages once (a finished stage's manifest or stats.json is kept); returns each vocabulary's
    piece count."""
    steps = [
        ("corpus", work / "corpus", ["--inputs", inputs, "--label_field", "folder"]),
        ("segment", work / "sentences", ["--input", str(work / "corpus"), "--language", "zh", "--lower_case", "false",
                                         "--strip_accents", "false"]),
        ("dedup", work / "deduped", ["--input", str(work / "sentences")]),
        ("tasks", work / "tasks", ["--input", str(work / "deduped"), "--label_field", "folder"]),
    ]  # fmt: skip
    for name, output, flags in steps:
        if not any(output.glob("*")):
            _stage(name, *flags, "--output", str(output), log=log)
    sizes = {}
    for kind in ("wordpiece", "sentencepiece"):  # WordPiece first: SentencePiece gets the count it reached
        vocab = work / kind / "vocab"
        size = budget if kind == "wordpiece" else sizes["wordpiece"]
        if not (vocab / "stats.json").exists():
            _stage("vocab", "--input", str(work / "deduped"), "--output", str(vocab), "--kind", kind,
                   "--vocab_size", str(size), log=log)  # fmt: skip
        sizes[kind] = load_vocabulary(vocab).vocab_size
        shards = work / kind / "shards"
        if not (shards / "manifest.json").exists():
            _stage("instances", "--input", str(work / "deduped"), "--spiece", str(vocab), "--output", str(shards),
                   "--eval_output", str(work / kind / "eval_shards"), "--word_segmenter", "jieba", log=log)  # fmt: skip
    return sizes


def _replicates(runs: int, template: list[str], log: Path) -> None:
    command = [sys.executable, "-m", "albert_lightning.ablations.replicates", "--seeds", str(runs), "--first_seed",
               str(FIRST_SEED), "--", *template]  # fmt: skip
    _run(command, log)


def train_and_evaluate(work: Path, kind: str, runs: int, steps: int, log: Path) -> None:
    """``runs`` pretraining runs of ``kind``'s shards and an evaluation of each, in ``work/runs/<kind>``."""
    folder = work / "runs" / kind
    seeds = [FIRST_SEED + i for i in range(runs)]
    if not all((folder / "pretrain" / f"seed-{s}" / "checkpoints" / "last.ckpt").exists() for s in seeds):
        fit = [sys.executable, "-m", "albert_lightning.fit", "--config", "configs/pretrain.yaml",
               "--data.data_dir", str(work / kind / "shards"), "--trainer.max_steps", str(steps),
               "--trainer.val_check_interval", str(steps), "--model.warmup_steps", str(max(1, steps // 10)),
               "--seed_everything", "{seed}", "--data.seed", "{seed}", "--trainer.enable_progress_bar", "false",
               "--trainer.default_root_dir", f"{folder}/pretrain/seed-{{seed}}"]  # fmt: skip
        _replicates(runs, fit, log)
    if not all((folder / "eval" / f"seed-{s}" / "metrics.json").exists() for s in seeds):
        evaluate = [sys.executable, "-m", "albert_lightning.evaluate", "--params", "/dev/null",
                    "--checkpoint", f"{folder}/pretrain/seed-{{seed}}/checkpoints/last.ckpt",
                    "--spiece", str(work / kind / "vocab"), "--tasks", str(work / "tasks"),
                    "--shards", str(work / kind / "eval_shards" / "sop"), "--output", f"{folder}/eval/seed-{{seed}}",
                    "--seeds", "3", "--train_sizes", "32", "128", "--max_steps", "100", "--min_steps", "30",
                    "--lrs", "0.002", "--batch_size", "32", "--intrinsic_batches", "64",
                    "--bootstrap_resamples", "1000"]  # fmt: skip
        _replicates(runs, evaluate, log)


def _characters(vocab) -> np.ndarray:
    """Characters of text each piece stands for: ▁ and ## are markers, not text; a special or unknown piece 1."""
    if isinstance(vocab, SentencePieceVocab):
        pieces = [vocab.sp.id_to_piece(i).replace("▁", "") for i in range(vocab.vocab_size)]
    else:
        pieces = [p.removeprefix("##") for p in vocab.pieces]
    counts = np.array([len(p) for p in pieces], np.int64)
    counts[: vocab.num_special] = 1
    return counts


@torch.no_grad()
def per_character(checkpoint: Path, shards: Path, vocab_folder: Path, batches: int = 64, batch_size: int = 32):
    """Held-out MLM of one run per character: (accuracy weighted by characters, loss nats per character)."""
    model, _ = load_pretrained(checkpoint)
    model.eval()
    chars = torch.from_numpy(_characters(load_vocabulary(vocab_folder)))
    dataset = ShardDataset(shards, "validation")
    hit_chars = loss = total = 0.0
    for _, batch, out in scored_batches(model, dataset, batches, batch_size):
        labels = batch["masked_lm_ids"]
        real = labels != IGNORE_INDEX
        logits, targets = out.prediction_logits[real], labels[real]
        weight = chars[targets].double()
        hit_chars += float(((logits.argmax(-1) == targets).double() * weight).sum())
        loss += float(torch.nn.functional.cross_entropy(logits.double(), targets, reduction="sum"))
        total += float(weight.sum())
    return hit_chars / total, loss / total


def welch(first: list[float], second: list[float]) -> dict[str, float]:
    """first − second with its 95 % Welch t interval over the runs."""
    from scipy import stats

    difference = statistics.mean(first) - statistics.mean(second)
    v1, v2 = statistics.variance(first) / len(first), statistics.variance(second) / len(second)
    se = (v1 + v2) ** 0.5
    df = (v1 + v2) ** 2 / (v1**2 / (len(first) - 1) + v2**2 / (len(second) - 1)) if se else 1.0
    half = float(stats.t.ppf(0.975, df)) * se
    return {"difference": difference, "low": difference - half, "high": difference + half}


def _downstream(evaluation: dict) -> dict[str, float]:
    """The task's dev accuracy at the largest training set: pretrained, random_init (medians over seeds)."""
    # The book: the tasks stage's classification task (a span task needs docstrings, which novels lack)
    task = next(t for t in evaluation["tasks"].values() if t["kind"] == "classification")
    sizes = task["splits"]["dev"]["sizes"]
    size = sizes[max(sizes, key=int)]
    return {start: size[start][task["primary"]] for start in ("pretrained", "random_init")}


def report(work: Path, runs: int) -> tuple[dict, list[str]]:
    figures: dict = {}
    for kind in KINDS:
        folder = work / "runs" / kind
        rows = []
        for i in range(runs):
            seed = f"seed-{FIRST_SEED + i}"
            accuracy, nats = per_character(folder / "pretrain" / seed / "checkpoints" / "last.ckpt",
                                           work / kind / "eval_shards" / "sop", work / kind / "vocab")  # fmt: skip
            evaluation = json.loads((folder / "eval" / seed / "metrics.json").read_text())
            intrinsic = next(iter(evaluation["intrinsic"].values()))
            task = _downstream(evaluation)
            rows.append({"seed": seed, "mlm_char_accuracy": accuracy, "mlm_nats_per_char": nats,
                         "mlm_piece_accuracy": intrinsic["mlm_accuracy"], **task,
                         "gain": task["pretrained"] - task["random_init"]})  # fmt: skip
        figures[kind] = {"vocab_size": load_vocabulary(work / kind / "vocab").vocab_size, "runs": rows}
    measures = ("mlm_char_accuracy", "mlm_nats_per_char", "mlm_piece_accuracy", "pretrained", "random_init", "gain")
    lines = ["| vocabulary | pieces | " + " | ".join(measures) + " |", "|---" * (len(measures) + 2) + "|"]
    for kind in KINDS:
        cells = []
        for m in measures:
            values = [r[m] for r in figures[kind]["runs"]]
            cells.append(f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}")
        lines.append(f"| {kind} | {figures[kind]['vocab_size']:,} | " + " | ".join(cells) + " |")
    per_run = {m: [[r[m] for r in figures[k]["runs"]] for k in ("wordpiece", "sentencepiece")] for m in measures}
    differences = {m: welch(*per_run[m]) for m in ("mlm_char_accuracy", "mlm_nats_per_char", "gain")}
    (finding,) = check({r.name: r.evidence for r in collect(work / "runs")}, (FINDING,))
    differences["downstream_bootstrap"] = {k: finding[k] for k in ("difference", "low", "high")}
    lines.append("")
    lines += [f"wordpiece − sentencepiece, {m}: {d['difference']:+.4f} (95 % interval {d['low']:+.4f} to "
              f"{d['high']:+.4f})" for m, d in differences.items()]  # fmt: skip
    return {"kinds": figures, "differences": differences}, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", required=True, help="glob of the corpus's text files, e.g. '/work/zh/*/*.txt'")
    parser.add_argument("--work", type=Path, required=True, help="folder for the stages' outputs and the runs")
    parser.add_argument("--budget", type=int, default=8000, help="WordPiece's vocab_size (the most pieces)")
    parser.add_argument("--paragraphs", type=int, default=6, help="paragraphs per document (0: a file each)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    log = args.work / "log.txt"
    inputs = cut_documents(args.inputs, args.work / "text", args.paragraphs) if args.paragraphs else args.inputs
    sizes = data_stages(inputs, args.work, args.budget, log)
    print(f"vocabularies: {sizes}", flush=True)
    for kind in KINDS:
        train_and_evaluate(args.work, kind, args.runs, args.steps, log)
    figures, lines = report(args.work, args.runs)
    for line in lines:
        print(line)
    settings = {
        "inputs": args.inputs,
        "paragraphs": args.paragraphs,
        "budget": args.budget,
        "runs": args.runs,
        "steps": args.steps,
    }
    result = {"machine": machine(sys.argv), "settings": settings, **figures}
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "vocab_kinds.json").write_text(json.dumps(result, indent=2) + "\n")
    command = " ".join(sys.argv[1:])
    text = "\n".join([f"`python bench/vocab_kinds.py {command}`", "", *lines]) + "\n"
    (args.results / "vocab_kinds.md").write_text(text)


if __name__ == "__main__":
    main()
