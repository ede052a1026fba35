"""``python -m albert_lightning.export``: write a transformers AlbertForPreTraining folder from a checkpoint.

The command lives in ``albert_lightning/interop/export.py``. The names this module had before it moved still
work, each with a DeprecationWarning naming its new path (docs/api.md, "Old paths"); running the command warns
of nothing, since it uses none of them.
"""

import importlib
import warnings
from typing import Any

from albert_lightning.interop.export import command

# The module's __all__ before it moved (git show 7fef671^:albert_lightning/export.py), and export_hf, which it
# imported and users took from it: each name's new module. Imported on use, so the command loads none of them.
_MOVED = {
    "export_hf": "albert_lightning.interop.hf",
    "load_pretraining_checkpoint": "albert_lightning.checkpoints",
    "main": "albert_lightning.interop.export",
    "read_pretraining_checkpoint": "albert_lightning.checkpoints",
}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    new = _MOVED[name]
    warnings.warn(f"albert_lightning.export.{name} moved to {new}.{name}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(new), name)


if __name__ == "__main__":
    command()
