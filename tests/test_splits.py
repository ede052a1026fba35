"""Tests for pipelines.algorithms.splits: the one split of documents every stage shares."""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipelines.algorithms import splits
from pipelines.algorithms.batch_hashes import stable_hashes64
from pipelines.contracts import documents

IDS = [f"pydoc:module{i}:function{i % 7}" for i in range(20000)]


def test_held_out_documents_are_the_fraction_asked_split_evenly_into_dev_and_test():
    counts = collections.Counter(splits.split_of(i, 0.2) for i in IDS)
    assert abs(counts["train"] / len(IDS) - 0.8) < 0.01
    assert abs(counts["dev"] / len(IDS) - 0.1) < 0.01 and abs(counts["test"] / len(IDS) - 0.1) < 0.01
    assert all(splits.is_held_out(i, 0.2) == (splits.split_of(i, 0.2) in splits.HELD_OUT) for i in IDS)


def test_a_larger_fraction_only_adds_held_out_documents():
    small = {i for i in IDS if splits.is_held_out(i, 0.1)}
    large = {i for i in IDS if splits.is_held_out(i, 0.3)}
    assert small < large


def test_the_instances_stage_batch_hash_holds_out_the_same_documents():
    # pipelines.instances hashes a file's ids at once with the same key: it must agree with split_of, document
    # for document, or pretraining would train on the tasks' dev and test documents.
    batch = stable_hashes64((splits.SPLIT_KEY,), pa.array(IDS)) / 2.0**64 < 0.2
    assert np.array_equal(batch, np.array([splits.is_held_out(i, 0.2) for i in IDS]))


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_a_fraction_that_leaves_a_side_empty_is_refused(fraction: float):
    with pytest.raises(ValueError, match="held_out_fraction must be in"):
        splits.check_fraction(fraction)


def test_an_upstream_split_at_another_fraction_is_refused_naming_its_file(tmp_path: Path):
    (tmp_path / "stats.json").write_text(json.dumps({"counters": {}}))  # an upstream that does not split
    assert documents.read_split_stats(str(tmp_path), 0.2) == {"counters": {}}
    (tmp_path / "stats.json").write_text(json.dumps({"held_out_fraction": 0.2}))
    assert documents.read_split_stats(str(tmp_path), 0.2) == {"held_out_fraction": 0.2}
    (tmp_path / "stats.json").write_text(json.dumps({"held_out_fraction": 0.1}))
    with pytest.raises(ValueError, match=r"stats\.json: written with held_out_fraction 0\.1, but this stage splits"):
        documents.read_split_stats(str(tmp_path), 0.2)


def test_every_splitting_stage_has_the_one_held_out_field_and_its_check() -> None:
    # One field, one help line and one check, not a copy per stage that could drift (another default, no check).
    from pipelines import dedup, instances, leakage, tasks, vocab

    configs = [
        dedup.DedupConfig,
        vocab.VocabConfig,
        instances.InstancesConfig,
        leakage.LeakageConfig,
        tasks.TasksConfig,
    ]
    for config in configs:
        assert issubclass(config, splits.HeldOutSplit), config.__name__
        (field,) = [f for f in dataclasses.fields(config) if f.name == "held_out_fraction"]
        assert field == {f.name: f for f in dataclasses.fields(splits.HeldOutSplit)}["held_out_fraction"]
        assert config().held_out_fraction == 0.2
        with pytest.raises(ValueError, match="held_out_fraction must be in"):
            config(held_out_fraction=1.0)


def test_the_normalizer_record_is_read_once_for_every_stage_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "stats.json").write_text(json.dumps({"held_out_fraction": 0.2}))  # an older segment stage's
    with pytest.raises(ValueError, match=r"stats\.json: no normalizer record \(older segment stage\); rerun it"):
        documents.read_normalizer(str(tmp_path))
    record = {"lower_case": True, "remove_space": True, "keep_accents": False}
    (tmp_path / "stats.json").write_text(json.dumps({"held_out_fraction": 0.1, "normalizer": record}))
    assert documents.read_normalizer(str(tmp_path)) == record
    with pytest.raises(ValueError, match=r"written with held_out_fraction 0\.1"):
        documents.read_normalizer(str(tmp_path), 0.2)
