"""The one safe checkpoint reader: ``load_checkpoint``, and ``safe_loading`` for the loads Lightning makes itself.

Unpickling a file can run any code it names, so every pickled file (a Lightning ``.ckpt``, a Hugging Face
``pytorch_model.bin``) is read by ``load_checkpoint``, the project's only torch.load, weights-only:
tensors, containers and numbers, plus the types in ``ALLOWED_GLOBALS``. A file naming anything else is
refused with one line naming the file and the type, before any of it is built. ``load_weights`` is the one
checked copy of what was read into a model.

A sharded checkpoint is a folder that ``torch.distributed.checkpoint`` (DCP) wrote: ``.metadata``, one
``.distcp`` file per rank, and Lightning's ``meta.pt``. torch 2.13 reads ``.metadata`` with plain ``pickle.load``
and each non-tensor value with ``torch.load(weights_only=False)``, and its weights-only unpickler cannot read
the former (protocol 4 frames). ``SafeFolderReader`` unpickles ``.metadata`` allowing only the classes DCP
writes into it, and only file names inside the folder; ``WeightsOnlyLoadPlanner`` reads the values weights-only.
``load_checkpoint`` reads such a folder as one checkpoint, and ``FSDP2Strategy`` resumes from it on any number
of ranks through the same two.
"""

from __future__ import annotations

import contextlib
import io
import pickle
import re
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

from albert_lightning.model import AlbertConfig, AlbertForPreTraining, with_tied_weights
from pipelines.algorithms.textnorm import Normalizer

__all__ = [
    "ALLOWED_GLOBALS",
    "LIGHTNING_META",
    "METADATA",
    "SafeFolderReader",
    "WeightsOnlyLoadPlanner",
    "check_sharded_checkpoint",
    "load_checkpoint",
    "load_pretraining_checkpoint",
    "load_weights",
    "read_pretraining_checkpoint",
    "read_pretraining_state",
    "read_sharded",
    "read_sharded_metadata",
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
    return _holds(path, named.group(1) if named else text.split("WeightsUnpickler error: ")[-1].splitlines()[0])


def _holds(path: str | Path, what: str) -> ValueError:
    return ValueError(f"{path}: holds {what}, which no checkpoint of this project does; refused without running it")


def load_checkpoint(path: str | Path, mmap: bool = False) -> dict[str, Any]:
    """Returns the checkpoint at ``path``, read without running any code it may name.

    Args:
        path: a file written by ``torch.save`` (a Lightning ``.ckpt``, a Hugging Face ``pytorch_model.bin``, a
            benchmark's batch), or a sharded checkpoint folder, returned as Lightning's ``meta.pt`` with the
            whole model's ``state_dict`` (as a full checkpoint holds it; the optimizer's shards are not read).
        mmap: map the tensors' bytes instead of reading them: checking a file costs its pickle alone.

    Raises:
        ValueError: naming the file, for a type outside tensors and ``ALLOWED_GLOBALS``, or an unreadable file.
    """
    if Path(path).is_dir():
        return _read_sharded_checkpoint(Path(path))
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


# ------------------------------------------------------------------------------------ sharded checkpoint folders

METADATA, LIGHTNING_META = ".metadata", "meta.pt"  # DCP's index of the shards; Lightning's loops, callbacks, ...

# What torch 2.13's DCP pickles into .metadata: its dataclasses, tensors' shapes, dtypes, layouts and memory
# formats, and the folder's path. Each is built from plain values and runs nothing.
_METADATA_GLOBALS = {
    ("torch.distributed.checkpoint.metadata", name)
    for name in (
        "Metadata",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "MetadataIndex",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    )
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
    ("collections", "OrderedDict"),
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _METADATA_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"GLOBAL {module}.{name}")


def read_sharded_metadata(folder: str | Path) -> Metadata:
    """Returns the DCP index of a sharded checkpoint folder, read without running what it names.

    Raises:
        ValueError: naming the file, when it names a class DCP does not write, is not an index, or points a
            shard outside the folder (a hostile index could make a load read any file into the weights).
    """
    path = Path(folder) / METADATA
    try:
        with open(path, "rb") as f:
            metadata = _MetadataUnpickler(f).load()
    except pickle.UnpicklingError as err:
        named = _GLOBAL.search(str(err))
        raise (_holds(path, named.group(1)) if named else _unreadable(path, err)) from err
    except (OSError, EOFError, AttributeError, TypeError, ValueError) as err:
        raise _unreadable(path, err) from err
    if not isinstance(metadata, Metadata) or not isinstance(metadata.storage_data, dict):
        raise ValueError(f"{path}: not a distributed checkpoint's index ({type(metadata).__name__})")
    for info in metadata.storage_data.values():
        name = info.relative_path if isinstance(info, _StorageInfo) else None
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise ValueError(f"{path}: names a shard {name!r} that is not a file of the folder; refused")
        if not (Path(folder) / name).is_file():
            raise ValueError(f"{path}: names the shard {name}, which the folder lacks; was it written completely?")
    return metadata


def check_sharded_checkpoint(folder: str | Path) -> None:
    """Reads what a resume from a sharded folder reads before its tensors: the index and Lightning's meta.pt.

    Raises:
        ValueError: naming the file, as ``read_sharded_metadata`` and ``load_checkpoint`` do.
    """
    read_sharded_metadata(folder)
    load_checkpoint(Path(folder) / LIGHTNING_META, mmap=True)


class SafeFolderReader(FileSystemReader):
    """DCP's file-system reader with ``.metadata`` read by ``read_sharded_metadata``, when it is made.

    Read up front, a refused index raises its own error: DCP's load catches any error of ``read_metadata`` and
    retries per-rank indexes, which would bury it in one of its own.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.metadata = read_sharded_metadata(path)

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        if kwargs.get("rank") is not None:  # per-rank indexes: written by no strategy of this project
            raise ValueError(f"{self.path}: a per-rank distributed checkpoint index, which is not read here")
        if self.metadata.storage_meta is None:
            self.metadata.storage_meta = StorageMeta()
        self.metadata.storage_meta.load_id = self.load_id  # as FileSystemReader does
        return self.metadata


class WeightsOnlyLoadPlanner(DefaultLoadPlanner):
    """DCP's load planner reading each non-tensor value (the optimizer's hyper-parameters) weights-only.

    Args:
        folder: the checkpoint folder, named by the error for a value that names a type beyond plain data.
    """

    def __init__(self, folder: str | Path, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.folder = folder

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        try:
            with safe_loading():
                loaded = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as err:
            refused = refusal(f"{self.folder} ({fqn})", err)
            if refused:
                raise refused from err
            raise
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded


class _WholeStateLoadPlanner(WeightsOnlyLoadPlanner, _EmptyStateDictLoadPlanner):
    """Rebuilds the saved state from the index itself (no model to load into), its values weights-only."""


def read_sharded(state: dict[str, Any], folder: str | Path, planner: WeightsOnlyLoadPlanner | None = None) -> None:
    """Fills ``state`` from a sharded checkpoint folder in place, each rank its own slices, reading no code.

    DCP reshards on load: each rank reads the parts of the saved shards that its own shard of ``state`` covers,
    whatever the world size that wrote them. Without a process group, one process reads the whole.

    Raises:
        ValueError: naming the folder, for an index or a value that ``read_sharded_metadata`` or
            ``WeightsOnlyLoadPlanner`` refuses, or a folder DCP cannot read.
    """
    folder = Path(folder)
    try:
        # dcp.load itself, less its copy of the top-level dict: with none given (the whole state, read without a
        # model, as torch's format_utils.dcp_to_torch_save does), the planner fills this one.
        _load_state_dict(
            state,
            storage_reader=SafeFolderReader(folder),
            planner=planner or WeightsOnlyLoadPlanner(folder),
            no_dist=not (dist.is_available() and dist.is_initialized()),
        )
    except CheckpointException as err:  # DCP gathers each rank's failure into one BaseException
        failures = [failure for failure, _ in err.failures.values()]
        refused = next((f for f in failures if isinstance(f, ValueError)), None)
        if refused is not None:
            raise refused from None
        raise _unreadable(folder, failures[0] if failures else err) from None
    except (RuntimeError, OSError) as err:
        raise _unreadable(folder, err) from err


def _read_sharded_checkpoint(folder: Path) -> dict[str, Any]:
    checkpoint = load_checkpoint(folder / LIGHTNING_META)
    state: dict[str, Any] = {}
    read_sharded(state, folder, _WholeStateLoadPlanner(folder, keys={"state_dict"}))
    checkpoint["state_dict"] = state.get("state_dict", {})
    return checkpoint


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

    The checkpoint (a file, or a sharded folder) must be one whose ``hyper_parameters["config"]`` holds the AlbertConfig
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
