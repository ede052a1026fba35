"""The adaptation report (``albert_lightning/ablations/adaptation.py``) on run folders written by hand: its
scores are the medians over seeds, its MLM difference the counts', and its intervals exclude zero only where one
run is clearly ahead."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from albert_lightning.ablations import adaptation

LABELS = ["numpy", "scipy", "sklearn"]


def write_run(
    runs: Path, name: str, mlm: tuple[int, int], right: dict[str, list[float]], seed: int, replicate: int = 1
) -> None:
    """An evaluation of one pretraining run (``seed-<replicate>``) on the package task whose fine-tuning seeds
    predict the gold label with the given chances per size."""
    folder = runs / name / f"seed-{replicate}"
    (folder / "predictions" / "package").mkdir(parents=True)
    rng = np.random.default_rng(seed)
    gold = [LABELS[i % 3] for i in range(90)]
    wrong = {label: LABELS[(LABELS.index(label) + 1) % 3] for label in LABELS}
    by_size = {
        size: [[g if rng.random() < p else wrong[g] for g in gold] for p in chances] for size, chances in right.items()
    }
    with open(folder / "predictions" / "package" / "dev.jsonl", "w") as f:
        for i, label in enumerate(gold):
            runs_of = {size: [seeds[i] for seeds in rows] for size, rows in by_size.items()}
            f.write(json.dumps({"index": i, "label": label, "pretrained": runs_of}) + "\n")
    task = {"kind": "classification", "labels": LABELS, "primary": "accuracy", "splits": {"dev": {}}}
    metrics = {"intrinsic": {"sop": {"mlm_correct": mlm[0], "mlm_predictions": mlm[1]}}, "tasks": {"package": task}}
    (folder / "metrics.json").write_text(json.dumps(metrics))


def test_the_table_compares_every_size_and_held_out_mlm(tmp_path):
    write_run(tmp_path, "continued", (300, 1000), {"32": [0.6, 0.6, 0.6], "90": [0.95, 0.95, 0.95]}, 1)
    write_run(tmp_path, "general", (200, 1000), {"32": [0.6, 0.6, 0.6], "90": [0.5, 0.5, 0.5]}, 2)
    write_run(tmp_path, "scratch", (290, 1000), {"32": [0.6, 0.6, 0.6], "90": [0.94, 0.94, 0.94]}, 3)
    table = adaptation.main(["--params", "/dev/null", "--runs", str(tmp_path), "--output", str(tmp_path / "report"),
                             "--resamples", "500"])  # fmt: skip

    mlm, small, large = table
    assert mlm["continued"] == 0.3 and mlm["general"] == 0.2
    assert mlm["continued-general"]["difference"] == pytest.approx(0.1)
    assert mlm["continued-general"]["low"] > 0  # 300/1000 vs 200/1000: far apart
    assert mlm["continued-scratch"]["low"] < 0 < mlm["continued-scratch"]["high"]  # 300 vs 290: not resolved
    assert [small["size"], large["size"]] == ["32", "90"]
    assert large["continued-general"]["low"] > 0.2  # 0.95 vs 0.5 right on 90 examples
    assert small["continued-general"]["low"] < 0 < small["continued-general"]["high"]  # the same chance
    assert large["continued"] == pytest.approx(0.95, abs=0.08)  # the median over seeds
    assert large["continued_sd"] == 0.0  # one pretraining run: no spread
    report = (tmp_path / "report" / "report.md").read_text()
    assert report.count("\n| ") == 4 and "continued − general" in report
    assert json.loads((tmp_path / "report" / "results.json").read_text()) == table


def test_a_missing_run_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"scratch: no seed-<n>/metrics\.json"):
        write_run(tmp_path, "continued", (1, 2), {"32": [0.5]}, 1)
        write_run(tmp_path, "general", (1, 2), {"32": [0.5]}, 2)
        adaptation.rows(tmp_path)


def test_runs_that_disagree_widen_the_interval_and_show_their_spread(tmp_path):
    """Two pretraining runs per model: continued's runs at 0.95 and 0.55 against general's 0.6 and 0.6 leave
    the difference unresolved, though continued's first run alone is far ahead."""
    for replicate, chance in ((1, 0.95), (2, 0.55)):
        write_run(tmp_path, "continued", (300, 1000), {"90": [chance] * 3}, 10 + replicate, replicate)
    for name, seed in (("general", 20), ("scratch", 30)):
        for replicate in (1, 2):
            write_run(tmp_path, name, (200, 1000), {"90": [0.6] * 3}, seed + replicate, replicate)
    _, large = adaptation.rows(tmp_path, resamples=500)
    assert large["continued_sd"] > 0.2 and large["general_sd"] < 0.1
    assert large["continued-general"]["low"] < 0 < large["continued-general"]["high"]
    assert large["continued"] == pytest.approx(0.75, abs=0.08)  # the mean over runs
