"""The one split of documents: which are training text and which are held out, by document id alone (pure).

Every stage asks this module: ``dedup`` keeps held-out documents over their training duplicates, ``instances``
pretrains on training documents only and builds its validation and evaluation shards from the held-out ones,
and ``tasks`` takes its dev and test examples only from held-out documents, so no score is measured on text the
model read in pretraining. A document is held out when ``unit_interval(SPLIT_KEY, id)`` falls below the
top-level param ``held_out_fraction``; the lower half of that range is ``dev``, the upper half ``test``. The seed
plays no part, so changing it keeps the split.
"""

from __future__ import annotations

import dataclasses

from pipelines.algorithms.hashes import unit_interval

__all__ = ["HELD_OUT", "SPLITS", "SPLIT_KEY", "HeldOutSplit", "check_fraction", "is_held_out", "split_of"]

SPLIT_KEY = "held-out"  # the hash's first part; batch code hashes ids with the same key (instances)
SPLITS = ("train", "dev", "test")
HELD_OUT = ("dev", "test")


def check_fraction(held_out_fraction: float) -> float:
    """Returns ``held_out_fraction`` if it leaves documents on both sides, else raises ValueError."""
    if not 0 < held_out_fraction < 1:
        raise ValueError(f"held_out_fraction must be in (0, 1), got {held_out_fraction}")
    return held_out_fraction


@dataclasses.dataclass
class HeldOutSplit:
    """The one field every splitting stage's config shares, and its check: a stage config derives from it (and
    a ``__post_init__`` of its own calls ``super().__post_init__()``)."""

    held_out_fraction: float = dataclasses.field(
        default=0.2,
        kw_only=True,
        metadata={
            "help": "share of documents held out, half dev, half test (top-level param: every stage's one split)"
        },
    )

    def __post_init__(self) -> None:
        check_fraction(self.held_out_fraction)


def split_of(document_id: str, held_out_fraction: float) -> str:
    """Returns ``"train"``, ``"dev"`` or ``"test"`` for a document, from the hash of its id alone."""
    u = unit_interval(SPLIT_KEY, document_id)
    if u >= held_out_fraction:
        return "train"
    return "dev" if u < held_out_fraction / 2 else "test"


def is_held_out(document_id: str, held_out_fraction: float) -> bool:
    """Returns whether a document is held out (dev or test): never trained on, in pretraining or fine-tuning."""
    return unit_interval(SPLIT_KEY, document_id) < held_out_fraction
