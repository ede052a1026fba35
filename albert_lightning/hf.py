"""Deprecated: ``albert_lightning.hf`` moved to ``albert_lightning.interop.hf`` (docs/api.md, "Old paths").

Each name the module had still works, with a DeprecationWarning naming its new path at the line that uses it.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

# The module's __all__ before it moved (git show 7fef671^:albert_lightning/hf.py).
_MOVED = (
    "EXPORT_FILES",
    "check_export_target",
    "export_hf",
    "hf_config",
    "hf_normalizer",
    "import_hf",
    "normalizer_of",
    "tokenizer_settings",
)
__all__ = list(_MOVED)  # built, not written out: each name exists only through __getattr__
_NEW = "albert_lightning.interop.hf"


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} moved to {_NEW}.{name}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_NEW), name)


def __dir__() -> list[str]:
    return list(__all__)
