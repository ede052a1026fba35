"""How big a vocabulary a corpus wants: pieces per word and tokens per sequence at several ``vocab_size`` values.

Run on a dedup stage output (held-out documents are skipped, as the vocab stage skips them)::

    python bench/vocab_sizes.py --input data/deduped --sizes 2000 5000 10000 20000

For each size it trains SentencePiece with the vocab stage's own ``train_vocab`` on the same hash-bounded sample,
then encodes a fixed slice of training sentences and prints pieces per word, the share of words that are one piece,
the share of pieces seen fewer than 5 times in that slice (a piece the model will hardly learn), and the
word embedding's share of a ``tiny`` model's parameters (the factorised V x E table is what grows with V).
Nothing is timed; docs/your-corpus.md quotes the figures.
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile

from albert_lightning.model import AlbertConfig, AlbertForPreTraining
from pipelines.algorithms.hashes import stable_hash64
from pipelines.algorithms.splits import is_held_out
from pipelines.contracts.documents import finished_files
from pipelines.runtime import files
from pipelines.vocab import VocabConfig, train_vocab


def _embedding_share(vocab_size: int) -> float:
    """The word embedding's share of the ``tiny`` preset's parameters at ``vocab_size`` (tied with the decoder)."""
    model = AlbertForPreTraining(AlbertConfig.preset("tiny", vocab_size=vocab_size))
    total = sum(p.numel() for p in model.parameters())  # parameters() counts the tied table once
    return vocab_size * model.config.embedding_size / total


def _sample(folder: str, fraction: float, limit: int, seed: int) -> list[str]:
    """The ``limit`` training sentences with the smallest stable hash (the vocab stage's sample rule)."""
    sentences = []
    for path in finished_files(folder, "sentences"):
        for row in files.read_parquet(path, columns=["id", "sentences"]).to_pylist():
            sentences += [] if is_held_out(row["id"], fraction) else row["sentences"]
    return sorted(sentences, key=lambda s: stable_hash64(seed, s))[:limit]


def _row(size: int, sample_file: str, probe: list[str], workdir: str) -> dict:
    config = VocabConfig(vocab_size=size, num_threads=8)
    sp = train_vocab(sample_file, os.path.join(workdir, f"v{size}"), config)
    words = [w for s in probe for w in s.split()]
    pieces = [p for w in words for p in sp.encode(w)]
    counts = collections.Counter(pieces)
    one_piece = sum(len(sp.encode(w)) == 1 for w in words)
    rare = sum(1 for i in range(sp.get_piece_size()) if counts[i] < 5)
    return {
        "vocab_size": sp.get_piece_size(),
        "pieces_per_word": len(pieces) / len(words),
        "one_piece_words": one_piece / len(words),
        "rare_pieces": rare / sp.get_piece_size(),
        "tiny_embedding_share": _embedding_share(sp.get_piece_size()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="a dedup stage output folder")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 5000, 10000, 20000])
    parser.add_argument("--sample_sentences", type=int, default=1_000_000)
    parser.add_argument("--probe_sentences", type=int, default=20_000, help="sentences encoded for the figures")
    parser.add_argument("--held_out_fraction", type=float, default=0.2)
    args = parser.parse_args()
    sample = _sample(args.input, args.held_out_fraction, args.sample_sentences, 12345)
    probe = sample[-args.probe_sentences :]  # the largest hashes of the sample: a fixed, spread-out slice
    with tempfile.TemporaryDirectory() as workdir:
        sample_file = os.path.join(workdir, "sample.txt")
        with open(sample_file, "w", encoding="utf-8") as f:
            f.writelines(s + "\n" for s in sample)
        words = sum(len(s.split()) for s in sample)
        print(f"{args.input}: {len(sample):,} training sentences, {words:,} words in the sample")
        print("| vocab_size | pieces per word | one-piece words | pieces seen < 5 times | tiny's embedding share |")
        print("|---|---|---|---|---|")
        for size in args.sizes:
            r = _row(size, sample_file, probe, workdir)
            print(f"| {r['vocab_size']:,} | {r['pieces_per_word']:.2f} | {r['one_piece_words']:.1%} | "
                  f"{r['rare_pieces']:.1%} | {r['tiny_embedding_share']:.0%} |")  # fmt: skip


if __name__ == "__main__":
    main()
