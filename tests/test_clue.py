"""CLUE's tasks read from hand-written files in CLUE's published layouts, its CMRC 2018 metric on hand-checked
cases, and the leaderboard files written for its test sets.

Every file here is written by the test: a few Chinese examples per task, in the record layout of CLUE's
``<task>_public/`` folders (JSON Lines for the classification tasks, SQuAD JSON for CMRC 2018, C3's lists).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from albert_lightning.evaluation.clue_files import CLUE_TASKS, clue_task, load_clue_split, mark_wsc_spans
from albert_lightning.evaluation.finetuning import mask_padded_options
from albert_lightning.evaluation.reading.clue_files import cmrc_files, read_c3
from albert_lightning.evaluation.reading.files import read_squad
from albert_lightning.evaluation.reading.metrics import cmrc_exact_match, cmrc_f1, cmrc_scores, cmrc_segments
from albert_lightning.evaluation.reading.runner import (
    ReadingTask,
    _collate,
    _options,
    _rows,
    _write_submissions,
    baseline,
    reading_task,
)
from albert_lightning.evaluation.report import SplitPredictions
from albert_lightning.evaluation.runner import TaskData, _write_predictions
from albert_lightning.evaluation.task_files import LoadStats, TaskDataError
from albert_lightning.evaluation.task_resolution import resolve_task, task_split_files


def write_lines(path: Path, records: list[Any]) -> Path:
    """Writes ``records`` as JSON Lines, as CLUE's .json files hold them (unescaped Chinese)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def write_json(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


TNEWS_LABELS = [{"label": "102", "label_desc": "news_entertainment"}, {"label": "100", "label_desc": "news_story"},
                {"label": "104", "label_desc": "news_finance"}]  # fmt: skip


def write_tnews(clue_dir: Path) -> Path:
    folder = clue_dir / "tnews_public"
    write_lines(folder / "labels.json", TNEWS_LABELS)
    write_lines(folder / "train.json", [
        {"label": "102", "label_desc": "news_entertainment", "sentence": "这部新电影下周上映", "keywords": "电影"},
        {"label": "104", "label_desc": "news_finance", "sentence": "今天股市小幅上涨", "keywords": ""},
        {"label": "100", "label_desc": "news_story", "sentence": "老人在路边捡到一只小猫", "keywords": "小猫"},
    ])  # fmt: skip
    write_lines(folder / "dev.json", [{"label": "104", "sentence": "银行调整了存款利率", "keywords": ""}])
    write_lines(folder / "test.json", [{"id": 7, "sentence": "球队赢得了冠军", "keywords": ""},
                                       {"id": 9, "sentence": "歌手发布新专辑", "keywords": ""}])  # fmt: skip
    write_lines(folder / "test1.0.json", [{"id": 0, "sentence": "新手机今天发布", "keywords": ""}])
    return folder


def test_tnews_takes_its_labels_from_labels_json_and_reads_both_test_sets(tmp_path: Path) -> None:
    write_tnews(tmp_path)
    files = task_split_files("TNEWS", None, {}, tmp_path)  # CLUE's names in any case
    spec = files["train"].spec
    assert spec.labels == ("102", "100", "104")  # labels.json's order, not sorted
    assert set(files) == {"train", "dev", "test", "test1.0"}
    train = files["train"].load()
    assert [(e.text_a, e.text_b, e.label) for e in train] == [
        ("这部新电影下周上映", None, "102"), ("今天股市小幅上涨", None, "104"), ("老人在路边捡到一只小猫", None, "100")
    ]  # fmt: skip
    test = files["test"].load()
    assert [(e.id, e.label) for e in test] == [(7, None), (9, None)]
    assert (files["test"].submission_file, files["test1.0"].submission_file) == (
        "tnews11_predict.json",
        "tnews10_predict.json",
    )
    assert files["dev"].submission_file is None and files["test"].submission_folder == "clue_submission"


def test_a_label_outside_labels_json_names_file_and_line(tmp_path: Path) -> None:
    folder = write_tnews(tmp_path)
    write_lines(folder / "dev.json", [{"label": "104", "sentence": "甲"}, {"label": "116", "sentence": "乙"}])
    with pytest.raises(TaskDataError, match=r"dev\.json, line 2: label '116' is not one of"):
        task_split_files("tnews", None, {}, tmp_path)["dev"].load()


def test_iflytek_labels_json_problems_name_the_line(tmp_path: Path) -> None:
    folder = tmp_path / "iflytek_public"
    write_lines(folder / "labels.json", [{"label": "0", "label_des": "打车"}, {"label": "0", "label_des": "地图导航"}])
    with pytest.raises(TaskDataError, match=r"labels\.json, line 2: label '0' again \(first on line 1\)"):
        clue_task("iflytek", tmp_path)
    (folder / "labels.json").unlink()
    with pytest.raises(TaskDataError, match=r"labels\.json: file not found"):
        clue_task("iflytek", tmp_path)


NLI_ROWS = [
    {"sentence1": "他每天早上跑步", "sentence2": "他有运动的习惯", "label": "entailment", "id": 0},
    {"sentence1": "商店九点开门", "sentence2": "商店整天关着", "label": "contradiction", "id": 1},
    {"sentence1": "她买了一本书", "sentence2": "那本书很贵", "label": "-", "id": 2},  # annotators disagreed
    {"sentence1": "外面在下雨", "sentence2": "地面可能是湿的", "label": "neutral", "id": 3},
]


@pytest.mark.parametrize(("task", "train_file"), [("ocnli", "train.50k.json"), ("cmnli", "train.json")])
def test_nli_drops_rows_labelled_dash(task: str, train_file: str, tmp_path: Path) -> None:
    folder = tmp_path / f"{task}_public"
    write_lines(folder / train_file, NLI_ROWS)
    spec, found = resolve_task(task, None, tmp_path)
    assert found == folder and spec.splits["train"] == train_file
    stats = LoadStats()
    examples = load_clue_split(spec, folder, "train", stats)
    assert [(e.text_a, e.text_b, e.label, e.id) for e in examples] == [
        ("他每天早上跑步", "他有运动的习惯", "entailment", 0),
        ("商店九点开门", "商店整天关着", "contradiction", 1),
        ("外面在下雨", "地面可能是湿的", "neutral", 3),
    ]
    assert (stats.rows, stats.skipped_no_gold) == (4, 1)


def test_ocnli_and_afqmc_submission_names() -> None:
    from albert_lightning.evaluation.task_resolution import SplitFile

    names = {task: SplitFile(CLUE_TASKS[task], Path("."), "test").submission_file for task in CLUE_TASKS}
    assert names == {
        "tnews": "tnews11_predict.json", "iflytek": "iflytek_predict.json", "afqmc": "afqmc_predict.json",
        "ocnli": "ocnli_50k_predict.json", "cmnli": "cmnli_predict.json", "csl": "csl_predict.json",
        "cluewsc2020": "cluewsc11_predict.json",
    }  # fmt: skip


def test_afqmc_pairs_and_a_line_that_is_not_json(tmp_path: Path) -> None:
    folder = tmp_path / "afqmc_public"
    write_lines(folder / "train.json", [{"sentence1": "花呗怎么还款", "sentence2": "花呗如何还钱", "label": "1"}])
    spec, _ = resolve_task("afqmc", None, tmp_path)
    assert [(e.text_a, e.text_b, e.label) for e in load_clue_split(spec, folder, "train")] == [
        ("花呗怎么还款", "花呗如何还钱", "1")
    ]
    with (folder / "train.json").open("a", encoding="utf-8") as f:
        f.write('{"sentence1": "借呗额度", "sentence2": \n')
    with pytest.raises(TaskDataError, match=r"afqmc_public/train\.json, line 2: not valid JSON"):
        load_clue_split(spec, folder, "train")


def test_csl_joins_its_keywords_as_the_first_text(tmp_path: Path) -> None:
    folder = tmp_path / "csl_public"
    write_lines(folder / "train.json", [
        {"id": 1, "abst": "本文提出一种新的图像分割方法。", "keyword": ["图像分割", "深度学习"], "label": "1"},
        {"id": 2, "abst": "本文研究了土壤中的水分变化。", "keyword": ["土壤", "机器翻译"], "label": "0"},
        {"id": 3, "abst": "本文讨论城市交通。", "keyword": "交通", "label": "1"},
    ])  # fmt: skip
    spec, _ = resolve_task("csl", None, tmp_path)
    with pytest.raises(TaskDataError, match=r"train\.json, line 3: \"keyword\" is '交通', expected a list"):
        load_clue_split(spec, folder, "train")
    lines = (folder / "train.json").read_text(encoding="utf-8").splitlines()[:2]
    examples = load_clue_split(spec, folder, "train", lines=tuple(lines))
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [
        ("图像分割 深度学习", "本文提出一种新的图像分割方法。", "1"),
        ("土壤 机器翻译", "本文研究了土壤中的水分变化。", "0"),
    ]


def wsc(text: str, span1: tuple[int, str], span2: tuple[int, str], label: str | None, idx: int) -> dict:
    target = {"span1_index": span1[0], "span1_text": span1[1], "span2_index": span2[0], "span2_text": span2[1]}
    return {"target": target, "idx": idx, "text": text} | ({} if label is None else {"label": label})


def test_cluewsc_marks_the_candidate_and_the_pronoun(tmp_path: Path) -> None:
    folder = tmp_path / "cluewsc2020_public"
    write_lines(folder / "train.json", [
        wsc("小明把书借给了小红，因为她想看。", (7, "小红"), (12, "她"), "true", 0),  # pronoun after the candidate
        wsc("他说完这句话，老师就笑了。", (7, "老师"), (0, "他"), "false", 1),  # pronoun before it
    ])  # fmt: skip
    write_lines(folder / "test.json", [wsc("猫追着狗跑，它很害怕。", (3, "狗"), (6, "它"), None, 5)])
    files = task_split_files("cluewsc2020", None, {}, tmp_path)
    assert [(e.text_a, e.label) for e in files["train"].load()] == [
        ("小明把书借给了_小红_，因为[她]想看。", "true"),
        ("[他]说完这句话，_老师_就笑了。", "false"),
    ]
    assert [(e.id, e.text_a, e.label) for e in files["test"].load()] == [(5, "猫追着_狗_跑，[它]很害怕。", None)]
    assert files["test"].submission_file == "cluewsc11_predict.json"


def test_cluewsc_span_not_at_its_index_names_file_and_line(tmp_path: Path) -> None:
    folder = tmp_path / "cluewsc2020_public"
    write_lines(folder / "dev.json", [wsc("小明把书借给了小红。", (7, "小红"), (0, "小明"), "false", 0),
                                      wsc("小明把书借给了小红。", (6, "小红"), (0, "小明"), "false", 1)])  # fmt: skip
    spec, _ = resolve_task("cluewsc2020", None, tmp_path)
    with pytest.raises(TaskDataError, match=r"dev\.json, line 2: span1_text '小红' is not at span1_index 6"):
        load_clue_split(spec, folder, "dev")
    with pytest.raises(TaskDataError, match="overlap"):
        mark_wsc_spans("小明来了", (0, "小明"), (1, "明"), "x")


def test_a_clue_task_without_clue_dir_says_which_setting(tmp_path: Path) -> None:
    with pytest.raises(TaskDataError, match="set clue_dir to the folder holding csl_public/"):
        resolve_task("csl", None)
    with pytest.raises(TaskDataError, match=r"did you mean 'cmnli'\?"):
        resolve_task("cmnlii", None, tmp_path)


def test_clue_submission_written_by_the_runner(tmp_path: Path) -> None:
    write_tnews(tmp_path)
    files = task_split_files("tnews", None, {}, tmp_path)
    spec = files["train"].spec
    rows = [([2, 5, 3], [0, 0, 0], None), ([2, 6, 3], [0, 0, 0], None)]
    task = TaskData(spec, [], {}, {"test": rows}, {"test": [7, 9]}, {"test": files["test"]})
    _write_predictions(task, {}, {"test": SplitPredictions([2, 0], [0.9, 0.8])}, str(tmp_path / "eval"))
    written = (tmp_path / "eval/clue_submission/tnews11_predict.json").read_text(encoding="utf-8")
    assert [json.loads(line) for line in written.splitlines()] == [{"id": 7, "label": "104"}, {"id": 9, "label": "102"}]
    assert (tmp_path / "eval/predictions/tnews/test.jsonl").is_file()
    assert not (tmp_path / "eval/glue_submission").exists()


# --- CMRC 2018 ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prediction", "answers", "exact", "f1"),
    [
        ("北京大学", ["北京大学"], 1.0, 1.0),
        # 4 of the 5 predicted characters are the first answer's 4: P = 4/5, R = 1, F1 = 8/9; "北大" scores less
        ("在北京大学", ["北京大学", "北大"], 0.0, 8 / 9),
        ("《红楼梦》", ["红楼梦"], 1.0, 1.0),  # full-width punctuation is dropped
        ("1862年", ["1862年。"], 1.0, 1.0),  # digits are one segment, the year character another
        ("Apple Inc", ["apple"], 0.0, 2 / 3),  # case folded; English by words: P = 1/2, R = 1
        ("甲乙丙", ["丙乙甲"], 0.0, 1 / 3),  # the longest common run, not a bag of characters (SQuAD's F1 gives 1)
        ("1,000元", ["1000元"], 0.0, 0.5),  # an ASCII comma is no CLUE punctuation: "1,000" is one word
        ("一九", ["三四"], 0.0, 0.0),
    ],
)
def test_cmrc_metric_on_hand_checked_cases(prediction: str, answers: list[str], exact: float, f1: float) -> None:
    assert cmrc_exact_match(prediction, answers) == exact
    assert cmrc_f1(prediction, answers) == pytest.approx(f1)


def test_cmrc_segments_and_scores() -> None:
    assert cmrc_segments("2018年 CMRC比赛，第3.5届") == ["2018", "年", "cmrc", "比", "赛", "第", "3.5", "届"]
    golds = {"q1": ["北京大学"], "q2": ["上海", "上海市"], "q3": ["长江"]}
    scores = cmrc_scores(golds, {"q1": "北京大学", "q2": "在上海"})  # q3 missing: scored 0
    assert scores["exact"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx((1 + 0.8) / 3)  # q2: "在上海" against "上海": P = 2/3, R = 1
    assert scores["average"] == pytest.approx((1 / 3 + 1.8 / 3) / 2)
    assert (scores["total"], scores["missing"]) == (3, 1)
    with pytest.raises(ValueError, match="not in the gold data"):
        cmrc_scores(golds, {"q9": "x"})


def cmrc_file(qas: list[dict], context: str = "长江是中国最长的河流，全长约6300公里。") -> dict:
    return {"version": "v1.0", "data": [{"id": "DEV_0", "title": "长江", "paragraphs": [
        {"id": "DEV_0", "context": context, "qas": qas}]}]}  # fmt: skip


def qa(qid: str, question: str, *answers: tuple[str, int]) -> dict:
    return {"id": qid, "question": question, "answers": [{"text": t, "answer_start": s} for t, s in answers]}


def test_cmrc2018_reads_squad_json_with_several_answers_and_clue_s_offsets(tmp_path: Path) -> None:
    folder = tmp_path / "cmrc2018_public"
    train = [qa("TRAIN_0_QUERY_0", "长江全长多少？", ("约6300公里", 16))]
    dev = [qa("DEV_0_QUERY_0", "中国最长的河流是什么？", ("长江", 0), ("长江", 0))]
    write_json(folder / "train.json", cmrc_file(train))
    write_json(folder / "dev.json", cmrc_file(dev))
    write_json(folder / "test.json", cmrc_file([{"id": "TEST_0_QUERY_0", "question": "长江在哪个国家？"}]))
    task = reading_task("CMRC2018", None, None, {}, str(tmp_path))
    assert (task.name, task.head, task.version, task.primary) == ("cmrc2018", "span", "cmrc2018", "exact")
    # The offset is 3 characters late (16 points at "00公里。"): the answer starts where its text is, at 13
    assert [(a.text, a.start) for a in task.train[0].answers] == [("约6300公里", 13)]
    assert [a.text for a in task.dev[0].answers] == ["长江", "长江"]
    assert [(q.id, q.answers) for q in task.tests["test"]] == [("TEST_0_QUERY_0", ())]
    assert baseline(task)["exact"] == 0.0  # the first sentence is longer than the answer
    # 5 characters late is more than CLUE's preprocessing moves an answer
    write_json(folder / "train.json", cmrc_file([qa("TRAIN_0_QUERY_0", "长江全长多少？", ("约6300公里", 18))]))
    with pytest.raises(TaskDataError, match=r"train\.json: question TRAIN_0_QUERY_0: answer_start 18 gives"):
        read_squad(folder / "train.json", answer_shift=3)


def test_cmrc2018_layouts(tmp_path: Path) -> None:
    folder = tmp_path / "cmrc2018_public"
    write_json(folder / "cmrc2018_train.json", cmrc_file([]))
    with pytest.raises(TaskDataError, match=r"no cmrc2018_dev\.json"):
        cmrc_files(folder)
    write_json(folder / "cmrc2018_dev.json", cmrc_file([]))
    assert sorted(cmrc_files(folder)) == ["dev", "train"]
    write_json(folder / "train.json", cmrc_file([]))
    with pytest.raises(TaskDataError, match="keep one layout"):
        cmrc_files(folder)


def test_cmrc2018_submission_is_one_json_object(tmp_path: Path) -> None:
    questions = [SimpleNamespace(id="TEST_0_QUERY_0"), SimpleNamespace(id="TEST_0_QUERY_1")]
    task = ReadingTask("cmrc2018", "span", [], [], "cmrc2018", {"test": questions})
    answers = {"TEST_0_QUERY_0": SimpleNamespace(text="长江"), "TEST_0_QUERY_1": SimpleNamespace(text="6300公里")}
    predictions = {"test": answers}
    _write_submissions(task, predictions, SimpleNamespace(output=str(tmp_path)))
    written = json.loads((tmp_path / "clue_submission/cmrc2018_predict.json").read_text(encoding="utf-8"))
    assert written == {"TEST_0_QUERY_0": "长江", "TEST_0_QUERY_1": "6300公里"}


# --- C3 ----------------------------------------------------------------------------------------------------------


def write_c3(clue_dir: Path) -> Path:
    folder = clue_dir / "c3_public"
    question = {"question": "女的明天做什么？", "choice": ["去图书馆", "在家写作业"], "answer": "在家写作业", "id": "0"}
    dialogue = [[["男：你明天去图书馆吗？", "女：不去，我要在家写作业。"], [question], "d1-1"]]
    mixed = [[["小王每天骑自行车上班。", "他觉得这样又快又健康。"],
              [{"question": "小王怎么上班？", "choice": ["坐公交", "开车", "骑自行车", "走路"], "answer": "骑自行车",
                "id": "1"},
               {"question": "小王觉得骑车怎么样？", "choice": ["很累", "又快又健康", "太慢"], "answer": "又快又健康",
                "id": "2"}],
              "m1-1"]]  # fmt: skip
    for split in ("train", "dev"):
        write_json(folder / f"d-{split}.json", dialogue)
        write_json(folder / f"m-{split}.json", mixed)
    test = [[["今天天气很好。"], [{"question": "今天天气怎么样？", "choice": ["很好", "下雨"], "id": 30}], "m9-9"]]
    write_json(folder / "test1.1.json", test)
    return folder


def test_c3_reads_both_sources_with_two_to_four_options(tmp_path: Path) -> None:
    write_c3(tmp_path)
    task = reading_task("c3", None, None, {}, str(tmp_path))
    assert (task.head, task.version, task.primary, task.levels) == ("choice", "c3", "accuracy", ("dialogue", "mixed"))
    assert [(q.id, len(q.options), q.label, q.level, q.source_id) for q in task.train] == [
        ("d/d1-1-0", 2, 1, "dialogue", "0"), ("m/m1-1-0", 4, 2, "mixed", "1"), ("m/m1-1-1", 3, 1, "mixed", "2")
    ]  # fmt: skip
    assert task.train[0].article == "男：你明天去图书馆吗？\n女：不去，我要在家写作业。"
    assert [(q.label, q.source_id) for q in task.tests["test1.1"]] == [(None, 30)]
    assert baseline(task) == {"accuracy": pytest.approx(2 / 3), "total": 3, "missing": 0, "dialogue_accuracy": 1.0,
                              "dialogue_total": 1, "mixed_accuracy": 0.5, "mixed_total": 2}  # fmt: skip


def test_c3_answer_not_among_the_options_names_file_and_question(tmp_path: Path) -> None:
    folder = write_c3(tmp_path)
    bad = [[["甲。"], [{"question": "问？", "choice": ["一", "二"], "answer": "三", "id": "0"}], "d5-1"]]
    write_json(folder / "d-dev.json", bad)
    with pytest.raises(TaskDataError, match=r"d-dev\.json: document 0 \(d5-1\), question d5-1-0: answer '三'"):
        read_c3(folder, "dev")
    write_json(folder / "d-dev.json", [[["甲。"], [{"question": "问？", "choice": ["一"], "answer": "一"}], "d5-1"]])
    with pytest.raises(TaskDataError, match="has 1 options, expected a list of 2 to 4"):
        read_c3(folder, "dev")


def test_c3_batches_pad_to_the_most_options_and_never_choose_a_padded_one(tmp_path: Path) -> None:
    write_c3(tmp_path)
    task = reading_task("c3", None, None, {}, str(tmp_path))

    def encoder(article: str, text: str) -> tuple[list[int], list[int]]:
        return [2, *range(10, 10 + len(text)), 3], [0] * (len(text) + 2)

    rows = _rows(task, [_options(q, encoder) for q in task.train])
    batch = _collate(rows)
    assert batch["input_ids"].shape[:2] == (3, 4)  # the 2- and 3-option questions padded to the batch's 4
    attended = batch["attention_mask"].any(-1)
    assert attended.tolist() == [[True, True, False, False], [True] * 4, [True, True, True, False]]
    assert batch["labels"].tolist() == [1, 2, 1]
    logits = torch.tensor([[0.0, 1.0, 9.0, 9.0], [0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 2.0, 9.0]])
    assert mask_padded_options(logits, batch["attention_mask"]).argmax(-1).tolist() == [1, 3, 2]
    assert _rows(task, [_options(q, encoder) for q in task.tests["test1.1"]])[0][2] == {"labels": 0}


def test_c3_submission_lines(tmp_path: Path) -> None:
    write_c3(tmp_path)
    task = reading_task("c3", None, None, {}, str(tmp_path))
    _write_submissions(task, {"test1.1": {"test/m9-9-0": [0.1, 0.7]}}, SimpleNamespace(output=str(tmp_path)))
    written = (tmp_path / "clue_submission/c311_predict.json").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in written] == [{"id": 30, "label": 1}]
