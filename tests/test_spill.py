"""Tests for the shuffle through files (pipelines.runtime.spill): parts written per source, read one part at a time."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipelines.runtime.spill import Spill, ThenEach

SCHEMA = pa.schema([("key", pa.int64()), ("source", pa.int32())])


def _rows(source: int, keys: list[int]) -> pa.Table:
    return pa.table({"key": keys, "source": [source] * len(keys)}, schema=SCHEMA)


def test_a_part_holds_every_sources_rows_of_that_part_in_source_order(tmp_path):
    spill = Spill(str(tmp_path / "spill"))
    spill.write("k", 1, _rows(1, [7, 2, 4, 5]), np.array([1, 2, 1, 2]), 3)  # written out of source order
    spill.write("k", 0, _rows(0, [3, 9]), np.array([1, 1]), 3)
    assert spill.read("k", 1, SCHEMA).to_pylist() == [
        {"key": 3, "source": 0}, {"key": 9, "source": 0}, {"key": 7, "source": 1}, {"key": 4, "source": 1}
    ]  # fmt: skip
    assert spill.read("k", 2, SCHEMA).column("key").to_pylist() == [2, 5]
    assert spill.read("k", 0, SCHEMA).num_rows == 0  # no source had rows there
    assert spill.read("never", 0, SCHEMA).schema == SCHEMA  # no source wrote this kind
    assert sorted(p.name for p in (tmp_path / "spill" / "k").iterdir()) == ["00000.arrow", "00001.arrow"]


def test_a_part_outside_the_count_is_refused(tmp_path):
    with pytest.raises(ValueError, match="k: part 3 of 3 parts"):
        Spill(str(tmp_path)).write("k", 0, _rows(0, [1]), np.array([3]), 3)


def test_put_and_get_return_the_whole_table(tmp_path):
    spill = Spill(str(tmp_path))
    spill.put("own", 4, _rows(4, [5, 1, 5]))
    spill.put("own", 5, _rows(5, []))
    assert spill.get("own", 4, SCHEMA).column("key").to_pylist() == [5, 1, 5]
    assert spill.get("own", 5, SCHEMA).num_rows == 0


def test_delete_removes_the_folder_and_may_find_none(tmp_path):
    spill = Spill(str(tmp_path / "spill"))
    spill.put("own", 0, _rows(0, [1]))
    (tmp_path / "mine.txt").write_text("not the spill's")
    spill.delete()
    spill.delete()  # nothing left to delete is no error
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


def test_then_each_starts_after_every_element_before_it(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()

    def mark(i: int) -> int:
        (marks / str(i)).touch()
        return i

    def count_marks(i: int) -> int:
        return len(list(marks.iterdir()))

    with beam.Pipeline() as pipeline:
        seen = (
            pipeline
            | beam.Create(range(5))
            | "Mark" >> beam.Map(mark)
            | ThenEach(3)
            | "CountMarks" >> beam.Map(lambda i: (i, count_marks(i)))
        )
        assert_that(seen, equal_to([(0, 5), (1, 5), (2, 5)]))
