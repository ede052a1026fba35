"""pipelines.runtime.options: the local runner's mode from the stage's estimated work, the user's flags winning,
and a flag that neither the stage nor Beam knows refused."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

from pipelines import dedup
from pipelines.runtime import options
from pipelines.runtime.options import MULTIPROCESSING_EXTRA_S, local_mode, parse_stage_args

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


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


def _dedup_argv(tmp_path: Path, *flags: str) -> list[str]:
    return ["--params", os.devnull, "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), *flags]


def test_a_misspelt_stage_flag_fails_in_one_line_naming_it_and_the_flag_it_resembles(tmp_path: Path):
    # Before, Beam took the flag, dropped it with a warning, and the stage ran with jaccard_threshold's default.
    with pytest.raises(ValueError) as raised:
        dedup.run(_dedup_argv(tmp_path, "--jaccard-threshold", "0.9"))
    message = str(raised.value)
    assert message.startswith("--jaccard-threshold (did you mean --jaccard_threshold?): ")
    assert "\n" not in message and "0.9" not in message  # the flag, not its value
    with pytest.raises(ValueError, match=r"^--not_a_flag, --direct-num-workers \(did you mean --direct_num_workers"):
        dedup.run(_dedup_argv(tmp_path, "--not_a_flag=1", "--direct-num-workers", "2"))
    with pytest.raises(ValueError, match=r"^stray: neither this stage nor Beam takes arguments without a flag"):
        dedup.run(_dedup_argv(tmp_path, "stray"))
    assert not (tmp_path / "out").exists()


def test_the_command_prints_the_unknown_flag_as_its_one_line(tmp_path: Path):
    command = [sys.executable, "-m", "pipelines.dedup", *_dedup_argv(tmp_path, "--jaccard-threshold", "0.9")]
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("dedup: error: --jaccard-threshold (did you mean --jaccard_threshold?): neither")


@pytest.mark.parametrize(
    "flags",
    [
        ("--runner", "DirectRunner", "--direct_num_workers", "2", "--direct_running_mode=multi_processing"),
        ("--temp_location", "/tmp/beam", "--s3_endpoint_url", "http://127.0.0.1:9000", "--s3_region_name=x"),
        ("--runner", DASK_RUNNER, "--dask_client_address", "tcp://127.0.0.1:8786", "--dask_npartitions=4"),
        ("--runner", "DataflowRunner", "--project", "p", "--region", "europe-west1"),
    ],
)
def test_beams_own_flags_still_pass_through(flags: tuple[str, ...]):
    # A regression guard: Beam's flags, a runner's own (the Dask runner defines its options in its module) included.
    argv = ["--params", os.devnull, "--input", "in", *flags]
    runner = flags[flags.index("--runner") + 1] if "--runner" in flags else options.LOCAL_RUNNER
    args = parse_stage_args(argv, _Config, "demo", {"input": "an input"}, "demo")
    assert args.beam.view_as(StandardOptions).runner == runner
