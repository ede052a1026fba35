"""Command-line and params.yaml handling shared by every stage.

A stage declares its knobs as a dataclass; ``parse_stage_args`` turns each field into a ``--flag`` whose default
comes from the stage's section of ``params.yaml`` (so DVC tracks it), and hands every flag it does not know to
Beam's ``PipelineOptions`` untouched, so ``--runner DataflowRunner --temp_location gs://...`` works unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import apache_beam as beam
import yaml
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipelines.commands import VERBOSE_FLAG

__all__ = ["StageArgs", "load_params", "parse_stage_args", "run_and_count"]

C = TypeVar("C")


@dataclasses.dataclass
class StageArgs:
    """What a stage gets from its command line: its typed config, its I/O paths and Beam's options."""

    config: Any
    paths: dict[str, str]
    beam: PipelineOptions
    params_file: str | None


def load_params(path: str | os.PathLike | None, section: str) -> dict[str, Any]:
    """Returns ``params.yaml``'s ``section`` plus the top-level ``seed``; {} when there is no file."""
    if path is None or not Path(path).exists():
        return {}
    with open(path, encoding="utf-8") as f:
        params = yaml.safe_load(f) or {}
    values = dict(params.get(section) or {})
    if "seed" in params:
        values.setdefault("seed", params["seed"])
    return values


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _add_field(parser: argparse.ArgumentParser, field: dataclasses.Field, hints: dict[str, Any]) -> None:
    hint = hints[field.name]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):  # Optional[X] → X
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
        origin = typing.get_origin(hint)
    kwargs: dict[str, Any] = {"dest": field.name, "default": argparse.SUPPRESS}
    if hint is bool:
        kwargs["type"] = _parse_bool
    elif origin in (list, tuple):
        kwargs.update(nargs="*", type=typing.get_args(hint)[0])
    else:
        kwargs["type"] = hint
    doc = field.metadata.get("help", "")
    parser.add_argument(f"--{field.name}", help=f"{doc} (params.yaml or built-in default)", **kwargs)


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

    Precedence: command-line flag > ``params.yaml`` > the dataclass default.
    """
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)
    parser.add_argument("--params", default="params.yaml", help="params file holding the stage's section")
    parser.add_argument(VERBOSE_FLAG, action="store_true", help="on an error, the full trace instead of one line")
    for name, help_text in paths.items():
        parser.add_argument(f"--{name}", required=True, help=help_text)
    hints = typing.get_type_hints(config_cls)
    for field in dataclasses.fields(config_cls):
        _add_field(parser, field, hints)
    known, beam_argv = parser.parse_known_args(argv)
    values = load_params(known.params, section)
    names = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(values) - names - {"seed"})
    if unknown:
        raise SystemExit(f"{known.params}: unknown keys in section '{section}': {', '.join(unknown)}")
    values = {k: v for k, v in values.items() if k in names}
    values.update({k: getattr(known, k) for k in names if hasattr(known, k)})
    config = config_cls(**values)
    beam = PipelineOptions(beam_argv)
    _default_to_local_multiprocessing(beam, beam_argv)
    params_file = known.params if Path(known.params).exists() else None
    return StageArgs(config, {k: getattr(known, k) for k in paths}, beam, params_file)


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


def run_and_count(pipeline: beam.Pipeline, *dofns: type) -> dict[str, int]:
    """Runs ``pipeline`` to completion and returns its counters by name (summed over steps), sorted.

    The stages write these into their stats/manifest files, so what was dropped or split, and why, is on record.
    With ``dofns``, only their counters are returned, and every name in a DoFn's ``COUNTERS`` is present (0 when
    never incremented), so a metrics file has a fixed set of keys for ``dvc metrics diff``.
    """
    result = pipeline.run()
    result.wait_until_finish()
    query = MetricsFilter().with_namespaces(dofns) if dofns else MetricsFilter()
    totals = {name: 0 for dofn in dofns for name in getattr(dofn, "COUNTERS", ())}
    for counter in result.metrics().query(query)["counters"]:
        name = counter.key.metric.name
        value = counter.committed if counter.committed is not None else counter.attempted
        totals[name] = totals.get(name, 0) + int(value or 0)
    return dict(sorted(totals.items()))
