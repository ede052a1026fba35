"""DVC reruns a stage only when a listed dependency changes: every module of ``pipelines`` a stage's command
imports, directly or not, must be listed, or a change there would leave stale outputs in DVC's cache."""

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


def _pipeline_stages() -> list[tuple[str, str, list[str]]]:
    stages = []
    for dvc_file in ("dvc.yaml", "ablations/dvc.yaml"):
        for name, stage in yaml.safe_load((REPO / dvc_file).read_text())["stages"].items():
            stage = stage.get("do", stage)
            if "python -m pipelines." in stage["cmd"]:
                module = stage["cmd"].split("python -m pipelines.")[1].split()[0]
                stages.append((f"{dvc_file}:{name}", module, stage.get("deps", [])))
    return stages


@pytest.mark.parametrize(("stage", "module", "deps"), _pipeline_stages(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_pipelines_module_a_stage_imports_is_one_of_its_deps(stage: str, module: str, deps: list[str]) -> None:
    needed = {f"pipelines/{m}.py" for m in _imported_modules(module)}
    assert needed <= set(deps), f"{stage}: add {sorted(needed - set(deps))} to its deps"
