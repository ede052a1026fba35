"""Readers for the span and multiple-choice tasks in their official distribution layouts: SQuAD and RACE.

SQuAD 1.1 / 2.0 (``read_squad``): one JSON file per split, ``{"version": ..., "data": [{"title": ..., "paragraphs":
[{"context": ..., "qas": [{"id": ..., "question": ..., "answers": [{"text": ..., "answer_start": ...}],
"is_impossible": ..., "plausible_answers": [...]}]}]}]}``, named ``train-v1.1.json`` / ``dev-v1.1.json`` or
``train-v2.0.json`` / ``dev-v2.0.json`` as distributed, or ``train.json`` / ``dev.json`` for the project's own span
tasks written in the same layout (``squad_files``).

RACE (``read_race``): ``RACE/{train,dev,test}/{middle,high}/*.txt``, each file one JSON object ``{"id": ...,
"article": ..., "questions": [...], "options": [[A, B, C, D], ...], "answers": ["A".."D", ...]}``.

Pure Python (standard library only), like ``task_files``: every problem raises ``TaskDataError`` naming the file and,
where there is one, the question id, and saying what is wrong. Tests: ``python -m pytest tests/test_reading_files.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albert_lightning.evaluation.task_files import TaskDataError

__all__ = [
    "RACE_LEVELS",
    "SQUAD_FILES",
    "Answer",
    "RaceQuestion",
    "SquadQuestion",
    "load_json",
    "read_race",
    "read_squad",
    "squad_files",
]

# Official file names of each SQuAD version, by split; the project's own span tasks use PROJECT_SQUAD_FILES.
SQUAD_FILES = {
    "1.1": {"train": "train-v1.1.json", "dev": "dev-v1.1.json"},
    "2.0": {"train": "train-v2.0.json", "dev": "dev-v2.0.json"},
}
PROJECT_SQUAD_FILES = {"train": "train.json", "dev": "dev.json"}
# Spellings a caller may give for a version: the numbers, with or without a "v" (the 2.0 file itself says "v2.0").
SQUAD_VERSIONS = {"1": "1.1", "1.1": "1.1", "2": "2.0", "2.0": "2.0"}
RACE_LEVELS = ("middle", "high")  # RACE's two school levels, read in this order
RACE_LETTERS = "ABCD"
RACE_LAYOUT = "RACE/{train,dev,test}/{middle,high}/*.txt"


@dataclass(frozen=True)
class Answer:
    """One reference answer: its text and where it starts in the context."""

    text: str
    start: int  # character (code point) offset in the context, as SQuAD's answer_start counts


@dataclass(frozen=True)
class SquadQuestion:
    """One SQuAD question with its paragraph; ``answers`` holds every reference answer, in file order."""

    id: str
    question: str
    context: str
    answers: tuple[Answer, ...]  # empty for an impossible question (2.0)
    is_impossible: bool
    title: str


@dataclass(frozen=True)
class RaceQuestion:
    """One RACE question with its article and four options (C3: two to four); ``label`` is the correct option's
    index."""

    id: str  # f"{level}/{file stem}-{index}": file stems repeat across levels and a file holds several questions
    article: str
    question: str
    options: tuple[str, ...]
    label: int | None  # 0..3 for answers "A".."D"; None in an unlabelled test file (C3's)
    level: str  # "middle" | "high"; C3: "dialogue" | "mixed", "" in its test files
    source_id: Any = None  # the file's own id of the question (C3's "id"), which a leaderboard file repeats


def load_json(path: Path) -> Any:
    """The JSON value in ``path``; a missing, non-UTF-8 or non-JSON file is a TaskDataError naming it."""
    try:
        # utf-8-sig: a byte-order mark added by an editor would otherwise make json.loads fail on a good file.
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise TaskDataError(f"{path}: file not found") from None
    except UnicodeDecodeError as e:
        raise TaskDataError(f"{path}: not UTF-8 text (byte {e.start}); expected a JSON file") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TaskDataError(f"{path}, line {e.lineno}: not valid JSON ({e.msg})") from e


def squad_files(folder: str | Path, version: str) -> dict[str, Path]:
    """The train and dev files of a SQuAD run whose data is in ``folder`` (``--squad_dir``), by split.

    ``folder`` holds either the official files of ``version`` ("1.1"/"v1.1"/"v1" or "2.0"/"v2.0"/"v2"), e.g.
    ``train-v2.0.json`` and ``dev-v2.0.json``, or the project's ``train.json`` and ``dev.json`` in the same layout.

    Raises:
        TaskDataError: An unknown version, a missing folder, a missing file (naming the folder and the names looked
            for), or both layouts in one folder (which one a run read would be a guess).
    """
    folder = Path(folder)
    key = SQUAD_VERSIONS.get(str(version).lower().removeprefix("v"))
    if key is None:
        raise TaskDataError(f"unknown SQuAD version {version!r}; expected 1.1 or 2.0")
    if not folder.is_dir():
        raise TaskDataError(f"{folder}: no such folder; expected a folder holding the SQuAD {key} files")
    official = {split: folder / name for split, name in SQUAD_FILES[key].items()}
    project = {split: folder / name for split, name in PROJECT_SQUAD_FILES.items()}
    has_official = any(p.is_file() for p in official.values())
    has_project = any(p.is_file() for p in project.values())
    if has_official and has_project:
        raise TaskDataError(f"{folder}: both the official SQuAD {key} files and train.json/dev.json; keep one layout")
    chosen = project if has_project else official
    missing = [p.name for p in chosen.values() if not p.is_file()]
    if missing:
        looked_for = " and ".join(SQUAD_FILES[key].values())
        raise TaskDataError(
            f"{folder}: no {' or '.join(missing)}; looked for {looked_for} (SQuAD {key}) or train.json and dev.json"
        )
    return chosen


def read_squad(path: str | Path, answer_shift: int = 0, labelled: bool = True) -> list[SquadQuestion]:
    """Every question of a SQuAD 1.1 or 2.0 file in the official layout, in file order.

    ``answer_shift``: how many characters before its ``answer_start`` an answer may begin, for files whose
    offsets are a little off (CMRC 2018's: CLUE's preprocessing moves such an answer back by up to 3); the answer
    then starts where its text is. ``labelled=False`` reads a test file, whose questions have no answers.

    Every answer is kept (a training file has one per question, a dev file up to several): the caller chooses, e.g.
    the first as a training span, as BERT's ``run_squad`` does, and all of them for the evaluation's best match.
    ``plausible_answers`` of impossible 2.0 questions are not read: neither training nor evaluation uses them.

    The checks are strict, for training and dev files alike: BERT's reference skips a training answer it cannot
    find in the context with a warning ("Could not find answer"), but a silently skipped or shifted answer changes
    the training set or the score unseen, so an ``answer_start`` whose context text is not the answer text is an
    error here.

    Raises:
        TaskDataError: Not JSON or no "data" list; a question without an id, question text, context or "answers"
            key; a duplicate id; a possible question without an answer; an impossible one with answers; an answer
            whose ``answer_start`` does not give its text. Each message names the file and the question id.
    """
    path = Path(path)
    data = load_json(path)
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list):
        raise TaskDataError(f'{path}: no "data" list; expected the official SQuAD layout {{"version": …, "data": […]}}')
    questions: list[SquadQuestion] = []
    first_seen: dict[str, str] = {}  # id → where it first appeared, for the duplicate message
    for a, article in enumerate(articles):
        for where, title, context, qa in _squad_records(path, a, article):
            question = _squad_question(path, where, title, context, qa, answer_shift, labelled)
            if question.id in first_seen:
                raise TaskDataError(f"{path}: question {question.id}: id appears twice ({first_seen[question.id]})")
            first_seen[question.id] = where
            questions.append(question)
    if not questions:
        raise TaskDataError(f"{path}: no questions; expected paragraphs with non-empty qas lists")
    return questions


def _squad_records(path: Path, a: int, article: Any) -> list[tuple[str, str, Any, Any]]:
    """(position, title, context, raw question) for every question of article ``a``, its nesting checked."""
    paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
    if not isinstance(paragraphs, list):
        raise TaskDataError(f'{path}: article {a}: no "paragraphs" list')
    title = article.get("title", "")
    title = title if isinstance(title, str) else str(title)
    records = []
    for p, paragraph in enumerate(paragraphs):
        qas = paragraph.get("qas") if isinstance(paragraph, dict) else None
        if not isinstance(qas, list):
            raise TaskDataError(f'{path}: article {a} ({title!r}), paragraph {p}: no "qas" list')
        records += [(f"article {a}, paragraph {p}", title, paragraph.get("context"), qa) for qa in qas]
    return records


def _squad_question(
    path: Path, where: str, title: str, context: Any, qa: Any, answer_shift: int = 0, labelled: bool = True
) -> SquadQuestion:
    """One question of ``path`` at ``where``, checked: see ``read_squad``."""
    qid = qa.get("id") if isinstance(qa, dict) else None
    if not isinstance(qid, str) or not qid:
        raise TaskDataError(f'{path}: {where}: a question without an "id" string')
    named = f"{path}: question {qid}"
    question = qa.get("question")
    if not isinstance(question, str) or not question.strip():
        raise TaskDataError(f"{named}: empty question text")
    if not isinstance(context, str) or not context.strip():
        raise TaskDataError(f"{named}: empty context ({where})")
    if not labelled:
        return SquadQuestion(qid, question, context, (), False, title)
    if "answers" not in qa:
        raise TaskDataError(f'{named}: no "answers" key; an impossible SQuAD 2.0 question has "answers": []')
    impossible = qa.get("is_impossible", False)  # SQuAD 1.1 has no such key: every question is answerable
    if not isinstance(impossible, bool):
        raise TaskDataError(f"{named}: is_impossible is {impossible!r}, expected true or false")
    answers = _squad_answers(named, context, qa["answers"], answer_shift)
    if impossible and answers:
        raise TaskDataError(
            f"{named}: is_impossible is true but it has {len(answers)} answer(s); 2.0 keeps those in plausible_answers"
        )
    if not impossible and not answers:
        raise TaskDataError(f"{named}: no answer; a possible question needs one (or is_impossible: true in 2.0)")
    return SquadQuestion(qid, question, context, answers, impossible, title)


def _squad_answers(named: str, context: str, raw: Any, answer_shift: int = 0) -> tuple[Answer, ...]:
    """The answers of one question, each checked against the context it points into (``answer_shift``
    characters before it too)."""
    if not isinstance(raw, list):
        raise TaskDataError(f'{named}: "answers" is a JSON {type(raw).__name__}, expected a list')
    answers = []
    for i, answer in enumerate(raw):
        text = answer.get("text") if isinstance(answer, dict) else None
        start = answer.get("answer_start") if isinstance(answer, dict) else None
        if not isinstance(text, str) or not text:
            raise TaskDataError(f'{named}: answer {i} has no "text" string')
        # bool is an int subclass, but true/false as an offset is a broken file, not offset 1/0.
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise TaskDataError(f"{named}: answer {i} has answer_start {start!r}, expected an offset ≥ 0")
        found = context[start : start + len(text)]
        shifted = next((s for s in range(start, max(start - answer_shift, 0) - 1, -1)
                        if context[s : s + len(text)] == text), None)  # fmt: skip
        if shifted is None:
            raise TaskDataError(f"{named}: answer_start {start} gives {found!r} but the answer text is {text!r}")
        answers.append(Answer(text, shifted))
    return tuple(answers)


def read_race(folder: str | Path, split: str) -> list[RaceQuestion]:
    """Every question of RACE's ``split`` under ``folder`` (the ``RACE`` folder): ``middle/*.txt`` then
    ``high/*.txt``, files in sorted name order, questions in file order. One level may be missing (a subset).

    Raises:
        TaskDataError: A missing split folder, one with neither level, no questions at all, a file that is not a
            JSON object, an empty article, question/options/answers lists of different lengths, an option count
            other than 4, or an answer outside A–D; each names the file and, where there is one, the question.
    """
    split_dir = Path(folder) / split
    if not split_dir.is_dir():
        raise TaskDataError(f"{split_dir}: no such folder; RACE's layout is {RACE_LAYOUT}")
    levels = [level for level in RACE_LEVELS if (split_dir / level).is_dir()]
    if not levels:
        raise TaskDataError(f"{split_dir}: neither middle/ nor high/; RACE's layout is {RACE_LAYOUT}")
    questions: list[RaceQuestion] = []
    for level in levels:
        for path in sorted((split_dir / level).glob("*.txt")):
            questions += _race_file(path, level)
    if not questions:
        found = " or ".join(f"{level}/*.txt" for level in levels)
        raise TaskDataError(f"{split_dir}: no questions in {found}")
    return questions


def _race_file(path: Path, level: str) -> list[RaceQuestion]:
    """The questions of one RACE file, its lists checked against each other."""
    record = load_json(path)
    if not isinstance(record, dict):
        raise TaskDataError(f"{path}: a JSON {type(record).__name__}, expected one object")
    article = record.get("article")
    if not isinstance(article, str) or not article.strip():
        raise TaskDataError(f"{path}: empty article")
    lists = {key: record.get(key) for key in ("questions", "options", "answers")}
    for key, value in lists.items():
        if not isinstance(value, list):
            raise TaskDataError(f"{path}: no {key!r} list")
    lengths = {key: len(value) for key, value in lists.items()}
    if len(set(lengths.values())) != 1:
        counts = ", ".join(f"{n} {key}" for key, n in lengths.items())
        raise TaskDataError(f"{path}: {counts}; expected one question, options list and answer per question")
    if not lengths["questions"]:
        raise TaskDataError(f"{path}: no questions")
    rows = zip(lists["questions"], lists["options"], lists["answers"], strict=True)  # lengths checked above
    return [_race_question(path, level, i, article, *row) for i, row in enumerate(rows)]


def _race_question(
    path: Path, level: str, i: int, article: str, question: Any, options: Any, answer: Any
) -> RaceQuestion:
    """Question ``i`` of ``path``, checked."""
    qid = f"{level}/{path.stem}-{i}"
    named = f"{path}: question {i} ({qid})"
    # An empty question is legal: RACE's cloze questions can be a blank the options complete.
    if not isinstance(question, str):
        raise TaskDataError(f"{named}: question is a JSON {type(question).__name__}, expected a string")
    if not isinstance(options, list) or len(options) != len(RACE_LETTERS):
        count = len(options) if isinstance(options, list) else type(options).__name__
        raise TaskDataError(f"{named}: {count} options, expected {len(RACE_LETTERS)} (A–D)")
    if not all(isinstance(option, str) for option in options):
        raise TaskDataError(f"{named}: an option is not a string")
    if not isinstance(answer, str) or len(answer) != 1 or answer not in RACE_LETTERS:
        raise TaskDataError(f"{named}: answer {answer!r}, expected one of A, B, C, D")
    return RaceQuestion(qid, article, question, tuple(options), RACE_LETTERS.index(answer), level)
