"""Tests for pipelines.readers.sources: how the readers take files as users write them."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from pipelines.readers import sources


def _read(path: Path, format: str = "auto") -> list[tuple[str, dict]]:
    [source] = sources.plan_sources([str(path)], format)
    return list(sources.read_records(source, "text"))


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_every_line_ending_splits_lines(tmp_path: Path, end: str):
    (tmp_path / "doc.txt").write_bytes(end.join(["First line.", "Second line.", "", "Third.", ""]).encode())
    assert _read(tmp_path / "doc.txt") == [("First line.\nSecond line.\n\nThird.", {})]
    (tmp_path / "wiki.txt").write_bytes(end.join(["One.", "Two.", "", "Other.", ""]).encode())
    assert _read(tmp_path / "wiki.txt", "bert") == [("One.\nTwo.", {"line": 1}), ("Other.", {"line": 4})]


def test_utf16_text_is_named_as_such(tmp_path: Path):
    (tmp_path / "notes.txt").write_bytes("Some notes.\nMore notes.\n".encode("utf-16"))
    message = f"{tmp_path / 'notes.txt'}: line 1: contains NUL bytes; looks like UTF-16 or binary, not UTF-8 text"
    with pytest.raises(ValueError, match=re.escape(message)):
        _read(tmp_path / "notes.txt")


@pytest.mark.parametrize("indent", [None, 2])
def test_a_json_array_given_as_json_lines_says_so(tmp_path: Path, indent: int | None):
    (tmp_path / "docs.json").write_text(json.dumps([{"text": "a"}, {"text": "b"}], indent=indent))
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'docs.json'}: line 1: a JSON array, not JSON Lines")):
        _read(tmp_path / "docs.json")


def test_json_lines_read_as_text_warn_and_go_on(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    lines = [json.dumps({"text": f"document {i}"}) for i in range(3)]
    (tmp_path / "docs.txt").write_text("\n".join(lines) + "\n\n")
    with caplog.at_level(logging.WARNING):
        assert _read(tmp_path / "docs.txt", "text") == [("\n".join(lines) + "\n", {})]
    assert f"{tmp_path / 'docs.txt'}: every line looks like JSON" in caplog.text and "--format jsonl" in caplog.text
    caplog.clear()
    (tmp_path / "prose.txt").write_text('{"text": "a"}\nbut this line is prose.\n')
    with caplog.at_level(logging.WARNING):
        _read(tmp_path / "prose.txt", "text")
    assert not caplog.text
