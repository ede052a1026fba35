"""A Beam stage's command line: its config (``pipelines.params``) plus Beam's own options, passed through.

Every flag the stage does not know goes to Beam's ``PipelineOptions`` untouched, so
``--runner DataflowRunner --temp_location gs://...`` works unchanged; without a runner, stages run on Beam's
local engine in multi-processing mode on every core.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, TypeVar

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipelines.params import parse_config

__all__ = ["StageArgs", "parse_stage_args"]

C = TypeVar("C")


@dataclasses.dataclass
class StageArgs:
    """What a stage gets from its command line: its typed config, its I/O paths and Beam's options."""

    config: Any
    paths: dict[str, str]
    beam: PipelineOptions
    params_file: str | None


def parse_stage_args(
    argv: list[str] | None,
    config_cls: type[C],
    section: str,
    paths: dict[str, str],
    description: str,
) -> StageArgs:
    """Splits ``argv`` into the stage's config (dataclass ``config_cls``), its paths and Beam's options.

    Args:
        argv: the command line without the program name; None reads ``sys.argv``.
        config_cls: the stage's dataclass of knobs; each field becomes ``--field``.
        section: the ``params.yaml`` section holding the stage's values.
        paths: flag name → help for the stage's required input/output paths.
        description: ``--help`` text.
    """
    parsed = parse_config(argv, config_cls, section, paths, description, allow_rest=True)
    beam = PipelineOptions(parsed.rest)
    _default_to_local_multiprocessing(beam, parsed.rest)
    return StageArgs(parsed.config, parsed.paths, beam, parsed.params_file)


# The engine of Beam's Python DirectRunner, named explicitly: in Beam 2.77 DirectRunner first tries the Prism
# runner, which downloads a Go binary at run time and ignores direct_num_workers/direct_running_mode.
LOCAL_RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"


def _default_to_local_multiprocessing(beam: PipelineOptions, beam_argv: list[str]) -> None:
    # DirectRunner's default in_memory mode uses one core; Beam's own multi-processing mode uses them all.
    standard = beam.view_as(StandardOptions)
    if standard.runner is None:
        standard.runner = LOCAL_RUNNER
    elif standard.runner not in ("DirectRunner", "direct", LOCAL_RUNNER):
        return
    direct = beam.view_as(DirectOptions)
    if not any(a.startswith("--direct_running_mode") for a in beam_argv):
        direct.direct_running_mode = "multi_processing"
    if not any(a.startswith("--direct_num_workers") for a in beam_argv):
        direct.direct_num_workers = os.cpu_count() or 1
