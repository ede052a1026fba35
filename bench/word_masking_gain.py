"""What Chinese whole word masking buys: pretraining with jieba's words against one word per character.

    python bench/word_masking_gain.py --inputs '/work/zh/*/*.txt' --work /work/wwm [--runs 3] [--steps 2000]

On a Chinese corpus (bench/zh_corpus.py's two novels, for the recorded figures), its files' paragraphs cut into
documents (``zh_runs.cut_documents``), through the real stages: corpus → segment (zh) → dedup → tasks (which book
a passage is from) → vocab (SentencePiece, ``--vocab_size``, ``--character_coverage``) → instances twice, from the
same documents with the same vocabulary: ``--word_segmenter none`` (every CJK character a word, as
google-research/albert and Google's Chinese BERT mask) and ``jieba`` (ymcui/Chinese-BERT-wwm's whole word
masking), each with held-out shards. Then ``--runs`` pretraining runs of each (``configs/pretrain.yaml``,
``--steps`` steps, seeds 12345…) and ``evaluate`` on each.

Reported, per masking, mean and between-run SD over the runs:

- held-out MLM on both held-out shard sets, which mask the same held-out documents two ways: **per whole word** on
  the jieba-masked rows (a jieba word counts as right only when every masked piece of it is: ``word_hits``), and
  per piece on the character-masked rows. Every model is scored on the same rows, so the columns compare;
- the downstream task's dev accuracy (median over fine-tuning seeds, largest training set) pretrained and from
  random weights, and the gain;
- jieba − none with 95 % intervals: Welch's t over the pretraining runs, and for downstream also
  ``ablations.findings``' hierarchical bootstrap (pretraining runs, fine-tuning seeds, dev examples), whose
  verdict is stated;
- the unknown-piece rate of the held-out rows (target ≤ 0.1 %).

Not representative of: a modern, many-author corpus (jieba's dictionary is of modern words; these are early
vernacular novels), ALBERT's full pretraining (the ``tiny`` preset, a few thousand steps), or the CLUE tasks.
Writes bench/results/word_masking_gain.{json,md}.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import zh_runs

from albert_lightning.ablations.findings import Finding, check
from albert_lightning.ablations.report import collect
from albert_lightning.evaluation.intrinsic import intrinsic_scores
from albert_lightning.interop.pretrained import load_pretrained
from albert_lightning.pretraining.data import ShardDataset
from pipelines.algorithms.vocab_layout import NUM_SPECIAL, UNK_ID

MASKINGS = ("none", "jieba")
CLAIM = "ymcui/Chinese-BERT-wwm: whole word masking over segmented words does better downstream than per character"
FINDING = Finding("jieba > none downstream", CLAIM, "downstream", "jieba", "none")
MEASURES = ("mlm_word_accuracy_wwm_rows", "mlm_piece_accuracy_char_rows", "pretrained", "random_init", "gain")


def data_stages(inputs: str, work: Path, vocab_size: int, coverage: float, log: Path) -> Path:
    """Runs the data stages once (a finished stage's output is kept); returns the vocabulary folder."""
    zh_runs.text_stages(inputs, work, log)
    vocab = work / "vocab"
    if not (vocab / "stats.json").exists():
        sizes = ["--vocab_size", str(vocab_size), "--character_coverage", str(coverage)]
        zh_runs.stage("vocab", "--input", str(work / "deduped"), "--output", str(vocab), *sizes, log=log)
    for masking in MASKINGS:
        zh_runs.instances(work, masking, vocab, log, "--word_segmenter", masking)
    return vocab


def _held_out(checkpoint: Path, shards: Path) -> dict:
    model, _ = load_pretrained(checkpoint)
    return intrinsic_scores(model, str(shards), 64, 32)  # as evaluate scores its own: --intrinsic_batches 64 of 32


def unknown_rate(shards: Path) -> tuple[int, int]:
    """``<unk>`` pieces and all pieces but the specials in the held-out rows of ``shards``, as they read before
    masking: the characters of held-out documents that the vocabulary lacks."""
    dataset = ShardDataset(shards, "validation")
    rows = dataset.__getitems__(range(len(dataset)))
    tokens = rows.input_ids.astype(np.int64)
    tokens[np.repeat(rows.offsets[:-1], np.diff(rows.prediction_offsets)) + rows.masked_lm_positions] = (
        rows.masked_lm_ids
    )
    return int((tokens == UNK_ID).sum()), int((tokens >= NUM_SPECIAL).sum() + (tokens == UNK_ID).sum())


def report(work: Path, runs: int) -> tuple[dict, list[str]]:
    figures: dict = {}
    for masking in MASKINGS:
        folder = work / "runs" / masking
        rows = []
        for seed in zh_runs.seeds(runs):
            evaluation = json.loads((folder / "eval" / seed / "metrics.json").read_text())
            own = next(iter(evaluation["intrinsic"].values()))  # this masking's held-out rows, scored by evaluate
            other = _held_out(folder / "pretrain" / seed / "checkpoints" / "last.ckpt",
                              work / MASKINGS[masking == "none"] / "eval_shards" / "sop")  # fmt: skip
            wwm, char = (own, other) if masking == "jieba" else (other, own)
            task = zh_runs.downstream(evaluation)
            rows.append({"seed": seed, "mlm_word_accuracy_wwm_rows": wwm["mlm_word_accuracy"],
                         "mlm_piece_accuracy_char_rows": char["mlm_accuracy"], "wwm_words": wwm["mlm_words"],
                         "char_pieces": char["mlm_predictions"], **task,
                         "gain": task["pretrained"] - task["random_init"]})  # fmt: skip
        figures[masking] = {"runs": rows}
    lines = ["| masking | " + " | ".join(MEASURES) + " |", "|---" * (len(MEASURES) + 1) + "|"]
    for masking in MASKINGS:
        cells = [zh_runs.mean_sd([r[m] for r in figures[masking]["runs"]]) for m in MEASURES]
        lines.append(f"| {masking} | " + " | ".join(cells) + " |")
    per_run = {m: [[r[m] for r in figures[k]["runs"]] for k in ("jieba", "none")] for m in MEASURES}
    differences = {
        m: zh_runs.welch(*per_run[m]) for m in ("mlm_word_accuracy_wwm_rows", "mlm_piece_accuracy_char_rows", "gain")
    }
    (finding,) = check({r.name: r.evidence for r in collect(work / "runs")}, (FINDING,))
    differences["downstream_bootstrap"] = {k: finding[k] for k in ("difference", "low", "high")}
    first = figures["jieba"]["runs"][0]
    unknown, pieces = unknown_rate(work / "jieba" / "eval_shards" / "sop")
    figures["unknown_pieces"] = {"unknown": unknown, "pieces": pieces}
    lines += [
        "",
        f"Unknown pieces in the held-out documents' rows: {unknown:,} of {pieces:,} ({unknown / pieces:.3%}).",
    ]
    lines += [
        "",
        f"Scored rows: {first['wwm_words']:,} masked jieba words, {first['char_pieces']:,} masked pieces.",
        "",
    ]
    lines += [f"jieba − none, {m}: {d['difference']:+.4f} (95 % interval {d['low']:+.4f} to {d['high']:+.4f})"
              for m, d in differences.items()]  # fmt: skip
    lines += ["", f'Verdict on "{CLAIM}" (hierarchical bootstrap, downstream): {finding["verdict"]}.']
    return {"maskings": figures, "differences": differences, "verdict": finding["verdict"]}, lines


def main() -> None:
    coverage = (float, 0.9995, "the vocab stage's character_coverage")
    args = zh_runs.arguments(__doc__, {"vocab_size": (int, 8000, "pieces"), "character_coverage": coverage})
    inputs, log = zh_runs.documents(args)
    vocab = data_stages(inputs, args.work, args.vocab_size, args.character_coverage, log)
    for masking in MASKINGS:
        zh_runs.train_and_evaluate(args.work, masking, vocab, args.runs, args.steps, log)
    zh_runs.write_results(
        "word_masking_gain", args, ["vocab_size", "character_coverage"], *report(args.work, args.runs)
    )


if __name__ == "__main__":
    main()
