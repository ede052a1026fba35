"""Export a pretraining checkpoint as a Hugging Face folder: ``python -m albert_lightning.export --help``.

    python -m albert_lightning.export --checkpoint data/pretrain/last.ckpt \
        --spiece data/vocab/spiece.model --output data/export
"""

from __future__ import annotations

import argparse

from albert_lightning.checkpoints import read_pretraining_checkpoint
from albert_lightning.interop.hf import export_hf
from pipelines.commands import main as run_command

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """Parses the command line and writes the export folder."""
    parser = argparse.ArgumentParser(prog="python -m albert_lightning.export", description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="Lightning checkpoint file of the pretraining run")
    parser.add_argument("--spiece", help="spiece.model to export with the weights (tokenizer files)")
    parser.add_argument("--output", required=True, help="folder to write (config.json, model.safetensors, ...)")
    args = parser.parse_args(argv)
    model, normalizer = read_pretraining_checkpoint(args.checkpoint)
    export_hf(model, model.config, args.output, args.spiece, normalizer)


def command() -> None:
    """Runs the command line; an error is one line, its trace in a log (pipelines/commands.py)."""
    run_command(main, "export")
