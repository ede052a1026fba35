"""The embedded default corpus: documentation that ships inside Python itself (pure: no Beam, no torch).

Every Python install carries two bodies of English prose: the reference topics behind ``help("assert")``
(``pydoc_data/topics.py``) and the docstrings of the standard library. This module lists the library's source
files and turns one of them into documents by *parsing* it with ``ast``: nothing is imported, so no module
runs code, opens windows or needs a platform it lacks.

Ids read ``pydoc:json.decoder`` (a module), ``pydoc:json.decoder:JSONDecoder.decode`` (a definition; the colon
keeps module and qualified name apart, so ``a.b`` the module never collides with ``b`` defined in ``a``) and
``topic:assert``. ``meta`` carries ``module`` (dotted), ``package`` (top level), ``kind`` (module, class,
function, method or topic), ``qualname``, ``source`` (relative to the stdlib folder) and ``python`` (the version).
Output depends only on the Python version: files are listed sorted and walked in source order.

``corpus.py`` runs this in Beam workers; ``python -m pipelines.corpus --output DIR`` with no inputs uses it.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import sysconfig
import warnings
from collections.abc import Iterator, Sequence

__all__ = ["TOPICS_SOURCE", "clean_docstring", "module_name", "source_documents", "stdlib_root", "stdlib_sources"]

TOPICS_SOURCE = "pydoc_data/topics.py"
# Test suites and the IDE are code and fixtures rather than documentation; lib2to3 is deprecated grammar
# tables; site-packages is whatever the user installed, which would make the default depend on the machine.
_SKIPPED_DIRS = frozenset({"test", "tests", "idle_test", "idlelib", "lib2to3", "site-packages", "dist-packages"})
_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def stdlib_root() -> str:
    """Returns the folder holding this interpreter's pure-Python standard library."""
    return sysconfig.get_paths()["stdlib"]


def stdlib_sources(packages: Sequence[str] = (), root: str | None = None) -> list[str]:
    """Returns the sorted '/'-separated paths, relative to ``root``, of the library's documented sources.

    Args:
        packages: top-level package or module names to keep (``json``, ``email``); empty keeps all.
        root: the stdlib folder; None means this interpreter's.
    """
    root = root or stdlib_root()
    found = []
    for directory, dirs, names in os.walk(root):
        # Only folders named like packages: skips lib-dynload, config-3.x-..., __pycache__ and the like.
        dirs[:] = sorted(d for d in dirs if d.isidentifier() and d not in _SKIPPED_DIRS)
        relative_dir = os.path.relpath(directory, root).replace(os.sep, "/")
        for name in names:
            if name.endswith(".py") and name[:-3].isidentifier():
                found.append(name if relative_dir == "." else f"{relative_dir}/{name}")
    wanted = set(packages)
    return sorted(p for p in found if not wanted or module_name(p).split(".")[0] in wanted)


def module_name(source: str) -> str:
    """Returns the dotted module of a relative source path: ``json/__init__.py`` → ``json``."""
    parts = source.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def clean_docstring(text: str) -> str:
    """Returns ``text`` without doctest examples (``>>>``/``...`` lines and their expected output).

    Examples are code, not prose; their expected output runs until the next blank line, as doctest reads it.
    """
    kept: list[str] = []
    in_example = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(">>>"):
            in_example = True
        elif not stripped:
            in_example = False
        if in_example:
            continue
        if stripped or (kept and kept[-1]):  # no runs of blank lines where examples were dropped
            kept.append(line.rstrip())
    return "\n".join(kept).strip()


def source_documents(source: str, root: str | None = None) -> list[dict]:
    """Returns the documents of one stdlib source file, before any length filter.

    Args:
        source: a path from ``stdlib_sources``.
        root: the stdlib folder; None means this interpreter's.

    Raises:
        SyntaxError, ValueError: the file does not parse (a caller may count and skip it).
        OSError: the file is missing, e.g. a worker runs another Python version than the launcher.
    """
    with open(os.path.join(root or stdlib_root(), source), "rb") as f:
        data = f.read()
    with warnings.catch_warnings():  # old escape sequences in some modules warn on 3.12+
        warnings.simplefilter("ignore")
        tree = ast.parse(data, filename=source)
    if source == TOPICS_SOURCE:
        return list(_topic_documents(tree))
    module = module_name(source)
    documents = []
    seen: dict[str, int] = {}
    for qualname, kind, node in _definitions(tree, "", in_class=False):
        text = ast.get_docstring(node, clean=True)
        if not text or not (text := clean_docstring(text)):
            continue
        seen[qualname] = seen.get(qualname, 0) + 1
        # A name defined twice (per-platform branches, property setters) gets ~2, ~3 in source order.
        suffix = f"~{seen[qualname]}" if seen[qualname] > 1 else ""
        doc_id = f"pydoc:{module}" + (f":{qualname}{suffix}" if qualname else suffix)
        documents.append(_document(doc_id, text, source, module, kind, qualname))
    return documents


def _definitions(node: ast.AST, prefix: str, in_class: bool) -> Iterator[tuple[str, str, ast.AST]]:
    if isinstance(node, ast.Module):
        yield "", "module", node
    for child in _statements(node):
        if isinstance(child, ast.ClassDef):
            qualname = prefix + child.name
            yield qualname, "class", child
            yield from _definitions(child, qualname + ".", in_class=True)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + child.name, "method" if in_class else "function", child
        else:  # definitions under `if sys.platform ...:`, `try: ... except ImportError:` and the like
            yield from _definitions(child, prefix, in_class)


def _statements(node: ast.AST) -> Iterator[ast.AST]:
    for name in ("body", "orelse", "finalbody"):
        for child in getattr(node, name, None) or ():
            if isinstance(child, ast.stmt):
                yield child
    for handler in getattr(node, "handlers", None) or ():
        yield from handler.body


def _topic_documents(tree: ast.Module) -> Iterator[dict]:
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "topics" for t in statement.targets
        ):
            topics = ast.literal_eval(statement.value)
            for name in sorted(topics):
                if text := clean_docstring(topics[name]):
                    yield _document(f"topic:{name}", text, TOPICS_SOURCE, "pydoc_data.topics", "topic", name)


def _document(doc_id: str, text: str, source: str, module: str, kind: str, qualname: str) -> dict:
    meta = {
        "kind": kind,
        "module": module,
        "package": module.split(".")[0],
        "python": _PYTHON,
        "qualname": qualname,
        "source": source,
    }
    return {"id": doc_id, "text": text, "presegmented": False, "meta": json.dumps(meta, sort_keys=True)}
