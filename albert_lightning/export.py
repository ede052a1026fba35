"""``python -m albert_lightning.export``: write a transformers AlbertForPreTraining folder from a checkpoint.

The command lives in ``albert_lightning/interop/export.py``."""

from albert_lightning.interop.export import command

if __name__ == "__main__":
    command()
