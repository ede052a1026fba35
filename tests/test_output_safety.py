"""Every stage clears its output folder before it writes: it must refuse, before deleting anything, an output that
overlaps one of its inputs or holds files it does not write (``pipelines.runtime.outputs.check_outputs``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pipelines import corpus, dedup, instances, leakage, segment, tasks, vocab
from pipelines.contracts.documents import SENTENCES_SCHEMA, file_name, table_from_rows
from pipelines.runtime import files

LOCAL = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _params(root: Path) -> list[str]:
    return ["--params", str(root / "none.yaml")]  # no params file: the built-in defaults


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` by relative path, with its bytes: equal snapshots mean nothing changed."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _segment_output(folder: Path, num_docs: int = 12) -> Path:
    """A finished segment stage folder: what the dedup stage reads."""
    rows = [
        {"id": f"d{i:02d}", "sentences": [f"document {i} says {' '.join(['w' + str(i * j) for j in range(12)])}."],
         "meta": "{}"}
        for i in range(num_docs)
    ]  # fmt: skip
    files.write_parquet_atomically(str(folder / file_name("sentences", 0, 1)), table_from_rows(rows, SENTENCES_SCHEMA))
    normalizer = {"lower_case": True, "strip_accents": True}
    files.write_json_atomically(str(folder / "stats.json"), {"normalizer": normalizer, "files": 1})
    return folder


def test_dedup_into_its_own_input_refuses_and_leaves_the_input_as_it_was(tmp_path: Path):
    # Before, dedup cleared sentences-*-of-* and stats.json in the folder, the segment stage's output, then failed.
    source = _segment_output(tmp_path / "sentences")
    before = _snapshot(source)
    argv = [*_params(tmp_path), "--input", str(source), *LOCAL]
    with pytest.raises(ValueError, match=r"sentences: --output is also --input \(.*sentences\); the stage clears"):
        dedup.run([*argv, "--output", str(source)])
    with pytest.raises(ValueError, match=r"--output is inside --input"):
        dedup.run([*argv, "--output", str(source / "deduped")])
    with pytest.raises(ValueError, match=r"--output holds --input"):
        dedup.run([*argv, "--output", str(tmp_path)])
    with pytest.raises(ValueError, match=r"--output is also --input"):  # the same folder, spelt another way
        dedup.run([*argv, "--output", f"{source}/../{source.name}/"])
    assert _snapshot(source) == before and not (source / "deduped").exists()


def _stage_runs(root: Path) -> dict[str, Callable[[Path], object]]:
    """Each stage's run with output folder ``out`` and inputs under ``root/in`` (missing: the check comes first)."""
    inp, p = root / "in", _params(root)
    return {
        "corpus": lambda out: corpus.run([*p, "--output", str(out), "--inputs", str(inp / "*.txt"), *LOCAL]),
        "segment": lambda out: segment.run([*p, "--input", str(inp), "--output", str(out), *LOCAL]),
        "dedup": lambda out: dedup.run([*p, "--input", str(inp), "--output", str(out), *LOCAL]),
        "vocab": lambda out: vocab.run([*p, "--input", str(inp), "--output", str(out), *LOCAL]),
        "instances": lambda out: instances.run(
            [*p, "--input", str(inp), "--spiece", str(inp / "spiece.model"), "--output", str(out), *LOCAL]
        ),
        "tasks": lambda out: tasks.run([*p, "--input", str(inp), "--output", str(out), *LOCAL]),
        "leakage": lambda out: leakage.run(
            [*p, "--sentences", str(inp), "--shards", str(inp), "--tasks", str(inp), "--output", str(out), *LOCAL]
        ),
    }


STAGES = ("corpus", "segment", "dedup", "vocab", "instances", "tasks", "leakage")
# What an earlier run of some stage leaves: a stage's clearing would delete one of these first.
EARLIER = {"stats.json": b"{}", "manifest.json": b"{}", "metrics.json": b"{}", "spiece.model": b"model"}


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_refuses_an_output_that_is_its_input_before_deleting_anything(tmp_path: Path, stage: str):
    # Before, each stage cleared its files (stats.json first) in the folder it was given, whatever else it was.
    shared = tmp_path / "in"
    shared.mkdir()
    for name, data in {**EARLIER, "sentences-00000-of-00001.parquet": b"x", "documents-00000-of-00001.parquet": b"x",
                       "a.txt": b"text"}.items():  # fmt: skip
        (shared / name).write_bytes(data)
    before = _snapshot(shared)
    with pytest.raises(ValueError, match=r"in: --output is also --\w+ \("):
        _stage_runs(tmp_path)[stage](shared)
    assert _snapshot(shared) == before


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_refuses_an_output_folder_holding_a_users_file_and_keeps_it(tmp_path: Path, stage: str):
    # Before, the stage deleted its own kinds of file there (stats.json and the like) and wrote beside notes.txt.
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    for name, data in EARLIER.items():
        (out / name).write_bytes(data)
    before = _snapshot(out)
    with pytest.raises(FileExistsError, match=r"out: holds files this stage does not write \(.*notes\.txt.*\); the"):
        _stage_runs(tmp_path)[stage](out)
    assert _snapshot(out) == before


def test_instances_refuses_a_vocabulary_inside_its_output_and_overlapping_outputs(tmp_path: Path):
    # Before, the shard folder's clearing deleted the spiece.model it was given (read already, so the run went on).
    vocab_folder = tmp_path / "vocab"
    vocab_folder.mkdir()
    (vocab_folder / "spiece.model").write_bytes(b"model")
    argv = [*_params(tmp_path), "--input", str(tmp_path / "in"), "--spiece", str(vocab_folder / "spiece.model")]
    with pytest.raises(ValueError, match=r"vocab: --output holds --spiece \("):
        instances.run([*argv, "--output", str(vocab_folder), *LOCAL])
    with pytest.raises(ValueError, match=r"shards: --output holds --eval_output \("):
        instances.run([*argv, "--output", str(tmp_path / "shards"), "--eval_output", str(tmp_path / "shards/eval")])
    assert (vocab_folder / "spiece.model").read_bytes() == b"model"


def test_vocab_refuses_to_copy_a_vocabulary_from_its_own_output(tmp_path: Path):
    # Before, the stage cleared spiece.model in --output, then found no --from_spiece to copy.
    out = tmp_path / "vocab"
    out.mkdir()
    (out / "spiece.model").write_bytes(b"model")
    argv = [*_params(tmp_path), "--input", str(tmp_path / "in"), "--output", str(out)]
    with pytest.raises(ValueError, match=r"vocab: --output holds --from_spiece \("):
        vocab.run([*argv, "--from_spiece", str(out / "spiece.model"), *LOCAL])
    assert (out / "spiece.model").read_bytes() == b"model"


def test_corpus_refuses_an_output_its_globs_read_and_takes_one_beside_a_shallow_glob(tmp_path: Path):
    # Before, the stage cleared the folder its --inputs read; a folder beside files a shallow glob reads is fine.
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.txt").write_text("A first sentence of text here. And a second one follows it.\n")
    argv = [*_params(tmp_path), *LOCAL]
    with pytest.raises(ValueError, match=r"raw/corpus: --output is inside --inputs \("):
        corpus.run([*argv, "--inputs", str(tmp_path / "raw" / "**"), "--output", str(tmp_path / "raw" / "corpus")])
    stats = corpus.run([*argv, "--inputs", str(tmp_path / "raw" / "*.txt"), "--output", str(tmp_path / "raw" / "c")])
    assert stats["counters"]["documents"] == 1


def test_a_rerun_into_the_stages_own_earlier_output_works(tmp_path: Path):
    # A regression guard: the stage's own files (and a crashed run's .tmp-* leftovers) are no foreign files.
    source = _segment_output(tmp_path / "sentences")
    argv = [*_params(tmp_path), "--input", str(source), "--output", str(tmp_path / "deduped"), *LOCAL]
    first = dedup.run(argv)
    written = _snapshot(tmp_path / "deduped")
    assert {"stats.json", "removed.jsonl", "sentences-00000-of-00001.parquet"} <= set(written)
    (tmp_path / "deduped" / ".tmp-spill" / "hashes").mkdir(parents=True)  # what a killed run leaves
    (tmp_path / "deduped" / ".tmp-spill" / "hashes" / "00000.arrow").write_bytes(b"x")
    assert dedup.run(argv) == first
    assert _snapshot(tmp_path / "deduped") == written


def _labelled_sentences(folder: Path) -> Path:
    """A finished sentences folder of documents labelled under two fields, 'package' and 'area'."""
    metas = [{"module": f"m{i}", "package": "pq"[i % 2], "area": "ab"[i // 20]} for i in range(40)]
    rows = [{"id": f"d{i:02d}", "sentences": [f"text of d{i}."], "meta": json.dumps(m)} for i, m in enumerate(metas)]
    files.write_parquet_atomically(str(folder / file_name("sentences", 0, 1)), table_from_rows(rows, SENTENCES_SCHEMA))
    files.write_json_atomically(str(folder / "stats.json"), {})
    return folder


def test_tasks_rerun_with_another_label_field_owns_and_clears_the_earlier_task(tmp_path: Path):
    # Before, the earlier run's package/ folder stayed beside the new area/ one; now its stats.json names it as
    # the stage's own, so the check accepts it and the run clears it.
    source = _labelled_sentences(tmp_path / "s")
    argv = [*_params(tmp_path), "--input", str(source), "--output", str(tmp_path / "t"), "--allow_undeduped"]
    flags = ["--num_classes=2", "--min_class_documents=5", "--held_out_fraction=0.3", *LOCAL]
    assert list(tasks.run([*argv, "--label_field=package", *flags])["tasks"]) == ["package"]
    assert (tmp_path / "t" / "package" / "task.json").exists()
    assert list(tasks.run([*argv, "--label_field=area", *flags])["tasks"]) == ["area"]
    assert not list((tmp_path / "t" / "package").glob("*.json*"))
