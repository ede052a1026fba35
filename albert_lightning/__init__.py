"""ALBERT pretraining with PyTorch Lightning: the model, its training and its Hugging Face interop.

Entry points:
    python -m albert_lightning.fit       pretrain on the Arrow shards (LightningCLI, FSDP)
    python -m albert_lightning.export    write a transformers AlbertForPreTraining folder from a checkpoint
    python -m albert_lightning.evaluate  fine-tune and score downstream tasks
    python -m albert_lightning.ablation_report  the ablation grid's runs in the shape of the paper's tables
"""

from albert_lightning.model import AlbertConfig, AlbertForPreTraining

__all__ = ["AlbertConfig", "AlbertForPreTraining"]
