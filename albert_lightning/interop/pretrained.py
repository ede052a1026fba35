"""The one reader of an existing network: a Hugging Face ALBERT folder (``transformers``' own or an export) or
a Lightning pretraining checkpoint, with the normalisation and vocabulary its text was pretrained under.
Fine-tuning starts from it (``load_pretrained``), and so does continued pretraining (``read_start``)."""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from pathlib import Path

import torch
from torch import nn

from albert_lightning.checkpoints import METADATA, load_weights, read_pretraining_state
from albert_lightning.interop.hf import read_hf
from albert_lightning.model import AlbertConfig, AlbertForPreTraining
from pipelines.algorithms.textnorm import Normalizer, hf_normalizer
from pipelines.algorithms.vocabulary import VOCAB_FILES

__all__ = ["Start", "load_pretrained", "read_start"]


@dataclasses.dataclass(frozen=True)
class Start:
    """A network to continue pretraining from.

    Attributes:
        path: the folder or checkpoint it was read from.
        config: its shape.
        state: its tensors, under our names.
        missing: heads it lacks (a released ``AlbertForMaskedLM`` has no SOP head): initialised as a new model's.
        normalizer: how its pretraining text was normalised.
        spiece_sha256: the hash of its ``spiece.model`` (or WordPiece ``vocab.txt``); None when it names none (a
            folder without one, or a checkpoint from before the hash was recorded): then only the piece count is
            compared.
    """

    path: str
    config: AlbertConfig
    state: dict[str, torch.Tensor]
    missing: list[str]
    normalizer: Normalizer
    spiece_sha256: str | None

    def load_into(self, model: nn.Module) -> None:
        """Copies the start's tensors into ``model`` (built and initialised, not yet sharded); the heads it lacks
        keep the model's initialisation.

        Raises:
            ValueError: one line naming ``path``, when the keys ``model`` misses are not exactly ``missing``,
                or the start holds any it has not (``checkpoints.load_weights``).
        """
        load_weights(model, self.state, self.missing, self.path)


def read_start(path: str | Path) -> Start:
    """Reads a Hugging Face ALBERT folder or a pretraining checkpoint, a file or a sharded folder (weights-only),
    without building a model.

    Raises:
        FileNotFoundError: if nothing is there.
        ValueError: naming the file, for a folder or checkpoint that is not an ALBERT this project can read.
    """
    path = Path(path)
    if path.is_dir() and not (path / METADATA).is_file():  # a sharded checkpoint's folder has an index
        config, state, missing = read_hf(path)
        vocab = next((path / name for name in VOCAB_FILES if (path / name).is_file()), None)
        sha = hashlib.sha256(vocab.read_bytes()).hexdigest() if vocab else None
        return Start(str(path), config, state, missing, hf_normalizer(path), sha)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no Hugging Face folder or checkpoint there (--model.init_from)")
    config, state, hyper_parameters = read_pretraining_state(path)  # the file is read once
    normalizer = Normalizer(**(hyper_parameters.get("normalizer") or {}))  # defaults: written before it was recorded
    return Start(str(path), config, state, [], normalizer, hyper_parameters.get("spiece_sha256"))


def load_pretrained(source: str | Path) -> tuple[AlbertForPreTraining, Normalizer]:
    """Returns the pretrained network and how its pretraining text was normalised, which later text must repeat.

    Args:
        source: a Lightning pretraining checkpoint (``.ckpt``, a file or a sharded folder: its recorded
            normalisation) or a Hugging Face ALBERT folder (its tokenizer_config.json's, AlbertTokenizer's defaults
            without one).

    Raises:
        FileNotFoundError: if nothing is there.
        ValueError: one line naming the file, as ``read_start`` and ``Start.load_into`` refuse it.
    """
    start = read_start(source)
    if start.missing:
        warnings.warn(f"{start.path} has no {start.missing}; they keep their random init", stacklevel=2)
    model = AlbertForPreTraining(start.config)
    start.load_into(model)
    return model, start.normalizer
