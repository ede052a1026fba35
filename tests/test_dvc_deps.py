"""DVC reruns a stage only when a listed dependency changes: every module of ``pipelines`` a stage's command
imports, directly or not, must be listed, or a change there would leave stale outputs in DVC's cache. The
ablation grid's ``albert_lightning`` stages are held to the same rule, over both packages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def _imported_modules(module: str, seen: set[str] | None = None) -> set[str]:
    """Returns ``module`` and every ``pipelines`` module it imports, transitively."""
    seen = set() if seen is None else seen
    path = REPO / "pipelines" / f"{module}.py"
    if module in seen or not path.exists():
        return seen
    seen.add(module)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "pipelines":
            for alias in node.names:
                _imported_modules(alias.name, seen)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pipelines."):
            _imported_modules(node.module.split(".")[1], seen)
    return seen


DVC_FILES = ("dvc.yaml", "ablations/dvc.yaml", "adapt/dvc.yaml", "replicates/dvc.yaml")


def _stages(package: str) -> list[tuple[str, str, list[str]]]:
    """(stage, module, deps) of each ``python -m {package}.…`` of the pipelines' dvc.yaml files: one entry per
    module a command runs (a stage with a list of commands, or a launcher running another module, gives several)."""
    stages = []
    for dvc_file in DVC_FILES:
        for name, stage in yaml.safe_load((REPO / dvc_file).read_text())["stages"].items():
            stage = stage.get("do", stage)
            commands = stage["cmd"] if isinstance(stage["cmd"], list) else [stage["cmd"]]
            for command in commands:
                for run in command.split(f"python -m {package}.")[1:]:
                    stages.append((f"{dvc_file}:{name}", run.split()[0], stage.get("deps", [])))
    return stages


def _missing(needed: set[str], deps: list[str]) -> list[str]:
    """The files of ``needed`` that no dep names, itself or as a folder above it."""
    return sorted(f for f in needed if not any(f == d or f.startswith(d.rstrip("/") + "/") for d in deps))


def _stage_id(value: object) -> str:
    return value if isinstance(value, str) else "-"


@pytest.mark.parametrize(("stage", "module", "deps"), _stages("pipelines"), ids=_stage_id)
def test_every_pipelines_module_a_stage_imports_is_one_of_its_deps(stage: str, module: str, deps: list[str]) -> None:
    # Importing any module of the package runs pipelines/__init__.py first (it sets numba's cache folder).
    needed = {f"pipelines/{m}.py" for m in _imported_modules(module)} | {"pipelines/__init__.py"}
    assert not _missing(needed, deps), f"{stage}: add {_missing(needed, deps)} to its deps"


PACKAGES = ("pipelines", "albert_lightning")


def _module_file(dotted: str) -> str | None:
    """The file of a dotted module name (``a/b.py`` or ``a/b/__init__.py``), or None outside ``PACKAGES``."""
    if dotted.split(".")[0] not in PACKAGES:
        return None
    base = dotted.replace(".", "/")
    for path in (f"{base}.py", f"{base}/__init__.py"):
        if (REPO / path).exists():
            return path
    return None


def _imported_files(dotted: str, seen: set[str] | None = None) -> set[str]:
    """Returns the file of ``dotted``, of every package above it, and of every module of ``PACKAGES`` they
    import, transitively, as paths (importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` too)."""
    seen = set() if seen is None else seen
    parts = dotted.split(".")
    for depth in range(1, len(parts) + 1):
        path = _module_file(".".join(parts[:depth]))
        if path is None or path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse((REPO / path).read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                _imported_files(node.module, seen)
                for alias in node.names:  # from albert_lightning.evaluation import cli: a module, not a name
                    if _module_file(f"{node.module}.{alias.name}"):
                        _imported_files(f"{node.module}.{alias.name}", seen)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    _imported_files(alias.name, seen)
    return seen


@pytest.mark.parametrize(("stage", "module", "deps"), _stages("albert_lightning"), ids=_stage_id)
def test_every_module_a_lightning_stage_imports_is_one_of_its_deps(stage: str, module: str, deps: list[str]) -> None:
    needed = _imported_files(f"albert_lightning.{module}")
    assert not _missing(needed, deps), f"{stage}: add {_missing(needed, deps)} to its deps"
