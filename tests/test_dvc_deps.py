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


def _stages(package: str) -> list[tuple[str, str, list[str]]]:
    """(stage, module, deps) of every stage of both dvc.yaml files whose command runs ``python -m {package}.…``."""
    stages = []
    for dvc_file in ("dvc.yaml", "ablations/dvc.yaml"):
        for name, stage in yaml.safe_load((REPO / dvc_file).read_text())["stages"].items():
            stage = stage.get("do", stage)
            if f"python -m {package}." in stage["cmd"]:
                module = stage["cmd"].split(f"python -m {package}.")[1].split()[0]
                stages.append((f"{dvc_file}:{name}", module, stage.get("deps", [])))
    return stages


def _stage_id(value: object) -> str:
    return value if isinstance(value, str) else "-"


@pytest.mark.parametrize(("stage", "module", "deps"), _stages("pipelines"), ids=_stage_id)
def test_every_pipelines_module_a_stage_imports_is_one_of_its_deps(stage: str, module: str, deps: list[str]) -> None:
    needed = {f"pipelines/{m}.py" for m in _imported_modules(module)}
    assert needed <= set(deps), f"{stage}: add {sorted(needed - set(deps))} to its deps"


PACKAGES = ("pipelines", "albert_lightning")


def _imported_files(package: str, module: str, seen: set[str] | None = None) -> set[str]:
    """Returns ``package/module.py`` and every module of ``PACKAGES`` it imports, transitively, as file paths."""
    seen = set() if seen is None else seen
    path = f"{package}/{module}.py"
    if path in seen or not (REPO / path).exists():
        return seen
    seen.add(path)
    for node in ast.walk(ast.parse((REPO / path).read_text())):
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        if node.module in PACKAGES:  # from albert_lightning import ablation_report
            for alias in node.names:
                _imported_files(node.module, alias.name, seen)
        elif node.module.split(".")[0] in PACKAGES:  # from albert_lightning.task_files import TaskSpec
            _imported_files(*node.module.split(".")[:2], seen)
    return seen


@pytest.mark.parametrize(("stage", "module", "deps"), _stages("albert_lightning"), ids=_stage_id)
def test_every_module_a_lightning_stage_imports_is_one_of_its_deps(stage: str, module: str, deps: list[str]) -> None:
    needed = _imported_files("albert_lightning", module)
    assert needed <= set(deps), f"{stage}: add {sorted(needed - set(deps))} to its deps"
