"""Hostile input to the corpus stage: an endless line or a compression bomb fails with one line naming
the file, after reading a bounded amount; Parquet is read a row group at a time; normal input reads as before.

Sizes are tiny: the bounds (``max_line_mb``, ``max_expansion``) are set low instead of the files made large.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import random
import re
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipelines import corpus
from pipelines.readers import sources
from pipelines.runtime.commands import error_line

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
MB = 1 << 20
COMPRESS = {
    "gz": gzip.compress,
    "bz2": bz2.compress,
    "xz": lzma.compress,
    "zst": zstandard.ZstdCompressor().compress,
    "deflate": zlib.compress,  # Beam's .deflate is a zlib stream
}


def _run(out: Path, *flags: str) -> dict:
    # --params points nowhere so a params.yaml in the working directory cannot change the test.
    return corpus.run(["--output", str(out), "--params", str(out.parent / "none.yaml"), *flags, *IN_MEMORY])


def _read(path: Path, format: str = "auto", **bounds: float) -> list[tuple[str, dict]]:
    [source] = sources.plan_sources([str(path)], format)
    return list(sources.read_records(source, "text", **bounds))


@pytest.mark.parametrize(
    ("name", "format", "line"),
    [("book.txt", "text", b"too long " * 200), ("rows.jsonl.gz", "jsonl", b'{"text": "%s"}' % (b"x" * 2000))],
)
def test_a_line_over_max_line_mb_fails_the_stage_in_one_line_naming_file_and_line(
    tmp_path: Path, name: str, format: str, line: bytes
):
    content = b'{"text": "fine"}\n' + line + b"\n" + b'{"text": "never read"}\n'
    (tmp_path / name).write_bytes(gzip.compress(content) if name.endswith(".gz") else content)
    with pytest.raises(Exception) as raised:  # Beam wraps what the worker raised
        _run(tmp_path / "out", "--inputs", str(tmp_path / name), "--format", format, "--max_line_mb", "0.001")
    assert error_line(raised.value) == f"{tmp_path / name}: line 2 is longer than 0.001 MB (max_line_mb)"


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r", b""])
def test_a_line_exactly_at_the_bound_is_read_and_one_byte_more_is_not(tmp_path: Path, end: bytes):
    bound = 100  # bytes of the line itself, without its end
    (tmp_path / "wiki.txt").write_bytes(b"short\n" + b"a" * bound + end)
    assert _read(tmp_path / "wiki.txt", "bert", max_line_mb=bound / MB) == [("short\n" + "a" * bound, {"line": 1})]
    (tmp_path / "wiki.txt").write_bytes(b"short\n" + b"a" * (bound + 1) + end)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'wiki.txt'}: line 2 is longer than")):
        _read(tmp_path / "wiki.txt", "bert", max_line_mb=bound / MB)


def test_a_document_over_max_document_mb_fails_naming_file_and_its_first_line(tmp_path: Path):
    lines = [b"line %d of forty characters, more or less" % i for i in range(60)]  # ~2.5 KB, no line over 50 B
    (tmp_path / "book.txt").write_bytes(b"\n".join(lines))
    with pytest.raises(Exception) as raised:  # a text file is one document, however short its lines
        _run(tmp_path / "out", "--inputs", str(tmp_path / "book.txt"), "--max_document_mb", "0.001")
    expected = f"{tmp_path / 'book.txt'}: the document from line 1 is longer than 0.001 MB (max_document_mb)"
    assert error_line(raised.value).startswith(expected)
    (tmp_path / "wiki.txt").write_bytes(b"first\nshort document\n\n" + b"\n".join(lines))  # bert: the second one
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'wiki.txt'}: the document from line 4 is longer")):
        _read(tmp_path / "wiki.txt", "bert", max_document_mb=0.001)
    both = _read(tmp_path / "wiki.txt", "bert", max_document_mb=2600 / MB)  # the same files pass a bound above them
    assert [where for _, where in both] == [{"line": 1}, {"line": 4}]
    assert _read(tmp_path / "book.txt", "text", max_document_mb=2600 / MB)[0][0] == "\n".join(
        line.decode() for line in lines
    )


BOMB_LINES = 20_000
BOMB_LINE = b'{"text": "' + b"0" * 86 + b'"}\n'  # 100 bytes, valid in every line format: 2 MB in all


def test_a_gzip_bomb_fails_the_stage_in_one_line_naming_the_file(tmp_path: Path):
    bomb = tmp_path / "zeros.txt.gz"
    bomb.write_bytes(gzip.compress(BOMB_LINE * BOMB_LINES))  # 2 MB in ~6 KB: over 300x
    with pytest.raises(Exception) as raised:
        _run(tmp_path / "out", "--inputs", str(bomb), "--max_expansion", "20")
    size = bomb.stat().st_size
    message = f"{bomb}: decompresses to more than 20x its {size:,} bytes (max_expansion): a compression bomb"
    assert error_line(raised.value) == f"{message}, or raise max_expansion"
    assert not (tmp_path / "out" / "stats.json").exists()


@pytest.mark.parametrize("kind", sorted(COMPRESS))
@pytest.mark.parametrize("format", ["text", "jsonl", "bert", "parquet"])
def test_every_compression_and_format_stops_at_max_expansion(tmp_path: Path, kind: str, format: str):
    if format == "parquet":
        buffer = io.BytesIO()
        table = pa.table({"text": ["0" * 100] * BOMB_LINES})
        pq.write_table(table, buffer, compression="none", use_dictionary=False)
        data = buffer.getvalue()
    else:
        data = BOMB_LINE * BOMB_LINES
    bomb = tmp_path / f"zeros.{format}.{kind}"
    bomb.write_bytes(COMPRESS[kind](data))
    ratio = len(data) / bomb.stat().st_size
    assert ratio > 40, ratio  # a bomb indeed, well past the 20x allowed
    with pytest.raises(ValueError, match=re.escape(f"{bomb}: decompresses to more than 20x its")):
        _read(bomb, format, max_expansion=20)
    records = _read(bomb, format, max_expansion=ratio * 1.01)  # a bound just above the file's ratio passes it
    assert len(records) == (BOMB_LINES if format in ("jsonl", "parquet") else 1)


def _universal_lines(data: bytes) -> list[str]:
    """What a reader must find in ``data``: its lines split at LF, CR LF or a lone CR, as if read whole."""
    lines = re.split(rb"\r\n|\r|\n", data)
    return [line.decode() for line in (lines[:-1] if lines[-1] == b"" else lines)]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["", ".gz", ".zst", ".deflate"])
def test_normal_input_reads_the_same_at_any_line_bound(tmp_path: Path, seed: int, kind: str):
    # Lines of 0-40 bytes with every kind of end: at the longest line as the bound, reads are cut inside lines
    # and between a CR and its LF, and must still find exactly the lines a whole read finds.
    rng = random.Random(seed)
    lines = ["".join(rng.choices("ab \t{}é", k=rng.randint(0, 40))) for _ in range(300)]
    data = b"".join(line.encode() + rng.choice([b"\n", b"\r\n", b"\r"]) for line in lines)
    path = tmp_path / f"doc.txt{kind}"
    path.write_bytes(COMPRESS[kind.lstrip(".")](data) if kind else data)
    expected = "\n".join(_universal_lines(data))
    bound = max(len(line.encode()) for line in lines)
    assert _read(path, "text", max_line_mb=bound / MB, max_expansion=1e9) == [(expected, {})]
    assert _read(path, "text") == [(expected, {})]  # the default bounds do not bind on normal input
    with pytest.raises(ValueError, match="is longer than"):
        _read(path, "text", max_line_mb=(bound - 1) / MB)


def test_parquet_is_read_a_row_group_at_a_time_with_the_same_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    rng = random.Random(0)
    texts = [" ".join(f"{rng.random():.6f}" for _ in range(20)) if i % 7 else None for i in range(4000)]
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": range(4000), "text": texts}), path, row_group_size=500, use_dictionary=False)
    size = path.stat().st_size
    assert pq.ParquetFile(path).metadata.num_row_groups == 8 and size > 400_000
    reads: list[int] = []

    class Spy(io.BufferedReader):
        def read(self, n: int | None = -1) -> bytes:
            reads.append(size if n is None or n < 0 else n)
            return super().read(n)

    monkeypatch.setattr(sources.FileSystems, "open", lambda p, **_: Spy(io.FileIO(p)))  # a local file, as Beam's
    assert _read(path) == [(text or "", {"row": row}) for row, text in enumerate(texts)]
    assert max(reads) < size / 4, reads  # the footer, then one row group's column per read
