"""The ablation report: grouping in the paper's shape, parameters from each run's own config, its files, and
the paper's findings checked with intervals on hand-written run folders."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from albert_lightning.ablations import report as ablation_report
from albert_lightning.model import AlbertConfig
from tests.test_model import formula

VARIANTS = {  # name → (config overrides, objective, masking)
    "baseline": ({}, "sop", "static"),
    "sharing-none": ({"sharing": "none"}, "sop", "static"),
    "sharing-attention": ({"sharing": "attention"}, "sop", "static"),
    "embedding-half": ({"embedding_size": 64}, "sop", "static"),
    "objective-nsp": ({}, "nsp", "static"),
    "masking-dynamic": ({}, "sop", "dynamic"),
}
# name → (SOP accuracy on the SOP shards, NSP accuracy on the NSP shards, MLM accuracy; in 1/1000ths), chosen
# independently of each other so that a swapped column or shard fails.
INTRINSIC = {
    "baseline": (900, 610, 330),
    "sharing-none": (880, 640, 350),
    "sharing-attention": (870, 600, 340),
    "embedding-half": (860, 590, 310),
    "objective-nsp": (520, 830, 320),
    "masking-dynamic": (890, 620, 325),
}
DEV = 200  # dev examples of the one task; the first DEV // 2 are labelled "a"
# name → which dev examples each of 3 seeds gets right: the same examples for related runs, as paired runs are
CORRECT = {
    "baseline": [range(150)] * 3,  # 0.75
    "sharing-none": [range(120)] * 3,  # 0.60: the paper's not-shared > all-shared, reversed here
    "sharing-attention": [range(150)] * 3,
    "embedding-half": [range(110)] * 3,  # 0.55: E=128 ahead by 0.20
    "objective-nsp": [range(150)] * 3,  # the same as baseline: a difference of exactly zero
    "masking-dynamic": [range(2, 152)] * 3,  # two examples lost, two others won: zero, and the interval spans it
}


def _eval(sop: int, nsp: int, mlm: int) -> dict:
    """eval/metrics.json's intrinsic section as evaluate writes it: accuracies with their counts."""
    intrinsic = {}
    for kind, pair in (("sop", sop), ("nsp", nsp)):
        intrinsic[kind] = {
            "kind": kind,
            "mlm_accuracy": mlm / 1000,
            f"{kind}_accuracy": pair / 1000,
            "mlm_correct": mlm,
            "mlm_predictions": 1000,
            "pair_correct": pair,
            "pairs": 1000,
            "mlm_most_frequent_accuracy": 0.05,
        }
    return intrinsic


def _predictions(folder: Path, correct: list[range]) -> float:
    """Writes predictions/package/dev.jsonl; returns the median accuracy over seeds (what metrics.json holds)."""
    gold = ["a" if i < DEV // 2 else "b" for i in range(DEV)]
    wrong = {"a": "b", "b": "a"}
    rows = [[g if i in right else wrong[g] for i, g in enumerate(gold)] for right in correct]
    (folder / "predictions/package").mkdir(parents=True)
    with open(folder / "predictions/package/dev.jsonl", "w") as f:
        for i, g in enumerate(gold):
            f.write(json.dumps({"index": i, "id": None, "label": g, "pretrained": {"64": [r[i] for r in rows]}}) + "\n")
    return sorted(len(right) / DEV for right in correct)[1]


def _write_run(
    folder: Path, overrides: dict, objective: str, masking: str, seed: int = 1, sop_shift: int = 0
) -> AlbertConfig:
    """One pretraining run of a variant as the grid leaves it (checkpoint hyper-parameters, curve, evaluation),
    without weights: ``pretrain/seed-<seed>`` and ``eval/seed-<seed>``; ``sop_shift`` moves its SOP count."""
    config = AlbertConfig.preset("base", **overrides)
    run, evaluated = folder / "pretrain" / f"seed-{seed}", folder / "eval" / f"seed-{seed}"
    (run / "checkpoints").mkdir(parents=True)
    (run / "curves").mkdir()
    evaluated.mkdir(parents=True)
    hparams = {"config": dataclasses.asdict(config), "inter_sentence": objective}
    data = {"masking": masking, "data_dir": str(folder / "no-such-shards")}
    torch.save({"hyper_parameters": hparams, "datamodule_hyper_parameters": data}, run / "checkpoints/last.ckpt")
    score = _predictions(evaluated, CORRECT[folder.name])
    split = {"examples": DEV, "sizes": {"64": {"pretrained": {"accuracy": score}}}}
    task = {"primary": "accuracy", "kind": "classification", "labels": ["a", "b"], "splits": {"dev": split}}
    sop, nsp, mlm = INTRINSIC[folder.name]
    evaluation = {"intrinsic": _eval(sop + sop_shift, nsp, mlm), "tasks": {"package": task}}
    (evaluated / "metrics.json").write_text(json.dumps(evaluation))
    (run / "curves/validation.csv").write_text(
        "step,mlm_loss,mlm_accuracy,sop_loss,sop_accuracy\n0,8.5,0.0,0.69,0.5\n50,6.0,0.1,0.6,0.7\n"
    )
    return config


def test_report_groups_runs_as_the_paper_and_counts_parameters_from_each_config(tmp_path: Path) -> None:
    configs = {
        name: _write_run(tmp_path / "runs" / name, overrides, objective, masking)
        for name, (overrides, objective, masking) in VARIANTS.items()
    }
    grouped = ablation_report.main(["--runs", str(tmp_path / "runs"), "--output", str(tmp_path / "out")])

    rows = {row["variant"]: row for row in grouped["All runs"]}
    for name, config in configs.items():
        assert rows[name]["parameters"] == formula(config, heads=False)
        assert rows[name]["parameters_pretraining"] == formula(config, heads=True)
    assert rows["baseline"]["parameters"] == 11_683_584 and rows["sharing-none"]["parameters"] == 89_650_176
    sharing = "Cross-layer sharing and embedding size (paper Tables 3 and 4)"
    expected = ["baseline", "embedding-half", "sharing-attention", "sharing-none"]
    assert [r["variant"] for r in grouped[sharing]] == expected
    objective = grouped["Inter-sentence objective (paper Table 5)"]
    assert [r["variant"] for r in objective] == ["baseline", "objective-nsp"]
    assert (objective[1]["sop_accuracy"], objective[1]["nsp_accuracy"], objective[1]["mlm_accuracy"]) == (
        0.52,
        0.83,
        0.32,
    )
    assert rows["baseline"]["package"] == 0.75 and rows["embedding-half"]["average"] == 0.55
    assert [r["variant"] for r in grouped["Other factors"]] == ["baseline", "masking-dynamic"]

    with open(tmp_path / "out/report.csv", newline="") as f:
        assert [r["variant"] for r in csv.DictReader(f)] == sorted(VARIANTS)
    text = (tmp_path / "out/report.md").read_text()
    assert "| sharing-none |" in text and "89,650,176" in text
    assert (tmp_path / "out/curves.png").stat().st_size > 0


def test_findings_from_counts_and_paired_predictions(tmp_path: Path) -> None:
    for name, (overrides, objective, masking) in VARIANTS.items():
        _write_run(tmp_path / "runs" / name, overrides, objective, masking)
    out = tmp_path / "out"
    findings = ablation_report.main(
        ["--runs", str(tmp_path / "runs"), "--output", str(out), "--bootstrap_resamples", "300"]
    )
    by_key = {f["key"]: f for f in findings["Findings"]}
    assert json.loads((out / "findings.json").read_text()) == findings["Findings"]

    # 0.900 vs 0.520 on 1000 pairs each, one run: the binomial draws give about the normal interval,
    # ±1.96·sqrt(0.00009 + 0.0002496) = ±0.036119
    sop = by_key["SOP>NSP on SOP"]
    assert (sop["first_value"], sop["second_value"], sop["verdict"]) == (0.9, 0.52, "holds")
    assert (sop["low"], sop["high"]) == pytest.approx((0.38 - 0.036119, 0.38 + 0.036119), abs=0.008)
    assert sop["first_runs"] == [0.9] and sop["first_spread"] == 0.0
    # 0.520 against chance on 1000 pairs: about ±1.96·sqrt(0.2496/1000) = ±0.030965, which spans chance
    chance = by_key["NSP near chance on SOP"]
    assert chance["verdict"] == "holds" and chance["low"] == pytest.approx(0.02 - 0.030965, abs=0.008)
    downstream = by_key["SOP>=NSP downstream"]  # identical predictions: zero, and every resample zero
    assert (downstream["difference"], downstream["low"], downstream["high"]) == (0.0, 0.0, 0.0)
    assert downstream["verdict"] == "not resolved at this budget"
    shared = by_key["not-shared>all-shared"]  # 0.60 vs 0.75 on the same examples: reversed
    assert shared["difference"] == pytest.approx(-0.15) and shared["verdict"] == "does not hold"
    embedding = by_key["E>E/2"]
    assert embedding["difference"] == pytest.approx(0.20) and embedding["verdict"] == "holds"
    dynamic = by_key["dynamic=static masking"]
    assert dynamic["difference"] == 0.0 and dynamic["low"] < 0 < dynamic["high"] and dynamic["verdict"] == "holds"
    skipped = [f["key"] for f in findings["Findings"] if f["verdict"] == "skipped"]
    assert skipped == [
        "SOP>none on NSP",
        "SOP>=none downstream",
        "attention<FFN sharing cost",
        "E>2E",
        "no dropout (MLM)",
        "no dropout (downstream)",
        "n-gram vs unigram",
    ]

    text = (out / "report.md").read_text()
    assert text.startswith(
        "## Findings\n\nOf 6 findings checked on 1 pretraining run per variant, 4 hold, 1 does not hold and 1 is "
        "not resolved at this budget "
        "(holds: SOP>NSP on SOP, NSP near chance on SOP, E>E/2, dynamic=static masking; does not hold: "
        "not-shared>all-shared; not resolved at this budget: SOP>=NSP downstream); 7 skipped ("
    )
    assert "Ours (downstream): sharing-none 0.600 ± 0.000 vs baseline 0.750 ± 0.000; difference -0.150 [" in text
    assert "(run objective-none not in the grid)" in text
    assert text.index("## Findings") < text.index("### All runs")


def test_a_difference_one_run_resolves_is_open_when_a_second_run_disagrees(tmp_path: Path) -> None:
    """Three runs per variant: the values are means over runs with their spread, and the interval takes in how
    far the runs of one variant differ (the grid's first run alone would call the finding resolved)."""
    shifts = {"baseline": (0, -300, -350), "objective-nsp": (-330, 100, 280)}  # 0.90 0.60 0.55 vs 0.19 0.62 0.80
    for name, by_seed in shifts.items():
        overrides, objective, masking = VARIANTS[name]
        for seed, shift in enumerate(by_seed):
            _write_run(tmp_path / "runs" / name, overrides, objective, masking, seed, shift)
    one_run = tmp_path / "one"
    for name in shifts:  # the first seed of each variant alone
        for part in ("pretrain", "eval"):
            (one_run / name / part).mkdir(parents=True)
            (one_run / name / part / "seed-0").symlink_to(tmp_path / "runs" / name / part / "seed-0")
    args = ["--bootstrap_resamples", "400"]
    single = ablation_report.main(["--runs", str(one_run), "--output", str(tmp_path / "o1"), *args])
    first = {f["key"]: f for f in single["Findings"]}["SOP>NSP on SOP"]
    assert first["verdict"] == "holds" and first["difference"] == pytest.approx(0.9 - 0.19)

    result = ablation_report.main(["--runs", str(tmp_path / "runs"), "--output", str(tmp_path / "o3"), *args])
    sop = {f["key"]: f for f in result["Findings"]}["SOP>NSP on SOP"]
    assert sop["first_runs"] == pytest.approx([0.9, 0.6, 0.55])
    assert sop["second_runs"] == pytest.approx([0.19, 0.62, 0.8])
    assert sop["difference"] == pytest.approx(2.05 / 3 - 1.61 / 3)
    assert sop["first_spread"] == pytest.approx(float(np.std([0.9, 0.6, 0.55], ddof=1)))
    # a resample may draw baseline's 0.55 three times against objective-nsp's 0.80: the interval crosses zero
    assert sop["low"] < 0 < sop["high"] and sop["verdict"] == "not resolved at this budget"
    rows = {r["variant"]: r for r in result["All runs"]}
    assert rows["baseline"]["runs"] == 3 and rows["baseline"]["sop_accuracy"] == pytest.approx(2.05 / 3)
    assert rows["baseline"]["sop_sd"] == pytest.approx(sop["first_spread"]) and rows["baseline"]["mlm_sd"] == 0.0
    assert "on 3 pretraining runs per variant" in (tmp_path / "o3" / "report.md").read_text()
