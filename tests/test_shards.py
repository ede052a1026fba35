"""The shard contract as a reader relies on it: typed manifest fields that follow the stage's config, a writer
that refuses an incomplete folder and streams rows into files whole or not at all, a reader that checks what it
opens."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipelines.algorithms.textnorm import Normalizer
from pipelines.contracts.manifest import MANIFEST, SPIECE, Manifest, shard_schema
from pipelines.contracts.shards import ShardWriter, open_shard, rows_table, shard_batches
from pipelines.instances import InstancesConfig
from pipelines.runtime.files import open_atomically
from tests.conftest import PipelineRun, run_instances


def _sentences_with(pipeline_run: PipelineRun, tmp_path: Path, stats: dict) -> Path:
    """A copy of the segment stage's output whose stats.json has ``stats`` merged in (None deletes a key)."""
    sentences = tmp_path / "sentences"
    sentences.mkdir()
    for path in pipeline_run.sentences.iterdir():
        (sentences / path.name).write_bytes(path.read_bytes())
    merged = json.loads((sentences / "stats.json").read_text()) | stats
    (sentences / "stats.json").write_text(json.dumps({k: v for k, v in merged.items() if v is not None}))
    return sentences


def test_the_manifest_records_the_stage_config_and_the_segment_normalisation_as_typed_fields(
    pipeline_run: PipelineRun, tmp_path: Path
) -> None:
    # The segment stage's record is what counts: write one that differs from the defaults.
    sentences = _sentences_with(pipeline_run, tmp_path, {"normalizer": {"lower_case": False, "strip_accents": True}})
    flags = ["--ngram", "2", "--masked_lm_prob", "0.2", "--inter_sentence", "nsp", "--dupe_factor", "1"]
    run_instances(
        PipelineRun(pipeline_run.corpus, sentences, pipeline_run.vocab, pipeline_run.shards), tmp_path / "o", *flags
    )
    manifest = Manifest.read(tmp_path / "o", verify=True)
    config = InstancesConfig(ngram=2, masked_lm_prob=0.2, inter_sentence="nsp", dupe_factor=1)
    assert manifest.masking == config.masking and manifest.masking.ngram == 2
    assert manifest.inter_sentence == "nsp"
    assert manifest.normalizer == Normalizer(lower_case=False, strip_accents=True)
    assert manifest.schema == shard_schema(manifest.vocab_size, manifest.max_seq_length)


def test_an_older_sentence_folder_without_a_normalisation_record_is_refused(
    pipeline_run: PipelineRun, tmp_path: Path
) -> None:
    sentences = _sentences_with(pipeline_run, tmp_path, {"normalizer": None})
    with pytest.raises(ValueError, match=r"stats\.json: no normalizer record"):
        run_instances(
            PipelineRun(pipeline_run.corpus, sentences, pipeline_run.vocab, pipeline_run.shards), tmp_path / "o"
        )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda body: body | {"schema_version": 1}, "schema_version 1, expected 3"),
        (lambda body: {k: v for k, v in body.items() if k != "masking"}, r"\['masking'\] missing or unknown"),
        (lambda body: body | {"masking": body["masking"] | {"ngram": 0}}, "ngram"),
        (lambda body: body | {"inter_sentence": "swap"}, "inter_sentence='swap'"),
        (lambda body: body | {"normalizer": {"lower": True}}, "lower"),
    ],
    ids=["old-version", "missing-field", "bad-masking", "bad-objective", "bad-normalizer"],
)
def test_a_manifest_this_version_cannot_read_is_refused_naming_it(
    pipeline_run: PipelineRun, tmp_path: Path, change, message: str
) -> None:
    body = json.loads((pipeline_run.shards / MANIFEST).read_text())
    (tmp_path / MANIFEST).write_text(json.dumps(change(body)))
    with pytest.raises(ValueError, match=rf"{tmp_path / MANIFEST}: not a readable shard manifest \(.*{message}"):
        Manifest.read(tmp_path)


def test_the_manifest_round_trips_byte_for_byte(pipeline_run: PipelineRun) -> None:
    written = (pipeline_run.shards / MANIFEST).read_bytes()
    assert Manifest.read(pipeline_run.shards).to_bytes() == written


def _writer(folder: Path, manifest: Manifest, files: int = 1) -> ShardWriter:
    return ShardWriter(str(folder), files, manifest.schema, open_atomically)


def test_the_writer_writes_no_manifest_for_an_incomplete_folder(pipeline_run: PipelineRun, tmp_path: Path) -> None:
    manifest = Manifest.read(pipeline_run.shards)
    writer = _writer(tmp_path, manifest)
    train = writer.write_shard("train", 0, [open_shard(manifest.paths(pipeline_run.shards, "train")[0])])
    with pytest.raises(RuntimeError, match=r"1 shards written, expected 2 .*validation-00000-of-00001"):
        writer.write_manifest(dataclasses.replace(manifest, shards=[train]))
    assert not (tmp_path / MANIFEST).exists()


def test_the_writer_refuses_rows_of_another_schema(pipeline_run: PipelineRun, tmp_path: Path) -> None:
    manifest = Manifest.read(pipeline_run.shards)
    table = open_shard(manifest.paths(pipeline_run.shards, "train")[0])
    wide = table.cast(shard_schema(1 << 17, manifest.max_seq_length))  # uint32 ids
    with pytest.raises(ValueError, match="shard train 0: input_ids is list<item: uint32>, not list<item: uint16>"):
        _writer(tmp_path, manifest).write_shard("train", 0, [wide])
    assert not list(tmp_path.iterdir())


def test_the_reader_refuses_a_shard_of_another_schema_naming_it(pipeline_run: PipelineRun, tmp_path: Path) -> None:
    manifest = Manifest.read(pipeline_run.shards)
    table = open_shard(manifest.paths(pipeline_run.shards, "train")[0])
    path = tmp_path / "other.arrow"
    with pa.ipc.new_file(path, table.schema.remove(table.schema.get_field_index("duplicate"))) as writer:
        writer.write_table(table.drop_columns(["duplicate"]))
    assert open_shard(path).num_rows == table.num_rows  # readable as Arrow ...
    with pytest.raises(ValueError, match=rf"{path}: not the manifest's schema \(no column duplicate\)"):
        open_shard(path, manifest.schema)  # ... but not a shard of this folder
    (tmp_path / "junk.arrow").write_bytes(b"not arrow")
    with pytest.raises(ValueError, match=r"junk\.arrow: not a readable Arrow shard"):
        open_shard(tmp_path / "junk.arrow")


def test_a_copied_folder_written_by_the_writer_reads_and_verifies(pipeline_run: PipelineRun, tmp_path: Path) -> None:
    manifest = Manifest.read(pipeline_run.shards)
    writer = _writer(tmp_path, manifest)
    first = {s: open_shard(manifest.paths(pipeline_run.shards, s)[0]) for s in ("train", "validation")}
    shards = [writer.write_shard(s, 0, [table]) for s, table in first.items()]
    sha = writer.write_vocab(SPIECE, (pipeline_run.shards / SPIECE).read_bytes())
    writer.write_manifest(dataclasses.replace(manifest, shards=shards, vocab_sha256=sha))
    copied = Manifest.read(tmp_path, verify=True)
    assert [s.rows for s in copied.shards] == [s.rows for s in manifest.shards[:1] + manifest.split("validation")[:1]]


def _random_rows(rng: np.random.Generator, rows: int) -> pa.Table:
    """Rows of the shard schema with lists of every length from empty up (masks can be empty, ids never are)."""

    def random_lists(shortest: int, longest: int) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, values) of ``rows`` lists of ``shortest`` to ``longest`` - 1 values each."""
        offsets = np.concatenate([[0], np.cumsum(rng.integers(shortest, longest, rows))])
        return offsets, rng.integers(0, 100, offsets[-1])

    ids, masked = random_lists(3, 40), random_lists(0, 5)
    lists = {"input_ids": ids, "token_type_ids": (ids[0], ids[1] % 2), "masked_lm_positions": masked}
    scalars = {
        "sentence_order_label": rng.integers(0, 2, rows),
        "document_id": pa.array([f"doc-{'x' * int(n)}" for n in rng.integers(0, 30, rows)]),
        "duplicate": rng.integers(0, 16, rows),
        "target_length": rng.integers(3, 128, rows),
    }
    return rows_table(shard_schema(5000, 512), lists | {"masked_lm_ids": masked}, scalars)


def _ipc_bytes(batches: list[pa.RecordBatch], schema: pa.Schema) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("seed", range(6))
def test_batches_streamed_from_runs_are_the_bytes_of_the_whole_table_cut_into_batches(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small batches, so runs end before, at and just after batch boundaries, and runs of one row or none come.
    monkeypatch.setattr("pipelines.contracts.shards.ROWS_PER_BATCH", 16)
    rng = np.random.default_rng(seed)
    sizes = [int(n) for n in rng.choice([0, 1, 2, 15, 16, 17, 40, 100], size=12)]
    runs = [_random_rows(rng, n) for n in sizes]
    whole = pa.concat_tables(runs).combine_chunks()
    expected = _ipc_bytes(whole.to_batches(max_chunksize=16), whole.schema)
    assert _ipc_bytes(list(shard_batches(iter(runs))), whole.schema) == expected


def test_a_shard_streams_into_its_file_and_its_entry_describes_the_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    runs = [_random_rows(rng, n) for n in (5000, 3, 7000)]
    schema = shard_schema(5000, 512)
    info = ShardWriter(str(tmp_path), 1, schema, open_atomically).write_shard("train", 0, iter(runs))
    data = (tmp_path / info.file).read_bytes()
    whole = pa.concat_tables(runs)
    assert (info.rows, info.bytes, info.sha256) == (12003, len(data), hashlib.sha256(data).hexdigest())
    assert info.tokens == sum(len(ids) for ids in whole.column("input_ids").to_pylist())
    assert open_shard(tmp_path / info.file, schema).equals(whole)
    assert [p.name for p in tmp_path.iterdir()] == [info.file]  # no temporary left behind


def test_a_shard_whose_rows_fail_midway_leaves_no_file_at_all(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)

    def runs() -> Iterator[pa.Table]:
        yield _random_rows(rng, 9000)  # two batches already in the file when the next run fails
        raise RuntimeError("worker lost")

    writer = ShardWriter(str(tmp_path), 1, shard_schema(5000, 512), open_atomically)
    with pytest.raises(RuntimeError, match="worker lost"):
        writer.write_shard("train", 0, runs())
    assert not list(tmp_path.iterdir())
