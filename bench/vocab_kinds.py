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

import json
from pathlib import Path

import numpy as np
import torch
from zh_runs import (
    arguments,
    documents,
    downstream,
    instances,
    mean_sd,
    seeds,
    stage,
    text_stages,
    train_and_evaluate,
    welch,
    write_results,
)

from albert_lightning.ablations.findings import Finding, check
from albert_lightning.ablations.report import collect
from albert_lightning.evaluation.intrinsic import scored_batches
from albert_lightning.interop.pretrained import load_pretrained
from albert_lightning.pretraining.data import IGNORE_INDEX, ShardDataset
from pipelines.algorithms.vocabulary import SentencePieceVocab, load_vocabulary

KINDS = ("sentencepiece", "wordpiece")
CLAIM = "google-research/albert#58: WordPiece did better than SentencePiece on Chinese reading comprehension"
FINDING = Finding("wordpiece vs sentencepiece", CLAIM, "downstream", "wordpiece", "sentencepiece", kind="none")


def data_stages(inputs: str, work: Path, budget: int, log: Path) -> dict[str, int]:
    """Runs the data stages once (a finished stage's output is kept); returns each vocabulary's piece count."""
    text_stages(inputs, work, log)
    sizes = {}
    for kind in ("wordpiece", "sentencepiece"):  # WordPiece first: SentencePiece gets the count it reached
        vocab = work / kind / "vocab"
        size = budget if kind == "wordpiece" else sizes["wordpiece"]
        if not (vocab / "stats.json").exists():
            stage("vocab", "--input", str(work / "deduped"), "--output", str(vocab), "--kind", kind,
                  "--vocab_size", str(size), log=log)  # fmt: skip
        sizes[kind] = load_vocabulary(vocab).vocab_size
        instances(work, kind, vocab, log, "--word_segmenter", "jieba")
    return sizes


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


def report(work: Path, runs: int) -> tuple[dict, list[str]]:
    figures: dict = {}
    for kind in KINDS:
        folder = work / "runs" / kind
        rows = []
        for seed in seeds(runs):
            accuracy, nats = per_character(folder / "pretrain" / seed / "checkpoints" / "last.ckpt",
                                           work / kind / "eval_shards" / "sop", work / kind / "vocab")  # fmt: skip
            evaluation = json.loads((folder / "eval" / seed / "metrics.json").read_text())
            intrinsic = next(iter(evaluation["intrinsic"].values()))
            task = downstream(evaluation)
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
            cells.append(mean_sd(values))
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
    args = arguments(__doc__, {"budget": (int, 8000, "WordPiece's vocab_size (the most pieces)")})
    inputs, log = documents(args)
    sizes = data_stages(inputs, args.work, args.budget, log)
    print(f"vocabularies: {sizes}", flush=True)
    for kind in KINDS:
        train_and_evaluate(args.work, kind, args.work / kind / "vocab", args.runs, args.steps, log)
    write_results("vocab_kinds", args, ["budget"], *report(args.work, args.runs))


if __name__ == "__main__":
    main()
