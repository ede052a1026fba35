"""``python -m albert_lightning.ablation_report``: the ablation grid's runs in the shape of the paper's tables.

The command lives in ``albert_lightning/ablations/report.py``."""

from albert_lightning.ablations.report import command

if __name__ == "__main__":
    command()
