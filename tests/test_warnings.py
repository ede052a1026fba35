"""A fit run prints no warning a user would have to learn to ignore."""

from __future__ import annotations

import warnings
from pathlib import Path

from tests.test_pretraining import cli_in_process, write_subset


def test_a_fit_run_warns_of_no_view_output_and_nothing_deprecated(pipeline_run, tmp_path: Path) -> None:
    shards = write_subset(pipeline_run.shards, tmp_path / "shards", 8)
    args = [
        "--model.preset=tiny",
        f"--data.data_dir={shards}",
        "--data.batch_size=4",
        "--trainer.accelerator=cpu",
        "--trainer.max_steps=2",
        "--trainer.limit_val_batches=1",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={tmp_path / 'run'}",
    ]
    with warnings.catch_warnings(record=True) as caught:
        # "always": a warning already shown once in this process (another test's run) must show again here.
        warnings.simplefilter("always")
        with cli_in_process(args):
            pass
    messages = [f"{w.category.__name__} ({w.filename}:{w.lineno}): {w.message}" for w in caught]
    unwanted = [m for m in messages if "view tensor" in m or "deprecated" in m]
    assert not unwanted, "\n".join(unwanted)
