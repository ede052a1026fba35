"""The atomic-write helpers every stage uses, under the races a multi-worker run produces."""

from pathlib import Path

import pytest
from apache_beam.io.filesystems import FileSystems

from pipelines import files


def test_a_folder_made_by_another_worker_meanwhile_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # Two SDK workers both see the folder missing, then both create it: the second mkdirs must not fail the bundle.
    folder = tmp_path / "out"
    folder.mkdir()
    real_exists = FileSystems.exists
    calls = []

    def exists_missed_once(path: str) -> bool:
        calls.append(path)
        return len(calls) > 1 and real_exists(path)

    monkeypatch.setattr(FileSystems, "exists", staticmethod(exists_missed_once))
    files.write_bytes_atomically(str(folder / "a.bin"), b"payload")
    assert (folder / "a.bin").read_bytes() == b"payload"
    assert sorted(p.name for p in folder.iterdir()) == ["a.bin"]


def test_a_folder_that_cannot_be_made_still_fails(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError):
        files.write_bytes_atomically(str(blocker / "sub" / "a.bin"), b"payload")
