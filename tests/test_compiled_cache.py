"""numba's cache is keyed by the source of every compiled module, so an edit of one rebuilds all of them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pipelines
from pipelines import COMPILED_MODULES, numba_cache_dir

PACKAGE = Path(pipelines.__file__).parent


def test_the_list_names_every_module_with_compiled_code() -> None:
    compiled = [p for p in PACKAGE.rglob("*.py") if "@numba." in p.read_text(encoding="utf-8")]
    assert set(COMPILED_MODULES) == {p.stem for p in compiled}
    assert {p.parent.name for p in compiled} == {"algorithms"}  # where numba_cache_dir reads them


def test_editing_a_compiled_module_moves_the_cache_and_editing_another_does_not(tmp_path: Path) -> None:
    copy = tmp_path / "pipelines"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = numba_cache_dir(copy, None)
    assert before.startswith(str(copy / "__pycache__" / "numba-"))
    (copy / "corpus.py").write_text((copy / "corpus.py").read_text() + "\n# a comment\n")
    assert numba_cache_dir(copy, None) == before
    (copy / "algorithms/seeding.py").write_text((copy / "algorithms/seeding.py").read_text() + "\n# a comment\n")
    after = numba_cache_dir(copy, None)
    assert after != before and Path(after).parent == Path(before).parent
    assert numba_cache_dir(copy, "/elsewhere") == os.path.join("/elsewhere", Path(after).name)
    assert numba_cache_dir(copy, after) == after  # a child process keeps its parent's folder, not a nested one


def test_numba_caches_in_that_folder_in_this_process_and_its_children() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    script = (
        "import pipelines, numba, os, subprocess, sys; print(numba.config.CACHE_DIR); sys.stdout.flush(); "
        "subprocess.run([sys.executable, '-c', 'import pipelines, numba; print(numba.config.CACHE_DIR)'])"
    )
    lines = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert lines.stdout.split() == [numba_cache_dir(PACKAGE, None)] * 2
