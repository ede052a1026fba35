"""The one safe checkpoint reader: ``load_checkpoint``, and ``safe_loading`` for the loads Lightning makes itself.

Unpickling a file can run any code it names, so every pickled file (a Lightning ``.ckpt``, a Hugging Face
``pytorch_model.bin``) is read by ``load_checkpoint``, the project's only torch.load, weights-only:
tensors, containers and numbers, plus the types in ``ALLOWED_GLOBALS``. A file naming anything else is
refused with one line naming the file and the type, before any of it is built. ``load_weights`` is the one
checked copy of what was read into a model.
"""

from __future__ import annotations

import contextlib
import pickle
import re
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from albert_lightning.model import AlbertConfig, AlbertForPreTraining, with_tied_weights
from pipelines.algorithms.textnorm import Normalizer

__all__ = [
    "ALLOWED_GLOBALS",
    "load_checkpoint",
    "load_pretraining_checkpoint",
    "load_weights",
    "read_pretraining_checkpoint",
    "read_pretraining_state",
    "refusal",
    "safe_loading",
]

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
        path: a file written by ``torch.save`` (a Lightning ``.ckpt``, a Hugging Face ``pytorch_model.bin``, a
            benchmark's batch).
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


PREFIX = "model."  # the LightningModule holds the network as `self.model`


def load_weights(model: nn.Module, state: dict[str, torch.Tensor], missing: Collection[str], source: str) -> None:
    """Copies ``state`` into ``model``: the one checked load of every network read from a file.

    Args:
        model: the network, built (and initialised) for the state's config.
        state: its tensors, under the model's names (both names of a tied pair).
        missing: the keys ``state`` may lack (heads a released checkpoint has not): they keep the model's values.
        source: the file or folder ``state`` was read from, for the error.

    Raises:
        ValueError: one line naming ``source``, when the keys missing from ``state`` are not exactly ``missing``,
            when it holds any key the model has not, or a tensor of another shape.
    """
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as err:  # mis-shaped tensors: torch lists each on a line of its own
        raise ValueError(f"{source}: {' '.join(str(err).split())}") from err
    if set(result.missing_keys) != set(missing) or result.unexpected_keys:
        missing_keys, unexpected_keys = sorted(result.missing_keys), sorted(result.unexpected_keys)
        raise ValueError(f"{source}: missing keys {missing_keys}, unexpected keys {unexpected_keys}")


def load_pretraining_checkpoint(path: str | Path) -> AlbertForPreTraining:
    """Returns the model saved in a Lightning pretraining checkpoint (see ``read_pretraining_checkpoint``)."""
    return read_pretraining_checkpoint(path)[0]


def read_pretraining_checkpoint(path: str | Path) -> tuple[AlbertForPreTraining, Normalizer]:
    """Returns the model saved in a Lightning pretraining checkpoint and how its training text was normalised.

    ``hyper_parameters["normalizer"]`` gives the normalisation; checkpoints written before it was recorded
    get the defaults, which every run then used.

    Raises:
        ValueError: as ``read_pretraining_state``, or naming the file when its keys are not the model's.
    """
    config, state, hyper_parameters = read_pretraining_state(path)
    model = AlbertForPreTraining(config)
    load_weights(model, state, (), str(path))
    return model, Normalizer(**(hyper_parameters.get("normalizer") or {}))


def read_pretraining_state(path: str | Path) -> tuple[AlbertConfig, dict[str, torch.Tensor], dict[str, Any]]:
    """Reads a Lightning pretraining checkpoint once, without building a model.

    The checkpoint must be one consolidated file whose ``hyper_parameters["config"]`` holds the AlbertConfig
    fields and whose ``state_dict`` keys start with ``model.``. It is read by ``load_checkpoint``,
    which refuses a file naming types beyond tensors and plain data without running it.

    Returns:
        The network's config; its tensors under the model's names, both names of every tied pair
        (``with_tied_weights``); and the checkpoint's ``hyper_parameters`` (normalizer, spiece_sha256, ...).

    Raises:
        ValueError: if the checkpoint is unreadable, holds other types, lacks the config or holds no ``model.``
            weights.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(
            f"{path} is a sharded checkpoint folder; consolidate it into one file first "
            "(python -m lightning.pytorch.utilities.consolidate_checkpoint)"
        )
    checkpoint = load_checkpoint(path)
    hyper_parameters = checkpoint.get("hyper_parameters", {})
    config = hyper_parameters.get("config")
    if not isinstance(config, dict):
        raise ValueError(f"{path}: hyper_parameters['config'] (the AlbertConfig fields) is missing")
    saved = checkpoint.get("state_dict", {})
    state = {k.removeprefix(PREFIX): v for k, v in saved.items() if k.startswith(PREFIX)}
    if not state:
        raise ValueError(f"{path}: state_dict has no keys starting with {PREFIX!r}")
    return AlbertConfig(**config), with_tied_weights(state, str(path)), hyper_parameters
