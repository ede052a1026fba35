"""ALBERT pretraining with PyTorch Lightning: the model, its training and its Hugging Face interop.

Entry points:
    python -m albert_lightning.fit       pretrain on the Arrow shards (LightningCLI, FSDP)
    python -m albert_lightning.export    write a transformers AlbertForPreTraining folder from a checkpoint
    python -m albert_lightning.evaluate  fine-tune and score downstream tasks
    python -m albert_lightning.ablation_report  the ablation grid's runs in the shape of the paper's tables

The Python API (docs/api.md) is the names below. Only the model is imported with the package; the rest on first
use, so ``import albert_lightning`` costs torch alone, not sentencepiece, Lightning or the evaluation stack.
"""

from __future__ import annotations

import importlib
from typing import Any

from albert_lightning.model import AlbertConfig, AlbertForPreTraining

__all__ = [
    "AlbertConfig",
    "AlbertForPreTraining",
    "Start",
    "export_hf",
    "import_hf",
    "load_pretrained",
    "read_start",
    "run_evaluation",
]

# Each lazily imported name: (module, name there), named as strings: DVC's deps count every import statement
# of this file, which every stage runs (tests/test_dvc_deps.py), so no ``if TYPE_CHECKING:`` imports either.
# ``run_evaluation``, not ``evaluate``: importing the command module ``albert_lightning.evaluate`` would rebind
# that attribute of the package to the module.
_LAZY = {
    "export_hf": ("albert_lightning.interop.hf", "export_hf"),
    "import_hf": ("albert_lightning.interop.hf", "import_hf"),
    "Start": ("albert_lightning.interop.pretrained", "Start"),
    "load_pretrained": ("albert_lightning.interop.pretrained", "load_pretrained"),
    "read_start": ("albert_lightning.interop.pretrained", "read_start"),
    "run_evaluation": ("albert_lightning.evaluation.cli", "main"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # imported once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
