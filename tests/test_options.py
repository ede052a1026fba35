"""pipelines.options: the local runner's mode from the stage's estimated work, and the user's flags winning."""

from __future__ import annotations

import dataclasses
import os

import pytest
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

from pipelines import options
from pipelines.options import MULTIPROCESSING_EXTRA_S, local_mode, parse_stage_args


@dataclasses.dataclass
class _Config:
    seed: int = 0


def _mode(*beam: str, work_s: float | None = 0.0) -> tuple[str | None, str, int, int]:
    """(runner, direct_running_mode, direct_num_workers, estimates made) parse_stage_args sets for ``beam``."""
    estimates = []

    def estimate(config: _Config, paths: dict[str, str]) -> float | None:
        estimates.append(paths["input"])
        return work_s

    argv = ["--params", os.devnull, "--input", "in", *beam]
    args = parse_stage_args(argv, _Config, "demo", {"input": "an input"}, "demo", estimate)
    direct = args.beam.view_as(DirectOptions)
    runner = args.beam.view_as(StandardOptions).runner
    return runner, direct.direct_running_mode, direct.direct_num_workers, len(estimates)


def test_more_workers_only_when_sharing_the_work_saves_more_than_their_start_up():
    k = 4
    break_even = MULTIPROCESSING_EXTRA_S / (1 - 1 / k)
    assert local_mode(break_even * 0.9, k) == ("in_memory", 1)
    assert local_mode(break_even * 1.1, k) == ("multi_processing", k)
    assert local_mode(1e6, 1) == ("in_memory", 1)  # one core: nothing to share
    assert local_mode(None, k) == ("multi_processing", k)  # unknown work: every core, as before sizing


def test_the_estimate_chooses_the_mode_unless_a_flag_says(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert _mode(work_s=1.0) == (options.LOCAL_RUNNER, "in_memory", 1, 1)
    assert _mode(work_s=60.0) == (options.LOCAL_RUNNER, "multi_processing", 2, 1)
    assert _mode("--direct_running_mode=multi_processing", work_s=1.0)[1:] == ("multi_processing", 2, 0)
    flags = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
    assert _mode(*flags, work_s=60.0)[1:] == ("in_memory", 1, 0)
    assert _mode("--direct_num_workers=2", work_s=1.0)[1:] == ("multi_processing", 2, 0)
    # One worker: in-process, since a separate worker process would add its start-up and share nothing.
    assert _mode("--direct_num_workers=1", work_s=60.0)[1:] == ("in_memory", 1, 0)
    assert _mode("--direct_running_mode=multi_processing", "--direct_num_workers=1")[1:] == ("multi_processing", 1, 0)


def test_a_remote_runner_is_left_alone_and_nothing_is_estimated():
    # Beam's own defaults, which a remote runner does not read
    assert _mode("--runner", "DataflowRunner") == ("DataflowRunner", "in_memory", 1, 0)
