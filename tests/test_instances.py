"""The instances stage on real text: mask statistics, SOP truth, determinism, the shard contract, bad input."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import sentencepiece as spm

from pipelines import instances
from pipelines.algorithms.masked_pairs import document_instances
from pipelines.algorithms.masking import TokenClasses, is_cjk
from pipelines.algorithms.vocabulary import SentencePieceVocab
from pipelines.contracts.manifest import MANIFEST, SPIECE, Manifest, shard_schema
from pipelines.contracts.shards import open_shard
from pipelines.instances import InstancesConfig, _encode_ids
from pipelines.runtime.files import read_parquet
from tests.conftest import LOCAL, PipelineRun, run_instances

MAX_SEQ_LENGTH = 128
SPECIAL_IDS = 5


@pytest.fixture(scope="module")
def rows(pipeline_run: PipelineRun) -> pa.Table:
    manifest = Manifest.read(pipeline_run.shards)
    return pa.concat_tables(open_shard(p) for p in manifest.paths(pipeline_run.shards, "train"))


@pytest.fixture(scope="module")
def sp(pipeline_run: PipelineRun) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(pipeline_run.spiece))


def _originals(row: dict) -> list[int]:
    tokens = list(row["input_ids"])
    for position, label in zip(row["masked_lm_positions"], row["masked_lm_ids"], strict=True):
        tokens[position] = label
    return tokens


def test_mask_share_replacements_labels_and_lengths(rows: pa.Table) -> None:
    masked = tokens = 0
    outcome: Counter[str] = Counter()
    for row in rows.to_pylist():
        ids, positions, labels = row["input_ids"], row["masked_lm_positions"], row["masked_lm_ids"]
        assert len(ids) <= MAX_SEQ_LENGTH
        assert positions == sorted(set(positions)) and all(0 < p < len(ids) for p in positions)
        assert all(label >= SPECIAL_IDS for label in labels)  # no special token is ever a prediction target
        for position, label in zip(positions, labels, strict=True):
            outcome["mask" if ids[position] == 4 else "keep" if ids[position] == label else "random"] += 1
            assert ids[position] == 4 or ids[position] >= SPECIAL_IDS
        masked += len(positions)
        tokens += len(ids)
    assert abs(masked / tokens - 0.15) < 0.005, masked / tokens
    total = sum(outcome.values())
    assert abs(outcome["mask"] / total - 0.8) < 0.02
    assert abs(outcome["keep"] / total - 0.1) < 0.02
    assert abs(outcome["random"] / total - 0.1) < 0.02
    labels = rows.column("sentence_order_label").to_numpy()
    assert abs(labels.mean() - 0.5) < 0.02
    short = (rows.column("target_length").to_numpy() < MAX_SEQ_LENGTH - 3).mean()
    assert abs(short - 0.1) < 0.02, short


def test_rebuilding_a_document_gives_its_rows_and_span_lengths_follow_one_over_n(
    pipeline_run: PipelineRun, rows: pa.Table, sp: spm.SentencePieceProcessor
) -> None:
    """The stage's rows are exactly what the pure function makes for (seed, document, duplicate)."""
    config = InstancesConfig(seed=7, max_seq_length=MAX_SEQ_LENGTH)
    classes = TokenClasses.from_pieces([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
    by_key: dict[tuple[str, int], list[dict]] = {}
    for row in rows.to_pylist():
        by_key.setdefault((row["document_id"], row["duplicate"]), []).append(row)
    sentences = pa.concat_tables(read_parquet(str(p)) for p in sorted(pipeline_run.sentences.glob("sentences-*")))
    draws: Counter[int] = Counter()
    checked = 0
    for document_id, document in zip(sentences["id"].to_pylist(), sentences["sentences"].to_pylist(), strict=True):
        if (document_id, 0) not in by_key:
            continue  # a validation document
        segments = sp.encode(document)
        for duplicate in range(2):
            built = document_instances(segments, document_id, duplicate, 7, config.pairs, config.masking, classes)
            stored = by_key[(document_id, duplicate)]
            assert sorted(built.rows(built.input_ids)) == sorted(r["input_ids"] for r in stored)
            draws.update(n for n, available in built.masked.draws.tolist() if available == 3)
            checked += 1
    assert checked > 500
    total = sum(draws.values())
    for n, p in ((1, 6 / 11), (2, 3 / 11), (3, 2 / 11)):
        assert abs(draws[n] / total - p) < 0.02, (n, draws[n] / total)


def test_the_stage_encodes_as_sp_encode_does(pipeline_run: PipelineRun, sp: spm.SentencePieceProcessor) -> None:
    """The stage reads SentencePiece's int32 buffers through a private method (cheaper than its lists of ints):
    they must be sp.encode's ids, empty and non-ASCII sentences included."""
    sentences = read_parquet(str(next(pipeline_run.sentences.glob("sentences-*")))).column("sentences")
    texts = [*pc.list_flatten(sentences).to_pylist(), "", " ", "中文 çà ⁇ \t x"]
    tokens, lengths = _encode_ids(SentencePieceVocab(pipeline_run.spiece.read_bytes(), "spiece.model"), texts)
    expected = sp.encode(texts)
    assert lengths.tolist() == [len(ids) for ids in expected]
    assert tokens.dtype == np.int32 and tokens.tolist() == [t for ids in expected for t in ids]


@pytest.mark.parametrize("per_call", [instances.ENCODE_SENTENCES, 5])
def test_a_group_of_files_encodes_to_each_files_own_documents(
    pipeline_run: PipelineRun, per_call: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker encodes a group of files in calls of a few thousand sentences (of 5 here, cutting files and
    documents): each file must get the documents it gets alone, an empty file's (no documents) and a last group's
    shorter run included."""
    monkeypatch.setattr(instances, "ENCODE_SENTENCES", per_call)
    paths = sorted(map(str, pipeline_run.sentences.glob("sentences-*")))
    groups = instances._groups(paths)
    assert [path for group in groups for _, path in group] == paths
    assert [index for group in groups for index, _ in group] == list(range(len(paths)))
    assert all(0 < len(group) <= instances.FILES_PER_ENCODE for group in groups)
    fn = instances._BuildShardsFn(instances.VocabSource.find(str(pipeline_run.spiece)), [])
    fn.setup()
    columns = [read_parquet(path).column("sentences") for path in paths[:3]]
    columns.insert(1, columns[0].slice(0, 0))
    for grouped, column in zip(fn._encode(columns), columns, strict=True):
        (alone,) = fn._encode([column])
        assert len(grouped.document_offsets) == len(column) + 1
        assert grouped.joins is None and alone.joins is None  # no word segmenter
        for got, want in zip(grouped[:3], alone[:3], strict=True):
            assert got.tolist() == want.tolist()


def test_sop_label_tells_the_order_of_a_and_b_in_the_source(
    pipeline_run: PipelineRun, rows: pa.Table, sp: spm.SentencePieceProcessor
) -> None:
    sentences = pa.concat_tables(read_parquet(str(p)) for p in sorted(pipeline_run.sentences.glob("sentences-*")))
    text = {
        i: " ".join(s) for i, s in zip(sentences["id"].to_pylist(), sentences["sentences"].to_pylist(), strict=True)
    }
    checked = Counter()
    for row in rows.slice(0, 600).to_pylist():
        tokens, types = _originals(row), row["token_type_ids"]
        first_b = types.index(1)
        a, b = sp.decode(tokens[1 : first_b - 1]), sp.decode(tokens[first_b:-1])
        if "⁇" in a + b:
            continue  # an unknown piece does not decode to its source text
        earlier, later = (a, b) if row["sentence_order_label"] == 0 else (b, a)
        source = text[row["document_id"]]
        assert f"{earlier} {later}" in source or f"{earlier}{later}" in source, (earlier, later)
        checked[row["sentence_order_label"]] += 1
    assert checked[0] > 200 and checked[1] > 200


def test_every_shard_opens_memory_mapped_and_matches_the_manifest(pipeline_run: PipelineRun) -> None:
    manifest = Manifest.read(pipeline_run.shards, verify=True)
    schema = shard_schema(manifest.vocab_size, manifest.max_seq_length)
    assert {s.split for s in manifest.shards} == {"train", "validation"}
    for shard in manifest.shards:
        table = open_shard(str(pipeline_run.shards / shard.file))
        assert table.schema.equals(schema)
        assert table.num_rows == shard.rows
        assert sum(len(x) for x in table["input_ids"].to_pylist()) == shard.tokens
    assert manifest.vocab_sha256 == hashlib.sha256((pipeline_run.shards / SPIECE).read_bytes()).hexdigest()
    assert manifest.counters["instances"] == sum(s.rows for s in manifest.shards)
    train = {
        d
        for s in manifest.split("train")
        for d in open_shard(str(pipeline_run.shards / s.file))["document_id"].to_pylist()
    }
    held = {
        d
        for s in manifest.split("validation")
        for d in open_shard(str(pipeline_run.shards / s.file))["document_id"].to_pylist()
    }
    assert held and not train & held  # held out by document


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.arrow"))}


def test_reruns_are_byte_identical_with_one_or_two_workers_and_the_seed_matters(
    pipeline_run: PipelineRun, tmp_path: Path
) -> None:
    run_instances(pipeline_run, tmp_path / "two", "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    assert _hashes(tmp_path / "two") == _hashes(pipeline_run.shards)
    assert (tmp_path / "two" / MANIFEST).read_bytes() == (pipeline_run.shards / MANIFEST).read_bytes()
    run_instances(pipeline_run, tmp_path / "seed", "--seed=8", *LOCAL)
    changed = _hashes(tmp_path / "seed")
    assert all(changed[name] != digest for name, digest in _hashes(pipeline_run.shards).items() if "train" in name)


def test_shards_built_in_many_runs_of_rows_are_the_shards_built_at_once(
    pipeline_run: PipelineRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of rows (which bound a worker's memory) only split the work: their tables end to end are the shard."""
    runs: list[int] = []
    whole = instances._runs

    def counted(row_tokens: np.ndarray):
        found = list(whole(row_tokens))
        runs.append(len(found))
        return iter(found)

    monkeypatch.setattr(instances, "RUN_TOKENS", 300)  # a few rows of 128 tokens each
    monkeypatch.setattr(instances, "_runs", counted)
    run_instances(pipeline_run, tmp_path / "runs", *LOCAL)
    assert max(runs) > 10
    assert _hashes(tmp_path / "runs") == _hashes(pipeline_run.shards)
    assert (tmp_path / "runs" / MANIFEST).read_bytes() == (pipeline_run.shards / MANIFEST).read_bytes()


def test_dupe_factor_zero_writes_empty_training_shards_and_the_held_out_ones(
    pipeline_run: PipelineRun, tmp_path: Path
) -> None:
    """The held-out documents alone (what --eval_output writes): the train shards exist, with the schema and no
    rows."""
    run_instances(pipeline_run, tmp_path / "held", "--dupe_factor=0", *LOCAL)
    manifest = Manifest.read(tmp_path / "held", verify=True)
    assert all(s.rows == 0 for s in manifest.split("train")) and sum(s.rows for s in manifest.split("validation"))
    assert open_shard(str(tmp_path / "held" / manifest.split("train")[0].file)).schema == shard_schema(
        manifest.vocab_size, manifest.max_seq_length
    )


def test_eval_output_is_the_held_out_documents_paired_each_way_byte_for_byte(
    pipeline_run: PipelineRun, tmp_path: Path
) -> None:
    """One run writes the shards and, from the same encoding, what ``--inter_sentence X --dupe_factor 0`` writes
    for sop and nsp; the shards themselves are unchanged by it."""
    run_instances(pipeline_run, tmp_path / "shards", "--eval_output", str(tmp_path / "eval"), *LOCAL)
    assert _hashes(tmp_path / "shards") == _hashes(pipeline_run.shards)
    assert (tmp_path / "shards" / MANIFEST).read_bytes() == (pipeline_run.shards / MANIFEST).read_bytes()
    for objective in ("sop", "nsp"):
        alone = tmp_path / f"alone-{objective}"
        run_instances(pipeline_run, alone, f"--inter_sentence={objective}", "--dupe_factor=0", *LOCAL)
        together = tmp_path / "eval" / objective
        assert _hashes(together) == _hashes(alone) and len(_hashes(alone)) == len(Manifest.read(alone).shards)
        assert (together / MANIFEST).read_bytes() == (alone / MANIFEST).read_bytes()
        assert sorted(p.name for p in together.iterdir()) == sorted(p.name for p in alone.iterdir())
    assert _hashes(tmp_path / "eval" / "sop") != _hashes(tmp_path / "eval" / "nsp")


def test_a_corrupt_sentence_file_fails_naming_it_and_leaves_no_manifest(
    pipeline_run: PipelineRun, tmp_path: Path
) -> None:
    bad = tmp_path / "sentences"
    bad.mkdir()
    for path in [*pipeline_run.sentences.glob("sentences-*.parquet"), pipeline_run.sentences / "stats.json"]:
        (bad / path.name).write_bytes(path.read_bytes())
    victim = sorted(bad.glob("sentences-*.parquet"))[-1]
    victim.write_bytes(b"PAR1 this is not parquet")
    broken = PipelineRun(pipeline_run.corpus, bad, pipeline_run.vocab, pipeline_run.shards)
    with pytest.raises(Exception, match=victim.name):
        run_instances(broken, tmp_path / "out", *LOCAL)
    assert not (tmp_path / "out" / MANIFEST).exists()
    with pytest.raises(FileNotFoundError, match="no shard manifest"):
        Manifest.read(tmp_path / "out")


def test_an_incomplete_sentence_folder_is_refused(pipeline_run: PipelineRun, tmp_path: Path) -> None:
    partial = tmp_path / "sentences"
    partial.mkdir()
    files = sorted(pipeline_run.sentences.glob("sentences-*.parquet"))
    for path in [*files[1:], pipeline_run.sentences / "stats.json"]:
        (partial / path.name).write_bytes(path.read_bytes())
    if len(files) < 2:
        pytest.skip("the fixture corpus fits in one file")
    with pytest.raises(ValueError, match="complete"):
        run_instances(
            PipelineRun(pipeline_run.corpus, partial, pipeline_run.vocab, pipeline_run.shards), tmp_path / "o"
        )


def test_chinese_text_is_masked_character_by_character(tmp_path: Path) -> None:
    """CJK: sentences split at 。！？ and each character a word for masking (the reference misgroups them:
    google-research/albert issue 161)."""
    from pipelines import corpus, segment, vocab

    text = "我们今天去公园散步。天气很好！你想一起来吗？我们可以在湖边喝茶。孩子们在草地上跑来跑去。"
    lines = [f'{{"text": "{text * (1 + i % 3)}第{i}天。"}}' for i in range(200)]
    source = tmp_path / "zh.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    flags = ["--params", "/dev/null", *LOCAL]
    corpus.run([*flags, "--inputs", str(source), "--output", str(tmp_path / "c")])
    segment.run([*flags, "--language", "zh", "--input", str(tmp_path / "c"), "--output", str(tmp_path / "s")])
    sentences = read_parquet(str(next((tmp_path / "s").glob("sentences-*")))).to_pylist()
    # Split at 。！？; normalisation (NFKD, as AlbertTokenizer) then turns full-width ！？ into !?.
    assert all(s.endswith(("。", "!", "?")) for d in sentences for s in d["sentences"])
    assert sum(len(d["sentences"]) for d in sentences) == sum(5 * (1 + i % 3) + 1 for i in range(200))
    vocab.run(
        [
            *flags,
            "--input",
            str(tmp_path / "s"),
            "--output",
            str(tmp_path / "v"),
            "--vocab_size=60",
            "--character_coverage=1.0",
            "--allow_undeduped",
        ]
    )
    run = PipelineRun(tmp_path / "c", tmp_path / "s", tmp_path / "v", tmp_path / "out")
    run_instances(run, run.shards, *LOCAL)
    sp = spm.SentencePieceProcessor(model_file=str(run.spiece))
    classes = TokenClasses.from_pieces([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
    table = pa.concat_tables(open_shard(p) for p in Manifest.read(run.shards).paths(run.shards, "train"))
    cjk_words = 0
    for row in table.to_pylist():
        tokens = _originals(row)
        for first, end, _ in classes.words(tokens):
            pieces = [sp.id_to_piece(tokens[p]) for p in range(first, end)]
            if any(is_cjk(c) for piece in pieces for c in piece):
                # A piece of Chinese text is a word of its own (a number like "123" may span pieces), with the
                # bare "▁" before it when there is one: that space belongs to the word after it (masking.py).
                assert end - first == 1 + (pieces[0] == "▁"), pieces
                cjk_words += 1
    assert cjk_words > 1000


def test_a_rerun_removes_stale_shards_and_what_a_killed_run_left(pipeline_run: PipelineRun, tmp_path: Path) -> None:
    output = tmp_path / "shards"
    output.mkdir()
    leftovers = [".tmp-0123abcd-train-00000-of-00001.arrow", "train-00009-of-00010.arrow", ".shard-index.json"]
    for name in leftovers:
        (output / name).write_bytes(b"from a run killed with -9, or an earlier run with more files")
    run_instances(pipeline_run, output, *LOCAL)
    manifest = Manifest.read(output, verify=True)
    assert sorted(p.name for p in output.iterdir()) == sorted([MANIFEST, SPIECE, *(s.file for s in manifest.shards)])


def test_no_sentences_is_an_error_not_an_empty_shard_folder(pipeline_run: PipelineRun, tmp_path: Path) -> None:
    from pipelines.contracts.documents import SENTENCES_SCHEMA, file_name
    from pipelines.runtime.files import write_parquet_atomically

    empty = tmp_path / "sentences"  # as a segment stage whose documents were all empty would have written
    write_parquet_atomically(str(empty / file_name("sentences", 0, 1)), SENTENCES_SCHEMA.empty_table())
    (empty / "stats.json").write_bytes((pipeline_run.sentences / "stats.json").read_bytes())
    with pytest.raises(ValueError, match=rf"{empty}: no training instances from 0 documents"):
        run_instances(PipelineRun(pipeline_run.corpus, empty, pipeline_run.vocab, pipeline_run.shards), tmp_path / "o")
    assert not (tmp_path / "o" / MANIFEST).exists()
