"""A command's knobs as a dataclass, read from flags and ``params.yaml`` the same way by every command (pure).

Each field of the dataclass becomes ``--field``; its default comes from the command's section of
``params.yaml`` (so DVC tracks it), then the dataclass. ``--help`` gives each field's ``metadata["help"]`` and the
value it will take, from the params file or built in. The Beam stages (``options.parse_stage_args``) and
``albert_lightning.evaluation.cli`` read their configs through ``parse_config``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import types
import typing
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml

from pipelines.runtime.commands import VERBOSE_FLAG  # stripped by commands.main; listed here so --help shows it

__all__ = ["ParsedConfig", "load_params", "parse_config"]

C = TypeVar("C")
DEFAULT_PARAMS = "params.yaml"
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
    switches: dict[str, bool] = dataclasses.field(default_factory=dict)  # each switch: whether it was given


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


def _add_field(parser: argparse.ArgumentParser, field: dataclasses.Field, hints: dict[str, Any], taken: str) -> None:
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
    # argparse fills "%(...)s" into help text: a literal "%" in a path or a description must be doubled
    parser.add_argument(f"--{field.name}", help=f"{doc} ({taken})".lstrip().replace("%", "%%"), **kwargs)


def _shown(value: Any) -> str:
    """A value as a flag would spell it (``0.8``, ``true``, ``[32, 128]``); ``unset`` for None, which no flag gives."""
    if value is None:
        return "unset"
    if isinstance(value, bool) or value == "":
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return f"[{', '.join(map(_shown, value))}]"
    return str(value)


def _taken(field: dataclasses.Field, values: dict[str, Any], params: str) -> str:
    """What ``--help`` says a field will be without its flag: the params file's value, else the built-in one."""
    if field.name in values:
        return f"{_shown(values[field.name])}, from {params}"
    if field.default_factory is not dataclasses.MISSING:
        return f"{_shown(field.default_factory())}, built-in default"
    if field.default is not dataclasses.MISSING:
        return f"{_shown(field.default)}, built-in default"
    return "required"


def _params_path(argv: list[str] | None) -> str:
    """The ``--params`` of ``argv``, read before the full parser exists: ``--help`` shows the file's values."""
    early = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    early.add_argument("--params", default=DEFAULT_PARAMS)
    try:
        return early.parse_known_args(argv)[0].params
    except argparse.ArgumentError:  # "--params" without a value: the full parser says so
        return DEFAULT_PARAMS


def parse_config(
    argv: list[str] | None,
    config_cls: type[C],
    section: str,
    paths: dict[str, str],
    description: str,
    prog: str | None = None,
    allow_rest: bool = False,
    optional_paths: dict[str, str] | None = None,
    switches: dict[str, str] | None = None,
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
        switches: flag name → help for flags without a value that ask for an exception to the command's checks
            (``--allow_undeduped``): given on the command line only, never by ``params.yaml``.

    Precedence: flag > ``params.yaml`` > the dataclass default. A key of the section that is no field is refused.
    """
    params = _params_path(argv)
    values = load_params(params, section)
    parser = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False)
    found = params if Path(params).exists() else f"{params}: none there, so built-in defaults"
    help_text = f"params file with the command's section ({found})".replace("%", "%%")
    parser.add_argument("--params", default=DEFAULT_PARAMS, help=help_text)
    parser.add_argument(VERBOSE_FLAG, action="store_true", help="on an error, the full trace instead of one line")
    for name, help_text in paths.items():
        parser.add_argument(f"--{name}", required=True, help=help_text)
    for name, help_text in (optional_paths or {}).items():
        parser.add_argument(f"--{name}", help=f"{help_text} (optional)")
    for name, help_text in (switches or {}).items():
        parser.add_argument(f"--{name}", action="store_true", help=help_text.replace("%", "%%"))
    hints = typing.get_type_hints(config_cls)
    for field in dataclasses.fields(config_cls):
        _add_field(parser, field, hints, _taken(field, values, params))
    known, rest = parser.parse_known_args(argv) if allow_rest else (parser.parse_args(argv), [])
    names = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(values) - names - set(TOP_LEVEL))
    if unknown:
        raise SystemExit(f"{known.params}: unknown keys in section '{section}': {', '.join(unknown)}")
    values = {k: v for k, v in values.items() if k in names}
    values.update({k: getattr(known, k) for k in names if hasattr(known, k)})
    params_file = known.params if Path(known.params).exists() else None
    given = {k: getattr(known, k) for k in [*paths, *(optional_paths or {})]}
    given_switches = {name: getattr(known, name) for name in switches or {}}
    return ParsedConfig(config_cls(**values), given, rest, params_file, given_switches)
