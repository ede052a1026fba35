"""``python -m albert_lightning.fit`` as a user calls it: its help, a second run into the same folder, and what a
run shorter than one validation interval reports (metrics.json, curves, the progress bar)."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel

from albert_lightning.pretraining.progress_bar import StepProgressBar, StepProgressLines, figure, step_progress
from tests.conftest import DISTRIBUTED_ENV
from tests.test_pretraining import REPO, cli_in_process, fit_args, fit_in_process, fit_subprocess, write_subset


@pytest.fixture(scope="module")
def shards(pipeline_run, tmp_path_factory) -> Path:
    return write_subset(pipeline_run.shards, tmp_path_factory.mktemp("cli") / "shards", 20)


def test_help_describes_this_tool_and_offers_only_the_models_optimizer_flags():
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    done = subprocess.run(
        [sys.executable, "-m", "albert_lightning.fit", "--help"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-4000:]
    text = " ".join(done.stdout.split())  # argparse wraps the description to the terminal's width
    assert "albert-lightning fit: pretrain ALBERT" in text
    assert "Lightning Trainer command line tool" not in text
    assert "--model.optimizer" in text and "--overwrite" in text
    # Lightning's own optimizer and scheduler flags, which configure_optimizers would ignore, are not offered.
    assert not re.search(r"(?<![\w.])--(optimizer|lr_scheduler)\b", done.stdout), done.stdout


def checkpoint_step(path: Path) -> int:
    return torch.load(path, map_location="cpu", weights_only=False)["global_step"]


def test_a_second_run_into_a_checkpoint_folder_must_resume_or_overwrite_and_never_leaves_a_stale_last(shards, tmp_path):
    folder = tmp_path / "checkpoints"
    fit_in_process(fit_args(tmp_path, shards, 4, 2))
    assert sorted(p.name for p in folder.iterdir()) == ["last.ckpt"]
    before = (folder / "last.ckpt").read_bytes()

    refused = fit_subprocess(fit_args(tmp_path, shards, 4, 3), check=False)
    assert refused.returncode == 1, refused.stderr[-4000:]
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith(f"fit: error: {folder}: holds an earlier run's checkpoints (last.ckpt)"), line
    assert "--ckpt_path last" in line and "--overwrite true" in line
    assert sorted(p.name for p in folder.iterdir()) == ["last.ckpt"]
    assert (folder / "last.ckpt").read_bytes() == before

    fit_in_process(fit_args(tmp_path, shards, 4, 3, "--overwrite=true"))
    assert sorted(p.name for p in folder.iterdir()) == ["last.ckpt"]  # no last-v1.ckpt beside it
    assert checkpoint_step(folder / "last.ckpt") == 3
    # The steps recorded from the start: the overwriting run began at step 1, it did not resume.
    steps = [json.loads(line)["step"] for line in (tmp_path / "steps-rank0.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 1, 2, 3]

    fit_in_process(fit_args(tmp_path, shards, 4, 4, "--ckpt_path=last"))  # resuming needs no flag
    assert sorted(p.name for p in folder.iterdir()) == ["last.ckpt"]
    assert checkpoint_step(folder / "last.ckpt") == 4


@pytest.fixture(scope="module")
def short_run(shards, tmp_path_factory) -> SimpleNamespace:
    """3 steps with the default config's validation every 1000 and logging every 10, with the progress bar on."""
    root = tmp_path_factory.mktemp("short-run")
    args = fit_args(root, shards, 4, 3, "--trainer.log_every_n_steps=10", "--trainer.enable_progress_bar=true")
    with cli_in_process(args) as cli:
        trainer = cli.trainer
    assert trainer.val_check_interval == 1000 and trainer.global_step == 3
    return SimpleNamespace(root=root, trainer=trainer)


def read_curve(root: Path, name: str) -> list[dict[str, str]]:
    with open(root / "curves" / f"{name}.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_a_run_shorter_than_its_validation_interval_validates_at_its_end_and_reports_its_speed(short_run):
    metrics = json.loads((short_run.root / "metrics.json").read_text())
    assert [r["step"] for r in read_curve(short_run.root, "validation")] == ["0", "3"]
    assert metrics["steps"] == 3
    assert metrics["validation"] != metrics["validation_at_start"], metrics
    last = read_curve(short_run.root, "train")[-1]  # the last step has its row, whatever log_every_n_steps
    assert last["step"] == "3"
    assert metrics["tokens_per_second"] == pytest.approx(float(last["tokens_per_second"]))
    assert metrics["tokens_per_second"] > 0


def test_the_progress_counts_steps_out_of_max_steps(short_run):
    bar = short_run.trainer.progress_bar_callback
    assert isinstance(bar, StepProgressLines)  # pytest's stderr is not a terminal
    assert bar.lines == 3  # 3 steps of 3: each a new 5 %, and the last one's line with the run's time


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_live_bar_counting_steps(monkeypatch):
    monkeypatch.setattr(sys, "stderr", _Terminal())
    bar = step_progress()
    assert isinstance(bar, StepProgressBar)
    trainer = L.Trainer(max_steps=3, callbacks=[bar], logger=False, enable_checkpointing=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")  # fmt: skip
    trainer.fit(BoringModel())
    tqdm_bar = bar.train_progress_bar
    assert (tqdm_bar.n, tqdm_bar.total) == (3, 3)
    assert tqdm_bar.desc.startswith("Steps (epoch 0)"), tqdm_bar.desc  # not "Epoch 0/-2"


def test_a_log_gets_a_line_per_5_percent_of_the_steps_and_one_at_the_end(capsys):
    bar = step_progress()
    trainer = L.Trainer(max_steps=100, callbacks=[bar], logger=False, enable_checkpointing=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")  # fmt: skip
    trainer.fit(BoringModel())  # far faster than 30 s a line: the lines are the twentieths
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("steps: ")]
    assert "\r" not in err and len(lines) == bar.lines == 20, err[-2000:]
    steps = [int(re.match(r"steps: (\d+)/100 ", line)[1]) for line in lines]
    assert steps == [*range(5, 100, 5), 100]
    assert all(line.endswith(" left") or ", loss " in line for line in lines[:-1]), lines[:3]
    assert re.match(r"steps: 100/100 \(100%\) in \d+:\d\d", lines[-1]), lines[-1]


@pytest.mark.parametrize(
    ("value", "shown"), [(47680.3, "47,680"), (1234567.0, "1,234,567"), (5.4321, "5.432"), (0.000123, "0.000123")]
)
def test_a_log_line_shows_figures_as_people_read_them(value, shown):
    assert figure(value) == shown


def test_a_user_config_written_before_the_subpackages_still_runs(shards, tmp_path):
    # The class paths users' YAML holds from before albert_lightning had subpackages, and a checkpoint callback
    # whose folder the CLI pins to {default_root_dir}/checkpoints (Lightning would otherwise choose it inside fit).
    old = tmp_path / "old.yaml"
    old.write_text(
        "trainer:\n"
        "  strategy:\n"
        "    class_path: albert_lightning.sharding.FSDP2Strategy\n"
        "  callbacks:\n"
        "    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        "      init_args: {save_last: true}\n"
        "    - class_path: albert_lightning.run_curves.PretrainingReport\n"
    )
    root = tmp_path / "run"
    with cli_in_process([*fit_args(root, shards, 4, 2), "--config", str(old)]) as cli:
        reports = [c for c in cli.trainer.callbacks if type(c).__name__ == "PretrainingReport"]
        assert [type(c).__module__ for c in reports] == ["albert_lightning.pretraining.curves"]
        assert cli.trainer.checkpoint_callback.dirpath == str(root / "checkpoints")
    assert json.loads((root / "metrics.json").read_text())["steps"] == 2
    assert (root / "checkpoints" / "last.ckpt").is_file()
