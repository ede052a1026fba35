"""The Python API (docs/api.md): what ``albert_lightning`` exports, that importing it stays light, and that the
module paths of before the subpackages still work, each name with a DeprecationWarning naming its new path."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import albert_lightning
from tests.conftest import DISTRIBUTED_ENV

REPO = Path(__file__).resolve().parents[1]

# Each exported name: the module and name it is.
API = {
    "AlbertConfig": ("albert_lightning.model", "AlbertConfig"),
    "AlbertForPreTraining": ("albert_lightning.model", "AlbertForPreTraining"),
    "Start": ("albert_lightning.interop.pretrained", "Start"),
    "export_hf": ("albert_lightning.interop.hf", "export_hf"),
    "import_hf": ("albert_lightning.interop.hf", "import_hf"),
    "load_pretrained": ("albert_lightning.interop.pretrained", "load_pretrained"),
    "read_start": ("albert_lightning.interop.pretrained", "read_start"),
    "run_evaluation": ("albert_lightning.evaluation.cli", "main"),
}
# Each old path's names (their __all__ before the move, git show 7fef671^:albert_lightning/<module>.py) and
# the module each now lives in.
HF_NAMES = ["EXPORT_FILES", "check_export_target", "export_hf", "hf_config", "hf_normalizer", "import_hf"]
HF_NAMES += ["normalizer_of", "tokenizer_settings"]
MOVED = [("albert_lightning.hf", name, "albert_lightning.interop.hf") for name in HF_NAMES] + [
    ("albert_lightning.export", "export_hf", "albert_lightning.interop.hf"),
    ("albert_lightning.export", "load_pretraining_checkpoint", "albert_lightning.checkpoints"),
    ("albert_lightning.export", "main", "albert_lightning.interop.export"),
    ("albert_lightning.export", "read_pretraining_checkpoint", "albert_lightning.checkpoints"),
]
# What ``import albert_lightning`` must not bring in: only the model (torch) is imported with the package.
HEAVY = ["lightning", "apache_beam", "sentencepiece", "transformers", "albert_lightning.evaluation"]


def run_python(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, check=True)


@pytest.mark.parametrize("name", sorted(API))
def test_each_name_of_the_api_is_importable_from_the_package(name: str) -> None:
    module, attribute = API[name]
    assert getattr(albert_lightning, name) is getattr(importlib.import_module(module), attribute)
    assert name in dir(albert_lightning)


def test_the_package_exports_the_api_and_nothing_else() -> None:
    assert sorted(albert_lightning.__all__) == sorted(API)
    with pytest.raises(AttributeError, match="has no attribute 'evaluate_everything'"):
        albert_lightning.evaluate_everything  # noqa: B018


def test_importing_the_package_stays_light() -> None:
    code = f"import sys, albert_lightning; print([m for m in {HEAVY!r} if m in sys.modules])"
    assert run_python("-c", code).stdout.strip() == "[]"


@pytest.mark.parametrize(("old", "name", "new"), MOVED, ids=[f"{old}.{name}" for old, name, _ in MOVED])
def test_an_old_path_gives_the_same_object_and_warns_naming_the_new_one(old: str, name: str, new: str) -> None:
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"^{re.escape(f'{old}.{name} moved to {new}.{name}')}$") as seen:
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(new), name)
    assert seen[0].filename == __file__  # the warning points at the line that used the old path


def test_from_imports_of_the_old_paths_warn() -> None:
    with pytest.warns(DeprecationWarning, match=r"albert_lightning\.interop\.hf\.import_hf"):
        from albert_lightning.hf import import_hf
    with pytest.warns(DeprecationWarning, match=r"albert_lightning\.checkpoints\.read_pretraining_checkpoint"):
        from albert_lightning.export import read_pretraining_checkpoint
    assert import_hf is albert_lightning.import_hf
    checkpoints = importlib.import_module("albert_lightning.checkpoints")
    assert read_pretraining_checkpoint is checkpoints.read_pretraining_checkpoint


def test_the_export_command_warns_of_nothing_and_a_user_of_an_old_path_is_told() -> None:
    done = run_python("-W", "always::DeprecationWarning", "-m", "albert_lightning.export", "--help")
    assert done.stdout.startswith("usage: python -m albert_lightning.export")
    assert "DeprecationWarning" not in done.stderr, done.stderr
    # Python shows a DeprecationWarning by default when the user's own script triggers it.
    done = run_python("-c", "from albert_lightning.hf import import_hf")
    assert "DeprecationWarning: albert_lightning.hf.import_hf moved to albert_lightning.interop.hf" in done.stderr
