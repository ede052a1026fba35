"""What a pretraining run reports: curves that survive a kill and a resume, and shard folders with empty splits.

The kill is a real SIGKILL in a ``python -m albert_lightning.fit`` subprocess, between a checkpoint and the
next validation, so nothing of the callback runs after it (no exception handler, no ``on_fit_end``).
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import warnings
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest

from tests.test_pretraining import fit_args, fit_in_process, fit_subprocess, write_subset

STEPS, VALIDATE_EVERY = 12, 6


class KillAt(L.Callback):
    """Kills its own process with SIGKILL once training reaches ``step``, as an out-of-memory killer would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def curve_args(root: Path, data: Path, checkpoint_every: int, *extra: str) -> list[str]:
    """A run whose only callbacks are a checkpoint every ``checkpoint_every`` steps and the report (+ extra)."""
    callbacks = [
        {
            "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
            "init_args": {"every_n_train_steps": checkpoint_every, "save_last": True, "save_top_k": 1},
        },
        {"class_path": "albert_lightning.pretraining.curves.PretrainingReport"},
    ]
    return [
        *fit_args(root, data, 4, STEPS),
        f"--trainer.callbacks={json.dumps(callbacks)}",
        f"--trainer.val_check_interval={VALIDATE_EVERY}",
        *extra,
    ]


def read_curve(root: Path, name: str) -> list[dict[str, str]]:
    with open(root / "curves" / f"{name}.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def shards(pipeline_run, tmp_path_factory) -> SimpleNamespace:
    """20 training rows (5 batches of 4 per epoch), and the same folder with an empty validation or train split."""
    root = tmp_path_factory.mktemp("curves")
    return SimpleNamespace(
        short=write_subset(pipeline_run.shards, root / "short", 20),
        no_validation=write_subset(pipeline_run.shards, root / "no-validation", 20, validation_rows=0),
        no_train=write_subset(pipeline_run.shards, root / "no-train", 0, validation_rows=20),
    )


@pytest.fixture(scope="module")
def uninterrupted(shards, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("uninterrupted")
    fit_in_process(curve_args(root, shards.short, 4))
    return root


# Checkpoints at 4 and 8, validations at 6 and 12: killed at 10, the rows of steps 7 and 8 were never written to
# disk. Checkpoints at 6: the validation at step 6 runs after the checkpoint and the resumed run does not repeat it.
@pytest.mark.parametrize(("checkpoint_every", "kill_at"), [(4, 10), (6, 9)])
def test_curves_of_a_run_killed_after_a_checkpoint_and_resumed_equal_the_uninterrupted_runs(
    shards, uninterrupted, tmp_path, checkpoint_every, kill_at
):
    args = curve_args(tmp_path, shards.short, checkpoint_every)
    kill = {"class_path": f"{__name__}.KillAt", "init_args": {"step": kill_at}}
    killed = fit_subprocess([*args, f"--trainer.callbacks+={json.dumps(kill)}"], check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-4000:]
    fit_in_process([*args, "--ckpt_path=last"])

    for name, columns in (("train", ["loss"]), ("validation", ["mlm_loss", "sop_accuracy"])):
        expected, got = read_curve(uninterrupted, name), read_curve(tmp_path, name)
        steps = [r["step"] for r in got]
        assert steps == [r["step"] for r in expected], name  # as text: "5", never "5.0"
        assert all(s.isdigit() for s in steps) and len(set(steps)) == len(steps), steps
        for column in columns:
            values = [float(r[column]) for r in got]
            assert values == pytest.approx([float(r[column]) for r in expected], rel=1e-6, abs=0), (name, column)
    assert [int(r["step"]) for r in read_curve(tmp_path, "train")] == list(range(1, STEPS + 1))
    assert [int(r["step"]) for r in read_curve(tmp_path, "validation")] == [0, 6, 12]


def test_a_shard_folder_without_validation_rows_reports_no_validation_numbers(shards, tmp_path):
    fit_in_process(fit_args(tmp_path, shards.no_validation, 4, 3))
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["steps"] == 3
    assert metrics["validation"] is None and metrics["validation_at_start"] is None, metrics
    assert metrics["note"] == f"{shards.no_validation}: no validation rows"
    assert read_curve(tmp_path, "validation") == []  # the header only: no stale rows of an earlier run either
    assert [int(r["step"]) for r in read_curve(tmp_path, "train")] == [1, 2, 3]


def test_fit_on_a_shard_folder_without_training_rows_fails_with_one_line_naming_it(shards, tmp_path):
    done = fit_subprocess(fit_args(tmp_path, shards.no_train, 4, 3), check=False)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert re.match(rf"fit: error: {re.escape(str(shards.no_train))}: .*no training rows", last), done.stderr[-4000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]


def test_resuming_mid_epoch_from_a_shard_data_module_does_not_warn_that_the_loader_is_not_resumable(shards, tmp_path):
    fit_in_process(fit_args(tmp_path, shards.short, 4, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_in_process(fit_args(tmp_path, shards.short, 4, 4, "--ckpt_path=last"))
    assert [str(w.message) for w in caught if "not resumable" in str(w.message)] == []
