"""The one safe checkpoint reader: ``load_checkpoint``, and ``safe_loading`` for the loads Lightning makes itself.

Unpickling a file can run any code it names, so every checkpoint is read with ``torch.load(weights_only=True)``:
tensors, containers and numbers, plus the types in ``ALLOWED_GLOBALS``. A checkpoint naming anything else is
refused with one line naming the file and the type, before any of it is built.
"""

from __future__ import annotations

import contextlib
import pickle
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

__all__ = ["ALLOWED_GLOBALS", "load_checkpoint", "refusal", "safe_loading"]

# The non-tensor types a checkpoint of this project may hold beyond those torch's weights-only unpickler allows
# by default. None so far: torch.serialization.get_unsafe_globals_in_checkpoint finds nothing in the pretraining
# run's and every ablation run's checkpoints (Lightning's loop, callback, optimizer and scheduler state, our
# hyper-parameters as plain dicts), nor in the tests' one-process and FSDP runs. A type added here must be data.
ALLOWED_GLOBALS: list[Any] = []

# How torch's UnpicklingError names what it refused: "Unsupported global: GLOBAL getattr was not an
# allowed global by default", or "Trying to load unsupported GLOBAL posix.system whose module posix is blocked".
_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")
_WEIGHTS_ONLY = "Weights only load failed"


@contextlib.contextmanager
def safe_loading() -> Iterator[None]:
    """Lets ``torch.load(weights_only=True)`` inside it (Lightning's, on resume) read this project's checkpoints."""
    with torch.serialization.safe_globals(ALLOWED_GLOBALS):
        yield


def refusal(path: str | Path, err: pickle.UnpicklingError) -> ValueError | None:
    """The one-line error for a file that a weights-only load refused, or None if ``err`` is another failure."""
    text = str(err)
    if _WEIGHTS_ONLY not in text:
        return None
    named = _GLOBAL.search(text)
    what = named.group(1) if named else text.split("WeightsUnpickler error: ")[-1].splitlines()[0]
    return ValueError(f"{path}: holds {what}, which no checkpoint of this project does; refused without running it")


def load_checkpoint(path: str | Path, mmap: bool = False) -> dict[str, Any]:
    """Returns the checkpoint at ``path``, read without running any code it may name.

    Args:
        path: a file written by ``torch.save`` (a Lightning ``.ckpt``, a benchmark's batch).
        mmap: map the tensors' bytes instead of reading them: checking a file costs its pickle alone.

    Raises:
        ValueError: naming the file, for a type outside tensors and ``ALLOWED_GLOBALS``, or an unreadable file.
    """
    try:
        with safe_loading():
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        refused = refusal(path, err)
        if refused is not None:
            raise refused from err
        raise _unreadable(path, err) from err
    except (RuntimeError, OSError, EOFError) as err:
        raise _unreadable(path, err) from err


def _unreadable(path: str | Path, err: Exception) -> ValueError:
    reason = (str(err).strip().splitlines() or [type(err).__name__])[0]  # the error stays one line
    return ValueError(f"{path}: not a readable checkpoint ({reason}); was it written completely?")
