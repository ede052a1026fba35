"""The reference's instance creation, as a baseline to time the instances stage against (target ≥ 30×).

google-research/albert ``create_pretraining_data.py`` in one process, written here from its description, its
costs kept: every line goes through ``preprocess_text`` and SentencePiece's pieces (its
``FullTokenizer`` with ``spm_model_file``), all documents live in memory, ``dupe_factor`` passes build pairs
and n-gram masks in Python with a seeded ``random.Random`` (span lengths from ``np.random.choice``, as it draws
them; seeded here so a rerun repeats), all instances are shuffled, then each becomes its features (piece → id
lookups, padding). Not done: the ``tf.train.Example`` serialisation and TFRecord writing (TensorFlow is not a
dependency), so the stage's advantage over this baseline understates its advantage over the reference.

Run: ``python bench/reference_instances.py --input SENTENCES --spiece MODEL --files N --dupe_factor D
--max_seq_length T --result OUT.json``; the bench (``bench/pipeline.py``) runs it as a subprocess and reads
``OUT.json``: tokens written (every instance's length, specials included), instances and CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sentencepiece as spm

from pipelines.runtime import files

__all__ = ["create_instances", "main"]


@dataclass
class Instance:
    tokens: list[str]
    segment_ids: list[int]
    is_random_next: bool
    masked_lm_positions: list[int]
    masked_lm_labels: list[str]
    token_boundary: list[int]


def preprocess_text(text: str, lower: bool = True) -> str:
    """Its text clean-up before SentencePiece: whitespace collapsed, quotes, NFKD without marks, lower case."""
    text = " ".join(text.strip().split()).replace("``", '"').replace("''", '"')
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return text.lower() if lower else text


def tokenize(sp: spm.SentencePieceProcessor, text: str) -> list[str]:
    """Its ``encode_pieces``: SentencePiece's pieces, with a piece "<digits>," split before its comma."""
    pieces = []
    for piece in sp.encode_as_pieces(text):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            parts = sp.encode_as_pieces(piece[:-1].replace("▁", ""))
            if piece[0] != "▁" and parts and parts[0][0] == "▁":  # no new word start inside a word
                parts = parts[1:] if len(parts[0]) == 1 else [parts[0][1:], *parts[1:]]
            pieces += [*parts, piece[-1]]
        else:
            pieces.append(piece)
    return pieces


def is_start_piece(piece: str) -> bool:
    """Its per-piece word-start test (the set rebuilt at every call, as it does)."""
    special = set('!"#$%&"()*+,-./:;?@[\\]^_`{|}~') | {"€", "£"}
    allowed = string.ascii_letters + string.digits + string.punctuation
    return piece.startswith(("▁", "<")) or piece in special or not all(c.lower() in allowed for c in piece.lstrip("▁"))


def masked_predictions(tokens, masked_lm_prob, max_predictions, ngram, vocab_words, rng):
    """Its ``create_masked_lm_predictions``: whole-word n-gram spans, p(n) ∝ 1/n, replaced 80/10/10 per token."""
    candidates, boundary = [], [0] * len(tokens)
    for i, token in enumerate(tokens):
        if token in ("[CLS]", "[SEP]"):
            boundary[i] = 1
            continue
        if candidates and not is_start_piece(token):
            candidates[-1].append(i)
        else:
            candidates.append([i])
            boundary[i] = int(is_start_piece(token))
    output = list(tokens)
    budget = min(max_predictions, max(1, round(len(tokens) * masked_lm_prob)))
    ngrams = np.arange(1, ngram + 1, dtype=np.int64)
    pvals = 1.0 / np.arange(1, ngram + 1)
    pvals /= pvals.sum(keepdims=True)
    spans = [[candidates[start : start + n] for n in ngrams] for start in range(len(candidates))]
    rng.shuffle(spans)
    masked, covered = [], set()
    for choices in spans:
        if len(masked) >= budget:
            break
        # Near the last word the longer slices hold fewer words; it draws n among all of them all the same.
        p = pvals[: len(choices)] / pvals[: len(choices)].sum(keepdims=True)
        n = np.random.choice(ngrams[: len(choices)], p=p)
        indexes = [i for word in choices[n - 1] for i in word]
        while len(masked) + len(indexes) > budget and n > 1:
            n -= 1
            indexes = [i for word in choices[n - 1] for i in word]
        if len(masked) + len(indexes) > budget or any(i in covered for i in indexes):
            continue
        for i in indexes:
            covered.add(i)
            if rng.random() < 0.8:
                output[i] = "[MASK]"
            elif rng.random() >= 0.5:
                output[i] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            masked.append((i, tokens[i]))
    rng.shuffle(spans)  # it shuffles again for its (disabled) permutation
    masked.sort()
    return output, [i for i, _ in masked], [label for _, label in masked], boundary


def truncate_pair(a: list[str], b: list[str], limit: int, rng: random.Random) -> None:
    while len(a) + len(b) > limit:
        longer = a if len(a) > len(b) else b
        del longer[0 if rng.random() < 0.5 else -1]


def instances_from_document(documents, index, config, vocab_words, rng) -> list[Instance]:
    """Its ``create_instances_from_document`` with sentence-order prediction (``random_next_sentence`` off)."""
    document, limit = documents[index], config.max_seq_length - 3
    target = rng.randint(2, limit) if rng.random() < config.short_seq_prob else limit
    out, chunk, length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            a = [t for segment in chunk[:a_end] for t in segment]
            b, random_next = [], True
            if len(chunk) == 1:  # a document's lone segment: B from another document
                for _ in range(10):
                    other = rng.randint(0, len(documents) - 1)
                    if other != index:
                        break
                start = rng.randint(0, len(documents[other]) - 1)
                for segment in documents[other][start:]:
                    b += segment
                    if len(b) >= target - len(a):
                        break
            else:  # the rest of the chunk, the two swapped half of the time
                b = [t for segment in chunk[a_end:] for t in segment]
                if rng.random() < 0.5:
                    a, b = b, a
                else:
                    random_next = False
            truncate_pair(a, b, limit, rng)
            tokens = ["[CLS]", *a, "[SEP]", *b, "[SEP]"]
            segment_ids = [0] * (len(a) + 2) + [1] * (len(b) + 1)
            output, positions, labels, boundary = masked_predictions(
                tokens, config.masked_lm_prob, config.max_predictions_per_seq, config.ngram, vocab_words, rng
            )
            out.append(Instance(output, segment_ids, random_next, positions, labels, boundary))
            chunk, length = [], 0
        i += 1
    return out


def create_instances(sentence_files: list[str], sp: spm.SentencePieceProcessor, config: argparse.Namespace):
    """Reads and tokenizes every document, then makes ``dupe_factor`` passes; returns the shuffled instances."""
    rng = random.Random(config.seed)
    np.random.seed(config.seed)
    documents = []
    for path in sentence_files:
        for sentences in files.read_parquet(path, columns=["sentences"]).column("sentences").to_pylist():
            document = [pieces for line in sentences if (pieces := tokenize(sp, preprocess_text(line)))]
            if document:
                documents.append(document)
    rng.shuffle(documents)
    vocab_words = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    instances = []
    for _ in range(config.dupe_factor):
        for index in range(len(documents)):
            instances += instances_from_document(documents, index, config, vocab_words, rng)
    rng.shuffle(instances)
    return instances


def features(instance: Instance, sp: spm.SentencePieceProcessor, seq_length: int, predictions: int) -> dict:
    """Its ``write_instance_to_example_files`` up to the Example: ids looked up, every list padded."""
    pad = seq_length - len(instance.tokens)
    room = predictions - len(instance.masked_lm_positions)
    return {
        "input_ids": [sp.piece_to_id(t) for t in instance.tokens] + [0] * pad,
        "input_mask": [1] * len(instance.tokens) + [0] * pad,
        "segment_ids": instance.segment_ids + [0] * pad,
        "token_boundary": instance.token_boundary + [0] * pad,
        "masked_lm_positions": instance.masked_lm_positions + [0] * room,
        "masked_lm_ids": [sp.piece_to_id(t) for t in instance.masked_lm_labels] + [0] * room,
        "masked_lm_weights": [1.0] * len(instance.masked_lm_labels) + [0.0] * room,
        "next_sentence_labels": [int(instance.is_random_next)],
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="a segment-stage folder (sentence files)")
    parser.add_argument("--spiece", required=True)
    parser.add_argument("--files", type=int, help="the first N sentence files only (its rate is per token)")
    parser.add_argument("--result", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--dupe_factor", type=int, default=40)
    parser.add_argument("--max_seq_length", type=int, default=512)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20)
    parser.add_argument("--masked_lm_prob", type=float, default=0.15)
    parser.add_argument("--short_seq_prob", type=float, default=0.1)
    parser.add_argument("--ngram", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    config = parse_args(argv)
    paths = sorted(str(p) for p in Path(config.input).glob("sentences-*-of-*.parquet"))[: config.files]
    sp = spm.SentencePieceProcessor(model_file=config.spiece)
    start, cpu = time.perf_counter(), time.process_time()
    instances = create_instances(paths, sp, config)
    for instance in instances:
        features(instance, sp, config.max_seq_length, config.max_predictions_per_seq)
    body = {
        "files": len(paths), "instances": len(instances), "tokens": sum(len(i.tokens) for i in instances),
        "masked_tokens": sum(len(i.masked_lm_positions) for i in instances),
        "cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - start,
    }  # fmt: skip
    config.result.write_text(json.dumps(body))


if __name__ == "__main__":
    main()
