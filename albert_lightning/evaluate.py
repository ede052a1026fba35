"""``python -m albert_lightning.evaluate``: fine-tune and score the downstream tasks.

The command lives in ``albert_lightning/evaluation/cli.py``."""

from albert_lightning.evaluation.cli import command

if __name__ == "__main__":
    command()
