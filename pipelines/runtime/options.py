"""A Beam stage's command line: its config (``pipelines.runtime.params``) plus Beam's own options, passed through.

Every flag the stage does not know goes to Beam's ``PipelineOptions`` untouched, so
``--runner DataflowRunner --temp_location gs://...`` works unchanged, and a flag Beam does not know either is
refused (Beam would drop it with a warning, and a misspelt stage flag would leave its knob at the default).
Without a runner, stages run on Beam's local engine, in-process or in one worker process per core, whichever the
stage's estimated work makes faster (``local_mode``), unless ``--direct_running_mode`` or ``--direct_num_workers``
says. Paths may be s3:// URLs, with Beam's S3 options (``--s3_endpoint_url http://127.0.0.1:9000`` for an
S3-compatible server, ``--s3_region_name``, ...).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
from collections.abc import Callable
from typing import Any, TypeVar

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    _BeamArgumentParser,  # the parser Beam reads its flags with (PipelineOptions.get_all_options)
)
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineResult, create_runner

from pipelines.runtime import files
from pipelines.runtime.params import parse_config

# The stages that promise held-out text unseen in training: each refuses input the dedup stage did not write
# (``documents.require_deduped``) unless given ALLOW_UNDEDUPED, a flag of these stages alone.
READS_DEDUPED = ("vocab", "instances", "tasks")
ALLOW_UNDEDUPED = "allow_undeduped"

__all__ = [
    "ALLOW_UNDEDUPED",
    "READS_DEDUPED",
    "StageArgs",
    "input_mb",
    "local_mode",
    "parse_stage_args",
    "runs_locally",
    "work_per_input_mb",
]

C = TypeVar("C")
UNDEDUPED_HELP = (
    "read a --input the dedup stage did not write (a segment stage folder): held-out documents may then repeat "
    "training text, so only for benchmarks and tests of the stage alone"
)


@dataclasses.dataclass
class StageArgs:
    """What a stage gets from its command line: its typed config, its I/O paths and Beam's options."""

    config: Any
    paths: dict[str, str | None]  # an optional path not given: None
    beam: PipelineOptions
    params_file: str | None
    allow_undeduped: bool = False  # --allow_undeduped, a flag of the stages in READS_DEDUPED alone


def parse_stage_args(
    argv: list[str] | None,
    config_cls: type[C],
    section: str,
    paths: dict[str, str],
    description: str,
    work_s: Callable[[Any, dict[str, str]], float | None] | None = None,
    optional_paths: dict[str, str] | None = None,
) -> StageArgs:
    """Splits ``argv`` into the stage's config (dataclass ``config_cls``), its paths and Beam's options.

    Args:
        argv: the command line without the program name; None reads ``sys.argv``.
        config_cls: the stage's dataclass of knobs; each field becomes ``--field``.
        section: the ``params.yaml`` section holding the stage's values.
        paths: flag name → help for the stage's required input/output paths.
        description: ``--help`` text.
        work_s: the stage's work in single-core seconds, estimated from its config and paths (its input's size
            times its measured cost); sizes Beam's local runner (``local_mode``). None: every core.
        optional_paths: flag name → help for paths the stage may be given (None in ``paths`` when not).
    """
    switches = {ALLOW_UNDEDUPED: UNDEDUPED_HELP} if section in READS_DEDUPED else {}
    parsed = parse_config(
        argv, config_cls, section, paths, description, allow_rest=True, optional_paths=optional_paths, switches=switches
    )
    beam = PipelineOptions(parsed.rest)
    own = ["params", *paths, *(optional_paths or {}), *switches, *(f.name for f in dataclasses.fields(config_cls))]
    _refuse_unknown_flags(parsed.rest, beam, own)
    files.use_options(beam)  # --s3_endpoint_url and the like reach this process's own file calls too
    _size_local_runner(beam, parsed.rest, lambda: None if work_s is None else work_s(parsed.config, parsed.paths))
    allow = parsed.switches.get(ALLOW_UNDEDUPED, False)
    return StageArgs(parsed.config, parsed.paths, beam, parsed.params_file, allow)


def _refuse_unknown_flags(rest: list[str], beam: PipelineOptions, own: list[str]) -> None:
    """Raises ValueError naming each flag of ``rest`` (what the stage's own parser left) that Beam does not take
    either, with the stage's or Beam's flag it looks like: Beam would drop it with only a warning.

    Beam takes the flags of every loaded ``PipelineOptions`` subclass, read as ``PipelineOptions.get_all_options``
    reads them (Beam 2.77, apache_beam/options/pipeline_options.py); the runner's module is loaded first, since
    some runners define their options there (``--dask_client_address``, apache_beam/runners/dask/dask_runner.py).
    """
    runner = beam.view_as(StandardOptions).runner
    try:
        if isinstance(runner, str):
            create_runner(runner)
    except Exception:  # a runner that does not load: Beam's own error names it once the pipeline is built
        return
    parser = _BeamArgumentParser(allow_abbrev=False, exit_on_error=False)
    classes: dict[str, type[PipelineOptions]] = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)  # as Beam does: a class defined twice (in a main session) counts once
    for cls in classes.values():
        cls._add_argparse_args(parser)
    try:
        unknown = parser.parse_known_args(rest)[1]
    except argparse.ArgumentError:  # a bad value of a Beam flag: Beam's own parsing says which
        return
    # A flag's name (no "=value"); "-0.5" is a value, as argparse reads it.
    flags = [w.split("=", 1)[0] for w in unknown if w.startswith("-") and not w[1:2].isdigit() and w[1:2] != "."]
    if not unknown:
        return
    if not flags:
        raise ValueError(f"{' '.join(unknown)}: neither this stage nor Beam takes arguments without a flag")
    beams = [name[2:] for action in parser._actions for name in action.option_strings if name.startswith("--")]
    shown = ", ".join(f"{flag}{_looks_like(flag, own, beams)}" for flag in flags)
    many = "these flags" if len(flags) > 1 else "this flag"
    raise ValueError(f"{shown}: neither this stage nor Beam knows {many} (--help lists the stage's)")


def _looks_like(flag: str, own: list[str], beams: list[str]) -> str:
    """`` (did you mean --x?)`` for the stage's flag, else Beam's, that ``flag`` resembles (``-`` read as ``_``)."""
    name = flag.lstrip("-").replace("-", "_").lower()
    for candidates in (own, beams):
        close = difflib.get_close_matches(name, candidates, n=1)
        if close:
            return f" (did you mean --{close[0]}?)"
    return ""


class LocalRunner(FnApiRunner):
    """Beam's local engine, handing the pipeline's options to its worker processes as ``DirectRunner`` does.

    Named on its own, ``FnApiRunner`` starts multi-processing workers with no options, so ``--s3_endpoint_url``
    and the like would reach the launching process but none of the workers; this builds it the way
    ``DirectRunner.run_pipeline`` does (Beam 2.77, apache_beam/runners/direct/direct_runner.py).
    """

    def run_pipeline(self, pipeline: beam.Pipeline, options: PipelineOptions) -> PipelineResult:
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision = ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        return FnApiRunner(provision_info=provision).run_pipeline(pipeline, options)


# The engine of Beam's Python DirectRunner, named explicitly: in Beam 2.77 DirectRunner first tries the Prism
# runner, which downloads a Go binary at run time and ignores direct_num_workers/direct_running_mode.
LOCAL_RUNNER = "pipelines.runtime.options.LocalRunner"
LOCAL_RUNNERS = (None, "DirectRunner", "direct", LOCAL_RUNNER)  # Beam's default runner is the DirectRunner
# What Beam's multi-processing mode costs over in-process mode whatever the input: each SDK worker process starts
# an interpreter and imports Beam and the stage, and the runner opens gRPC channels to each and closes them;
# measured by bench/startup.py on one-file slices (bench/results/startup.md).
MULTIPROCESSING_EXTRA_S = 3.0
MB = 1 << 20


def runs_locally(options: PipelineOptions) -> bool:
    """Whether ``options`` run the pipeline on Beam's local engine, whose workers are processes of this machine."""
    return options.view_as(StandardOptions).runner in LOCAL_RUNNERS


def local_mode(work_s: float | None, cores: int) -> tuple[str, int]:
    """Returns Beam's (direct_running_mode, direct_num_workers) for ``work_s`` single-core seconds on ``cores``.

    k worker processes share the work, saving ``work_s × (1 − 1/k)`` seconds, and start up in
    ``MULTIPROCESSING_EXTRA_S`` more than in-process mode: one process per core when the saving is the larger.
    Unknown work (None): one process per core, which a large input needs and a small one survives.
    """
    if work_s is None or (cores > 1 and work_s * (1 - 1 / cores) > MULTIPROCESSING_EXTRA_S):
        return "multi_processing", cores
    return "in_memory", 1


def input_mb(folder: str, pattern: str = "*.parquet") -> float:
    """Returns the MB of the files of ``folder`` that ``pattern`` matches, 0 for none: a stage's input size."""
    try:
        return sum(size for _, size in files.match_paths([files.join(folder, pattern)])) / MB
    except FileNotFoundError:  # the stage's own check of its input says what is missing
        return 0.0


def work_per_input_mb(cpu_s: float) -> Callable[[Any, dict[str, str]], float]:
    """Returns a ``work_s`` for ``parse_stage_args``: ``cpu_s`` single-core seconds per MB of ``--input``'s files."""
    return lambda config, paths: cpu_s * input_mb(paths["input"])


def _size_local_runner(beam: PipelineOptions, beam_argv: list[str], work_s: Callable[[], float | None]) -> None:
    standard = beam.view_as(StandardOptions)
    if not runs_locally(beam):
        return
    standard.runner = standard.runner or LOCAL_RUNNER
    direct = beam.view_as(DirectOptions)
    mode_set = any(a.startswith("--direct_running_mode") for a in beam_argv)
    workers_set = any(a.startswith("--direct_num_workers") for a in beam_argv)
    if mode_set or workers_set:  # the user's choice wins; the other one follows it
        if not mode_set:  # one worker runs in-process: a worker process of its own would add start-up, share nothing
            direct.direct_running_mode = "in_memory" if direct.direct_num_workers == 1 else "multi_processing"
        direct.direct_num_workers = direct.direct_num_workers if workers_set else os.cpu_count() or 1
        return
    direct.direct_running_mode, direct.direct_num_workers = local_mode(work_s(), os.cpu_count() or 1)
