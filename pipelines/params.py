"""A command's knobs as a dataclass, read from flags and ``params.yaml`` the same way by every command (pure).

Each field of the dataclass becomes ``--field``; its default comes from the command's section of
``params.yaml`` (so DVC tracks it), then the dataclass. The Beam stages (``options.parse_stage_args``) and
``albert_lightning.evaluate`` read their configs through ``parse_config``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml

from pipelines.commands import VERBOSE_FLAG  # stripped by commands.main; listed here so --help shows it

__all__ = ["ParsedConfig", "load_params", "parse_config"]

C = TypeVar("C")
# Top-level params that several commands read as a field of their own config: one value for all of them.
TOP_LEVEL = ("seed", "held_out_fraction")


@dataclasses.dataclass
class ParsedConfig(Generic[C]):
    """What a command line gave: the typed config, the paths (an optional one not given: None), and the flags
    left for others (Beam)."""

    config: C
    paths: dict[str, str | None]
    rest: list[str]
    params_file: str | None


def load_params(path: str | os.PathLike | None, section: str) -> dict[str, Any]:
    """Returns ``params.yaml``'s ``section`` plus the top-level keys every stage shares (``TOP_LEVEL``); {} when
    there is no file."""
    if path is None or not Path(path).exists():
        return {}
    with open(path, encoding="utf-8") as f:
        params = yaml.safe_load(f) or {}
    values = dict(params.get(section) or {})
    for key in TOP_LEVEL:
        if key in params:
            values.setdefault(key, params[key])
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
    parser.add_argument(f"--{field.name}", help=f"{doc} (params.yaml or built-in default)".lstrip(), **kwargs)


def parse_config(
    argv: list[str] | None,
    config_cls: type[C],
    section: str,
    paths: dict[str, str],
    description: str,
    prog: str | None = None,
    allow_rest: bool = False,
    optional_paths: dict[str, str] | None = None,
) -> ParsedConfig[C]:
    """Reads the config ``config_cls`` of a command from ``argv`` and ``params.yaml``'s ``section``.

    Args:
        argv: the command line without the program name; None reads ``sys.argv``.
        config_cls: the dataclass of knobs; each field becomes ``--field``.
        section: the ``params.yaml`` section holding the command's values.
        paths: flag name → help for the command's required input/output paths.
        description: ``--help`` text.
        prog: the program name ``--help`` shows.
        allow_rest: keep flags this parser does not know in ``rest`` (for Beam) instead of refusing them.
        optional_paths: flag name → help for paths the command may be given (None in ``paths`` when not).

    Precedence: flag > ``params.yaml`` > the dataclass default. A key of the section that is no field is refused.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False)
    parser.add_argument("--params", default="params.yaml", help="params file holding the command's section")
    parser.add_argument(VERBOSE_FLAG, action="store_true", help="on an error, the full trace instead of one line")
    for name, help_text in paths.items():
        parser.add_argument(f"--{name}", required=True, help=help_text)
    for name, help_text in (optional_paths or {}).items():
        parser.add_argument(f"--{name}", help=f"{help_text} (optional)")
    hints = typing.get_type_hints(config_cls)
    for field in dataclasses.fields(config_cls):
        _add_field(parser, field, hints)
    known, rest = parser.parse_known_args(argv) if allow_rest else (parser.parse_args(argv), [])
    values = load_params(known.params, section)
    names = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(values) - names - set(TOP_LEVEL))
    if unknown:
        raise SystemExit(f"{known.params}: unknown keys in section '{section}': {', '.join(unknown)}")
    values = {k: v for k, v in values.items() if k in names}
    values.update({k: getattr(known, k) for k in names if hasattr(known, k)})
    params_file = known.params if Path(known.params).exists() else None
    given = {k: getattr(known, k) for k in [*paths, *(optional_paths or {})]}
    return ParsedConfig(config_cls(**values), given, rest, params_file)
