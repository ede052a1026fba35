"""Reading comprehension end to end: tiny SQuAD 1.1, SQuAD 2.0 and RACE files in their official layouts fine-tune
for a few steps, score with the official definitions, and leave a fine-tuned folder transformers loads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from albert_lightning.evaluation import cli as evaluate
from albert_lightning.evaluation.reading.runner import first_sentence_object, reading_task
from albert_lightning.evaluation.report import read_question_scores
from albert_lightning.evaluation.task_files import TaskDataError
from tests.conftest import PipelineRun
from tests.test_evaluate import _argv

PASSAGES = [  # (context, question, answer)
    ("the cat sat on the mat near the door. it was a sunny day.", "where did the cat sit?", "on the mat"),
    (
        "return the base name of pathname p. more of the pair.",
        "what does basename return?",
        "the base name of pathname p",
    ),
    ("the river flows to the sea. many fish live in the river.", "where does the river flow?", "to the sea"),
    ("she bought three red apples at the market. then she left.", "what did she buy?", "three red apples"),
]


def _squad(version: str, impossible: bool) -> dict:
    paragraphs = []
    for i, (context, question, answer) in enumerate(PASSAGES):
        qas = [
            {"id": f"q{i}", "question": question, "answers": [{"text": answer, "answer_start": context.index(answer)}]}
        ]
        if version == "2.0":
            qas[0]["is_impossible"] = False
            if impossible:
                qas.append({"id": f"n{i}", "question": "what colour is the moon?", "answers": [], "is_impossible": True,
                            "plausible_answers": [{"text": "red", "answer_start": 0}]})  # fmt: skip
        paragraphs.append({"context": context, "qas": qas})
    return {"version": version, "data": [{"title": "fixture", "paragraphs": paragraphs}]}


@pytest.fixture(scope="module")
def reading_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    squad = tmp_path_factory.mktemp("squad")
    for version, impossible in (("1.1", False), ("2.0", True)):
        for split in ("train", "dev"):
            (squad / f"{split}-v{version}.json").write_text(json.dumps(_squad(version, impossible)))
    race = tmp_path_factory.mktemp("race")
    for split in ("train", "dev"):
        for level, letters in (("middle", "ABCD"), ("high", "DCBA")):
            folder = race / split / level
            folder.mkdir(parents=True)
            questions = ["where is the cat?", "the _ sat."]
            options = [["on the mat", "in a car", "at sea", "up a tree"], ["dog", "cat", "cow", "pig"]]
            record = {"id": f"{level}1.txt", "article": PASSAGES[0][0], "questions": questions, "options": options,
                      "answers": [letters[0], letters[1]]}  # fmt: skip
            (folder / "1.txt").write_text(json.dumps(record))
    return squad, race


def test_squad_and_race_fine_tune_score_and_export(
    pipeline_run: PipelineRun,
    random_export: Path,
    reading_dirs: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    squad, race = reading_dirs
    flags = ("--tasks", "squad1", "squad2", "race", "--squad_dir", str(squad), "--race_dir", str(race),
             "--seeds", "2", "--max_seq_length", "40", "--doc_stride", "8", "--max_query_length", "12")  # fmt: skip
    report = evaluate.main(_argv(pipeline_run, random_export, tmp_path, *flags))
    squad1, squad2, race_scores = (report["tasks"][t]["splits"]["dev"] for t in ("squad1", "squad2", "race"))
    size = next(iter(squad1["sizes"].values()))
    assert set(size["pretrained"]) >= {"exact", "f1"} and len(size["seeds"]["pretrained"]) == 2
    assert "gain" in size and size["gain"]["low"] <= size["gain"]["median"] <= size["gain"]["high"]
    size2 = next(iter(squad2["sizes"].values()))
    assert {"HasAns_f1", "NoAns_f1", "best_f1", "best_f1_thresh"} <= set(size2["pretrained"])
    assert report["tasks"]["squad2"]["primary"] == "best_f1"
    assert {"accuracy", "middle_accuracy", "high_accuracy"} <= set(
        next(iter(race_scores["sizes"].values()))["pretrained"]
    )
    # The baselines: the first sentence's object answers the "return" passage exactly; RACE's most frequent answer
    # letter (A in middle, D in high: a tie broken towards A) gets one of four questions right.
    assert squad1["majority"]["exact"] == pytest.approx(1 / 4)
    assert race_scores["majority"]["accuracy"] == pytest.approx(1 / 4)
    # The audited run's predictions are substrings of their contexts, and its network loads in transformers.
    rows = [json.loads(line) for line in (tmp_path / "predictions" / "squad1" / "dev.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["q0", "q1", "q2", "q3"]
    assert all(r["prediction"] in PASSAGES[i][0] for i, r in enumerate(rows))
    # Every run's per-question scores are there too, and each seed's mean is the score its run reported.
    per_question = read_question_scores(tmp_path / "predictions" / "squad1" / "dev.jsonl")
    for start in ("pretrained", "random_init"):
        for size_name, by_seed in per_question[start].items():
            means = [float(np.mean(seed)) for seed in by_seed]
            assert means == pytest.approx(squad1["sizes"][size_name]["seeds"][start], abs=1e-4)
    for task, model in (
        ("squad2", transformers.AlbertForQuestionAnswering),
        ("race", transformers.AlbertForMultipleChoice),
    ):
        _, info = model.from_pretrained(tmp_path / "finetuned" / task, output_loading_info=True)
        assert not any(info.values()), info
        tokenizer = transformers.AlbertTokenizer.from_pretrained(tmp_path / "finetuned" / task)
        assert tokenizer("the cat")["input_ids"][0] == tokenizer.cls_token_id
    assert "| squad1 | dev (4) | f1 |" in (tmp_path / "report.md").read_text()


def test_the_first_sentence_baseline() -> None:
    assert first_sentence_object("return the base name of pathname p. more text.") == "the base name of pathname p"
    assert first_sentence_object("returns x.") == "x"
    assert first_sentence_object("word") == "word"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"kind": "span",\n "metrics": ["f1",]}', r"task\.json, line 2: not valid JSON \(Expecting value\)$"),
        ('["span"]', r"task\.json: unknown keys \['<not an object>'\]"),
    ],
)
def test_a_malformed_task_json_is_named_as_the_sentence_tasks_name_theirs(text: str, message: str, tmp_path: Path):
    (tmp_path / "returns").mkdir()
    (tmp_path / "returns" / "task.json").write_text(text)
    with pytest.raises(TaskDataError, match=rf"^{tmp_path / 'returns'}/{message}"):
        reading_task(str(tmp_path / "returns"), None, None)


def test_a_reading_task_without_its_folder_or_with_a_bad_file_is_refused_before_fine_tuning(
    pipeline_run: PipelineRun,
    random_export: Path,
    reading_dirs: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    with pytest.raises(TaskDataError, match="task squad2: give the folder of its files with --squad_dir"):
        evaluate.main(_argv(pipeline_run, random_export, tmp_path, "--tasks", "squad2"))
    bad = tmp_path / "bad"
    bad.mkdir()
    for path in reading_dirs[0].iterdir():
        (bad / path.name).write_bytes(path.read_bytes())
    broken = _squad("1.1", False)
    broken["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] += 1
    (bad / "dev-v1.1.json").write_text(json.dumps(broken))
    with pytest.raises(TaskDataError, match=r"dev-v1\.1\.json: question q1: answer_start"):
        evaluate.main(_argv(pipeline_run, random_export, tmp_path / "o", "--tasks", "squad1", "--squad_dir", str(bad)))
    assert not (tmp_path / "o" / "metrics.json").exists()
    torch.manual_seed(0)  # keep the global generator as other tests expect it
