"""CLUE's two reading tasks in the folders CLUE publishes them in: CMRC 2018 (spans) and C3 (multiple choice).

CMRC 2018 (``cmrc_files``): ``<clue_dir>/cmrc2018_public/`` holds SQuAD 1.1 JSON, ``train.json`` and ``dev.json``
as CLUE's download has them, or ``cmrc2018_train.json`` and ``cmrc2018_dev.json`` as the CMRC 2018 release names
them; an unlabelled ``test.json`` (``cmrc2018_test.json``) is predicted where present. Read by ``read_squad``, its
answers checked against their ``answer_start`` up to 3 characters early, as CLUE's preprocessing tolerates.

C3 (``read_c3``): ``<clue_dir>/c3_public/`` holds ``d-train.json``, ``m-train.json``, ``d-dev.json``, ``m-dev.json``
(dialogues and mixed-genre texts) and the unlabelled ``test1.0.json`` / ``test1.1.json``, each one JSON list of
``[[context sentences], [{"question", "choice": [2–4 options], "answer", "id"}], document id]``. A question is a
``RaceQuestion`` on the sentences joined by newlines, its options as many as the file gives: the multiple-choice
path pads a batch to its most options and never chooses a padded one.

Pure Python, like ``files``: every problem raises ``TaskDataError`` naming the file and where in it.
Tests: ``python -m pytest tests/test_clue.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from albert_lightning.evaluation.reading.files import RaceQuestion, load_json
from albert_lightning.evaluation.task_files import TaskDataError

__all__ = ["C3_LEVELS", "C3_TESTS", "CLUE_READING_TASKS", "CMRC_ANSWER_SHIFT", "cmrc_files", "read_c3"]

CLUE_READING_TASKS = ("cmrc2018", "c3")
CMRC_ANSWER_SHIFT = 3  # CLUE's cmrc2018_preprocess.py: repeat_limit=3
_CMRC_LAYOUTS = (
    {"train": "train.json", "dev": "dev.json", "test": "test.json"},
    {"train": "cmrc2018_train.json", "dev": "cmrc2018_dev.json", "test": "cmrc2018_test.json"},
)
C3_LEVELS = ("dialogue", "mixed")  # C3-D and C3-M, read in this order
_C3_PREFIX = {"dialogue": "d", "mixed": "m"}
C3_TESTS = {"test1.0": "test1.0.json", "test1.1": "test1.1.json"}  # CLUE 1.0's and 1.1's test sets
C3_MAX_OPTIONS = 4


def cmrc_files(folder: str | Path) -> dict[str, Path]:
    """CMRC 2018's files in ``folder`` by split: train and dev, and test where present.

    Raises:
        TaskDataError: A missing folder or train/dev file, or both layouts in one folder.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise TaskDataError(f"{folder}: no such folder; expected CLUE's cmrc2018_public/ with train.json, dev.json")
    present = [layout for layout in _CMRC_LAYOUTS if any((folder / name).is_file() for name in layout.values())]
    if len(present) > 1:
        raise TaskDataError(f"{folder}: both train.json/dev.json and cmrc2018_train.json/…; keep one layout")
    layout = present[0] if present else _CMRC_LAYOUTS[0]
    missing = [layout[split] for split in ("train", "dev") if not (folder / layout[split]).is_file()]
    if missing:
        raise TaskDataError(f"{folder}: no {' or '.join(missing)}; expected train.json and dev.json (SQuAD layout)")
    return {split: folder / name for split, name in layout.items() if (folder / name).is_file()}


def read_c3(folder: str | Path, split: str) -> list[RaceQuestion]:
    """Every question of C3's ``split`` in ``folder``: "train" and "dev" read ``d-<split>.json`` then
    ``m-<split>.json`` (both required), a test split (``C3_TESTS``) its one file, unlabelled.

    Raises:
        TaskDataError: A missing file, one that is not a list of [sentences, questions, id] documents, a question
            without text or with other than 2–4 options, an answer that is not one of its options, or no question.
    """
    folder = Path(folder)
    if split in C3_TESTS:
        files = [(folder / C3_TESTS[split], "")]
    else:
        files = [(folder / f"{_C3_PREFIX[level]}-{split}.json", level) for level in C3_LEVELS]
    questions = [q for path, level in files for q in _c3_file(path, level)]
    if not questions:
        raise TaskDataError(f"{folder}: no questions in {', '.join(path.name for path, _ in files)}")
    return questions


def _c3_file(path: Path, level: str) -> list[RaceQuestion]:
    documents = load_json(path)
    if not isinstance(documents, list):
        raise TaskDataError(f"{path}: a JSON {type(documents).__name__}, expected a list of documents")
    questions = []
    for d, document in enumerate(documents):
        if not (isinstance(document, list) and len(document) == 3 and isinstance(document[0], list)
                and isinstance(document[1], list)):  # fmt: skip
            raise TaskDataError(f"{path}: document {d}: expected [[sentences], [questions], id]")
        sentences, items, doc_id = document
        where = f"{path}: document {d} ({doc_id})"
        if not sentences or not all(isinstance(s, str) for s in sentences):
            raise TaskDataError(f"{where}: the context is not a non-empty list of sentences")
        context = "\n".join(sentences)
        questions += [_c3_question(where, level, f"{doc_id}-{i}", context, item) for i, item in enumerate(items)]
    return questions


def _c3_question(where: str, level: str, key: str, context: str, item: Any) -> RaceQuestion:
    named = f"{where}, question {key}"
    if not isinstance(item, dict) or not isinstance(item.get("question"), str) or not item["question"].strip():
        raise TaskDataError(f'{named}: expected an object with a "question" text')
    options = item.get("choice")
    if not isinstance(options, list) or not 2 <= len(options) <= C3_MAX_OPTIONS:
        count = len(options) if isinstance(options, list) else repr(options)
        raise TaskDataError(f'{named}: "choice" has {count} options, expected a list of 2 to {C3_MAX_OPTIONS}')
    if not all(isinstance(option, str) for option in options):
        raise TaskDataError(f"{named}: an option is not a string")
    answer = item.get("answer")
    label = None
    if level:  # train and dev: the answer is one of the options, by its text
        if answer not in options:
            raise TaskDataError(f"{named}: answer {answer!r} is not one of its options {options}")
        label = options.index(answer)
    qid = f"{_C3_PREFIX.get(level, 'test')}/{key}"  # document ids repeat across d- and m- files
    return RaceQuestion(qid, context, item["question"], tuple(options), label, level, item.get("id"))
