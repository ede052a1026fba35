"""The ablation report: grouping in the paper's shape, parameters from each run's own config, its files."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import torch

from albert_lightning import report
from albert_lightning.model import AlbertConfig
from tests.test_model import formula

VARIANTS = {  # name → (config overrides, objective, masking)
    "baseline": ({}, "sop", "static"),
    "sharing-none": ({"sharing": "none"}, "sop", "static"),
    "sharing-attention": ({"sharing": "attention"}, "sop", "static"),
    "embedding-64": ({"embedding_size": 64}, "sop", "static"),
    "objective-nsp": ({}, "nsp", "static"),
    "masking-dynamic": ({}, "sop", "dynamic"),
}


def _write_run(folder: Path, overrides: dict, objective: str, masking: str, score: float) -> AlbertConfig:
    """A run folder as the grid leaves it (checkpoint hyper-parameters, evaluation, curve), without weights."""
    config = AlbertConfig.preset("base", **overrides)
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "eval").mkdir()
    (folder / "curves").mkdir()
    hparams = {"config": dataclasses.asdict(config), "inter_sentence": objective}
    data = {"masking": masking, "data_dir": str(folder / "no-such-shards")}
    torch.save({"hyper_parameters": hparams, "datamodule_hyper_parameters": data}, folder / "checkpoints/last.ckpt")
    intrinsic = {
        "sop": {"kind": "sop", "mlm_accuracy": 0.3, "sop_accuracy": score},
        "nsp": {"kind": "nsp", "mlm_accuracy": 0.3, "nsp_accuracy": 1 - score},
    }
    tasks = {"package": {"primary": "accuracy", "splits": {"dev": {"pretrained": {"accuracy": score}}}}}
    (folder / "eval/metrics.json").write_text(json.dumps({"intrinsic": intrinsic, "tasks": tasks}))
    (folder / "curves/validation.csv").write_text(
        "step,mlm_loss,mlm_accuracy,sop_loss,sop_accuracy\n0,8.5,0.0,0.69,0.5\n50,6.0,0.1,0.6,0.7\n"
    )
    return config


def test_report_groups_runs_as_the_paper_and_counts_parameters_from_each_config(tmp_path: Path) -> None:
    configs = {
        name: _write_run(tmp_path / "runs" / name, overrides, objective, masking, 0.5 + i / 100)
        for i, (name, (overrides, objective, masking)) in enumerate(VARIANTS.items())
    }
    grouped = report.main(["--runs", str(tmp_path / "runs"), "--output", str(tmp_path / "out")])

    rows = {row["variant"]: row for row in grouped["All runs"]}
    for name, config in configs.items():
        assert rows[name]["parameters"] == formula(config, heads=False)
        assert rows[name]["parameters_pretraining"] == formula(config, heads=True)
    assert rows["baseline"]["parameters"] == 11_683_584 and rows["sharing-none"]["parameters"] == 89_650_176
    sharing = "Cross-layer sharing and embedding size (paper Tables 3 and 4)"
    assert [r["variant"] for r in grouped[sharing]] == ["baseline", "embedding-64", "sharing-attention", "sharing-none"]
    objective = grouped["Inter-sentence objective (paper Table 5)"]
    assert [r["variant"] for r in objective] == ["baseline", "objective-nsp"]
    assert objective[1]["nsp_accuracy"] == 1 - objective[1]["sop_accuracy"]
    assert [r["variant"] for r in grouped["Other factors"]] == ["baseline", "masking-dynamic"]

    with open(tmp_path / "out/report.csv", newline="") as f:
        assert [r["variant"] for r in csv.DictReader(f)] == sorted(VARIANTS)
    text = (tmp_path / "out/report.md").read_text()
    assert "| sharing-none |" in text and "89,650,176" in text
    assert (tmp_path / "out/curves.png").stat().st_size > 0
