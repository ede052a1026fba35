"""Tests for albert_lightning.evaluation.task_files: each GLUE task in its own file layout, the generic format, and
bad files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from albert_lightning.evaluation.task_files import LoadStats, TaskDataError, generic_task, label_ids, load_split
from albert_lightning.evaluation.task_resolution import glue_name, present_splits, resolve_task
from albert_lightning.evaluation.task_specs import GLUE_DIAGNOSTIC, GLUE_SUBMISSION_FILES, GLUE_TASKS

MNLI_TRAIN = "index|promptID|pairID|genre|sentence1_binary_parse|sentence2_binary_parse|sentence1_parse|"
MNLI_TRAIN += "sentence2_parse|sentence1|sentence2|label1|gold_label"
MNLI_DEV = MNLI_TRAIN.replace("label1", "label1|label2|label3|label4|label5")
MNLI_TEST = MNLI_TRAIN.removesuffix("|label1|gold_label")
MNLI_PARSES = "31193|0n|government|( x )|( y )|(ROOT x)|(ROOT y)"
STSB = "index|genre|filename|year|old_index|source1|source2|sentence1|sentence2|score"
STSB_ROW = "0|main-captions|MSRvid|2012test|0001|none|none"
PAIR = "index|sentence1|sentence2|label"

# fmt: off
# "Task/file" → lines in the GLUE distribution's exact layout, with "|" standing for a tab (quotes are literal:
# GLUE files are read with quotechar=None). Real MRPC files start with a byte-order mark, as this one does.
FILES = {
    "CoLA/train.tsv": """
gj04|1||Our friends won't buy this analysis, let alone the next one we propose.
gj04|0|*|They drank the pub.""",
    "CoLA/dev.tsv": "gj04|0|*|The more we study verbs, the crazier they get get.",
    "CoLA/test.tsv": "index|sentence\n0|Bill whistled past the house.",
    "SST-2/train.tsv": "sentence|label\nhide new secretions from the parental units |0",
    "SST-2/dev.tsv": "sentence|label\nit 's a charming and often affecting journey . |1",
    "MRPC/train.tsv": """\ufeffQuality|#1 ID|#2 ID|#1 String|#2 String
1|702876|702977|Amrozi accused his brother , whom he called " the witness " .|Referring to him as " the witness " .""",
    "MRPC/dev.tsv": """Quality|#1 ID|#2 ID|#1 String|#2 String
0|1089874|1089925|PCCW 's chief operating officer will also leave.|He quit.""",
    "STS-B/train.tsv": f"{STSB}\n{STSB_ROW}|A plane is taking off.|An air plane is taking off.|5.000",
    "STS-B/dev.tsv": f"{STSB}\n{STSB_ROW}|A man with a hard hat is dancing.|A man is dancing.|4.750",
    # Row 3 is a question broken by a stray newline: lines 3 and 4 both have the wrong field count.
    "QQP/train.tsv": """id|qid1|qid2|question1|question2|is_duplicate
133273|213221|213222|How is the life of a math student?|Which level is enough?|0
363|725|726|How do I get
rid of acne?|What cures acne?|0
402555|536040|536041|How do I control my anger?|How do I stop being angry?|1""",
    "QQP/dev.tsv": "id|qid1|qid2|question1|question2|is_duplicate\n40|81|82|What is a good diet?|What should I eat?|1",
    "MNLI/train.tsv": f"""{MNLI_TRAIN}
0|{MNLI_PARSES}|Cream skimming has two dimensions.|Product and geography matter.|neutral|neutral""",
    "MNLI/dev_matched.tsv": f"""{MNLI_DEV}
0|{MNLI_PARSES}|The new rights are nice|All like the rights.|neutral|neutral|contradiction|neutral|neutral|neutral""",
    "MNLI/dev_mismatched.tsv": f"{MNLI_DEV}\n0|{MNLI_PARSES}|You helped.|You gave nothing.{'|contradiction' * 6}",
    "MNLI/test_matched.tsv": f"{MNLI_TEST}\n0|{MNLI_PARSES}|Hi there.|Hello.",
    "QNLI/train.tsv": """index|question|sentence|label
0|When did the third Digimon series air?|Unlike the two seasons before.|not_entailment""",
    "QNLI/dev.tsv": """index|question|sentence|label
0|What came into force after the Treaty?|The Treaty came into force.|entailment""",
    "RTE/train.tsv": f"{PAIR}\n0|No Weapons of Mass Destruction Found in Iraq.|Weapons Found in Iraq.|not_entailment",
    "RTE/dev.tsv": f"{PAIR}\n0|Dana Reeve died of lung cancer.|Dana Reeve died.|entailment",
    "WNLI/train.tsv": f"{PAIR}\n0|I stuck a pin through a carrot. It had a hole.|The carrot had a hole.|1",
    "WNLI/dev.tsv": f"{PAIR}\n0|The drain is clogged with hair. It has to be cleaned.|The hair has to be cleaned.|0",
}

# "Task/split" → [(text_a, text_b, label, line)].
EXPECTED = {
    "CoLA/train": [("Our friends won't buy this analysis, let alone the next one we propose.", None, "1", 1),
                   ("They drank the pub.", None, "0", 2)],
    "CoLA/dev": [("The more we study verbs, the crazier they get get.", None, "0", 1)],
    "CoLA/test": [("Bill whistled past the house.", None, None, 2)],
    "SST-2/train": [("hide new secretions from the parental units ", None, "0", 2)],
    "SST-2/dev": [("it 's a charming and often affecting journey . ", None, "1", 2)],
    "MRPC/train": [('Amrozi accused his brother , whom he called " the witness " .',
                    'Referring to him as " the witness " .', "1", 2)],
    "MRPC/dev": [("PCCW 's chief operating officer will also leave.", "He quit.", "0", 2)],
    "STS-B/train": [("A plane is taking off.", "An air plane is taking off.", 5.0, 2)],
    "STS-B/dev": [("A man with a hard hat is dancing.", "A man is dancing.", 4.75, 2)],
    "QQP/train": [("How is the life of a math student?", "Which level is enough?", "0", 2),
                  ("How do I control my anger?", "How do I stop being angry?", "1", 5)],
    "QQP/dev": [("What is a good diet?", "What should I eat?", "1", 2)],
    "MNLI/train": [("Cream skimming has two dimensions.", "Product and geography matter.", "neutral", 2)],
    "MNLI/dev_matched": [("The new rights are nice", "All like the rights.", "neutral", 2)],
    "MNLI/dev_mismatched": [("You helped.", "You gave nothing.", "contradiction", 2)],
    "MNLI/test_matched": [("Hi there.", "Hello.", None, 2)],
    "QNLI/train": [("When did the third Digimon series air?", "Unlike the two seasons before.", "not_entailment", 2)],
    "QNLI/dev": [("What came into force after the Treaty?", "The Treaty came into force.", "entailment", 2)],
    "RTE/train": [("No Weapons of Mass Destruction Found in Iraq.", "Weapons Found in Iraq.", "not_entailment", 2)],
    "RTE/dev": [("Dana Reeve died of lung cancer.", "Dana Reeve died.", "entailment", 2)],
    "WNLI/train": [("I stuck a pin through a carrot. It had a hole.", "The carrot had a hole.", "1", 2)],
    "WNLI/dev": [("The drain is clogged with hair. It has to be cleaned.", "The hair has to be cleaned.", "0", 2)],
}

# The other unlabelled test files of the distribution, two rows each (CoLA's and MNLI matched's are in FILES), and
# the diagnostic set (AX) in its own folder. QQP's test file names its index column "id".
PAIR_TEST = "index|sentence1|sentence2"
TEST_FILES = {
    "SST-2/test.tsv": "index|sentence\n0|uneasy mishmash of styles and genres .\n1|a gorgeous , witty film .",
    "MRPC/test.tsv": """index|#1 ID|#2 ID|#1 String|#2 String
0|1089874|1089925|PCCW 's chief operating officer will report to Mr So .|The officer will report to So .
1|3019446|3019327|The automakers said sales declined .|Sales at GM declined more than predicted .""",
    "STS-B/test.tsv": f"""{STSB.removesuffix("|score")}
0|main-captions|MSRvid|2012test|0024|none|none|A girl is styling her hair.|A girl is brushing her hair.
1|main-captions|MSRvid|2012test|0033|none|none|A group of men play soccer.|A man is playing a flute.""",
    "QQP/test.tsv": """id|question1|question2
0|How does the Surface Pro compare with iPad Pro?|Why did Microsoft choose core m3?
1|Should I have a hair transplant at age 24?|How much would it cost?""",
    "MNLI/test_mismatched.tsv": f"{MNLI_TEST}\n0|{MNLI_PARSES}|Hold on.|Wait.\n1|{MNLI_PARSES}|Go on.|Stop.",
    "QNLI/test.tsv": """index|question|sentence
0|What is devoted to Jihad?|For some decades it was.
1|When did it open?|It opened in 1990.""",
    "RTE/test.tsv": f"{PAIR_TEST}\n0|Mangla was summoned after Madhumita's sister complained.|Shapiro works.\n1|A.|B.",
    "WNLI/test.tsv": f"{PAIR_TEST}\n0|Maude had seen the trains.|Horses ran away.\n1|The cat sat.|It sat.",
    "diagnostic/diagnostic.tsv": f"{PAIR_TEST}\n0|The cat sat on the mat.|The cat did not sit.\n1|A dog runs.|It runs.",
}
# fmt: on


def write_task(folder: Path, files: dict[str, str]) -> Path:
    """Writes each file's text under folder, "|" standing for a tab, one trailing newline."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text.strip("\n").replace("|", "\t") + "\n", encoding="utf-8")
    return folder


def write_glue(root: Path, task: str, tests: bool = False) -> Path:
    """Writes a task's fixture under root/task; with ``tests`` also its TEST_FILES (for MNLI: AX's folder too)."""
    folders = {task, "diagnostic"} if tests and task == "MNLI" else {task}
    for key, text in ({**FILES, **TEST_FILES} if tests else FILES).items():
        folder, name = key.split("/")
        if folder in folders:
            write_task(root / folder, {name: text})
    return root / task


def as_tuples(examples: list) -> list[tuple]:
    return [(e.text_a, e.text_b, e.label, e.line) for e in examples]


def test_every_glue_task_has_a_fixture() -> None:
    tasks = {"CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI"}
    assert set(GLUE_TASKS) == {k.split("/")[0] for k in FILES} == {k.split("/")[0] for k in EXPECTED} == tasks


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_glue_task_reads_its_own_layout(key: str, tmp_path: Path) -> None:
    task, split = key.split("/")
    assert as_tuples(load_split(GLUE_TASKS[task], write_glue(tmp_path, task), split)) == EXPECTED[key]


def test_qqp_skips_and_counts_malformed_rows(tmp_path: Path) -> None:
    stats = LoadStats()
    examples = load_split(GLUE_TASKS["QQP"], write_glue(tmp_path, "QQP"), "train", stats=stats)
    assert [e.line for e in examples] == [2, 5]
    assert stats == LoadStats(rows=4, skipped_malformed=2)


def test_paper_hyperparameters_and_primary_metrics() -> None:
    cola, mnli = GLUE_TASKS["CoLA"], GLUE_TASKS["MNLI"]
    assert dict(cola.hparams) == {
        "learning_rate": 1e-5,
        "batch_size": 16,
        "albert_dropout": 0.0,
        "classifier_dropout": 0.1,
        "train_steps": 5336,
        "warmup_steps": 320,
        "max_seq_length": 512,
    }
    assert [mnli.hparams[k] for k in ("learning_rate", "batch_size", "train_steps")] == [3e-5, 128, 10000]
    assert GLUE_TASKS["QQP"].hparams["albert_dropout"] == 0.1
    assert {name: spec.primary for name, spec in GLUE_TASKS.items()} == {
        "CoLA": "matthews_correlation",
        "STS-B": "pearson_spearman_mean",
        "MRPC": "f1_accuracy_mean",
        "QQP": "f1_accuracy_mean",
        "SST-2": "accuracy",
        "MNLI": "accuracy",
        "QNLI": "accuracy",
        "RTE": "accuracy",
        "WNLI": "accuracy",
    }
    assert mnli.eval_splits == ("dev_matched", "dev_mismatched")
    with pytest.raises(TypeError):  # the shared specs are read-only
        cola.splits["dev"] = "other.tsv"  # type: ignore[index]


@pytest.mark.parametrize(
    ("task", "file", "text", "message"),
    [
        ("SST-2", "dev.tsv", "sentence|labl\nfine .|1", r"dev\.tsv, line 1 \(header\): no column 'label'"),
        (
            "SST-2",
            "dev.tsv",
            "sentence|label\nok .|1\nmeh .|3",
            r"dev\.tsv, line 3: label '3' is not one of the task's labels \('0', '1'\)",
        ),
        ("SST-2", "dev.tsv", "sentence|label", r"dev\.tsv: no examples"),
        ("SST-2", "dev.tsv", "", r"dev\.tsv: empty file; expected a header row"),
        (
            "STS-B",
            "dev.tsv",
            f"{STSB}\n{STSB_ROW}|A.|B.|n/a",
            r"dev\.tsv, line 2: score 'n/a' in column 'score' is not a finite number",
        ),
        (
            "MNLI",
            "train.tsv",
            f"{MNLI_TRAIN}\n0|{MNLI_PARSES}|A.|B.|neutral|-",
            r"train\.tsv, line 2: label '-' is not one",
        ),
        ("RTE", "dev.tsv", f"{PAIR}\n0|A.|B.", r"dev\.tsv, line 2: 3 tab-separated fields, expected 4"),
    ],
)
def test_bad_glue_files_name_file_and_line(task: str, file: str, text: str, message: str, tmp_path: Path) -> None:
    folder = write_task(tmp_path / task, {file: text})
    with pytest.raises(TaskDataError, match=message):
        load_split(GLUE_TASKS[task], folder, file.removesuffix(".tsv"))


def test_missing_file_and_unknown_split(tmp_path: Path) -> None:
    with pytest.raises(TaskDataError, match=r"RTE/dev\.tsv: file not found"):
        load_split(GLUE_TASKS["RTE"], tmp_path / "RTE", "dev")
    with pytest.raises(TaskDataError, match=r"no split 'dev'; expected one of \('train', 'dev_matched'"):
        load_split(GLUE_TASKS["MNLI"], tmp_path / "MNLI", "dev")


def test_label_ids(tmp_path: Path) -> None:
    mnli, stsb, cola = (GLUE_TASKS[name] for name in ("MNLI", "STS-B", "CoLA"))
    assert label_ids(mnli, load_split(mnli, write_glue(tmp_path, "MNLI"), "dev_mismatched")) == [0]
    assert label_ids(stsb, load_split(stsb, write_glue(tmp_path, "STS-B"), "dev")) == [4.75]
    with pytest.raises(TaskDataError, match="line 2: label None"):
        label_ids(cola, load_split(cola, write_glue(tmp_path, "CoLA"), "test"))


def jsonl(*records: dict) -> str:
    return "\n".join(json.dumps(r) for r in records)


def test_generic_tsv_single_text_without_task_json(tmp_path: Path) -> None:
    files = {
        "train.tsv": "text|label\ngreat phone|pos\nbroke in a week|neg\nfine|neutral",
        "dev.tsv": "label|text\npos|love\u2028it\x0c",
    }
    folder = write_task(tmp_path / "reviews", files)
    spec = generic_task(folder)
    assert (spec.name, spec.kind, spec.labels, spec.text_b) == (
        "reviews",
        "classification",
        ("neg", "neutral", "pos"),
        None,
    )
    assert (spec.metrics, spec.primary, dict(spec.splits)) == (
        ("accuracy",),
        "accuracy",
        {"train": "train.tsv", "dev": "dev.tsv"},
    )
    assert as_tuples(load_split(spec, folder, "dev")) == [
        ("love\u2028it\x0c", None, "pos", 2)
    ]  # lines end only at \n, \r\n or \r


def test_generic_jsonl_pairs_numeric_labels(tmp_path: Path) -> None:
    folder = write_task(
        tmp_path / "para",
        {
            "train.jsonl": jsonl({"text": "a", "text_b": "b", "label": 10}, {"text": "c", "text_b": "d", "label": 2}),
            "dev.jsonl": jsonl({"text": "e", "text_b": "f", "label": 2}, {}).replace("{}", ""),  # a blank line 2
            "test.jsonl": jsonl({"text": "g", "text_b": "h"}),
        },
    )
    spec = generic_task(folder)
    assert (spec.labels, spec.text_b) == (("2", "10"), "text_b")  # numeric labels sort as numbers
    assert as_tuples(load_split(spec, folder, "dev")) == [("e", "f", "2", 1)]
    assert as_tuples(load_split(spec, folder, "test")) == [("g", "h", None, 1)]


def test_generic_task_json_regression_and_custom_columns(tmp_path: Path) -> None:
    config = {"kind": "regression", "text_a": "premise", "text_b": "hypothesis", "label": "similarity"}
    folder = write_task(
        tmp_path / "sim",
        {
            "task.json": json.dumps(config),
            "train.tsv": "premise|hypothesis|similarity\na cat|a kitten|4.5",
            "dev.jsonl": jsonl({"premise": "a dog", "hypothesis": "a car", "similarity": 0.5}),
        },
    )
    spec = generic_task(folder)
    assert (spec.kind, spec.labels, spec.primary) == ("regression", (), "pearson_spearman_mean")
    assert as_tuples(load_split(spec, folder, "train")) == [("a cat", "a kitten", 4.5, 2)]
    assert label_ids(spec, load_split(spec, folder, "dev")) == [0.5]


def test_generic_task_json_labels_and_metrics(tmp_path: Path) -> None:
    config = {"labels": ["no", "yes"], "text_b": None, "metrics": ["f1", "accuracy"], "primary": "f1"}
    folder = write_task(
        tmp_path / "spam",
        {
            "task.json": json.dumps(config),
            "train.tsv": "text|text_b|label\nwin money|x|yes",
            "dev.tsv": "text|label\nhello|no\nbuy now|maybe",
        },
    )
    spec = generic_task(folder)
    assert (spec.labels, spec.text_b, spec.metrics, spec.primary) == (("no", "yes"), None, ("f1", "accuracy"), "f1")
    with pytest.raises(TaskDataError, match=r"dev\.tsv, line 3: label 'maybe'"):
        load_split(spec, folder, "dev")


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"train.tsv": "text|label\na|x"}, r"no dev\.tsv or dev\.jsonl"),
        ({"train.tsv": "text|label", "train.jsonl": "", "dev.tsv": ""}, r"both train\.tsv and train\.jsonl"),
        ({"train.tsv": "text|gold\na|x", "dev.tsv": ""}, r"train\.tsv, line 1 \(header\): no column 'label'"),
        ({"train.tsv": "text|label", "dev.tsv": ""}, r"train\.tsv: no examples"),
        (
            {"task.json": '{"kind": "regression",\n "lables": 1}', "train.tsv": "", "dev.tsv": ""},
            r"task\.json: unknown keys \['lables'\]",
        ),
        ({"task.json": '{"kind": "ranking"}', "train.tsv": "text|label", "dev.tsv": ""}, r"kind 'ranking'"),
        ({"train.jsonl": '{"text": "a", "label": 1}\n{oops', "dev.tsv": ""}, r"train\.jsonl, line 2: not valid JSON"),
    ],
)
def test_generic_task_errors(files: dict[str, str], message: str, tmp_path: Path) -> None:
    with pytest.raises(TaskDataError, match=message):
        generic_task(write_task(tmp_path / "bad", files))


def test_generic_jsonl_missing_key_names_line(tmp_path: Path) -> None:
    folder = write_task(
        tmp_path / "t",
        {
            "train.jsonl": jsonl({"text": "a", "label": "x"}),
            "dev.jsonl": jsonl({"text": "b", "label": "x"}, {"txt": "c", "label": "x"}),
        },
    )
    with pytest.raises(TaskDataError, match=r"dev\.jsonl, line 2: no column 'text'"):
        load_split(generic_task(folder), folder, "dev")


@pytest.mark.parametrize("key", sorted(TEST_FILES))
def test_glue_test_files_keep_their_index(key: str, tmp_path: Path) -> None:
    folder, name = key.split("/")
    spec = GLUE_DIAGNOSTIC if folder == "diagnostic" else GLUE_TASKS[folder]
    split = next(s for s, file in spec.splits.items() if file == name)
    examples = load_split(spec, write_task(tmp_path / folder, {name: TEST_FILES[key]}), split)
    assert [(e.id, e.label) for e in examples] == [("0", None), ("1", None)]  # GLUE's submission index


def test_present_splits_and_submission_files(tmp_path: Path) -> None:
    mnli = GLUE_TASKS["MNLI"]
    assert present_splits(mnli, write_glue(tmp_path, "MNLI")) == (
        "train",
        "dev_matched",
        "dev_mismatched",
        "test_matched",
    )
    assert present_splits(mnli, tmp_path / "none") == ("train", "dev_matched", "dev_mismatched")  # train/dev required
    tests = {(t, s) for t, spec in {**GLUE_TASKS, "AX": GLUE_DIAGNOSTIC}.items() for s in spec.splits if "test" in s}
    assert set(GLUE_SUBMISSION_FILES) == tests
    assert sorted(GLUE_SUBMISSION_FILES.values()) == sorted(
        f"{n}.tsv" for n in "CoLA SST-2 MRPC STS-B QQP MNLI-m MNLI-mm QNLI RTE WNLI AX".split()
    )


@pytest.mark.parametrize(
    ("name", "canonical"),
    [("cola", "CoLA"), ("sst2", "SST-2"), ("sst-2", "SST-2"), ("SST-2", "SST-2"), ("mnli", "MNLI"),
     ("stsb", "STS-B"), ("sts-b", "STS-B"), ("mrpc", "MRPC"), ("qqp", "QQP"), ("qnli", "QNLI"), ("rte", "RTE"),
     ("wnli", "WNLI"), ("data/tasks/package", None), ("ax", None)],
)  # fmt: skip
def test_hugging_face_and_lower_case_glue_names(name: str, canonical: str | None, tmp_path: Path) -> None:
    assert glue_name(name) == canonical
    if canonical is not None:
        assert resolve_task(name, tmp_path) == (GLUE_TASKS[canonical], tmp_path / canonical)


@pytest.mark.parametrize(
    ("name", "meant"), [("colaa", "'CoLA'"), ("sst", "'SST-2'"), ("mnlii", "'MNLI'"), ("stsbb", "'STS-B'")]
)
def test_unknown_task_name_says_which_was_meant(name: str, meant: str, tmp_path: Path) -> None:
    with pytest.raises(TaskDataError, match=f"unknown task '{name}'.*did you mean {meant}"):
        resolve_task(name, tmp_path)
    folder = write_task(tmp_path / "tasks" / "package", {"train.tsv": "text|label\na|x", "dev.tsv": "text|label\nb|x"})
    assert resolve_task(str(folder), None)[1] == folder
    with pytest.raises(TaskDataError, match=re.escape(f"did you mean '{folder}'")):  # a typo in a task folder's name
        resolve_task(str(tmp_path / "tasks" / "pakage"), None)
    with pytest.raises(ValueError, match="glue_dir"):
        resolve_task("CoLA", None)
