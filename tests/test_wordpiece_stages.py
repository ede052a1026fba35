"""A WordPiece vocab.txt through the real stages: trained by the vocab stage or copied from a BERT folder, read by
the instances stage as BertTokenizer reads it, its special ids kept, whole words masked, the shards loaded.

Runs segment → vocab → instances on the Chinese fixture and a play of the English one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from albert_lightning.pretraining.data import ShardDataset
from pipelines.algorithms.textnorm import Normalizer, hf_normalizer
from pipelines.contracts.manifest import Manifest
from pipelines.contracts.shards import open_shard
from pipelines.runtime.files import read_parquet
from tests.conftest import LOCAL, NO_PARAMS, UNDEDUPED

FIXTURES = Path(__file__).parent / "fixtures"
FLAGS = ["--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=2", "--seed=3", UNDEDUPED, *LOCAL]
CASE = ["--lower_case=false", "--strip_accents=false"]  # BertTokenizer lower-cases and strips accents itself


@pytest.fixture(scope="module")
def wp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """corpus → segment (case kept) → vocab (kind wordpiece) → instances per character and per jieba word."""
    from pipelines import corpus, instances, segment, vocab

    root = tmp_path_factory.mktemp("wordpiece")
    inputs = [str(FIXTURES / "zh" / "*" / "*.txt"), str(FIXTURES / "prose" / "romeo_and_juliet" / "*.txt")]
    corpus.run([*NO_PARAMS, "--inputs", *inputs, "--output", str(root / "corpus"), *LOCAL])
    segment.run([*NO_PARAMS, "--language=zh", *CASE, "--input", str(root / "corpus"), "--output", str(root / "s"),
                 *LOCAL])  # fmt: skip
    vocab.run([*NO_PARAMS, "--input", str(root / "s"), "--output", str(root / "v"), UNDEDUPED, "--kind=wordpiece",
               "--vocab_size=3500", *LOCAL])  # fmt: skip
    for segmenter in ("none", "jieba"):
        argv = ["--input", str(root / "s"), "--spiece", str(root / "v"), "--output", str(root / segmenter)]
        instances.run([*NO_PARAMS, *argv, f"--word_segmenter={segmenter}", *FLAGS])
    return root


def _rows(folder: Path, split: str = "train") -> pa.Table:
    return pa.concat_tables(open_shard(p) for p in Manifest.read(folder).paths(folder, split))


def _originals(row: dict) -> np.ndarray:
    tokens = np.array(row["input_ids"])
    tokens[row["masked_lm_positions"]] = row["masked_lm_ids"]
    return tokens


def _documents(sentences: Path) -> dict[str, list[str]]:
    return {
        d["id"]: d["sentences"] for p in sorted(sentences.glob("sentences-*")) for d in read_parquet(str(p)).to_pylist()
    }


def _contains(whole: np.ndarray, part: np.ndarray) -> bool:
    found, start = -1, 0
    haystack, needle = whole.astype("<i4").tobytes(), part.astype("<i4").tobytes()
    while (found := haystack.find(needle, start)) != -1 and found % 4:
        start = found + 1  # a match must start on an id, not inside one
    return found != -1


def test_the_vocab_stage_writes_a_folder_bert_tokenizer_loads(wp_run: Path) -> None:
    from transformers import AutoTokenizer

    folder = wp_run / "v"
    assert sorted(p.name for p in folder.iterdir()) == ["stats.json", "tokenizer_config.json", "vocab.txt"]
    stats = json.loads((folder / "stats.json").read_text())
    assert stats["kind"] == "wordpiece" and 2500 < stats["vocab_size"] <= 3500  # what this small text supports
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert type(tokenizer).__name__ == "BertTokenizer" and len(tokenizer) == stats["vocab_size"]
    assert tokenizer.convert_tokens_to_ids(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]) == [0, 1, 2, 3, 4]


def test_every_row_is_bert_tokenizers_ids_of_its_document(wp_run: Path) -> None:
    """Each segment of every row, unmasked, is a run of BertTokenizer's ids of its document's sentences."""
    from transformers import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(wp_run / "v")
    expected = {
        doc: np.array([i for s in sentences for i in tokenizer(s, add_special_tokens=False)["input_ids"]])
        for doc, sentences in _documents(wp_run / "s").items()
    }
    rows = _rows(wp_run / "none").to_pylist()
    assert len(rows) > 500
    for row in rows:
        tokens = _originals(row)
        seps = np.flatnonzero(tokens == 3)
        assert tokens[0] == 2 and len(seps) == 2 and seps[1] == len(tokens) - 1
        for segment in (tokens[1 : seps[0]], tokens[seps[0] + 1 : seps[1]]):
            assert _contains(expected[row["document_id"]], segment), row["document_id"]


def test_a_word_is_masked_with_its_continuations_and_a_jieba_word_whole(wp_run: Path) -> None:
    pieces = (wp_run / "v" / "vocab.txt").read_text(encoding="utf-8").split("\n")
    continuation = np.array([p.startswith("##") for p in pieces[:-1]])
    for segmenter in ("none", "jieba"):
        cut = spans = 0
        for row in _rows(wp_run / segmenter).to_pylist():
            tokens = _originals(row)
            masked = np.zeros(len(tokens), bool)
            masked[row["masked_lm_positions"]] = True
            joins = continuation[tokens]
            if segmenter == "jieba":
                joins |= np.asarray(row["joins_word"], bool)
            joins[tokens < 5] = False
            starts = np.flatnonzero(joins)
            starts = starts[tokens[starts - 1] >= 5]  # a word cut at a segment's start may begin with ##
            cut += int(np.sum(masked[starts] != masked[starts - 1]))
            spans += int(np.sum(np.diff(np.concatenate([[0], masked.astype(np.int8)])) == 1))
        assert spans > 1000 and cut == 0, (segmenter, cut, spans)


def test_the_manifest_records_the_vocabulary_and_training_masks_with_it(wp_run: Path) -> None:
    folder = wp_run / "jieba"
    manifest = Manifest.read(folder, verify=True)
    assert manifest.vocab_file == "vocab.txt" and manifest.tokenizer["do_lower_case"] is True
    assert (folder / "vocab.txt").read_bytes() == (wp_run / "v" / "vocab.txt").read_bytes()
    dataset = ShardDataset(folder, "train", masking="dynamic", seed=1)
    rows = [dataset[i] for i in range(200)]
    for row in rows:
        labels = np.asarray(row["masked_lm_ids"])
        assert len(labels) and np.all(labels >= 5)  # a special is never a target
    static = ShardDataset(folder, "train")
    assert any(not np.array_equal(r["input_ids"], static[i]["input_ids"]) for i, r in enumerate(rows))


def test_a_vocab_txt_refuses_sentences_already_lower_cased(wp_run: Path, pipeline_run, tmp_path: Path) -> None:
    from pipelines import instances

    argv = ["--input", str(pipeline_run.sentences), "--spiece", str(wp_run / "v" / "vocab.txt")]
    with pytest.raises(ValueError, match=r"segment\.lower_case false and segment\.strip_accents false"):
        instances.run([*NO_PARAMS, *argv, "--output", str(tmp_path / "out"), *FLAGS])
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_bert_folder_keeps_its_special_ids_through_the_stages(wp_run: Path, tmp_path: Path) -> None:
    """BERT's layout ([PAD], 99 [unused], [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103) copied by from_wordpiece:
    the ids stay, the rows are laid out with 101 and 102, and nothing below 104 is ever a target."""
    from pipelines import instances, vocab

    trained = (wp_run / "v" / "vocab.txt").read_text(encoding="utf-8").split("\n")[5:-1]
    head = ["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    bert = tmp_path / "bert-chinese"
    bert.mkdir()
    (bert / "vocab.txt").write_text("".join(p + "\n" for p in [*head, *trained]), encoding="utf-8")
    hostile = {"do_lower_case": True, "auto_map": {"AutoTokenizer": "evil.Tokenizer"}, "tokenizer_class": "X"}
    (bert / "tokenizer_config.json").write_text(json.dumps(hostile))
    vocab.run([*NO_PARAMS, "--input", str(wp_run / "s"), "--output", str(tmp_path / "v"), UNDEDUPED,
               "--from_wordpiece", str(bert), *LOCAL])  # fmt: skip
    assert (tmp_path / "v" / "vocab.txt").read_bytes() == (bert / "vocab.txt").read_bytes()
    written = json.loads((tmp_path / "v" / "tokenizer_config.json").read_text())
    assert "auto_map" not in written and written["tokenizer_class"] == "BertTokenizer"
    assert hf_normalizer(bert) == Normalizer(lower_case=False, strip_accents=False)  # segment.normalization_from
    argv = ["--input", str(wp_run / "s"), "--spiece", str(tmp_path / "v"), "--output", str(tmp_path / "shards")]
    instances.run([*NO_PARAMS, *argv, *FLAGS])
    rows = _rows(tmp_path / "shards").to_pylist()
    for row in rows[:300]:
        tokens = _originals(row)
        assert tokens[0] == 101 and tokens[-1] == 102 and np.sum(tokens == 102) == 2
        assert np.all(np.asarray(row["masked_lm_ids"]) >= 104)
        assert not np.any((np.asarray(row["input_ids"]) < 104) & ~np.isin(row["input_ids"], [100, 101, 102, 103]))
    # The same text, the same pieces: each id but [PAD]'s is the trained vocabulary's, moved by the 99 slots.
    same = _rows(wp_run / "none").to_pylist()[0]
    assert same["document_id"] == rows[0]["document_id"]
    shifted = np.where(_originals(same) > 0, _originals(same) + 99, 0)
    assert np.array_equal(shifted, _originals(rows[0]))


def test_fsdp_pretraining_runs_on_wordpiece_shards(wp_run: Path, tmp_path: Path) -> None:
    """Two FSDP2 ranks pretrain on the jieba-masked WordPiece shards, dynamic masking with the vocab.txt's rule."""
    from tests.test_pretraining import fit_args, fit_subprocess, recorded

    args = fit_args(tmp_path, wp_run / "jieba", 8, 3, "--data.masking=dynamic")
    fit_subprocess(args, devices=2)
    steps = recorded(tmp_path)
    assert len(steps) == 3 and all(np.isfinite(s["loss"]) and s["fsdp"] and s["world_size"] == 2 for s in steps)


@pytest.fixture(scope="module")
def albert_zh(wp_run: Path, tmp_path_factory: pytest.TempPathFactory):
    """A tiny ALBERT (random weights) with the trained vocab.txt, its weights and config.json saved by transformers
    itself (save_pretrained of our export), and our network. The tokenizer files are the export's: transformers 5
    saves a BertTokenizer as tokenizer.json alone, while the Chinese ALBERTs in use ship vocab.txt."""
    import torch
    from transformers import AlbertForPreTraining as HFAlbert

    from albert_lightning.interop.hf import export_hf
    from albert_lightning.model import AlbertConfig, AlbertForPreTraining
    from pipelines.algorithms.vocabulary import load_vocabulary

    vocab_txt = wp_run / "v" / "vocab.txt"
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.preset("tiny", vocab_size=load_vocabulary(vocab_txt).vocab_size))
    root = tmp_path_factory.mktemp("hf")
    ours = export_hf(model.eval(), model.config, root / "ours", str(vocab_txt), Normalizer(False, False))
    folder = root / "albert_zh"
    HFAlbert.from_pretrained(ours).save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(ours / name, folder / name)
    return folder, model


def test_a_vocab_txt_albert_exports_loads_in_transformers_and_continues(wp_run: Path, albert_zh) -> None:
    """A transformers-made ALBERT folder with this vocab.txt: transformers' tokenizer and model give our ids and
    logits (≤ 1e-5) on Chinese input, and --model.init_from it accepts exactly the shards of that vocabulary."""
    import torch
    from transformers import AlbertForPreTraining as HFAlbert
    from transformers import AutoTokenizer

    from albert_lightning.interop.hf import EXPORT_FILES
    from albert_lightning.interop.pretrained import read_start
    from albert_lightning.pretraining.start import check_shards
    from pipelines.algorithms.vocabulary import load_vocabulary

    folder, model = albert_zh
    vocab = load_vocabulary(folder / "vocab.txt")
    ours = folder.parent / "ours"  # what our export wrote, before transformers saved the weights again
    assert {p.name for p in ours.iterdir()} == EXPORT_FILES - {"spiece.model", "tokenizer.json"}
    tokenizer = AutoTokenizer.from_pretrained(folder)
    a, b = "话说天下大势，分久必合，合久必分。", "周末七国分争，并入于秦。"
    encoded = tokenizer(a, b, return_tensors="pt")
    first, second = (vocab.encode([t])[0].tolist() for t in (a, b))
    assert encoded["input_ids"][0].tolist() == [2, *first, 3, *second, 3]
    assert encoded["token_type_ids"][0].tolist() == [0] * (len(first) + 2) + [1] * (len(second) + 1)
    theirs = HFAlbert.from_pretrained(folder).eval()
    with torch.no_grad():
        expected = theirs(**encoded).prediction_logits
        got = model(**encoded).prediction_logits
    assert (got - expected).abs().max().item() <= 1e-5
    start = read_start(folder)
    manifest = Manifest.read(wp_run / "jieba")
    check_shards(start, manifest.vocab_size, manifest.vocab_sha256, Normalizer(False, False), "shards")
    with pytest.raises(ValueError, match=r"vocab\.txt\) sha256 0{12}, but .* vocab\.from_wordpiece"):
        check_shards(start, manifest.vocab_size, "0" * 64, Normalizer(False, False), "shards")


def test_evaluate_fine_tunes_a_vocab_txt_albert_on_clue_tasks_with_its_tokenizer(
    wp_run: Path, albert_zh, tmp_path: Path
) -> None:
    """evaluate on the transformers folder and its vocab.txt: a CLUE sentence task and CMRC 2018 fine-tune, each
    answer is text of its context, and the fine-tuned export tokenises as fine-tuning did."""
    from transformers import AutoTokenizer

    from albert_lightning.evaluation import cli as evaluate
    from albert_lightning.evaluation.finetuning import Encoder
    from tests.test_clue import cmrc_file, qa, write_json, write_tnews

    folder, _ = albert_zh
    clue = tmp_path / "clue"
    write_tnews(clue)
    context = "长江是中国最长的河流，全长约6300公里。"
    write_json(
        clue / "cmrc2018_public" / "train.json", cmrc_file([qa("TRAIN_0", "长江全长多少？", ("约6300公里", 13))])
    )
    write_json(clue / "cmrc2018_public" / "dev.json", cmrc_file([qa("DEV_0", "中国最长的河流是什么？", ("长江", 0))]))
    output = tmp_path / "eval"
    report = evaluate.main([
        "--params", "/dev/null", "--checkpoint", str(folder), "--spiece", str(folder),
        "--tasks", "TNEWS", "CMRC2018", "--clue_dir", str(clue), "--shards", str(wp_run / "jieba"),
        "--output", str(output), "--max_steps", "2", "--batch_size", "4", "--intrinsic_batches", "1", "--seeds", "1",
        "--train_sizes", "0", "--min_steps", "1", "--bootstrap_resamples", "50",
    ])  # fmt: skip
    assert set(report["tasks"]) == {"tnews", "cmrc2018"}
    assert 0 <= report["intrinsic"]["jieba"]["mlm_accuracy"] <= 1
    (line,) = (output / "predictions" / "cmrc2018" / "dev.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["prediction"] in context
    finetuned = output / "finetuned" / "cmrc2018"
    assert (finetuned / "vocab.txt").read_bytes() == (folder / "vocab.txt").read_bytes()
    encoder = Encoder(folder / "vocab.txt", 128, Normalizer(False, False))
    assert (
        AutoTokenizer.from_pretrained(finetuned)("长江全长多少？", context)["input_ids"]
        == encoder("长江全长多少？", context)[0]
    )


def test_fsdp_continues_a_vocab_txt_albert_on_its_shards_and_exports_its_tokenizer(
    wp_run: Path, albert_zh, tmp_path: Path
) -> None:
    """--model.init_from the transformers folder on two FSDP2 ranks over the jieba shards, then export: the new
    folder tokenises as the start did and loads as AlbertForPreTraining with the continued weights."""
    import torch
    from transformers import AlbertForPreTraining as HFAlbert
    from transformers import AutoTokenizer

    from albert_lightning.checkpoints import load_pretraining_checkpoint
    from albert_lightning.export import main as export_main
    from tests.conftest import NO_PARAMS
    from tests.test_pretraining import fit_args, fit_subprocess, recorded

    folder, start = albert_zh
    root = tmp_path / "run"
    fit_subprocess(fit_args(root, wp_run / "jieba", 8, 2, f"--model.init_from={folder}"), devices=2)
    assert all(r["fsdp"] and r["world_size"] == 2 and np.isfinite(r["loss"]) for r in recorded(root))
    checkpoint = root / "checkpoints" / "last.ckpt"
    export_main([*NO_PARAMS, "--checkpoint", str(checkpoint), "--spiece", str(folder), "--output", str(tmp_path / "e")])
    text = "话说天下大势，分久必合，合久必分。"
    assert AutoTokenizer.from_pretrained(tmp_path / "e")(text) == AutoTokenizer.from_pretrained(folder)(text)
    continued = load_pretraining_checkpoint(checkpoint).state_dict()
    back = HFAlbert.from_pretrained(tmp_path / "e").state_dict()
    name = "albert.embeddings.word_embeddings.weight"
    torch.testing.assert_close(back[name], continued[name], rtol=0, atol=0)
    assert not torch.equal(back[name], start.state_dict()[name])  # two steps moved the start's weights
