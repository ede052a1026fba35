"""Export a pretraining checkpoint as a Hugging Face folder: ``python -m albert_lightning.export --help``.

    python -m albert_lightning.export --checkpoint data/pretrain/last.ckpt \
        --spiece data/vocab --output data/export

Knobs: the ``export`` section of ``params.yaml`` (the export stage's paths), each also a ``--flag``.
"""

from __future__ import annotations

import dataclasses

from albert_lightning.checkpoints import read_pretraining_checkpoint
from albert_lightning.interop.hf import export_hf
from pipelines.runtime.commands import main as run_command
from pipelines.runtime.params import parse_config

__all__ = ["ExportConfig", "main"]


@dataclasses.dataclass
class ExportConfig:
    """The ``export`` section of params.yaml; each field is also a ``--flag``."""

    checkpoint: str = dataclasses.field(
        default="data/pretrain/checkpoints/last.ckpt",
        metadata={"help": "Lightning checkpoint file of the pretraining run"},
    )
    # None without a params file: only the weights, as before the params section existed
    spiece: str | None = dataclasses.field(
        default=None,
        metadata={"help": "the vocabulary to export with the weights: spiece.model, vocab.txt or a folder of one"},
    )
    output: str = dataclasses.field(
        default="data/export", metadata={"help": "folder to write (config.json, model.safetensors, ...)"}
    )


def main(argv: list[str] | None = None) -> None:
    """Parses the command line (flags over params.yaml's ``export`` section) and writes the export folder."""
    prog, description = "python -m albert_lightning.export", __doc__.split("\n")[0]
    config = parse_config(argv, ExportConfig, "export", {}, description, prog=prog).config
    model, normalizer = read_pretraining_checkpoint(config.checkpoint)
    export_hf(model, model.config, config.output, config.spiece, normalizer)


def command() -> None:
    """Runs the command line; an error is one line, its trace in a log (pipelines/runtime/commands.py)."""
    run_command(main, "export")
