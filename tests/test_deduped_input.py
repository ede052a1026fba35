"""The stages that promise unseen held-out text (vocab, instances, tasks) read the dedup stage's output only:
segment's sentences are refused, one line naming ``--allow_undeduped``, which lets them through."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pipelines import dedup, instances, tasks, vocab
from pipelines.runtime.commands import error_line
from tests.conftest import LOCAL, NO_PARAMS, PipelineRun

FRACTION = "--held_out_fraction=0.05"  # the shared run's shards hold out this share (conftest.INSTANCE_FLAGS)


def _argv(stage: str, run: PipelineRun, source: Path, output: Path) -> list[str]:
    flags = {
        "vocab": ["--vocab_size=500"],
        "instances": ["--spiece", str(run.spiece), "--max_seq_length=64", "--dupe_factor=1"],
        "tasks": [],
    }[stage]
    return [*NO_PARAMS, "--input", str(source), "--output", str(output), FRACTION, *flags, *LOCAL]


STAGES: dict[str, Callable[[list[str]], object]] = {"vocab": vocab.run, "instances": instances.run, "tasks": tasks.run}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_segment_output_is_refused_in_one_line_naming_the_flag_which_lets_it_through(
    stage: str, pipeline_run: PipelineRun, tmp_path: Path
) -> None:
    argv = _argv(stage, pipeline_run, pipeline_run.sentences, tmp_path / "out")
    with pytest.raises(ValueError, match="not written by the dedup stage") as refused:
        STAGES[stage](argv)
    message = str(refused.value)
    assert "\n" not in message and error_line(refused.value) == message
    assert "--allow_undeduped" in message and str(pipeline_run.sentences / "stats.json") in message
    assert not (tmp_path / "out").exists()  # refused before any output
    STAGES[stage]([*argv, "--allow_undeduped"])
    assert any((tmp_path / "out" / name).exists() for name in ("stats.json", "manifest.json"))


@pytest.mark.parametrize("stage", [*sorted(STAGES), "dedup"])
def test_help_names_the_flag_for_the_stages_that_need_dedup_only(stage: str, capsys: pytest.CaptureFixture) -> None:
    run = {**STAGES, "dedup": dedup.run}[stage]
    with pytest.raises(SystemExit):
        run([*NO_PARAMS, "--help"])
    assert ("--allow_undeduped" in capsys.readouterr().out) == (stage != "dedup")


def test_the_dedup_output_passes_without_the_flag(pipeline_run: PipelineRun, tmp_path: Path) -> None:
    deduped = tmp_path / "deduped"
    dedup.run([*NO_PARAMS, "--input", str(pipeline_run.sentences), "--output", str(deduped), FRACTION, *LOCAL])
    assert json.loads((deduped / "stats.json").read_text())["stage"] == "dedup"
    for stage, run in STAGES.items():
        run(_argv(stage, pipeline_run, deduped, tmp_path / stage))
    assert json.loads((tmp_path / "vocab" / "stats.json").read_text())["trained_on"] == "training documents"
    assert (tmp_path / "instances" / "manifest.json").exists() and (tmp_path / "tasks" / "stats.json").exists()
