"""The atomic-write helpers every stage uses, under the races a multi-worker run produces."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.localfilesystem import LocalFileSystem

from pipelines.runtime import files


def test_a_folder_made_by_another_worker_meanwhile_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # Two SDK workers both see the folder missing, then both create it: the second mkdirs must not fail the bundle.
    folder = tmp_path / "out"
    folder.mkdir()
    real_exists = LocalFileSystem.exists
    calls = []

    def exists_missed_once(self: LocalFileSystem, path: str) -> bool:
        calls.append(path)
        return len(calls) > 1 and real_exists(self, path)

    monkeypatch.setattr(LocalFileSystem, "exists", exists_missed_once)
    files.write_bytes_atomically(str(folder / "a.bin"), b"payload")
    assert (folder / "a.bin").read_bytes() == b"payload"
    assert sorted(p.name for p in folder.iterdir()) == ["a.bin"]


def test_a_folder_that_cannot_be_made_still_fails(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError):
        files.write_bytes_atomically(str(blocker / "sub" / "a.bin"), b"payload")


def test_reading_a_column_the_file_lacks_names_the_file_and_the_column(tmp_path: Path):
    path = tmp_path / "sentences.parquet"
    pq.write_table(pa.table({"id": ["a"], "text": ["x"]}), path)
    assert files.read_parquet(str(path), columns=["id"]).to_pylist() == [{"id": "a"}]
    with pytest.raises(ValueError, match=rf"{path}: no column sentences \(has id, text\)"):
        files.read_parquet(str(path), columns=["id", "sentences"])


def test_a_file_that_is_not_parquet_is_named_in_the_error(tmp_path: Path):
    path = tmp_path / "sentences.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match=rf"{path}: not a readable Parquet file"):
        files.read_parquet(str(path))
