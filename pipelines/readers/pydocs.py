"""The embedded default corpus: documentation that ships inside Python and the project's dependencies (pure).

Every Python install carries two bodies of English prose: the reference topics behind ``help("assert")``
(``pydoc_data/topics.py``) and the docstrings of the standard library. The packages the project installs
(``DEPENDENCIES``: torch, numpy, scipy, ...) carry ten times more. This module lists the source files of
either and turns one of them into documents by *parsing* it with ``ast``: nothing is imported, so no module
runs code, opens windows or needs a platform or a GPU it lacks. It imports neither Beam nor torch.

Ids read ``pydoc:json.decoder`` (a module), ``pydoc:json.decoder:JSONDecoder.decode`` (a definition; the colon
keeps module and qualified name apart, so ``a.b`` the module never collides with ``b`` defined in ``a``) and
``topic:assert``. ``meta`` carries ``module`` (dotted), ``package`` (top level), ``kind`` (module, class,
function, method or topic), ``qualname`` and ``source`` (relative to the stdlib folder, or to the folder holding
the dependency's package); a stdlib document adds ``python`` (major.minor), a dependency's adds ``library`` (its
distribution) and ``version``. Output depends only on those versions: files are listed sorted and walked in
source order.

``corpus.py`` runs this in Beam workers; ``python -m pipelines.corpus --output DIR`` with no inputs uses it.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import sysconfig
import warnings
from collections.abc import Iterator, Sequence

__all__ = [
    "DEPENDENCIES", "EMBEDDED_SOURCES", "PYTHON", "TOPICS_SOURCE", "clean_docstring", "embedded_libraries",
    "embedded_sources", "library_root", "library_sources", "library_version", "module_name", "source_documents",
    "stdlib_root", "stdlib_sources",
]  # fmt: skip

TOPICS_SOURCE = "pydoc_data/topics.py"
PYTHON = "python"  # the library name of the standard library
EMBEDDED_SOURCES = ("stdlib", "dependencies", "both")
# Distribution → top-level import name. The packages the project itself installs (pyproject.toml pins them), so
# the corpus is the same wherever the project installs and needs no download; and prose-rich ones: numpydoc and
# Google docstrings explain parameters and behaviour in sentences (~15 MB of texts over 300 characters).
DEPENDENCIES = {
    "apache-beam": "apache_beam",
    "matplotlib": "matplotlib",
    "numpy": "numpy",
    "scikit-learn": "sklearn",
    "scipy": "scipy",
    "torch": "torch",
}

# What is not documentation, all in one place. Standard library: test suites and the IDE are code and fixtures;
# lib2to3 is deprecated grammar tables; site-packages is whatever the user installed, which would make the default
# depend on the machine. These rules stay as they were so ``stdlib`` gives the same corpus on every Python.
_SKIPPED_DIRS = frozenset({"test", "tests", "idle_test", "idlelib", "lib2to3", "site-packages", "dist-packages"})
# Dependencies, also: test harnesses and fixtures document tests, not the library (numpy.testing,
# torch.testing._internal's OpInfo tables, beam's test_utils, load_tests and benchmarks, sklearn's _test_common);
# vendored copies are other projects' code, and would come twice (sklearn.externals and scipy._lib both vendor
# array_api_compat; torch._vendor holds packaging; scipy._lib holds cobyqa, pyprima and uarray).
_DEPENDENCY_SKIPPED_DIRS = _SKIPPED_DIRS | {
    "testing", "_testing", "_test_common", "test_utils", "test_data", "load_tests", "benchmarks",
    "_vendor", "vendored_templates", "externals", "array_api_compat", "array_api_extra", "cobyqa", "pyprima",
    "_uarray",
}  # fmt: skip
_TEST_WORDS = frozenset({"test", "tests", "testing", "conftest", "microbenchmark"})
_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _is_test_module(name: str) -> bool:
    # Tests and their helpers beside the code: Beam's foo_test.py and foo_test_it.py (hundreds), test_foo.py,
    # conftest.py, scipy's _testutils.py, sklearn's utils/_testing.py, Beam's tools/*_microbenchmark.py.
    stem = name.removesuffix(".py")
    return bool(_TEST_WORDS & set(stem.split("_"))) or stem.endswith("testutils")


def stdlib_root() -> str:
    """Returns the folder holding this interpreter's pure-Python standard library."""
    return sysconfig.get_paths()["stdlib"]


def stdlib_sources(packages: Sequence[str] = (), root: str | None = None) -> list[str]:
    """Returns the sorted '/'-separated paths, relative to ``root``, of the library's documented sources.

    Args:
        packages: modules to keep with their submodules (``json``, ``email.mime``); empty keeps all.
        root: the stdlib folder; None means this interpreter's.
    """
    return _select(_walk(root or stdlib_root(), ".", _SKIPPED_DIRS, skip_test_modules=False), packages)


def embedded_libraries(which: str) -> list[str]:
    """Returns the libraries of the embedded corpus ``which`` (one of ``EMBEDDED_SOURCES``), ``PYTHON`` first.

    Raises:
        ValueError: ``which`` is not one of ``EMBEDDED_SOURCES``.
    """
    if which not in EMBEDDED_SOURCES:
        raise ValueError(f"embedded_sources must be one of {', '.join(EMBEDDED_SOURCES)}, got {which!r}")
    stdlib = [PYTHON] if which in ("stdlib", "both") else []
    return stdlib + (sorted(DEPENDENCIES) if which in ("dependencies", "both") else [])


def embedded_sources(which: str, packages: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Returns the sorted (library, source) pairs of the embedded corpus ``which``; each parses on its own.

    Args:
        which: one of ``EMBEDDED_SOURCES``.
        packages: modules to keep with their submodules (``json``, ``sklearn.cluster``); empty keeps all.

    Raises:
        ValueError: ``which`` is unknown, a name in ``packages`` matches no module, or two libraries hold the same
            top-level module (their document ids would collide).
        ModuleNotFoundError: a dependency is not installed.
    """
    listed = {library: library_sources(library) for library in embedded_libraries(which)}
    owner: dict[str, str] = {}
    for library, sources in listed.items():
        for top in sorted({module_name(s).split(".")[0] for s in sources}):
            if owner.setdefault(top, library) != library:
                raise ValueError(f"module {top} is in both {owner[top]} and {library}: their ids would collide")
    pairs = sorted((library, s) for library, sources in listed.items() for s in _select(sources, packages))
    modules = {module_name(s) for _, s in pairs}
    missing = [p for p in packages if not any(_in_packages(m, [p]) for m in modules)]
    if missing:
        raise ValueError(f"embedded_packages {missing} match no module of the {which} sources ({', '.join(listed)})")
    return pairs


def library_sources(library: str, packages: Sequence[str] = ()) -> list[str]:
    """Returns the sorted paths, relative to ``library_root(library)``, of a library's documented sources."""
    if library == PYTHON:
        return stdlib_sources(packages)
    top = _top_level(library)
    return _select(_walk(library_root(library), top, _DEPENDENCY_SKIPPED_DIRS, skip_test_modules=True), packages)


def library_root(library: str) -> str:
    """Returns the folder holding a library's top-level package (site-packages), found without importing it.

    Raises:
        ModuleNotFoundError: the library is not installed.
    """
    if library == PYTHON:
        return stdlib_root()
    top = _top_level(library)
    spec = importlib.util.find_spec(top)  # a top-level name is only looked up on sys.path: nothing runs
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the embedded corpus needs {library} (package {top}): pip install -e .")
    return os.path.dirname(os.path.abspath(next(iter(spec.submodule_search_locations))))


@functools.cache
def library_version(library: str) -> str:
    """Returns the installed version of a library (the Python version for ``PYTHON``).

    Raises:
        ModuleNotFoundError: the distribution is not installed.
    """
    if library == PYTHON:
        return platform.python_version()
    _top_level(library)
    try:
        return importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError as error:
        raise ModuleNotFoundError(f"the embedded corpus needs the distribution {library}: pip install -e .") from error


def _top_level(library: str) -> str:
    if library not in DEPENDENCIES:
        raise ValueError(f"library must be {PYTHON} or one of {', '.join(DEPENDENCIES)}, got {library!r}")
    return DEPENDENCIES[library]


def _walk(root: str, start: str, skipped_dirs: frozenset[str], skip_test_modules: bool) -> list[str]:
    found = []
    for directory, dirs, names in os.walk(os.path.join(root, start)):
        # Only folders named like packages: skips lib-dynload, config-3.x-..., mpl-data, __pycache__ and the like.
        dirs[:] = sorted(d for d in dirs if d.isidentifier() and d not in skipped_dirs)
        relative_dir = os.path.relpath(directory, root).replace(os.sep, "/")
        for name in names:
            if name.endswith(".py") and name[:-3].isidentifier() and not (skip_test_modules and _is_test_module(name)):
                found.append(name if relative_dir == "." else f"{relative_dir}/{name}")
    return found


def _select(sources: list[str], packages: Sequence[str]) -> list[str]:
    return sorted(s for s in sources if not packages or _in_packages(module_name(s), packages))


def _in_packages(module: str, packages: Sequence[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


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


def source_documents(source: str, root: str | None = None, library: str = PYTHON) -> list[dict]:
    """Returns the documents of one source file, before any length filter.

    Args:
        source: a path from ``library_sources(library)``.
        root: the folder ``source`` is relative to; None means ``library_root(library)``.
        library: ``PYTHON`` or a distribution of ``DEPENDENCIES``; it sets the version ``meta`` records.

    Raises:
        SyntaxError, ValueError: the file does not parse (a caller may count and skip it).
        OSError: the file is missing, e.g. a worker runs another Python version than the launcher.
    """
    with open(os.path.join(root or library_root(library), source), "rb") as f:
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
        documents.append(_document(doc_id, text, source, module, kind, qualname, library))
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
                    yield _document(f"topic:{name}", text, TOPICS_SOURCE, "pydoc_data.topics", "topic", name, PYTHON)


def _document(doc_id: str, text: str, source: str, module: str, kind: str, qualname: str, library: str) -> dict:
    meta = {"kind": kind, "module": module, "package": module.split(".")[0], "qualname": qualname, "source": source}
    if library == PYTHON:
        # Stdlib documents keep the meta they always had, so ``stdlib`` gives the same bytes as before dependencies
        # joined (and downstream caches stay valid); ``python`` names both the library and its version.
        meta["python"] = _PYTHON
    else:
        meta.update(library=library, version=library_version(library))
    return {"id": doc_id, "text": text, "presegmented": False, "meta": json.dumps(meta, sort_keys=True)}
