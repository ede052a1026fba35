"""DVC reruns a stage only when a listed dependency changes, so a stage's code deps must be exactly the files its
commands import, directly or not, from ``pipelines`` and ``albert_lightning`` (package ``__init__`` files included:
importing ``a.b`` runs ``a/__init__.py``), plus the modules its ``--config`` files name by ``class_path``. One
missing would leave stale outputs in DVC's cache after an edit there; one extra reruns the stage for nothing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


PACKAGES = ("pipelines", "albert_lightning")
DVC_FILES = ("dvc.yaml", "ablations/dvc.yaml", "adapt/dvc.yaml", "replicates/dvc.yaml")


def _commands() -> list[tuple[str, list[str], list[str], list[str]]]:
    """(stage, modules its commands run, config files they read, deps) of every stage of ``DVC_FILES``."""
    stages = []
    for dvc_file in DVC_FILES:
        for name, stage in yaml.safe_load((REPO / dvc_file).read_text())["stages"].items():
            stage = stage.get("do", stage)
            words = " ".join(stage["cmd"] if isinstance(stage["cmd"], list) else [stage["cmd"]]).split()
            modules = [
                words[i + 1]
                for i, word in enumerate(words[:-1])
                if word == "-m" and words[i + 1].split(".")[0] in PACKAGES
            ]
            configs = [
                words[i + 1] for i, word in enumerate(words[:-1]) if word == "--config" and "$" not in words[i + 1]
            ]
            stages.append((f"{dvc_file}:{name}", modules, configs, stage.get("deps", [])))
    return stages


def needed_files(modules: list[str], configs: list[str]) -> set[str]:
    """Every file of ``PACKAGES`` that running ``modules`` with ``configs`` imports."""
    needed: set[str] = set()
    for module in modules:
        _imported_files(module, needed)
    for config in configs:
        for line in (REPO / config).read_text().splitlines():
            name = line.split("class_path:")[-1].split("#")[0].strip() if "class_path:" in line else ""
            if name.split(".")[0] in PACKAGES:
                _imported_files(name.rsplit(".", 1)[0], needed)
    return needed


def _missing(needed: set[str], deps: list[str]) -> list[str]:
    """The files of ``needed`` that no dep names, itself or as a folder above it."""
    return sorted(f for f in needed if not any(f == d or f.startswith(d.rstrip("/") + "/") for d in deps))


def _stage_id(value: object) -> str:
    return value if isinstance(value, str) else "-"


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


@pytest.mark.parametrize(("stage", "modules", "configs", "deps"), _commands(), ids=_stage_id)
def test_a_stages_code_deps_are_exactly_what_it_imports(
    stage: str, modules: list[str], configs: list[str], deps: list[str]
) -> None:
    needed = needed_files(modules, configs)
    assert not _missing(needed, deps), f"{stage}: add {_missing(needed, deps)} to its deps"
    extra = sorted(d for d in deps if d.endswith(".py") and d not in needed)
    assert not extra, f"{stage}: {extra} are deps it never imports (a change there reruns it for nothing)"
