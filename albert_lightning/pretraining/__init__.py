"""Pretraining: the LightningModule (``module``), its command line (``cli``), the shard loader (``data``) with its
object-store download cache (``bucket_cache``), and the curves and metrics a run writes (``curves``)."""

from albert_lightning.pretraining.module import AlbertPretraining

__all__ = ["AlbertPretraining"]
