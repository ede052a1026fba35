"""Chinese whole word masking: jieba's words through the instances stage, the shards and dynamic masking.

Runs the real stages on ``tests/fixtures/zh`` (five chapters of two public-domain novels).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import sentencepiece as spm

from albert_lightning.pretraining.data import ShardDataset
from pipelines.algorithms.masking import MaskingConfig, TokenClasses, is_cjk, mask_batch
from pipelines.algorithms.textnorm import Normalizer
from pipelines.algorithms.vocab_layout import NUM_SPECIAL, UNK_ID
from pipelines.algorithms.word_segments import jieba_words, piece_joins
from pipelines.contracts.manifest import MANIFEST, Manifest
from pipelines.contracts.shards import open_shard
from pipelines.runtime.files import read_parquet
from tests.conftest import LOCAL, NO_PARAMS, UNDEDUPED

FIXTURE = Path(__file__).parent / "fixtures" / "zh"
FLAGS = ["--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=3", "--seed=3"]


@pytest.fixture(scope="module")
def zh_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """corpus → segment (zh) → vocab on the fixture, then the shards masked per character and per jieba word."""
    from pipelines import corpus, instances, segment, vocab

    root = tmp_path_factory.mktemp("zh")
    corpus.run([*NO_PARAMS, "--inputs", str(FIXTURE / "*" / "*.txt"), "--output", str(root / "corpus"), *LOCAL])
    segment.run([*NO_PARAMS, "--language=zh", "--input", str(root / "corpus"), "--output", str(root / "s"), *LOCAL])
    vocab.run([*NO_PARAMS, "--input", str(root / "s"), "--output", str(root / "v"), UNDEDUPED, "--vocab_size=2500",
               "--character_coverage=0.9995", *LOCAL])  # fmt: skip
    for segmenter in ("none", "jieba"):
        argv = ["--input", str(root / "s"), "--spiece", str(root / "v" / "spiece.model"), "--output"]
        instances.run([*NO_PARAMS, *argv, str(root / segmenter), UNDEDUPED, *FLAGS, f"--word_segmenter={segmenter}",
                       *LOCAL])  # fmt: skip
    return root


def _sp(root: Path) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(root / "v" / "spiece.model"))


def _rows(folder: Path) -> pa.Table:
    return pa.concat_tables(open_shard(p) for p in Manifest.read(folder).paths(folder, "train"))


def _encoded(sp: spm.SentencePieceProcessor, text: str) -> tuple[list[int], np.ndarray]:
    pieces = sp.encode([text], return_type="proto")[0].pieces
    return [p.id for p in pieces], piece_joins(text, [p.begin for p in pieces])


def _jieba_word_spans(sp: spm.SentencePieceProcessor, text: str) -> list[tuple[int, int]]:
    """The pieces [first, end) each multi-character CJK jieba word of ``text`` covers (pieces that start in it)."""
    pieces = sp.encode([text], return_type="proto")[0].pieces
    char_begin = [len(text.encode("utf-8")[: p.begin].decode("utf-8")) for p in pieces]
    spans, position = [], 0
    for word in jieba_words(text):
        if len(word) > 1 and all(map(is_cjk, word)):
            covered = [
                i
                for i, c in enumerate(char_begin)
                if position <= c < position + len(word) and pieces[i].end > pieces[i].begin
            ]  # a bare "▁" (no text of its own) belongs to no jieba word
            if covered:  # else the word lies inside a piece that starts before it
                spans.append((covered[0], covered[-1] + 1))
        position += len(word)
    return spans


def test_a_piece_inside_a_jieba_word_joins_the_one_before_and_other_scripts_keep_their_rule() -> None:
    text = "我们在北京大学学习3D打印。"
    words = jieba_words(text)
    assert "".join(words) == text and "北京大学" in words and "3D" in words
    # One piece per character: byte offsets of each character.
    begins = np.cumsum([0] + [len(c.encode()) for c in text[:-1]])
    joins = piece_joins(text, begins)
    inside = []
    for word in words:
        cjk = len(word) > 1 and all(map(is_cjk, word))
        inside += [0] + [int(cjk)] * (len(word) - 1)
    assert joins.tolist() == inside
    assert joins[text.index("京")] == 1 and joins[text.index("北")] == 0 and joins[text.index("D")] == 0


def test_a_jieba_word_is_one_masking_unit_and_none_keeps_characters(zh_run: Path) -> None:
    sp = _sp(zh_run)
    classes = TokenClasses.from_pieces([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
    text = Normalizer()("却说张飞拍马赶到关下，不得进而回。")  # as the segment stage wrote it
    tokens, joins = _encoded(sp, text)
    assert UNK_ID not in tokens
    spans = _jieba_word_spans(sp, text)
    multi = [(a, b) for a, b in spans if b - a > 1]
    assert multi, "the sentence must hold a jieba word of several pieces"
    with_jieba = {(a, b) for a, b, _ in classes.words(tokens, joins)}
    per_piece = {(a, b) for a, b, _ in classes.words(tokens)}
    for a, b in multi:  # a bare "▁" before the first word belongs to it
        assert (a, b) in with_jieba or (a - 1, b) in with_jieba
        assert (a, b) not in per_piece


def _split_share(sp: spm.SentencePieceProcessor, table: pa.Table, joins_column: bool) -> tuple[float, int]:
    """The share of masked spans (runs of masked positions) that cover part of a jieba word, and the spans."""
    split = spans = 0
    for row in table.to_pylist():
        original = list(row["input_ids"])
        for position, label in zip(row["masked_lm_positions"], row["masked_lm_ids"], strict=True):
            original[position] = label
        masked = np.zeros(len(original), bool)
        masked[row["masked_lm_positions"]] = True
        if joins_column:
            joins = np.asarray(row["joins_word"], bool)
        else:
            joins = _joins_of_row(sp, original)
        # Every masked run, and whether a word runs on past either end of it.
        edges = np.flatnonzero(np.diff(np.concatenate([[0], masked.astype(np.int8), [0]])))
        for start, stop in zip(edges[::2], edges[1::2], strict=True):
            spans += 1
            split += bool(joins[start]) or (stop < len(joins) and bool(joins[stop]))
    return split / spans, spans


def _joins_of_row(sp: spm.SentencePieceProcessor, tokens: list[int]) -> np.ndarray:
    """jieba's joins for a row masked without them: each segment re-encoded from its decoded text."""
    joins = np.zeros(len(tokens), bool)
    sep = [i for i, t in enumerate(tokens) if t < NUM_SPECIAL]  # [CLS] A [SEP] B [SEP]
    for lo, hi in itertools.pairwise(sep):
        text = sp.decode(tokens[lo + 1 : hi])
        ids, row_joins = _encoded(sp, text)
        if ids == tokens[lo + 1 : hi]:  # decoding is exact for these sentences, as the stage encoded them
            joins[lo + 1 : hi] = row_joins
    return joins


def test_no_masked_span_splits_a_jieba_word_with_jieba_and_many_do_per_character(zh_run: Path) -> None:
    sp = _sp(zh_run)
    share, spans = _split_share(sp, _rows(zh_run / "jieba"), joins_column=True)
    assert spans > 1000 and share == 0.0
    share_none, spans_none = _split_share(sp, _rows(zh_run / "none"), joins_column=False)
    assert spans_none > 1000 and share_none > 0.2  # characters of two-character words masked alone


def test_the_stage_joins_every_piece_that_starts_inside_a_jieba_word(zh_run: Path) -> None:
    """The stage's vectorised joins against a plain count of characters, on every sentence of the fixture."""
    from pipelines.algorithms.vocabulary import SentencePieceVocab
    from pipelines.instances import _encode_segmented

    sp = _sp(zh_run)
    sentences = [s for p in sorted((zh_run / "s").glob("sentences-*")) for d in read_parquet(str(p)).to_pylist()
                 for s in d["sentences"]]  # fmt: skip
    vocab = SentencePieceVocab((zh_run / "v" / "spiece.model").read_bytes(), "spiece.model")
    tokens, lengths, joins = _encode_segmented(vocab, [s.encode("utf-8") for s in sentences])
    expected = []
    for sentence in sentences:  # each piece's first character: is it a later character of a CJK jieba word?
        later = []
        for word in jieba_words(sentence):
            later += [False] + [len(word) > 1 and all(map(is_cjk, word))] * (len(word) - 1)
        pieces = sp.encode([sentence], return_type="proto")[0].pieces
        starts = [len(sentence.encode("utf-8")[: p.begin].decode("utf-8")) for p in pieces]
        expected.append(np.array([p.end > p.begin and later[c] for p, c in zip(pieces, starts, strict=True)], np.int8))
    assert len(sentences) > 900 and lengths.tolist() == [len(row) for row in expected]
    assert np.array_equal(joins, np.concatenate(expected)) and joins.mean() > 0.1
    assert np.array_equal(tokens, np.concatenate([sp.encode(s) for s in sentences]))


def test_jieba_shards_are_byte_identical_across_runs_and_processes(zh_run: Path, tmp_path: Path) -> None:
    from pipelines import instances

    argv = ["--input", str(zh_run / "s"), "--spiece", str(zh_run / "v" / "spiece.model"), "--output"]
    processes = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    instances.run([*NO_PARAMS, *argv, str(tmp_path / "two"), UNDEDUPED, *FLAGS, "--word_segmenter=jieba", *processes])
    for name in [MANIFEST, *(p.name for p in (zh_run / "jieba").glob("*.arrow"))]:
        ours, theirs = (tmp_path / "two" / name).read_bytes(), (zh_run / "jieba" / name).read_bytes()
        assert hashlib.sha256(ours).digest() == hashlib.sha256(theirs).digest(), name
    manifest = json.loads((zh_run / "jieba" / MANIFEST).read_text())
    assert manifest["masking"]["word_segmenter"] == "jieba"
    assert "joins_word" in Manifest.read(zh_run / "jieba").schema.names
    assert "joins_word" not in Manifest.read(zh_run / "none").schema.names


def test_dynamic_masks_keep_jiebas_words_whole(zh_run: Path) -> None:
    dataset = ShardDataset(zh_run / "jieba", "train", masking="dynamic", seed=5)
    rows = dataset.__getitems__([(1, i) for i in range(0, len(dataset), 7)])
    assert rows.joins_word is not None and rows.joins_word.any()
    masked = np.zeros(len(rows.input_ids), bool)
    masked[np.repeat(rows.offsets[:-1], np.diff(rows.prediction_offsets)) + rows.masked_lm_positions] = True
    joins = rows.joins_word.astype(bool)
    # A token that continues a word is masked exactly when the token before it is.
    assert np.array_equal(masked[1:][joins[1:]], masked[:-1][joins[1:]])
    stored = ShardDataset(zh_run / "jieba", "train").__getitems__([(1, i) for i in range(0, len(dataset), 7)])
    assert not np.array_equal(stored.masked_lm_positions, rows.masked_lm_positions)  # new masks, same words


def test_mask_batch_refuses_joins_of_another_length() -> None:
    classes = TokenClasses.from_pieces(["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "▁a", "b"])
    with pytest.raises(ValueError, match="3 joins for 4 tokens"):
        mask_batch(np.array([2, 5, 6, 3]), np.array([0, 4]), np.array([1], np.uint64), classes, MaskingConfig(),
                   np.zeros(3, np.int8))  # fmt: skip


def test_an_unknown_word_segmenter_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="word_segmenter='thulac': choose one of none, jieba"):
        MaskingConfig(word_segmenter="thulac")


def test_a_word_holding_an_unknown_character_is_no_candidate() -> None:
    pieces = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "▁甲", "乙", "丙", "丁"]
    classes = TokenClasses.from_pieces(pieces)
    tokens = [2, 5, 6, 1, 7, 8, 3]  # [CLS] 甲 乙 <unk> 丙 丁 [SEP]: 乙<unk>丙 one jieba word
    assert [w[:2] for w in classes.words(tokens, [0, 0, 0, 1, 1, 0, 0])] == [(1, 2), (5, 6)]
    assert [w[:2] for w in classes.words(tokens)] == [(1, 2), (2, 3), (4, 5), (5, 6)]


def test_a_manifest_written_before_word_segmenter_reads_as_none_and_unknown_fields_fail(zh_run: Path) -> None:
    body = json.loads((zh_run / "none" / MANIFEST).read_text())
    del body["masking"]["word_segmenter"], body["normalizer"]["chinese_script"]
    manifest = Manifest.from_json(body)
    assert manifest.masking.word_segmenter == "none" and manifest.normalizer.chinese_script == "keep"
    body["masking"]["segmenter"] = "jieba"
    with pytest.raises(ValueError, match=r"masking: fields \['segmenter'\] missing or unknown"):
        Manifest.from_json(body)
    del body["masking"]["segmenter"], body["masking"]["ngram"]
    with pytest.raises(ValueError, match=r"masking: fields \['ngram'\] missing or unknown"):
        Manifest.from_json(body)


def _cjk_words(words: list[str]) -> list[tuple[int, int]]:
    """The character spans of the words that whole word masking keeps together: two or more CJK characters."""
    spans, position = [], 0
    for word in words:
        if len(word) > 1 and all(map(is_cjk, word)):
            spans.append((position, position + len(word)))
        position += len(word)
    return spans


def test_rjiebas_chinese_words_are_jieba_0_42_1s_on_every_sentence_of_the_fixture(zh_run: Path) -> None:
    """The stage cuts with rjieba (jieba in Rust) for speed; its Chinese words must be jieba's own."""
    jieba = pytest.importorskip("jieba")
    tokenizer = jieba.Tokenizer()  # its own dictionary load, not the process-wide jieba.dt
    sentences = [s for p in sorted((zh_run / "s").glob("sentences-*")) for d in read_parquet(str(p)).to_pylist()
                 for s in d["sentences"]]  # fmt: skip
    assert len(sentences) > 900
    ours = [_cjk_words(jieba_words(s)) for s in sentences]
    assert ours == [_cjk_words(tokenizer.lcut(s, HMM=True)) for s in sentences]
    assert sum(map(len, ours)) > 5000
