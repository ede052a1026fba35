"""What Chinese whole word masking costs and does: jieba's words against one word per character.

    python bench/word_masking.py --deduped DIR --spiece spiece.model [--rounds 3]

On a dedup stage's output of Chinese text (bench/zh_corpus.py's novels, for the recorded figures) and its vocab:

- the instances stage (``python -m pipelines.instances``, every default knob of params.yaml) with
  ``--word_segmenter none`` and ``jieba``, interleaved rounds: CPU-s of the whole process tree per input MB, and
  the ratio (target ≤ 1.5×); and the encoding alone per MB of sentences (SentencePiece, and SentencePiece with
  jieba);
- the share of masked spans that split a jieba word (cover part of one): spans are runs of masked positions, in
  the instances both stages build from the same documents (``masked_pairs``, here in-process);
- one sentence masked both ways;
- the unknown-piece rate on the held-out documents' sentences (pieces that are ``<unk>``; target ≤ 0.1 %).

Writes bench/results/word_masking.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from measure import MB, REPO, ratio, run_rounds, run_tree, summary, verdicts, write_results

from pipelines.algorithms.masked_pairs import Items, build_planned, plan_pairs
from pipelines.algorithms.masking import MaskingConfig, TokenClasses
from pipelines.algorithms.sop import Documents, PairConfig
from pipelines.algorithms.splits import is_held_out
from pipelines.algorithms.vocab_layout import UNK_ID, load_spiece
from pipelines.algorithms.vocabulary import SentencePieceVocab
from pipelines.contracts.documents import finished_files
from pipelines.instances import _encode_ids, _encode_segmented
from pipelines.runtime.files import read_parquet

HELD_OUT_FRACTION = 0.2  # params.yaml's


def _stage_cpu(deduped: Path, spiece: Path, segmenter: str, out: Path) -> dict:
    command = [sys.executable, "-m", "pipelines.instances", "--input", str(deduped), "--spiece", str(spiece)]
    command += ["--output", str(out / segmenter), f"--word_segmenter={segmenter}"]
    run = run_tree(command, log=out / f"{segmenter}.log")
    if run.returncode:
        raise SystemExit(f"{' '.join(command)} failed: see {out / segmenter}.log")
    return {"cpu_s": run.cpu_s, "wall_s": run.wall_s, "other_cores": run.other_cores}


def _documents(deduped: Path) -> tuple[list[str], list[list[str]]]:
    ids, documents = [], []
    for path in finished_files(str(deduped), "sentences"):
        table = read_parquet(path, columns=["id", "sentences"])
        ids += table.column("id").to_pylist()
        documents += table.column("sentences").to_pylist()
    return ids, documents


def _split_share(instances, joins_of_rows: np.ndarray) -> tuple[float, int]:
    """The share of masked runs that start at a token continuing a word or stop before one, and the runs."""
    masked = np.zeros(len(instances.input_ids), np.int8)
    starts = np.repeat(instances.offsets[:-1], np.diff(instances.masked.offsets))
    masked[starts + instances.masked.positions] = 1
    edges = np.flatnonzero(np.diff(np.concatenate([[0], masked, [0]])))
    begin, stop = edges[::2], edges[1::2]
    padded = np.append(joins_of_rows, 0)
    split = (padded[begin] == 1) | (padded[stop] == 1)
    return float(split.mean()), len(begin)


def _shown(sp, tokens: np.ndarray, positions: np.ndarray) -> str:
    pieces = [sp.id_to_piece(int(t)) for t in tokens]
    for p in positions:
        pieces[p] = f"[{pieces[p]}]"
    return " ".join(pieces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deduped", type=Path, required=True)
    parser.add_argument("--spiece", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args()
    sp = load_spiece(str(args.spiece))
    ids, documents = _documents(args.deduped)
    sentences = [s.encode("utf-8") for document in documents for s in document]
    input_mb = sum(p.stat().st_size for p in args.deduped.glob("sentences-*.parquet")) / MB
    text_mb = sum(map(len, sentences)) / MB

    encode = {}
    for name, fn in (("sentencepiece", _encode_ids), ("sentencepiece + jieba", _encode_segmented)):
        start = time.process_time()
        encoded = fn(SentencePieceVocab(args.spiece.read_bytes(), str(args.spiece)), sentences)
        encode[name] = (time.process_time() - start) / text_mb
    tokens, lengths, joins = encoded

    # Both masks over the same documents and pairs, so the two differ by the words alone.
    per_document = [len(d) for d in documents]
    docs = Documents.from_lengths(tokens, lengths, np.array(per_document), joins)
    items = Items(np.arange(len(documents)), ids, np.zeros(len(documents), np.int64))
    plan = plan_pairs(docs, items, 12345, PairConfig(64, 0.1, "sop"))
    classes = TokenClasses.from_pieces([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
    by_segmenter = {}
    for segmenter in ("none", "jieba"):
        masking = MaskingConfig(0.15, 10, 3, True, segmenter)
        documents_used = docs if segmenter == "jieba" else docs._replace(joins=None)
        by_segmenter[segmenter] = build_planned(documents_used, plan, masking, classes)
    laid_out = by_segmenter["jieba"].joins
    shares = {name: _split_share(built, laid_out) for name, built in by_segmenter.items()}
    row = int(np.argmax(np.diff(by_segmenter["jieba"].masked.offsets) >= 8))
    examples = {}
    for name, built in by_segmenter.items():
        lo, hi = built.offsets[row], built.offsets[row + 1]
        original = built.input_ids[lo:hi].copy()
        positions = built.masked.positions[built.masked.offsets[row] : built.masked.offsets[row + 1]]
        original[positions] = built.masked.labels[built.masked.offsets[row] : built.masked.offsets[row + 1]]
        examples[name] = _shown(sp, original, positions)

    held = [i for i, document_id in enumerate(ids) if is_held_out(document_id, HELD_OUT_FRACTION)]
    held_pieces = [piece for i in held for piece in sp.encode(documents[i])]
    held_ids = np.fromiter((t for piece in held_pieces for t in piece), np.int64)
    held_chars = sum(len(s) for i in held for s in documents[i])
    unknown = {
        "held_out_documents": len(held),
        "pieces": len(held_ids),
        "unknown_pieces": int((held_ids == UNK_ID).sum()),
        "characters": held_chars,
    }
    unknown["rate"] = unknown["unknown_pieces"] / max(1, unknown["pieces"])

    with tempfile.TemporaryDirectory() as tmp:
        measure = lambda segmenter: _stage_cpu(args.deduped, args.spiece, segmenter, Path(tmp))  # noqa: E731
        stage = run_rounds(["none", "jieba"], args.rounds, measure)
    cpu = {name: summary([r["cpu_s"] for r in runs]) for name, runs in stage.items()}
    per_round = [j["cpu_s"] / n["cpu_s"] for n, j in zip(stage["none"], stage["jieba"], strict=True)]
    ratios = {
        "instances_cpu_jieba_over_none": ratio(
            cpu["jieba"]["median"], cpu["none"]["median"], "instances stage CPU-s, jieba over none", per_round
        )
    }
    load = max(r["other_cores"] for runs in stage.values() for r in runs)
    lines = verdicts(ratios, {"instances_cpu_jieba_over_none": ("<=", 1.5)}, load)
    lines += [
        f"input: {input_mb:.2f} MB of sentence files, {text_mb:.2f} MB of sentences, {len(documents)} documents",
        *(f"instances stage, {n}: {c['median'] / input_mb:.2f} CPU-s per input MB" for n, c in cpu.items()),
        *(f"encoding with {n}: {v:.2f} CPU-s per MB of sentences" for n, v in encode.items()),
        *(f"masked spans splitting a jieba word, {n}: {s:.2%} of {count:,}" for n, (s, count) in shares.items()),
        *(f"masked ({n}): {text}" for n, text in examples.items()),
        f"unknown pieces on {unknown['held_out_documents']} held-out documents: {unknown['unknown_pieces']:,} of "
        f"{unknown['pieces']:,} ({unknown['rate']:.3%}; target <= 0.1 %)",
    ]
    for line in lines:
        print(line)
    figures = {"stage": stage, "encode_cpu_s_per_mb": encode, "split_share": shares, "examples": examples}
    write_results(args.results, "word_masking", figures | {"unknown": unknown, "input_mb": input_mb}, ratios, load,
                  lines)  # fmt: skip


if __name__ == "__main__":
    main()
