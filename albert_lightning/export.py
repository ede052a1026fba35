"""Export a pretraining checkpoint as a Hugging Face folder: ``python -m albert_lightning.export --help``.

    python -m albert_lightning.export --checkpoint data/pretrain/last.ckpt \
        --spiece data/vocab/spiece.model --output data/export
"""

from __future__ import annotations

import argparse
from pathlib import Path

from albert_lightning.checkpoints import load_checkpoint
from albert_lightning.hf import export_hf
from albert_lightning.model import TIED_WEIGHTS, AlbertConfig, AlbertForPreTraining
from pipelines.commands import main as run_command
from pipelines.textnorm import Normalizer

__all__ = ["load_pretraining_checkpoint", "main", "read_pretraining_checkpoint"]

PREFIX = "model."  # the LightningModule holds the network as `self.model`


def load_pretraining_checkpoint(path: str | Path) -> AlbertForPreTraining:
    """Returns the model saved in a Lightning pretraining checkpoint (see ``read_pretraining_checkpoint``)."""
    return read_pretraining_checkpoint(path)[0]


def read_pretraining_checkpoint(path: str | Path) -> tuple[AlbertForPreTraining, Normalizer]:
    """Returns the model saved in a Lightning pretraining checkpoint and how its training text was normalised.

    The checkpoint must be one consolidated file whose ``hyper_parameters["config"]`` holds the AlbertConfig
    fields and whose ``state_dict`` keys start with ``model.``. It is read by ``checkpoints.load_checkpoint``,
    which refuses a file naming types beyond tensors and plain data without running it.
    ``hyper_parameters["normalizer"]`` gives the normalisation; checkpoints written before it was recorded
    get the defaults, which every run then used.

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
    state = {k.removeprefix(PREFIX): v for k, v in checkpoint["state_dict"].items() if k.startswith(PREFIX)}
    if not state:
        raise ValueError(f"{path}: state_dict has no keys starting with {PREFIX!r}")
    for tied, source in TIED_WEIGHTS.items():  # a checkpoint may store a tied tensor once
        if source in state:
            state.setdefault(tied, state[source])
    model = AlbertForPreTraining(AlbertConfig(**config))
    model.load_state_dict(state)
    return model, Normalizer(**(hyper_parameters.get("normalizer") or {}))


def main(argv: list[str] | None = None) -> None:
    """Parses the command line and writes the export folder."""
    parser = argparse.ArgumentParser(prog="python -m albert_lightning.export", description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="Lightning checkpoint file of the pretraining run")
    parser.add_argument("--spiece", help="spiece.model to export with the weights (tokenizer files)")
    parser.add_argument("--output", required=True, help="folder to write (config.json, model.safetensors, ...)")
    args = parser.parse_args(argv)
    model, normalizer = read_pretraining_checkpoint(args.checkpoint)
    export_hf(model, model.config, args.output, args.spiece, normalizer)


if __name__ == "__main__":
    run_command(main, "export")
