"""A synthetic corpus of any size that no data stage can shortcut, for ``bench/scale.py``.

Sentences of the embedded default's standard-library part (Python's own docstrings and help topics) and of
``tests/fixtures/prose`` (four public-domain books) are recombined into new documents, and every sentence of two
words or more gets at least two of its words replaced by words drawn uniformly from the same source's distinct
words. With 4-21 k distinct words per source, two copies of one pool sentence of eight words or more (the length
the dedup stage's passage rule looks at) coincide with a chance below 1 in 10⁸, so no two documents and almost
no two sentences repeat: every stage does the work of distinct text (``bench/scale.py`` reports what dedup
removed), and a file's generation depends on (seed, file index) alone, so any size's corpus is the first files
of a larger one.

What it is not representative of: dedup's removal rates (there are no duplicates to find, so dedup's decisions
stay small while its reading, hashing and spilling grow with the text; real corpora remove 5-30 %), the
vocabulary's quality (substituted words break the sources' phrases), and sentence-segmentation difficulty (the
pool's sentences are re-joined with single spaces).

Each document carries a ``label``: which of six sources its sentences come from (the four books, and the
standard library's modules split in two by name), so the tasks stage builds a real classification task.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from pipelines.readers import pydocs

__all__ = ["FILES_PER_GB", "build", "sentence_pool"]

REPO = Path(__file__).resolve().parents[1]
PROSE = REPO / "tests" / "fixtures" / "prose"
FILES_PER_GB = 100  # ~10 MB JSON Lines files: the corpus stage reads a file per task, so 10 at 0.1 GB
GB = 10**9
VERSION = 1  # of the generator: a cached file made by another version is made again
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _sentences(text: str) -> list[list[str]]:
    words = " ".join(text.split())
    return [s.split(" ") for s in _SENTENCE_END.split(words) if s]


def sentence_pool() -> dict[str, list[list[str]]]:
    """Returns the six sources' sentences, each a list of words, in a fixed order."""
    pool: dict[str, list[list[str]]] = {}
    for book in sorted(p for p in PROSE.iterdir() if p.is_dir()):
        pool[book.name] = [s for path in sorted(book.glob("*.txt")) for s in _sentences(path.read_text("utf-8"))]
    for _, source in pydocs.embedded_sources("stdlib"):
        try:
            documents = pydocs.source_documents(source)
        except (SyntaxError, ValueError, OSError):
            continue
        name = "stdlib_a_m" if pydocs.module_name(source).lower() < "n" else "stdlib_n_z"
        pool.setdefault(name, []).extend(s for d in documents for s in _sentences(d["text"]))
    return pool


def _document(rng: np.random.Generator, sentences: list[list[str]], words: np.ndarray) -> str:
    picked = rng.integers(0, len(sentences), size=int(rng.integers(3, 40)))
    out = []
    for index in picked:
        sentence = list(sentences[index])
        if len(sentence) >= 2:
            changes = max(2, int(rng.binomial(len(sentence), 0.15)))
            for position in rng.choice(len(sentence), size=min(changes, len(sentence)), replace=False):
                sentence[position] = words[rng.integers(0, len(words))]
        out.append(" ".join(sentence))
    return " ".join(out)


def _write_file(path: Path, index: int, size: int, seed: int, pool: dict[str, list[list[str]]]) -> None:
    rng = np.random.default_rng([seed, index])
    names = list(pool)
    vocab = {name: np.array(sorted({w for s in pool[name] for w in s}), dtype=object) for name in names}
    lines, written, number = [], 0, 0
    while written < size:
        name = names[int(rng.integers(0, len(names)))]
        record = {"id": f"scale-{index:05d}-{number:07d}", "text": _document(rng, pool[name], vocab[name]),
                  "label": name}  # fmt: skip
        line = json.dumps(record, ensure_ascii=False) + "\n"
        lines.append(line)
        written += len(line.encode("utf-8"))
        number += 1
    temporary = path.with_name(f".tmp-{path.name}")
    temporary.write_text("".join(lines), encoding="utf-8")
    os.replace(temporary, path)


def build(folder: Path, gb: float, seed: int = 0) -> list[Path]:
    """Writes (or reuses) the JSON Lines files of a ``gb``-gigabyte corpus under ``folder`` and returns them.

    File i holds ~``GB / FILES_PER_GB`` bytes made from (seed, i); a file already there from this ``VERSION``
    and seed is kept, so a larger size reuses a smaller one's files.
    """
    folder.mkdir(parents=True, exist_ok=True)
    count = max(1, round(gb * FILES_PER_GB))
    paths = [folder / f"part-{i:05d}.jsonl" for i in range(count)]
    stamp = folder / "generator.json"
    expected = {"version": VERSION, "seed": seed, "file_bytes": GB // FILES_PER_GB}
    if not stamp.exists() or json.loads(stamp.read_text()) != expected:
        for path in folder.glob("part-*.jsonl"):
            path.unlink()
        stamp.write_text(json.dumps(expected))
    missing = [(i, p) for i, p in enumerate(paths) if not p.exists()]
    if missing:
        pool = sentence_pool()
        for i, path in missing:
            _write_file(path, i, GB // FILES_PER_GB, seed, pool)
    return paths
