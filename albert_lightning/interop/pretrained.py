"""The one reader of a network to start from: a Hugging Face ALBERT folder (an export included) or a Lightning
pretraining checkpoint, with the normalisation its text was pretrained under."""

from __future__ import annotations

from pathlib import Path

from albert_lightning.checkpoints import read_pretraining_checkpoint
from albert_lightning.interop.hf import hf_normalizer, import_hf
from albert_lightning.model import AlbertForPreTraining
from pipelines.textnorm import Normalizer

__all__ = ["load_pretrained"]


def load_pretrained(source: str | Path) -> tuple[AlbertForPreTraining, Normalizer]:
    """Returns the pretrained network and how its pretraining text was normalised, which later text must repeat.

    Args:
        source: a Lightning pretraining checkpoint (``.ckpt``: its recorded normalisation) or a Hugging Face
            ALBERT folder (its tokenizer_config.json's, AlbertTokenizer's defaults without one).
    """
    source = Path(source)
    if source.is_dir():
        return import_hf(source), hf_normalizer(source)
    return read_pretraining_checkpoint(source)
