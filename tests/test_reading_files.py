"""Tests for albert_lightning.evaluation.reading.files: SQuAD 1.1/2.0 and RACE read from their official layouts,
and bad files.

Fixtures are written with json.dumps in the exact distributed layouts; expected offsets and ids are literals, so a
reader that counts offsets differently (e.g. in UTF-16 units or bytes) or names questions differently fails.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from albert_lightning.evaluation.reading.files import Answer, RaceQuestion, read_race, read_squad, squad_files
from albert_lightning.evaluation.task_files import TaskDataError

NORMANS = "The Normans were the people who gave their name to Normandy, a region in France."
# A non-BMP emoji first: SQuAD's answer_start counts code points, so "1958年" starts at 7 (UTF-16 would say 8).
TOWER = "🗼東京タワーは1958年に完成した。高さは333メートルです。"

SQUAD_V1_TRAIN = {
    "version": "1.1",
    "data": [
        {
            "title": "Normans",
            "paragraphs": [
                {
                    "context": NORMANS,
                    "qas": [
                        {
                            "id": "n1",
                            "question": "What gave its name?",
                            "answers": [{"text": "Normandy", "answer_start": 51}],
                        },
                        {
                            "id": "n2",
                            "question": "Where is Normandy?",
                            "answers": [{"text": "France", "answer_start": 73}],
                        },
                    ],
                }
            ],
        },
        {
            "title": "東京タワー",
            "paragraphs": [
                {
                    "context": TOWER,
                    "qas": [
                        {"id": "t1", "question": "いつ完成した？", "answers": [{"text": "1958年", "answer_start": 7}]}
                    ],
                }
            ],
        },
    ],
}


def squad_v2_dev() -> dict[str, Any]:
    """A SQuAD 2.0 dev file: a possible question with three reference answers and an impossible one."""
    possible = {
        "id": "56ddde6b9a695914005b9628",
        "question": "What region is named after the Normans?",
        "answers": [
            {"text": "Normandy", "answer_start": 51},
            {"text": "Normandy", "answer_start": 51},
            {"text": "Normandy, a region in France", "answer_start": 51},
        ],
        "is_impossible": False,
    }
    impossible = {
        "id": "5ad39d53604f3c001a3fe8d1",
        "question": "Who gave their name to France?",
        "answers": [],
        "is_impossible": True,
        "plausible_answers": [{"text": "Normans", "answer_start": 4}],
    }
    paragraph = {"context": NORMANS, "qas": [possible, impossible]}
    return {"version": "v2.0", "data": [{"title": "Normans", "paragraphs": [paragraph]}]}


def write_json(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")
    return path


def test_squad_v1_reads_ids_offsets_titles_and_unicode(tmp_path: Path) -> None:
    questions = read_squad(write_json(tmp_path / "train-v1.1.json", SQUAD_V1_TRAIN))
    assert [q.id for q in questions] == ["n1", "n2", "t1"]
    assert [q.answers for q in questions] == [
        (Answer("Normandy", 51),),
        (Answer("France", 73),),
        (Answer("1958年", 7),),
    ]
    assert [q.title for q in questions] == ["Normans", "Normans", "東京タワー"]
    assert questions[2].context == TOWER and questions[2].question == "いつ完成した？"
    assert not any(q.is_impossible for q in questions)  # 1.1 files have no is_impossible key


def test_squad_v2_keeps_every_answer_and_reads_impossible_questions(tmp_path: Path) -> None:
    possible, impossible = read_squad(write_json(tmp_path / "dev-v2.0.json", squad_v2_dev()))
    assert possible.id == "56ddde6b9a695914005b9628" and not possible.is_impossible
    assert [a.text for a in possible.answers] == ["Normandy", "Normandy", "Normandy, a region in France"]
    assert {a.start for a in possible.answers} == {51}
    assert impossible.id == "5ad39d53604f3c001a3fe8d1" and impossible.is_impossible
    assert impossible.answers == ()  # plausible_answers are not reference answers


QID = "56ddde6b9a695914005b9628"


def first_qa(data: dict[str, Any]) -> dict[str, Any]:
    return data["data"][0]["paragraphs"][0]["qas"][0]


def set_key(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: first_qa(data).__setitem__(key, value)


def set_answer(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: first_qa(data)["answers"][0].__setitem__(key, value)


def duplicate_id(data: dict[str, Any]) -> None:
    data["data"][0]["paragraphs"][0]["qas"][1]["id"] = QID


def empty_context(data: dict[str, Any]) -> None:
    data["data"][0]["paragraphs"][0]["context"] = ""


def impossible_with_answers(data: dict[str, Any]) -> None:
    qa = data["data"][0]["paragraphs"][0]["qas"][1]
    qa["answers"] = qa["plausible_answers"]


IMPOSSIBLE_ID = "5ad39d53604f3c001a3fe8d1"
# (mutation of the good 2.0 dev file, what the message must say after "dev-v2.0.json: ")
BAD_SQUAD = {
    "no answers key": (lambda data: first_qa(data).pop("answers"), f'question {QID}: no "answers" key'),
    "possible without answer": (set_key("answers", []), f"question {QID}: no answer"),
    "answer_start off by one": (
        set_answer("answer_start", 52),
        f"question {QID}: answer_start 52 gives 'ormandy,' but the answer text is 'Normandy'",
    ),
    "answer_start past the end": (
        set_answer("answer_start", 78),
        f"question {QID}: answer_start 78 gives 'e.' but the answer text is 'Normandy'",
    ),
    "answer_start negative": (set_answer("answer_start", -1), f"question {QID}: answer 0 has answer_start -1"),
    "answer_start a string": (set_answer("answer_start", "51"), f"question {QID}: answer 0 has answer_start '51'"),
    "answer_start a bool": (set_answer("answer_start", True), f"question {QID}: answer 0 has answer_start True"),
    "empty answer text": (set_answer("text", ""), f'question {QID}: answer 0 has no "text" string'),
    "duplicate id": (duplicate_id, f"question {QID}: id appears twice"),
    "empty question": (set_key("question", "  "), f"question {QID}: empty question text"),
    "empty context": (empty_context, f"question {QID}: empty context"),
    "impossible with answers": (impossible_with_answers, f"question {IMPOSSIBLE_ID}: is_impossible is true but"),
    "is_impossible not a bool": (set_key("is_impossible", "no"), f"question {QID}: is_impossible is 'no'"),
    "no id": (lambda data: first_qa(data).pop("id"), 'article 0, paragraph 0: a question without an "id" string'),
}


@pytest.mark.parametrize("case", sorted(BAD_SQUAD))
def test_bad_squad_file_names_file_and_question(tmp_path: Path, case: str) -> None:
    mutate, message = BAD_SQUAD[case]
    data = squad_v2_dev()
    mutate(data)
    path = write_json(tmp_path / "dev-v2.0.json", data)
    with pytest.raises(TaskDataError, match=re.escape(f"dev-v2.0.json: {message}")):
        read_squad(path)


def test_bad_squad_fixture_is_good_before_mutation(tmp_path: Path) -> None:
    # Guards the parametrized test above: each error must come from its mutation, not from a broken base file.
    assert len(read_squad(write_json(tmp_path / "dev-v2.0.json", squad_v2_dev()))) == 2


def test_squad_not_json_or_no_data_list(tmp_path: Path) -> None:
    not_json = tmp_path / "dev-v2.0.json"
    not_json.write_text('{"version": "v2.0", "data": [', encoding="utf-8")
    with pytest.raises(TaskDataError, match=re.escape("dev-v2.0.json, line 1: not valid JSON")):
        read_squad(not_json)
    with pytest.raises(TaskDataError, match=re.escape('train-v1.1.json: no "data" list')):
        read_squad(write_json(tmp_path / "train-v1.1.json", {"version": "1.1", "paragraphs": []}))
    with pytest.raises(TaskDataError, match=re.escape("missing.json: file not found")):
        read_squad(tmp_path / "missing.json")


def touch(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("{}", encoding="utf-8")
    return folder


def test_squad_files_official_and_project_names(tmp_path: Path) -> None:
    both_versions = touch(tmp_path / "squad", "train-v1.1.json", "dev-v1.1.json", "train-v2.0.json", "dev-v2.0.json")
    assert squad_files(both_versions, "1.1") == {
        "train": both_versions / "train-v1.1.json",
        "dev": both_versions / "dev-v1.1.json",
    }
    assert squad_files(both_versions, "v2.0") == {
        "train": both_versions / "train-v2.0.json",
        "dev": both_versions / "dev-v2.0.json",
    }
    assert squad_files(both_versions, "v2")["dev"].name == "dev-v2.0.json"
    project = touch(tmp_path / "own", "train.json", "dev.json")
    assert squad_files(project, "2.0") == {"train": project / "train.json", "dev": project / "dev.json"}


def test_squad_files_errors_name_folder_and_files(tmp_path: Path) -> None:
    only_v1 = touch(tmp_path / "v1only", "train-v1.1.json", "dev-v1.1.json")
    looked_for = "v1only: no train-v2.0.json or dev-v2.0.json; looked for train-v2.0.json and dev-v2.0.json (SQuAD 2.0)"
    with pytest.raises(TaskDataError, match=re.escape(looked_for)):
        squad_files(only_v1, "2.0")
    no_dev = touch(tmp_path / "nodev", "train.json")
    with pytest.raises(
        TaskDataError, match=re.escape("nodev: no dev.json; looked for train-v1.1.json and dev-v1.1.json")
    ):
        squad_files(no_dev, "1.1")
    mixed = touch(tmp_path / "mixed", "train-v1.1.json", "dev-v1.1.json", "train.json", "dev.json")
    with pytest.raises(TaskDataError, match=re.escape("mixed: both the official SQuAD 1.1 files and train.json")):
        squad_files(mixed, "1.1")
    with pytest.raises(TaskDataError, match=re.escape("nowhere: no such folder")):
        squad_files(tmp_path / "nowhere", "1.1")
    with pytest.raises(TaskDataError, match=re.escape("unknown SQuAD version '3.0'")):
        squad_files(only_v1, "3.0")


def race_file(
    article: str, questions: list[str], options: list[list[str]], answers: list[str], rid: str
) -> dict[str, Any]:
    return {"answers": answers, "options": options, "questions": questions, "article": article, "id": rid}


OPTIONS = [["red", "green", "blue", "black"], ["one", "two", "three", "four"]]
MIDDLE_2 = race_file(
    "Tom has a red bike.", ["What color is the bike?", "How many bikes?"], OPTIONS, ["A", "A"], "middle2.txt"
)
MIDDLE_10 = race_file("小明有两本书。", ["小明有几本书？"], [["一", "两", "三", "四"]], ["B"], "middle10.txt")
HIGH_1 = race_file("The sky is blue.", ["The sky is _ ."], [OPTIONS[0]], ["D"], "high1.txt")


def write_race(root: Path) -> Path:
    """RACE/train with middle/2.txt, middle/10.txt and high/1.txt; RACE/dev with high/ only."""
    race = root / "RACE"
    write_json(race / "train" / "middle" / "2.txt", MIDDLE_2)
    write_json(race / "train" / "middle" / "10.txt", MIDDLE_10)
    write_json(race / "train" / "high" / "1.txt", HIGH_1)
    write_json(race / "dev" / "high" / "1.txt", HIGH_1)
    return race


def test_race_reads_levels_ids_labels_in_order(tmp_path: Path) -> None:
    questions = read_race(write_race(tmp_path), "train")
    # middle before high; files in sorted name order ("10.txt" < "2.txt"); questions in file order.
    assert [q.id for q in questions] == ["middle/10-0", "middle/2-0", "middle/2-1", "high/1-0"]
    assert [q.label for q in questions] == [1, 0, 0, 3]
    assert [q.level for q in questions] == ["middle", "middle", "middle", "high"]
    assert questions[0] == RaceQuestion(
        "middle/10-0", "小明有两本书。", "小明有几本书？", ("一", "两", "三", "四"), 1, "middle"
    )
    assert questions[2].question == "How many bikes?" and questions[2].options == tuple(OPTIONS[1])
    dev = read_race(tmp_path / "RACE", "dev")
    assert [(q.id, q.level, q.label) for q in dev] == [("high/1-0", "high", 3)]


def bad_race(tmp_path: Path, record: Any) -> Path:
    """A RACE folder whose only train file, high/7.txt, holds ``record``."""
    write_json(tmp_path / "RACE" / "train" / "high" / "7.txt", record)
    return tmp_path / "RACE"


def with_changes(**changes: Any) -> dict[str, Any]:
    record = copy.deepcopy(MIDDLE_2)
    record.update(changes)
    return record


BAD_RACE = {
    "lengths differ": (with_changes(answers=["A"]), "7.txt: 2 questions, 2 options, 1 answers"),
    "three options": (
        with_changes(options=[OPTIONS[0], ["one", "two", "three"]]),
        "7.txt: question 1 (high/7-1): 3 options, expected 4",
    ),
    "five options": (
        with_changes(options=[[*OPTIONS[0], "white"], OPTIONS[1]]),
        "7.txt: question 0 (high/7-0): 5 options, expected 4",
    ),
    "answer E": (
        with_changes(answers=["A", "E"]),
        "7.txt: question 1 (high/7-1): answer 'E', expected one of A, B, C, D",
    ),
    "answer lower case": (with_changes(answers=["a", "B"]), "7.txt: question 0 (high/7-0): answer 'a'"),
    "answer two letters": (with_changes(answers=["A", "AB"]), "7.txt: question 1 (high/7-1): answer 'AB'"),
    "empty article": (with_changes(article=" \n"), "7.txt: empty article"),
    "no options list": (with_changes(options=None), "7.txt: no 'options' list"),
    "not an object": ([MIDDLE_2], "7.txt: a JSON list, expected one object"),
}


@pytest.mark.parametrize("case", sorted(BAD_RACE))
def test_bad_race_file_names_file_and_question(tmp_path: Path, case: str) -> None:
    record, message = BAD_RACE[case]
    with pytest.raises(TaskDataError, match=re.escape(message)):
        read_race(bad_race(tmp_path, record), "train")


def test_race_not_json_and_missing_folders(tmp_path: Path) -> None:
    race = write_race(tmp_path)
    (race / "train" / "middle" / "3.txt").write_text('{"article": "x",', encoding="utf-8")
    with pytest.raises(TaskDataError, match=re.escape("3.txt, line 1: not valid JSON")):
        read_race(race, "train")
    with pytest.raises(TaskDataError, match=re.escape(f"{race / 'test'}: no such folder")):
        read_race(race, "test")
    (race / "test" / "other").mkdir(parents=True)
    with pytest.raises(TaskDataError, match=re.escape(f"{race / 'test'}: neither middle/ nor high/")):
        read_race(race, "test")
    (race / "test" / "high").mkdir()
    with pytest.raises(TaskDataError, match=re.escape(f"{race / 'test'}: no questions in high/*.txt")):
        read_race(race, "test")
