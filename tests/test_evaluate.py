"""Downstream evaluation: every GLUE layout fine-tunes end to end, the report has its baselines, encoding,
and one checkpoint evaluated twice gives the same bytes."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import sentencepiece as spm
import torch
import yaml

from albert_lightning.evaluation import cli as evaluate
from albert_lightning.evaluation import runner
from albert_lightning.evaluation.finetuning import Encoder
from albert_lightning.evaluation.intrinsic import word_hits
from albert_lightning.evaluation.metrics import compute_metrics
from albert_lightning.evaluation.report import read_predictions, write_report
from albert_lightning.evaluation.task_files import TaskDataError, generic_task
from albert_lightning.evaluation.task_specs import GLUE_TASKS, TaskSpec
from albert_lightning.pretraining.data import Rows, ShardDataset
from pipelines.algorithms.masking import TokenClasses
from pipelines.algorithms.textnorm import Normalizer
from tests.conftest import DISTRIBUTED_ENV, PipelineRun
from tests.test_task_files import FILES, TEST_FILES, write_glue


def _argv(run: PipelineRun, checkpoint: Path, output: Path, *flags: str) -> list[str]:
    return [
        "--params", "/dev/null", "--checkpoint", str(checkpoint), "--spiece", str(run.spiece),
        "--shards", str(run.shards), "--output", str(output), "--max_steps", "2", "--batch_size", "4",
        "--intrinsic_batches", "1", "--seeds", "1", "--train_sizes", "0", "--min_steps", "1",
        "--bootstrap_resamples", "50", *flags,
    ]  # fmt: skip


def _evaluate(run: PipelineRun, checkpoint: Path, output: Path, *flags: str) -> dict:
    return evaluate.main(_argv(run, checkpoint, output, *flags))


@pytest.fixture(scope="module")
def toy_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generic two-class task: 12 training and 6 dev examples whose label is whether the text names a dog."""
    folder = tmp_path_factory.mktemp("tasks") / "toy"
    folder.mkdir()
    words = ["the quick brown fox", "a lazy dog sleeps", "return the value", "the dog barks twice", "import a module"]
    for split, count in (("train", 12), ("dev", 6)):
        rows = [f"{words[i % 5]} {i}\t{int('dog' in words[i % 5])}" for i in range(count)]
        (folder / f"{split}.tsv").write_text("text\tlabel\n" + "\n".join(rows) + "\n")
    return folder


def assert_predictions_reproduce_metrics(report: dict, output: Path, spec: TaskSpec) -> None:
    """Re-scores every run in the predictions files: each seed's primary score is the one metrics.json holds."""
    for split, scores in report["tasks"][spec.name]["splits"].items():
        lines = (output / "predictions" / spec.name / f"{split}.jsonl").read_text().splitlines()
        assert len(lines) == scores["examples"]
        assert [json.loads(line)["index"] for line in lines] == list(range(scores["examples"]))
        dev = read_predictions(output / "predictions" / spec.name / f"{split}.jsonl")
        assert set(dev.starts) == set(next(iter(scores["sizes"].values()))["seeds"])
        for start, sizes in dev.starts.items():
            assert list(sizes) == list(scores["sizes"])
            for size, seeds in sizes.items():
                rescored = [round(compute_metrics(spec, row, dev.labels)[spec.primary], 4) for row in seeds]
                assert rescored == pytest.approx(scores["sizes"][size]["seeds"][start], abs=1e-4)


@pytest.mark.parametrize("task", sorted(GLUE_TASKS))
def test_every_glue_task_fine_tunes_from_its_distribution_layout(
    task: str, pipeline_run: PipelineRun, random_export: Path, tmp_path: Path
) -> None:
    write_glue(tmp_path / "glue", task)
    report = _evaluate(pipeline_run, random_export, tmp_path / "eval", "--glue_dir", str(tmp_path / "glue"),
                       "--tasks", task)  # fmt: skip
    spec = GLUE_TASKS[task]
    splits = report["tasks"][task]["splits"]
    assert set(splits) == set(spec.eval_splits)  # MNLI: matched and mismatched
    for scores in splits.values():
        assert math.isfinite(scores["majority"][spec.primary])
        (size,) = scores["sizes"].values()  # --train_sizes 0: every training example
        assert size["train_examples"] == report["tasks"][task]["train_examples"]
        for start in ("pretrained", "random_init"):
            assert math.isfinite(size[start][spec.primary]) and len(size["seeds"][start]) == 1
        assert size["gain"]["median"] == pytest.approx(
            size["pretrained"][spec.primary] - size["random_init"][spec.primary], abs=2e-4
        )
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text()) == report
    assert f"| {task} |" in (tmp_path / "eval" / "report.md").read_text()
    assert report["tasks"][task]["labels"] == list(spec.labels) and report["tasks"][task]["kind"] == spec.kind
    assert_predictions_reproduce_metrics(report, tmp_path / "eval", spec)  # label strings, scores, MNLI's two splits


def test_intrinsic_scores_follow_the_shards_kind(
    pipeline_run: PipelineRun, random_export: Path, tmp_path: Path
) -> None:
    report = _evaluate(pipeline_run, random_export, tmp_path, "--tasks")
    scores = report["intrinsic"][pipeline_run.shards.name]
    assert scores["kind"] == "sop"
    # The counts behind the accuracies: --intrinsic_batches 1 of --batch_size 4 scores the first 4 rows.
    rows = [ShardDataset(str(pipeline_run.shards), "validation")[i] for i in range(4)]
    # Rescored independently: transformers' model from the same folder, one unpadded row at a time.
    reference = pytest.importorskip("transformers").AlbertForPreTraining.from_pretrained(random_export).eval()
    mlm_correct = pair_correct = 0
    for row in rows:
        ids, types, positions, labels = (
            torch.as_tensor(row[key], dtype=torch.long)
            for key in ("input_ids", "token_type_ids", "masked_lm_positions", "masked_lm_ids")
        )
        with torch.no_grad():
            out = reference(input_ids=ids[None], token_type_ids=types[None])
        mlm_correct += int((out.prediction_logits[0, positions].argmax(-1) == labels).sum())
        pair_correct += int(out.sop_logits[0].argmax()) == int(row["sentence_order_label"])
    assert (scores["mlm_correct"], scores["pair_correct"]) == (mlm_correct, pair_correct)
    targets = Counter(int(t) for row in rows for t in row["masked_lm_ids"])
    assert scores["pairs"] == 4 and scores["mlm_predictions"] == sum(targets.values())
    assert scores["mlm_accuracy"] == scores["mlm_correct"] / scores["mlm_predictions"]
    assert 0 < scores["mlm_words"] <= scores["mlm_predictions"]  # a masked word holds one masked piece or more
    assert scores["mlm_word_accuracy"] == scores["mlm_word_correct"] / scores["mlm_words"]
    assert scores["sop_accuracy"] == scores["pair_correct"] / scores["pairs"]
    frequent_count = targets.most_common(1)[0][1]
    assert scores["mlm_most_frequent_accuracy"] == frequent_count / sum(targets.values())
    assert targets[scores["mlm_most_frequent_id"]] == frequent_count
    # A known answer (a random model likely gets no MLM guess right): always that id, and pair class 0.
    guess = scores["mlm_most_frequent_id"]

    class Constant(torch.nn.Module):
        def forward(self, input_ids, token_type_ids, attention_mask, positions):
            logits = torch.zeros(*positions.shape, guess + 1)
            logits[..., guess] = 1.0
            return SimpleNamespace(prediction_logits=logits, sop_logits=torch.tensor([[1.0, 0.0]] * len(input_ids)))

    known = evaluate.intrinsic_scores(Constant(), str(pipeline_run.shards), 1, 4)
    first_order = sum(int(row["sentence_order_label"]) == 0 for row in rows)
    assert (known["mlm_correct"], known["pair_correct"]) == (frequent_count, first_order)
    frequent_cell = f"| {scores['mlm_accuracy']:.3f} | {scores['mlm_most_frequent_accuracy']:.3f} | "
    assert frequent_cell in (tmp_path / "report.md").read_text()


def test_word_hits_count_a_word_right_only_when_every_masked_piece_is() -> None:
    pieces = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "▁a", "b", "▁c", "▁d"]
    classes = TokenClasses.from_pieces(pieces, mask_id=4, num_special=5)
    # [CLS] ▁a b ▁c ▁d [SEP]: words ▁a+b, ▁c, ▁d; ▁a, b and ▁d masked, b predicted wrong.
    tokens, positions, labels = np.array([2, 4, 4, 7, 4, 3]), np.array([1, 2, 4]), np.array([5, 6, 8])

    def rows(joins: np.ndarray | None) -> Rows:
        offsets = np.array([0, len(tokens)])
        return Rows(
            tokens, np.zeros_like(tokens), offsets, positions, labels, np.array([0, 3]), np.zeros(1), np.zeros(1), joins
        )

    hits = np.array([[True, False, True]])
    assert word_hits(rows(None), hits, classes) == (1, 2)  # ▁a+b missed, ▁d right
    assert word_hits(rows(None), np.array([[True, True, True]]), classes) == (2, 2)
    # A segmenter's word ▁c+▁d: ▁d alone masked and right still counts the word once, right.
    assert word_hits(rows(np.array([0, 0, 0, 0, 1, 0], np.int8)), hits, classes) == (1, 2)
    assert word_hits(rows(np.array([0, 0, 0, 0, 1, 0], np.int8)), ~hits, classes) == (0, 2)


def test_glue_name_without_glue_dir_is_refused(pipeline_run: PipelineRun, random_export: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="glue_dir"):
        _evaluate(pipeline_run, random_export, tmp_path, "--tasks", "CoLA")


def test_encoder_gives_the_pipeline_ids_and_fits_pairs(pipeline_run: PipelineRun) -> None:
    encoder = Encoder(pipeline_run.spiece, max_seq_length=16)
    sp = spm.SentencePieceProcessor(model_file=str(pipeline_run.spiece))
    text = "Return the Café's ``value'' of  X."
    ids, types = Encoder(pipeline_run.spiece, 128)(text)
    assert ids == [2, *sp.encode(Normalizer()(text)), 3] and types == [0] * len(ids)
    long = "the quick brown fox jumps over the lazy dog " * 10
    ids, types = encoder(long, "a short one")
    assert len(ids) == 16 and ids.count(3) == 2 and types[-1] == 1 and ids[0] == 2


TOY_FLAGS = ("--seeds", "2", "--train_sizes", "4", "0", "--epochs", "1", "--min_steps", "2", "--max_steps", "3")


def test_same_checkpoint_gives_the_same_bytes_and_a_learning_curve(
    pipeline_run: PipelineRun, random_export: Path, toy_task: Path, tmp_path: Path
) -> None:
    first = _evaluate(pipeline_run, random_export, tmp_path / "a", "--tasks", str(toy_task), *TOY_FLAGS)
    # A second process, whose global generator has drawn nothing that the first one drew before fine-tuning.
    argv = _argv(pipeline_run, random_export, tmp_path / "b", "--tasks", str(toy_task), *TOY_FLAGS)
    # Without the first run's MASTER_PORT and ranks, which name the process group this process still holds.
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    done = subprocess.run([sys.executable, "-m", "albert_lightning.evaluate", *argv], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert (tmp_path / "a/metrics.json").read_bytes() == (tmp_path / "b/metrics.json").read_bytes()
    sizes = first["tasks"]["toy"]["splits"]["dev"]["sizes"]
    assert list(sizes) == ["4", "12"]
    # steps: max(min_steps 2, ceil(1 epoch · n / batch 4)) capped at 3 → 2 for 4 examples, 3 for 12
    assert [(s["train_examples"], s["steps"]) for s in sizes.values()] == [(4, 2), (12, 3)]
    for size in sizes.values():
        seeds = size["seeds"]
        assert len(seeds["pretrained"]) == len(seeds["random_init"]) == 2
        assert size["pretrained"]["accuracy"] == pytest.approx(sum(seeds["pretrained"]) / 2, abs=1e-4)  # median of 2
        gain = size["gain"]
        assert gain["low"] <= gain["median"] <= gain["high"]
    with open(tmp_path / "a/learning_curve.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["task"], r["train_examples"]) for r in rows] == [("toy", "4"), ("toy", "12")]
    assert [float(r["pretrained"]) for r in rows] == [s["pretrained"]["accuracy"] for s in sizes.values()]
    assert {r["majority"] for r in rows} == {"0.6667"}  # 4 of the 12 train texts name a dog; dev: 2 of 6
    assert (tmp_path / "a/learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    report = (tmp_path / "a/report.md").read_text()
    assert "| toy | dev (6) | accuracy | 4 | " in report and "| toy | dev (6) | accuracy | 12 | " in report
    assert f"{sizes['12']['gain']['median']:+.3f} [" in report
    assert_predictions_reproduce_metrics(first, tmp_path / "a", generic_task(toy_task))
    line = json.loads((tmp_path / "a/predictions/toy/dev.jsonl").read_text().splitlines()[1])
    assert line["label"] == "1" and set(line["pretrained"]) == {"4", "12"} and len(line["random_init"]["4"]) == 2
    # The audited run: the pretrained start's first seed on every training example
    assert line["id"] is None and line["prediction"] == line["pretrained"]["12"][0] and 0.5 <= line["score"] <= 1
    assert not (tmp_path / "a/glue_submission").exists()  # no GLUE task with a test file
    # Every out dvc.yaml declares for the stage exists, or `dvc repro` would fail after the run.
    stage = yaml.safe_load((Path(__file__).parents[1] / "dvc.yaml").read_text())["stages"]["evaluate"]
    outs = [
        next(iter(out)) if isinstance(out, dict) else out
        for kind in ("outs", "metrics", "plots")
        for out in stage[kind]
    ]
    assert outs and all(out.startswith("data/eval/") for out in outs)
    assert [out for out in outs if not (tmp_path / "a" / out.removeprefix("data/eval/")).exists()] == []


def test_without_random_baseline_only_the_pretrained_scores(
    pipeline_run: PipelineRun, random_export: Path, toy_task: Path, tmp_path: Path
) -> None:
    report = _evaluate(pipeline_run, random_export, tmp_path, "--tasks", str(toy_task), "--random_baseline", "false")
    (size,) = report["tasks"]["toy"]["splits"]["dev"]["sizes"].values()
    assert set(size) == {"train_examples", "steps", "seeds", "pretrained"}
    assert list(size["seeds"]) == ["pretrained"]
    assert "| toy | dev (6) | accuracy | 12 | " in (tmp_path / "report.md").read_text()
    assert " | - | - | " in (tmp_path / "report.md").read_text()  # no random init, no gain
    line = json.loads((tmp_path / "predictions/toy/dev.jsonl").read_text().splitlines()[0])
    assert set(line) == {"index", "id", "label", "prediction", "score", "pretrained"}  # no random_init: not run


def _no_fine_tuning(*args: object) -> None:
    raise AssertionError("fine-tuning started before every input was checked")


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing train", r"task MNLI: .*MNLI/train\.tsv: file not found"),
        ("bad header", r"task MNLI: .*dev_mismatched\.tsv, line 1 \(header\): no column 'gold_label'"),
        ("bad test row", r"task WNLI: .*WNLI/test\.tsv, line 2: 2 tab-separated fields, expected 3"),
        ("unknown name", r"unknown task 'mnlii'.*did you mean 'MNLI'"),
        ("truncated checkpoint", r"last\.ckpt: not a readable checkpoint .*was it written completely"),
        ("missing checkpoint", r"nothing\.ckpt: no checkpoint file or Hugging Face folder"),
        ("missing vocabulary", r"nothing\.model"),
    ],
)
def test_every_input_is_checked_before_any_fine_tuning(
    case: str, message: str, pipeline_run: PipelineRun, random_export: Path, tmp_path: Path, monkeypatch
) -> None:
    glue, checkpoint, flags = tmp_path / "glue", random_export, []
    write_glue(glue, "WNLI", tests=True)
    mnli = write_glue(glue, "MNLI")
    tasks = ["WNLI", "mnlii" if case == "unknown name" else "MNLI"]
    if case == "missing train":
        (mnli / "train.tsv").unlink()
    elif case == "bad header":
        (mnli / "dev_mismatched.tsv").write_text((mnli / "dev_mismatched.tsv").read_text().replace("gold_", "g_"))
    elif case == "bad test row":
        (glue / "WNLI/test.tsv").write_text("index\tsentence1\tsentence2\n0\tno hypothesis\n")
    elif case == "truncated checkpoint":
        checkpoint = tmp_path / "last.ckpt"
        checkpoint.write_bytes(b"PK\x03\x04 half a zip")
    elif case == "missing checkpoint":
        checkpoint = tmp_path / "nothing.ckpt"
    elif case == "missing vocabulary":
        flags = ["--spiece", str(tmp_path / "nothing.model")]
    monkeypatch.setattr(runner, "finetune", _no_fine_tuning)
    with pytest.raises((TaskDataError, ValueError, OSError), match=message):
        _evaluate(pipeline_run, checkpoint, tmp_path / "eval", "--glue_dir", str(glue), "--tasks", *tasks, *flags)
    assert not (tmp_path / "eval").exists()  # nothing written, not even the intrinsic scores


def test_each_task_is_written_as_it_finishes(
    pipeline_run: PipelineRun, random_export: Path, tmp_path: Path, monkeypatch
) -> None:
    real = runner.finetune

    def finetune(network, spec, *args):
        if spec.name == "RTE":
            raise RuntimeError("out of memory")
        return real(network, spec, *args)

    monkeypatch.setattr(runner, "finetune", finetune)
    for task in ("WNLI", "RTE"):
        write_glue(tmp_path / "glue", task)
    with pytest.raises(RuntimeError, match="out of memory"):
        _evaluate(pipeline_run, random_export, tmp_path / "eval", "--glue_dir", str(tmp_path / "glue"),
                  "--tasks", "wnli", "rte", "--random_baseline", "false")  # fmt: skip
    kept = json.loads((tmp_path / "eval/metrics.json").read_text())
    assert list(kept["tasks"]) == ["WNLI"] and kept["intrinsic"]
    assert "| WNLI |" in (tmp_path / "eval/report.md").read_text()
    assert (tmp_path / "eval/predictions/WNLI/dev.jsonl").is_file()
    assert not [p for p in (tmp_path / "eval").rglob("*") if p.name.startswith(".tmp-")]  # renamed into place


def test_report_files_are_replaced_whole(tmp_path: Path) -> None:
    report = {"checkpoint": "a.ckpt", "tasks": {}, "intrinsic": {}}
    write_report(report, str(tmp_path))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(KeyError):
        write_report({**report, "tasks": {"broken": {}}}, str(tmp_path))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no half-updated set of files


SUBMISSION_LABELS = {
    "CoLA": {"0", "1"}, "SST-2": {"0", "1"}, "MRPC": {"0", "1"}, "QQP": {"0", "1"}, "WNLI": {"0", "1"},
    "QNLI": {"entailment", "not_entailment"}, "RTE": {"entailment", "not_entailment"},
    "MNLI-m": {"entailment", "neutral", "contradiction"}, "MNLI-mm": {"entailment", "neutral", "contradiction"},
    "AX": {"entailment", "neutral", "contradiction"}, "STS-B": None,
}  # fmt: skip
SUBMISSION_SOURCES = {"MNLI-m": "MNLI/test_matched", "MNLI-mm": "MNLI/test_mismatched", "AX": "diagnostic/diagnostic"}


def _rows(key: str) -> int:
    """Data rows of a fixture file: CoLA's train and dev files have no header row, every other file has one."""
    headerless = key in ("CoLA/train.tsv", "CoLA/dev.tsv")
    return len({**FILES, **TEST_FILES}[key].strip("\n").splitlines()) - (not headerless)


def _fixture_splits(task: str) -> dict[str, str]:
    """Every dev and test split of a task's fixture → its file; MNLI's run also predicts the diagnostic set (AX)."""
    spec, files = GLUE_TASKS[task], {**FILES, **TEST_FILES}
    splits = {s: f"{task}/{name}" for s, name in spec.splits.items() if s != "train" and f"{task}/{name}" in files}
    return {**splits, "diagnostic": "diagnostic/diagnostic.tsv"} if task == "MNLI" else splits


def assert_audited_predictions(folder: Path, spec: TaskSpec, split: str, source: str) -> None:
    """One line per example of the split's file, with the audited run's prediction and score."""
    lines = [json.loads(text) for text in (folder / f"{split}.jsonl").read_text().splitlines()]
    assert len(lines) == _rows(source)
    unlabelled = split.startswith("test") or split == "diagnostic"
    for line in lines:
        assert {"index", "id", "label", "prediction", "score"} <= set(line) and (line["label"] is None) == unlabelled
        if spec.kind == "regression":
            assert isinstance(line["prediction"], float) and line["score"] == line["prediction"]
        else:  # the predicted label's probability: never below a uniform guess's
            assert line["prediction"] in spec.labels and 1 / len(spec.labels) <= line["score"] <= 1


def test_glue_predictions_and_submission_files(pipeline_run: PipelineRun, random_export: Path, tmp_path: Path) -> None:
    for task in GLUE_TASKS:
        write_glue(tmp_path / "glue", task, tests=True)
    names = ["cola", "sst2", "mrpc", "sts-b", "qqp", "mnli", "qnli", "rte", "wnli"]  # Hugging Face's names
    report = _evaluate(pipeline_run, random_export, tmp_path / "eval", "--glue_dir", str(tmp_path / "glue"),
                       "--tasks", *names, "--random_baseline", "false", "--max_steps", "1")  # fmt: skip
    assert list(report["tasks"]) == list(GLUE_TASKS)
    for task, spec in GLUE_TASKS.items():
        for split, source in _fixture_splits(task).items():
            assert_audited_predictions(tmp_path / "eval/predictions" / task, spec, split, source)
    folder = tmp_path / "eval/glue_submission"
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{name}.tsv" for name in SUBMISSION_LABELS)
    for name, labels in SUBMISSION_LABELS.items():
        header, *rows = (folder / f"{name}.tsv").read_text().splitlines()
        assert header == "index\tprediction"
        source = SUBMISSION_SOURCES.get(name, f"{name}/test") + ".tsv"
        assert [r.split("\t")[0] for r in rows] == [str(i) for i in range(_rows(source))]  # the test file's order
        predictions = [r.split("\t")[1] for r in rows]
        assert all(math.isfinite(float(p)) for p in predictions) if labels is None else set(predictions) <= labels


def test_evaluate_chooses_each_starts_rate_on_the_training_slice_only(
    pipeline_run: PipelineRun, random_export: Path, toy_task: Path, tmp_path: Path
):
    flags = ("--tasks", str(toy_task), *TOY_FLAGS, "--lrs", "1e-5", "1e-2", "--lr_selection_fraction", "0.25")
    report = _evaluate(pipeline_run, random_export, tmp_path, *flags)
    choices = report["tasks"]["toy"]["lr"]
    assert set(choices) == {"pretrained", "random_init"}
    for choice in choices.values():
        assert set(choice["slice_scores"]) == {"1e-05", "0.01"}
        best = max(choice["slice_scores"].values())
        assert choice["slice_scores"][f"{choice['lr']:g}"] == best
    assert json.loads((tmp_path / "metrics.json").read_text())["tasks"]["toy"]["lr"] == choices


@pytest.mark.parametrize("with_config", [False, True])
def test_evaluate_reads_each_file_of_a_task_folder_once(toy_task, tmp_path, monkeypatch, with_config):
    folder = tmp_path / "toy"
    folder.mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (folder / name).write_bytes((toy_task / name).read_bytes())
    if with_config:  # read to tell a span task from a sentence task, and for the labels
        (folder / "task.json").write_text(json.dumps({"labels": ["0", "1"]}))
    opened: Counter[str] = Counter()
    real_open = Path.open

    def counting_open(self, *args, **kwargs):
        opened[self.name] += 1
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", counting_open)
    splits = evaluate.read_task(str(folder), evaluate.EvaluateConfig())
    assert [len(examples) for _, examples in splits.values()] == [12, 6]
    assert opened == Counter({"train.tsv": 1, "dev.tsv": 1, **({"task.json": 1} if with_config else {})})
