"""Splits two public-domain Chinese novels into one text file per chapter: the Chinese corpus of the measurements.

``python bench/zh_corpus.py MIRROR OUT`` reads 三国演义 (Luo Guanzhong, 14th century) and 红楼梦 (Cao Xueqin, 18th
century) from a checkout of the public GitHub repository ``hankinghu/literature-books`` (commit 864c0e7; its
other books are not public domain and are not read) and writes ``OUT/sanguo/NNN.txt`` and
``OUT/hongloumeng/NNN.txt``: 240 chapters, 4.4 MB of simplified Chinese, one paragraph a line, a blank line
between paragraphs, the folder the book (``tasks.label_field=folder``). ``tests/fixtures/zh`` holds five of these
chapters. Not representative of: modern Chinese (both novels are early vernacular, which jieba's dictionary of
modern words segments less well), or of a corpus of many authors.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

BOOKS = {"sanguo": "三国演义.txt", "hongloumeng": "红楼梦.txt"}
CHAPTER = re.compile(r"^第\d+章 ", re.MULTILINE)


def chapters(text: str) -> list[str]:
    """The book's chapters, each from its heading ("第N章 title") on, paragraphs one a line."""
    text = text.replace("\r\n", "\n").lstrip("\ufeff")
    starts = [m.start() for m in CHAPTER.finditer(text)]
    parts = [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]
    # The books indent paragraphs with full-width spaces; a paragraph is a line, so the indent goes.
    return ["\n\n".join(line.strip("\u3000 \t") for line in part.splitlines() if line.strip()) + "\n" for part in parts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mirror", help="a git directory of hankinghu/literature-books")
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    for folder, name in BOOKS.items():
        text = subprocess.run(["git", "-C", args.mirror, "show", f"HEAD:{name}"], capture_output=True, check=True)
        parts = chapters(text.stdout.decode("utf-8"))
        (args.out / folder).mkdir(parents=True, exist_ok=True)
        for number, chapter in enumerate(parts, start=1):
            (args.out / folder / f"{number:03d}.txt").write_text(chapter, encoding="utf-8")
        print(f"{folder}: {len(parts)} chapters, {sum(len(p.encode()) for p in parts) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
