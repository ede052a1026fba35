"""Our WordPiece ids against transformers' BertTokenizer and BertTokenizerLegacy on every sentence of a real text.

    python bench/wordpiece_ids.py --zh /work/zh [--en_mb 8]

``--zh`` is bench/zh_corpus.py's folder (two public-domain novels, 4.4 MB); the English is the docstrings of
Python's own standard library (the embedded default's text), up to ``--en_mb``. A vocabulary is trained on 80 %
of the sentences (``pipelines.algorithms.wordpiece.train_wordpiece``, chosen by stable hash), then every
sentence is encoded by ``WordPieceVocab.encode`` and by both transformers tokenizers, in the trained layout and
in BERT's ([unused] slots, [UNK]=100), lower-cased and cased. Prints and writes ``bench/results/wordpiece_ids.md``:
sentences compared, mismatches (the target is 0), the unknown-piece rate on the held-out 20 %, and CPU seconds
per MB of ours against BertTokenizer's (one thread each). Not representative of: BERT's own released
vocabularies (not downloadable here), or text with literal special tokens ("[SEP]"), which BertTokenizer
matches and ours, by design, does not.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np
from measure import MB, REPO, busy_cpu_s, other_cores, ratio, write_results

from pipelines.algorithms.hashes import stable_hash64
from pipelines.algorithms.sentences import split_sentences
from pipelines.algorithms.wordpiece import WordPieceSettings, train_wordpiece, wordpiece_from_bytes

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread each, so the CPU times compare like for like


def chinese(folder: Path) -> list[str]:
    return [
        s
        for path in sorted(folder.rglob("*.txt"))
        for paragraph in path.read_text(encoding="utf-8").split("\n")
        if paragraph.strip()
        for s in split_sentences(paragraph, "zh")
    ]


def english(max_mb: float) -> list[str]:
    """Sentences of the standard library's docstrings, module by module in path order, up to ``max_mb``."""
    sentences, size = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef))]
        for doc in filter(None, map(ast.get_docstring, nodes)):
            for paragraph in doc.split("\n\n"):
                for s in split_sentences(" ".join(paragraph.split()), "en"):
                    sentences.append(s)
                    size += len(s.encode("utf-8"))
        if size > max_mb * MB:
            break
    return sentences


def bert_layout(pieces: tuple[str, ...]) -> bytes:
    head = ["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return "".join(p + "\n" for p in [*head, *pieces[5:]]).encode("utf-8")


def compare(name: str, texts: list[str], held_out: np.ndarray, settings: dict, vocab_size: int) -> dict:
    from transformers import BertTokenizer
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    config = WordPieceSettings.from_config(settings, name)
    trained = train_wordpiece([t for t, h in zip(texts, held_out, strict=True) if not h], vocab_size, config)
    rows = {}
    for layout, data in (("trained", trained.vocab_txt()), ("bert", bert_layout(trained.pieces))):
        ours = wordpiece_from_bytes(data, settings, layout)
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "vocab.txt").write_bytes(data)
            Path(folder, "tokenizer_config.json").write_text(json.dumps(settings))
            references = {"BertTokenizer": BertTokenizer.from_pretrained(folder)}
            references["BertTokenizerLegacy"] = BertTokenizerLegacy.from_pretrained(folder)
            start = time.process_time()
            ids, counts = ours.encode(texts)
            ours_s = time.process_time() - start
            per_text = np.split(ids, np.cumsum(counts)[:-1])
            row = {"sentences": len(texts), "ours_cpu_s": ours_s}
            for reference_name, reference in references.items():
                start = time.process_time()
                expected = reference(texts, add_special_tokens=False)["input_ids"]
                row[f"{reference_name}_cpu_s"] = time.process_time() - start
                bad = [i for i, (a, b) in enumerate(zip(per_text, expected, strict=True)) if a.tolist() != b]
                # By design: a literal "[MASK]" in the text is text here, the special token to BertTokenizer.
                literal = [i for i in bad if any(t in texts[i] for t in ours.settings.special_tokens)]
                row[f"{reference_name}_mismatches"] = len(bad) - len(literal)
                row[f"{reference_name}_literal_special"] = len(literal)
                row[f"{reference_name}_first_mismatches"] = [texts[i] for i in bad if i not in literal][:3]
        unk = ours.special_ids["unk_token"]
        held_ids = [p for p, h in zip(per_text, held_out, strict=True) if h]
        row["held_out_unk_rate"] = float(np.mean(np.concatenate(held_ids) == unk))
        row["vocab_size"] = ours.vocab_size
        rows[layout] = row
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zh", type=Path, required=True, help="bench/zh_corpus.py's output folder")
    parser.add_argument("--en_mb", type=float, default=8.0)
    parser.add_argument("--vocab_size", type=int, default=21128, help="BERT-Chinese's size")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args()
    texts = {"zh": chinese(args.zh), "en": english(args.en_mb)}
    busy, wall, own = busy_cpu_s(), time.perf_counter(), time.process_time()
    figures, ratios, lines = {}, {}, []
    for language, sentences in texts.items():
        held_out = np.array([stable_hash64("wordpiece-bench", s) % 5 == 0 for s in sentences])
        mb = sum(len(s.encode("utf-8")) for s in sentences) / MB
        for case, settings in (("uncased", {"do_lower_case": True}), ("cased", {"do_lower_case": False})):
            result = compare(f"{language}-{case}", sentences, held_out, settings, args.vocab_size)
            figures[f"{language}_{case}"] = {"mb": mb, **result}
            for layout, row in result.items():
                line = (
                    f"{language} {case} {layout}: {row['sentences']:,} sentences ({mb:.1f} MB), mismatches "
                    f"BertTokenizer {row['BertTokenizer_mismatches']}, BertTokenizerLegacy "
                    f"{row['BertTokenizerLegacy_mismatches']} (and {row['BertTokenizer_literal_special']} holding a "
                    f"literal special token, by design); held-out [UNK] {row['held_out_unk_rate']:.4%}; "
                    f"{row['vocab_size']:,} pieces"
                )
                print(line)
                lines.append(line)
            row = result["trained"]
            ratios[f"cpu_{language}_{case}"] = ratio(
                row["ours_cpu_s"], row["BertTokenizer_cpu_s"],
                f"{language} {case}: CPU-s of WordPieceVocab.encode ÷ BertTokenizer's on the same sentences",
            )  # fmt: skip
    load = other_cores(busy, time.process_time() - own, time.perf_counter() - wall)
    write_results(args.results, "wordpiece_ids", figures, ratios, load, lines)


if __name__ == "__main__":
    main()
