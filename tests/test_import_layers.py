"""Imports in ``pipelines`` run one way, down its layers, and form no cycle; ``pipelines`` never imports
``albert_lightning``. ``python tests/test_import_layers.py`` prints the layers, their modules and the arrows.

Layers, lowest first: ``algorithms`` (pure) < ``runtime`` (what every stage shares) < ``contracts`` (the files
between stages) < ``readers`` (the corpus stage's inputs) < ``steps`` (a stage's work too large for its module)
< the stage modules themselves, which nothing below imports. A module may import its own layer or lower ones.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("algorithms", "runtime", "contracts", "readers", "steps")
STAGES = "stages"  # pipelines/<stage>.py, the commands: the top layer


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: str) -> dict[str, Path]:
    return {_module_name(path): path for path in sorted((REPO / package).rglob("*.py"))}


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``path`` imports, anywhere in it (a function-level import is an arrow too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found |= {name for name in names if name in known}
    return found


def _graph(package: str) -> dict[str, set[str]]:
    known = _modules(package)
    return {module: _imports(path, known) - {module} for module, path in known.items()}


def layer_of(module: str) -> str:
    """The layer of a ``pipelines`` module: its subpackage, or ``stages`` for the stage modules."""
    parts = module.split(".")
    if len(parts) == 1:
        return "package"  # pipelines/__init__.py: below everything, imports nothing of its own
    return parts[1] if parts[1] in LAYERS else STAGES


def _rank(layer: str) -> int:
    return -1 if layer == "package" else (*LAYERS, STAGES).index(layer)


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph``, as a path that returns to its start, or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str]:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target, [*path, target])):
                return found
        state[module] = 2
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module, [module])):
            return found
    return []


def test_every_pipelines_module_has_a_layer_and_the_package_lists_every_stage() -> None:
    import pipelines

    stages = sorted(m.split(".")[1] for m in _modules("pipelines") if layer_of(m) == STAGES)
    assert stages == ["corpus", "dedup", "instances", "leakage", "segment", "tasks", "vocab"]
    for stage in stages:
        assert f"``{stage}``" in pipelines.__doc__, f"pipelines/__init__.py's docstring does not list {stage}"
    for layer in LAYERS:
        assert (REPO / "pipelines" / layer / "__init__.py").read_text().startswith('"""'), f"{layer} has no docstring"


def test_pipelines_imports_run_down_its_layers() -> None:
    upward = [
        f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
        for module, targets in _graph("pipelines").items()
        for target in targets
        if _rank(layer_of(target)) > _rank(layer_of(module))
    ]
    assert not upward, "\n".join(upward)


def test_no_package_has_an_import_cycle() -> None:
    for package in ("pipelines", "albert_lightning"):
        assert not _cycle(_graph(package)), f"{package}: import cycle {' → '.join(_cycle(_graph(package)))}"


def test_pipelines_never_imports_albert_lightning() -> None:
    for module, path in _modules("pipelines").items():
        trained = {name for name in _imports(path, _modules("albert_lightning"))}
        assert not trained, f"{module} imports {sorted(trained)}: the data stages must not need torch's side"


def test_the_checks_catch_an_upward_import_and_a_cycle() -> None:
    assert _rank(layer_of("pipelines.algorithms.sop")) < _rank(layer_of("pipelines.runtime.files"))
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


if __name__ == "__main__":
    graph = _graph("pipelines")
    packages = {f"pipelines.{layer}" for layer in LAYERS} | {"pipelines"}  # a package's __init__: a docstring
    for layer in ("package", *LAYERS, STAGES):
        modules = sorted(m for m in graph if layer_of(m) == layer and (m == "pipelines" or m not in packages))
        arrows = sum(len(graph[m] - packages) for m in modules)
        names = ", ".join(m.split(".")[-1] for m in modules)
        print(f"{layer:<11} {len(modules):>2} modules, {arrows:>3} imports of modules: {names}")
    arrows = sum(len(targets - packages) for targets in graph.values())
    print(f"{arrows} import arrows between modules; cycles: {' -> '.join(_cycle(graph)) or 'none'}")
