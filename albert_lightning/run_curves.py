"""The name configs written before the subpackages use for the pretraining report callback
(``class_path: albert_lightning.run_curves.PretrainingReport``)."""

from albert_lightning.pretraining.curves import PretrainingReport

__all__ = ["PretrainingReport"]
