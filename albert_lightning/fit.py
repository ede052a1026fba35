"""``python -m albert_lightning.fit``: pretrain ALBERT on the Arrow shards (LightningCLI, FSDP2).

The command lives in ``albert_lightning/pretraining/cli.py``."""

from albert_lightning.pretraining.cli import command

if __name__ == "__main__":
    command()
