"""Pretrain ALBERT on the shards: ``python -m albert_lightning.fit [--trainer.devices 8] [--ckpt_path last]``.

A LightningCLI over ``AlbertPretraining`` and ``ShardDataModule``. With no arguments it reads
``configs/pretrain.yaml`` (the file ``dvc.yaml``'s pretrain stage uses) and trains on ``data/shards``.
``--print_config`` shows the resolved configuration; every Trainer flag works. Precision defaults to
``bf16-mixed`` on GPUs and 32-bit on CPUs.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch
from lightning.fabric.utilities.warnings import PossibleUserWarning
from lightning.pytorch.cli import LightningCLI

from albert_lightning.pretraining import AlbertPretraining
from albert_lightning.shard_loader import ShardDataModule
from pipelines.commands import main as run_command

__all__ = ["DEFAULT_CONFIG", "cli_main"]

DEFAULT_CONFIG = "configs/pretrain.yaml"
# Lightning's warning, from its start (a warnings filter matches a regex at the start of the message).
NOT_RESUMABLE = (
    "You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not resumable"
)


class AlbertCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--ckpt_path", default=None, help='checkpoint to resume from ("last" for the newest)')
        # The model's vocabulary and second objective are the shards'; they are read, never typed twice.
        parser.link_arguments("data.vocab_size", "model.vocab_size", apply_on="instantiate")
        parser.link_arguments("data.inter_sentence", "model.inter_sentence", apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        trainer = self.config["trainer"]
        if trainer.get("precision") is None:
            trainer["precision"] = "bf16-mixed" if torch.cuda.is_available() else "32-true"


def cli_main(args: list[str] | None = None) -> AlbertCLI:
    """Parses ``args`` (None: the command line), trains, and returns the CLI (its ``trainer`` and ``model``)."""
    cli = AlbertCLI(
        AlbertPretraining,
        ShardDataModule,
        run=False,
        save_config_kwargs={"overwrite": True},  # re-runs (dvc repro) write into the same folder
        parser_kwargs={"default_config_files": [DEFAULT_CONFIG] if os.path.exists(DEFAULT_CONFIG) else []},
        args=args,
    )
    with warnings.catch_warnings():
        # Lightning trusts only a loader that is itself stateful. ShardDataModule saves the sampler's position
        # (epoch, batches done) in the checkpoint, refuses to resume with another seed, batch size or world size,
        # and replays the uninterrupted run batch for batch (tests/test_pretraining.py), so resuming mid-epoch
        # is exact here and the warning would only be wrong.
        warnings.filterwarnings("ignore", NOT_RESUMABLE, PossibleUserWarning)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.config["ckpt_path"])
    return cli


def _command(argv: list[str]) -> None:
    # The command line less --verbose, as sys.argv too: LightningCLI warns when given args while sys.argv holds
    # some, and Lightning's launcher starts the other ranks with sys.argv.
    sys.argv[1:] = argv
    cli_main(None)


if __name__ == "__main__":
    run_command(_command, "fit")  # an error (e.g. "<folder>: ... no training rows") is one line; trace in a log
