"""Reading comprehension in the evaluation: span extraction (SQuAD 1.1 and 2.0, the embedded ``returns`` task)
and multiple choice (RACE).

A task is fine-tuned as the sentence tasks are (``evaluate``): per training-set size and seed, from the checkpoint
and from random weights of its shape, on the same subset; scored on dev with the official definitions
(``reading.metrics``), with the median over seeds and the gain's 95% interval; beside a baseline that needs no
model: for spans the first sentence's object (the first sentence of the context without its first word: what a
docstring's "Return …" opening answers), for RACE the most frequent answer letter of the training set.

Span inputs are the reference's windows (``windows.make_windows``: ``max_seq_length``, ``doc_stride``,
``max_query_length``), answers are decoded across a question's windows (``decoding.decode``) back to the original
text; SQuAD 2.0 reports the official best-threshold scores, the threshold on the no-answer score chosen on dev.
A RACE option is ``[CLS] article [SEP] question option [SEP]`` (a blank ``_`` in the question is filled with the
option), one score per option from [CLS], softmax over the four.

The audited run (the pretrained start's first seed on the largest training set) writes its dev predictions to
``predictions/<task>/dev.jsonl`` and its fine-tuned network as a Hugging Face folder, ``finetuned/<task>/``, which
``transformers`` loads as ``AlbertForQuestionAnswering`` or ``AlbertForMultipleChoice``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from albert_lightning.evaluation.clue_files import CLUE_SUBMISSION_FILES, clue_folder
from albert_lightning.evaluation.finetuning import AlbertFineTuning, Encoder, run_finetuning, show_run, starts
from albert_lightning.evaluation.intervals import median_gain_interval
from albert_lightning.evaluation.lr_selection import HeldSlice, choose_lrs
from albert_lightning.evaluation.plan import finetuning_seeds, finetuning_steps, train_sizes, train_subset
from albert_lightning.evaluation.reading.clue_files import (
    C3_LEVELS,
    C3_TESTS,
    CLUE_READING_TASKS,
    CMRC_ANSWER_SHIFT,
    cmrc_files,
    read_c3,
)
from albert_lightning.evaluation.reading.decoding import decode
from albert_lightning.evaluation.reading.files import RaceQuestion, SquadQuestion, read_race, read_squad, squad_files
from albert_lightning.evaluation.reading.metrics import (
    RACE_LEVELS,
    apply_no_ans_threshold,
    cmrc_raw_scores,
    cmrc_scores,
    race_accuracy,
    raw_scores,
    squad_scores,
)
from albert_lightning.evaluation.reading.windows import Window, make_windows
from albert_lightning.evaluation.report import PREDICTION_DIGITS, STARTS, round_score, rounded_gain, write_json_lines
from albert_lightning.evaluation.task_files import TaskDataError, read_task_config
from albert_lightning.interop.hf import check_export_target, export_hf
from albert_lightning.model import AlbertForPreTraining
from pipelines.runtime.files import write_text_atomically

__all__ = ["READING_TASKS", "ReadingTask", "evaluate_reading_task", "first_sentence_object", "reading_task"]

SQUAD_VERSIONS = {"squad1": "1.1", "squad2": "2.0"}
READING_TASKS = (*SQUAD_VERSIONS, "race", *CLUE_READING_TASKS)


@dataclass
class ReadingTask:
    """A reading-comprehension task, read and checked in full."""

    name: str
    head: str  # "span" or "choice"
    train: list[SquadQuestion] | list[RaceQuestion]
    dev: list[SquadQuestion] | list[RaceQuestion]
    # "1.1" or "2.0" for spans (2.0: questions may have no answer), "cmrc2018" for spans scored as CLUE scores
    # CMRC 2018; "race" or "c3" for choices
    version: str
    tests: dict[str, list[Any]] = dataclasses.field(default_factory=dict)  # unlabelled split → its questions

    @property
    def primary(self) -> str:
        # CLUE's leaderboard ranks CMRC 2018 by exact match
        return {"1.1": "f1", "2.0": "best_f1", "cmrc2018": "exact", "race": "accuracy", "c3": "accuracy"}[self.version]

    @property
    def levels(self) -> tuple[str, ...]:
        """The parts a choice task's accuracy is also given on: RACE's school levels, C3's two sources."""
        return C3_LEVELS if self.version == "c3" else RACE_LEVELS


def reading_task(
    name: str,
    squad_dir: str | None,
    race_dir: str | None,
    task_config: dict[str, Any] | None = None,
    clue_dir: str | None = None,
) -> ReadingTask | None:
    """Returns the reading task ``name`` denotes, every file read and checked; None for a sentence task.

    ``squad1``/``squad2`` read ``squad_dir`` (the official file names), ``race`` reads ``race_dir``
    (``{train,dev}/{middle,high}/*.txt``), ``cmrc2018`` and ``c3`` (any case) read ``clue_dir``'s
    ``cmrc2018_public/`` and ``c3_public/`` (``reading.clue_files``), with their test files where present; a folder
    whose ``task.json`` says ``"kind": "span"`` (the tasks stage's ``returns``) holds ``train.json`` and
    ``dev.json`` in SQuAD's layout. ``task_config``: that ``task.json`` when read already.

    Raises:
        TaskDataError: a missing folder or file, or a file that is not in its official layout (naming it).
    """
    if name in SQUAD_VERSIONS:
        files = squad_files(_folder(squad_dir, "squad_dir", name), SQUAD_VERSIONS[name])
        return ReadingTask(name, "span", read_squad(files["train"]), read_squad(files["dev"]), SQUAD_VERSIONS[name])
    if name == "race":
        folder = _folder(race_dir, "race_dir", name)
        return ReadingTask(name, "choice", read_race(folder, "train"), read_race(folder, "dev"), "race")
    if name.lower() in CLUE_READING_TASKS:
        return _clue_task(name.lower(), clue_dir)
    task_config = read_task_config(Path(name)) if task_config is None else task_config  # when not read already
    if task_config.get("kind") == "span":
        files = squad_files(name, "1.1")
        return ReadingTask(Path(name).name, "span", read_squad(files["train"]), read_squad(files["dev"]), "1.1")
    return None


def _clue_task(name: str, clue_dir: str | None) -> ReadingTask:
    folder = clue_folder(name, _folder(clue_dir, "clue_dir", name))
    if name == "c3":
        tests = {split: read_c3(folder, split) for split, file in C3_TESTS.items() if (folder / file).is_file()}
        return ReadingTask(name, "choice", read_c3(folder, "train"), read_c3(folder, "dev"), "c3", tests)
    files = cmrc_files(folder)
    train, dev = (read_squad(files[split], CMRC_ANSWER_SHIFT) for split in ("train", "dev"))
    tests = {"test": read_squad(files["test"], labelled=False)} if "test" in files else {}
    return ReadingTask(name, "span", train, dev, "cmrc2018", tests)


def _folder(path: str | None, flag: str, task: str) -> str:
    if path is None:
        raise TaskDataError(f"task {task}: give the folder of its files with --{flag} (or evaluate.{flag})")
    return path


def first_sentence(context: str) -> str:
    """CMRC 2018's baseline answer: the context up to its first full stop "。"."""
    return context.split("。", 1)[0]


def first_sentence_object(context: str) -> str:
    """The baseline answer: the context's first sentence without its first word and final full stop."""
    sentence = context.split(". ", 1)[0].rstrip(".")
    return sentence.split(" ", 1)[1] if " " in sentence else sentence


# --- encoding ---------------------------------------------------------------------------------------------------


@dataclass
class _Inputs:
    """A task's training rows (one per window or per question) and its dev questions' inputs."""

    train: list[Any]
    dev: list[Any]  # per dev question: its windows (spans) or its encoded options (choices)
    tests: dict[str, list[Any]] = dataclasses.field(default_factory=dict)  # per test split, as dev


def _encode(task: ReadingTask, encoder: Encoder, config: Any) -> _Inputs:
    if task.head == "choice":
        encode = functools.partial(_options, encoder=encoder)
    else:
        encode = functools.partial(_windows, encoder=encoder, config=config)
    tests = {split: [encode(q) for q in questions] for split, questions in task.tests.items()}
    return _Inputs([encode(q) for q in task.train], [encode(q) for q in task.dev], tests)


def _windows(question: SquadQuestion, encoder: Encoder, config: Any) -> list[Window]:
    # Training takes the first answer, as the reference; an impossible question points every window at [CLS].
    answers = [(a.start, a.start + len(a.text)) for a in question.answers[:1]]
    return make_windows(
        encoder, question.question, question.context, answers, config.max_seq_length, config.doc_stride,
        config.max_query_length, question.id,
    )  # fmt: skip


def _options(question: RaceQuestion, encoder: Encoder) -> tuple[list[tuple[list[int], list[int]]], int]:
    filled = [
        question.question.replace("_", option) if "_" in question.question else f"{question.question} {option}"
        for option in question.options
    ]
    # A test question has no label; predicting ignores it.
    return [encoder(question.article, text) for text in filled], question.label or 0


def _collate(rows: Sequence[tuple[list[list[int]], list[list[int]], dict[str, int]]]) -> dict[str, torch.Tensor]:
    """Pads rows of one or several sequences each ([B, T] or [B, options, T]) to a multiple of 8, and a row with
    fewer options than the batch's most (C3's) with options of no token, which the choice head never picks."""
    length = -(-max(len(ids) for seqs, _, _ in rows for ids in seqs) // 8) * 8
    count = max(len(seqs) for seqs, _, _ in rows)
    batch = {name: torch.zeros(len(rows), count, length, dtype=torch.long) for name in ("input_ids", "token_type_ids")}
    batch["attention_mask"] = torch.zeros(len(rows), count, length, dtype=torch.long)
    for i, (seqs, types, _) in enumerate(rows):
        for j, (ids, kinds) in enumerate(zip(seqs, types, strict=True)):
            batch["input_ids"][i, j, : len(ids)] = torch.tensor(ids)
            batch["token_type_ids"][i, j, : len(ids)] = torch.tensor(kinds)
            batch["attention_mask"][i, j, : len(ids)] = 1
    if count == 1:  # spans: one sequence per row
        batch = {name: value[:, 0] for name, value in batch.items()}
    for name in rows[0][2]:
        batch[name] = torch.tensor([labels[name] for _, _, labels in rows])
    return batch


def _training_rows(task: ReadingTask, inputs: list[Any]) -> list[tuple[list[list[int]], list[list[int]], dict]]:
    """The rows fine-tuning trains on: ``_rows``, less the windows without the answer when every question has one.

    The reference trains every window, a window without the answer pointing at [CLS]. Its 384-piece windows hold
    most SQuAD contexts whole; at this project's 64 most windows hold no answer, and their [CLS] target drowned the
    answer windows' loss (docs/evaluation.md has the measurements). A SQuAD 1.1 prediction never abstains, so
    [CLS] has nothing to learn there; SQuAD 2.0 keeps every window, as [CLS] is its no-answer score.
    """
    rows = _rows(task, inputs)
    if task.head != "span" or task.version == "2.0":
        return rows
    return [row for row in rows if row[2]["start_positions"] > 0]


def _rows(task: ReadingTask, inputs: list[Any]) -> list[tuple[list[list[int]], list[list[int]], dict[str, int]]]:
    """Model rows: a window (with its gold positions) per row for spans, a question's options per row for RACE."""
    if task.head == "choice":
        return [([ids for ids, _ in options], [t for _, t in options], {"labels": label}) for options, label in inputs]
    return [
        ([w.input_ids], [w.token_type_ids], {"start_positions": w.start_position, "end_positions": w.end_position})
        for windows in inputs
        for w in windows
    ]


def _loader(rows: list, batch_size: int, shuffle: bool, seed: int) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(rows, batch_size=batch_size, shuffle=shuffle, generator=generator, collate_fn=_collate)


# --- fine-tuning and scoring -------------------------------------------------------------------------------------


def _finetune(
    network: AlbertForPreTraining, task: ReadingTask, rows: list, steps: int, seed: int, config: Any, lr: float
) -> tuple[Any, AlbertFineTuning]:
    """Fine-tunes a copy of ``network`` at ``lr`` on ``rows``; ``seed`` fixes the head's init, dropout and order."""
    return run_finetuning(
        lambda: AlbertFineTuning(network, head=task.head, lr=lr, total_steps=steps),
        _loader(rows, config.batch_size, shuffle=True, seed=seed), steps, seed, config.devices,
    )  # fmt: skip


def _predict(trainer: Any, module: AlbertFineTuning, task: ReadingTask, dev: list, config: Any) -> dict[str, Any]:
    """Each dev question's prediction: a decoded ``decoding.Prediction``, or the option scores of a RACE question."""
    loader = _loader(_rows(task, dev), config.batch_size, shuffle=False, seed=0)
    logits = [row for batch in trainer.predict(module, loader) for row in batch.float().numpy()]
    if task.head == "choice":
        return {q.id: scores for q, scores in zip(task.dev, logits, strict=True)}
    predictions, at = {}, 0
    for question, windows in zip(task.dev, dev, strict=True):
        rows = logits[at : at + len(windows)]  # [2, T] per window, padded to its batch's length
        at += len(windows)
        predictions[question.id] = decode(
            windows, [r[0] for r in rows], [r[1] for r in rows], question.context, config.n_best_size,
            config.max_answer_length,
        )  # fmt: skip
    return predictions


def _span_scores(task: ReadingTask, predictions: dict[str, Any]) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The official scores of one run, and per question its exact match and F1 (after the best-F1 no-answer
    threshold for SQuAD 2.0), for the bootstrap."""
    golds = {q.id: [a.text for a in q.answers] for q in task.dev}
    texts = {qid: p.text for qid, p in predictions.items()}
    if task.version == "cmrc2018":
        exact, f1 = raw = cmrc_raw_scores(golds, texts)
        ids = [q.id for q in task.dev]
        per_question = {"exact": np.array([exact[i] for i in ids]), "f1": np.array([f1[i] for i in ids])}
        return cmrc_scores(golds, texts, raw=raw), per_question
    exact, f1 = raw = raw_scores(golds, texts)
    if task.version != "2.0":
        scores = squad_scores(golds, texts, raw=raw)
    else:
        # The no-answer score is null_score_diff (higher: more likely no answer), as the reference's null odds.
        null = {qid: p.null_score_diff for qid, p in predictions.items()}
        scores = squad_scores(golds, texts, null, raw=raw)
        has_answer = {qid: bool(answers) for qid, answers in golds.items()}
        exact = apply_no_ans_threshold(exact, null, has_answer, scores["best_exact_thresh"])
        f1 = apply_no_ans_threshold(f1, null, has_answer, scores["best_f1_thresh"])
    ids = [q.id for q in task.dev]
    per_question = {"exact": np.array([exact[i] for i in ids]), "f1": np.array([f1[i] for i in ids])}
    if task.version == "2.0":
        per_question = {"best_exact": per_question["exact"], "best_f1": per_question["f1"]}
    return scores, per_question


def _choice_scores(task: ReadingTask, predictions: dict[str, Any]) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    chosen = {qid: int(np.argmax(scores)) for qid, scores in predictions.items()}
    golds = {q.id: (q.label, q.level) for q in task.dev}
    correct = np.array([chosen[q.id] == q.label for q in task.dev], dtype=np.float64)
    return race_accuracy(chosen, golds, task.levels), {"accuracy": correct}


def _scores(task: ReadingTask, predictions: dict[str, Any]) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    return (_choice_scores if task.head == "choice" else _span_scores)(task, predictions)


def baseline(task: ReadingTask) -> dict[str, float]:
    """The model-free baseline's dev scores: the first sentence's object (CMRC 2018: the first sentence), or the
    most frequent answer position of RACE or C3."""
    if task.head == "choice":
        letters = np.bincount([q.label for q in task.train], minlength=4)
        guess = int(np.argmax(letters))
        golds_by_level = {q.id: (q.label, q.level) for q in task.dev}
        return race_accuracy({q.id: guess for q in task.dev}, golds_by_level, task.levels)
    golds = {q.id: [a.text for a in q.answers] for q in task.dev}
    if task.version == "cmrc2018":
        return cmrc_scores(golds, {q.id: first_sentence(q.context) for q in task.dev})
    scores = squad_scores(golds, {q.id: first_sentence_object(q.context) for q in task.dev})
    if task.version == "2.0":  # it never abstains: its best-threshold scores are its scores
        scores |= {"best_exact": scores["exact"], "best_f1": scores["f1"]}
    return scores


# --- one task ----------------------------------------------------------------------------------------------------


def _summary(
    runs: dict[str, list[dict[str, float]]], questions: dict[str, list[np.ndarray]], task: ReadingTask, config: Any
) -> dict[str, Any]:
    """Per start the median over seeds of every score, the per-seed primary scores, and the median gain of the
    primary score with its 95% interval, resampling seeds and dev questions (paired)."""
    summary: dict[str, Any] = {"seeds": {}}
    for start, scores in runs.items():
        # Medians of the scores; counts (questions per part, missing predictions) are no score to take one of.
        scored = [m for m in scores[0] if not m.endswith("total") and m != "missing"]
        summary[start] = {m: round_score(np.median([s[m] for s in scores])) for m in scored}
        summary["seeds"][start] = [round_score(s[task.primary]) for s in scores]
    if all(start in questions for start in STARTS):
        pretrained, random_init = (np.stack(questions[start]) for start in STARTS)
        gain = median_gain_interval(
            pretrained, random_init, np.zeros(pretrained.shape[1]), lambda p, r: float(np.mean(p)),
            config.bootstrap_resamples, config.seed,
        )  # fmt: skip
        summary["gain"] = rounded_gain(gain)
    return summary


def _slice_score(
    task: ReadingTask, inputs: _Inputs, config: Any, network: AlbertForPreTraining, part: HeldSlice, lr: float
) -> float:
    """The primary score on the held training questions of ``network`` fine-tuned at ``lr`` on the rest
    (``lr_selection.choose_lrs``'s ``score``); dev plays no part."""
    rows = _training_rows(task, [inputs.train[i] for i in part.fit])
    sliced = dataclasses.replace(task, dev=[task.train[i] for i in part.held])
    steps = finetuning_steps(len(rows), config.epochs, config.batch_size, config.min_steps, config.max_steps)
    trainer, module = _finetune(network, task, rows, steps, part.seed, config, lr)
    predictions = _predict(trainer, module, sliced, [inputs.train[i] for i in part.held], config)
    score = _scores(sliced, predictions)[0][task.primary]
    show_run(f"{task.name}, choosing lr on {len(part.fit)} questions", trainer, module, {f"held {task.primary}": score})
    return score


def _size(
    task: ReadingTask,
    inputs: _Inputs,
    size: int,
    pretrained: AlbertForPreTraining,
    encoder: Encoder,
    config: Any,
    lrs: dict[str, float],
    audit: bool,
) -> tuple[dict[str, Any], dict[str, list[np.ndarray]], tuple[dict[str, Any], dict[str, dict[str, Any]]] | None]:
    """Fine-tunes every (seed, start) on ``size`` training questions, each start at its rate in ``lrs``; returns
    the size's summary, per start each seed's per-question primary scores, and with ``audit`` the pretrained
    start's first seed's predictions of dev and of each test split (its network is written as a Hugging Face
    folder)."""
    seeds = finetuning_seeds(config.seed, config.seeds)
    runs: dict[str, list] = {}
    questions: dict[str, list] = {}
    steps = 0
    audited = None
    for seed in seeds:
        # The same subset and order for both starts: the gain is a paired comparison.
        subset = [inputs.train[i] for i in train_subset(len(inputs.train), seed, task.name, size)]
        rows = _training_rows(task, subset)
        steps = finetuning_steps(len(rows), config.epochs, config.batch_size, config.min_steps, config.max_steps)
        for start, network in starts(pretrained, seed, config.random_baseline):
            trainer, module = _finetune(network, task, rows, steps, seed, config, lrs[start])
            predictions = _predict(trainer, module, task, inputs.dev, config)
            scores, per_question = _scores(task, predictions)
            what = f"{task.name}, {size} questions, seed {seeds.index(seed) + 1}/{len(seeds)}, {start}"
            show_run(what, trainer, module, {f"dev {task.primary}": scores[task.primary]})
            runs.setdefault(start, []).append(scores)
            questions.setdefault(start, []).append(per_question[task.primary])
            if audit and seed == seeds[0] and start == "pretrained":
                audited = (
                    predictions,
                    {
                        split: _predict(trainer, module, dataclasses.replace(task, dev=task.tests[split]), rows, config)
                        for split, rows in inputs.tests.items()
                    },
                )
                network = module.network
                export_hf(network, network.albert.config, Path(config.output) / "finetuned" / task.name,
                          config.spiece, encoder.normalize)  # fmt: skip
    summary = {"train_examples": size, "steps": steps, **_summary(runs, questions, task, config)}
    return summary, questions, audited


def _write_predictions(
    task: ReadingTask, audited: dict[str, Any], scores: dict[str, dict[str, list[np.ndarray]]], config: Any
) -> None:
    """Writes ``predictions/<task>/dev.jsonl``: per question the audited run's prediction, and per start and
    training size every seed's primary score of it (what ``ablations/across_runs.py`` resamples)."""
    lines = []
    for i, question in enumerate(task.dev):
        prediction = audited[question.id]
        if task.head == "choice":
            row = {"id": question.id, "label": question.label, "prediction": int(np.argmax(prediction))}
        else:
            row = {"id": question.id, "answers": [a.text for a in question.answers], "prediction": prediction.text,
                   "null_score_diff": round_score(prediction.null_score_diff)}  # fmt: skip
        for start in STARTS:
            if any(start in by_start for by_start in scores.values()):
                row[start] = {size: [round(float(seed[i]), PREDICTION_DIGITS) for seed in by_start[start]]
                              for size, by_start in scores.items()}  # fmt: skip
        lines.append(json.dumps(row, ensure_ascii=False) + "\n")
    write_text_atomically(os.path.join(config.output, "predictions", task.name, "dev.jsonl"), "".join(lines))


def evaluate_reading_task(
    task: ReadingTask, config: Any, pretrained: AlbertForPreTraining, encoder: Encoder
) -> dict[str, Any]:
    """Returns a reading task's report entry (the shape of ``evaluation.runner.evaluate_task``'s: per dev split the
    baseline and per training-set size the fine-tuned scores), writing the audited run's files.

    Raises:
        FileExistsError: before any fine-tuning, if ``finetuned/<task>`` holds files that are not an export's.
    """
    check_export_target(Path(config.output) / "finetuned" / task.name)
    inputs = _encode(task, encoder, config)
    sizes = train_sizes(config.train_sizes, len(inputs.train))
    split = {"examples": len(task.dev), "majority": baseline(task), "baseline": _baseline_name(task), "sizes": {}}
    score = functools.partial(_slice_score, task, inputs, config)
    choices = choose_lrs(pretrained, config, [q.id for q in task.train], task.name, score)
    lrs = {start: choice.lr for start, choice in choices.items()}
    scores: dict[str, dict[str, list[np.ndarray]]] = {}
    for size in sizes:
        summary, scores[str(size)], audited = _size(task, inputs, size, pretrained, encoder, config, lrs,
                                                    size == sizes[-1])  # fmt: skip
        split["sizes"][str(size)] = summary
    _write_predictions(task, audited[0], scores, config)
    _write_submissions(task, audited[1], config)
    return {"task": task.name, "primary": task.primary, "kind": task.head, "train_examples": len(task.train),
            "lr": {start: choice.to_json() for start, choice in choices.items()}, "splits": {"dev": split}}  # fmt: skip


def _write_submissions(task: ReadingTask, predictions: dict[str, dict[str, Any]], config: Any) -> None:
    """Writes the CLUE leaderboard file of each test split the audited run predicted: CMRC 2018's one JSON object
    of question id → answer text, C3's one ``{"id": <the file's id>, "label": <option index>}`` a line."""
    for split, predicted in predictions.items():
        path = Path(config.output) / "clue_submission" / CLUE_SUBMISSION_FILES[(task.name, split)]
        if task.head == "choice":
            write_json_lines(path, [{"id": q.source_id if q.source_id is not None else i,
                                     "label": int(np.argmax(predicted[q.id]))}
                                    for i, q in enumerate(task.tests[split])])  # fmt: skip
        else:
            answers = {q.id: predicted[q.id].text for q in task.tests[split]}
            write_text_atomically(str(path), json.dumps(answers, ensure_ascii=False, indent=1) + "\n")


def _baseline_name(task: ReadingTask) -> str:
    if task.version == "cmrc2018":
        return "first sentence"
    return "most frequent answer" if task.head == "choice" else "first sentence's object"
