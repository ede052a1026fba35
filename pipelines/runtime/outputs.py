"""A stage's output folders: refused when clearing them would delete what the stage did not write, then cleared.

- ``check_outputs`` comes first: it refuses an output folder that is, is inside or holds one of the stage's inputs,
  or that holds files the stage does not write, so that clearing deletes only what an earlier run wrote.
- ``owning_outputs`` clears what an earlier run of the stage left in its folder, its finished-marker (stats or
  manifest file) first, so a half-cleared folder is never taken for a finished one, and clears it again when
  this run fails. The marker is written last, inside the block, by the stage.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence

from apache_beam.io.filesystem import FileSystem
from apache_beam.io.filesystems import FileSystems

from pipelines.runtime import files

__all__ = ["check_outputs", "owning_outputs"]


@contextlib.contextmanager
def owning_outputs(folder: str, marker: str, patterns: Sequence[str]) -> Iterator[None]:
    """Clears ``marker``, then every file ``patterns`` match and any temporary file in ``folder``, before the
    block and again if it raises: the folder holds one finished run or none."""
    everything = [marker, *patterns, ".tmp-*"]
    files.delete_matching(folder, everything)
    try:
        yield
    except BaseException:
        files.delete_matching(folder, everything)
        raise


def check_outputs(
    paths: Mapping[str, str | None],
    writes: Mapping[str, Sequence[str]],
    inputs: Mapping[str, str | Sequence[str] | None] | None = None,
) -> None:
    """Refuses, before a stage clears anything, an output folder whose clearing would delete what it did not write.

    Args:
        paths: the stage's path flags as given (``StageArgs.paths``); those not in ``writes`` are its inputs.
        writes: each output flag → the glob patterns (``*`` within a name), relative to its folder, of what the
            stage writes there, marker included; ``.tmp-*`` names are the stage's at any depth.
        inputs: more inputs, by flag: paths or globs of the stage's config (``--from_spiece``, ``--inputs``).

    Raises:
        ValueError: an output is, is inside or holds an input or another output (local paths compared resolved,
            URLs as normalised strings).
        FileExistsError: an output exists and is not a folder, or holds files the stage does not write, as
            ``albert_lightning.interop.hf.check_export_target`` refuses them; an empty or missing one is fine.
    """
    listed = [
        (flag, p)
        for flag, value in (inputs or {}).items()
        for p in ([value] if isinstance(value, str) else value or ())
    ]
    given = [(flag, p, p, True) for flag, p in paths.items() if p] + [(f, p, *_read(p)) for f, p in listed if p]
    for flag, folder in [(flag, folder) for flag, folder, *_ in given if flag in writes]:
        for other, path, read, deep in given:
            relation = other != flag and _overlap(_normalised(folder), _normalised(read), deep)
            if relation:
                raise ValueError(
                    f"{folder}: --{flag} {relation} --{other} ({path}); the stage clears its output folder before "
                    "writing, so give one apart from its inputs and its other outputs"
                )
    for flag, patterns in writes.items():
        if paths.get(flag):
            _check_only_own_files(paths[flag], [FileSystem.translate_pattern(p) for p in patterns])


def _normalised(path: str) -> str:
    if "://" in path:
        scheme, rest = path.split("://", 1)
        return f"{scheme.lower()}://{posixpath.normpath(rest) if rest else ''}"
    return os.path.realpath(path)


def _read(path: str) -> tuple[str, bool]:
    """What ``path`` reads: itself and all below it, or for a glob its fixed folder and whether the glob reaches
    below that folder's own files (``data/*.txt`` → ``data``, False; ``data/*/*.txt`` or ``data/**`` → True)."""
    fixed = re.match(r"[^*?[]*", path).group(0)
    if fixed == path:
        return path, True
    folder = posixpath.dirname(fixed) if "://" in path else os.path.dirname(fixed) or "."
    rest = path[len(folder) :].lstrip("/" + os.sep)
    return folder, "**" in rest or "/" in rest or os.sep in rest


def _overlap(output: str, read: str, deep: bool) -> str | None:
    """How folder ``output`` overlaps what reading ``read`` (``deep``: and all below it) may touch, or None."""
    sep = "/" if "://" in output else os.sep
    if output == read:
        return "is also"
    if deep and output.startswith(read.rstrip(sep) + sep):
        return "is inside"
    return "holds" if read.startswith(output.rstrip(sep) + sep) else None


def _check_only_own_files(folder: str, own: list[str]) -> None:
    foreign = sorted(
        name
        for name in _listing(folder)
        if not any(part.startswith(".tmp-") for part in name.split("/")) and not any(re.match(p, name) for p in own)
    )
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise FileExistsError(
            f"{folder}: holds files this stage does not write ({shown}); the stage replaces only an empty folder or "
            "its own earlier output, so give an empty or new folder"
        )


def _listing(folder: str) -> list[str]:
    """Every file below ``folder`` (and every link to a folder), as a path relative to it with ``/``; [] when
    there is no ``folder``."""
    if "://" in folder:
        prefix = folder.rstrip("/") + "/"
        return [m.path[len(prefix) :] for m in FileSystems.match([prefix + "**"])[0].metadata_list]
    if not os.path.lexists(folder):
        return []
    if not os.path.isdir(folder):
        raise FileExistsError(f"{folder}: exists and is not a folder; the stage writes a folder there, choose another")
    found = []
    for root, folders, names in os.walk(folder):
        links = [name for name in folders if os.path.islink(os.path.join(root, name))]  # os.walk does not enter them
        relative = os.path.relpath(root, folder)
        found += [name if relative == "." else f"{relative}/{name}".replace(os.sep, "/") for name in names + links]
    return found
