"""Stable hashes: the one source of every seed, split and sample that needs no compiled code (pure, stdlib only).

Python's ``hash()`` is salted per process, so it would make shards differ between runs and workers; sha256 of
an unambiguous encoding does not. A module of its own, apart from ``seeding``'s compiled draws, because the
stages that only hash (corpus, segment, vocab, tasks) would otherwise import numba and load its cache in every
process they start: ~0.7 s each (bench/startup.py's ``import`` column). ``seeding`` re-exports all three.
"""

from __future__ import annotations

import hashlib
import random

__all__ = ["KEY_SEPARATOR", "rng_for", "stable_hash64", "unit_interval"]

KEY_SEPARATOR = "\x1f"  # between the str() of the parts a key is hashed from (``batch_hashes`` joins them alike)


def stable_hash64(*parts: object) -> int:
    """Returns a 64-bit integer hash of ``parts`` that is the same on every machine, process and run."""
    digest = hashlib.sha256(KEY_SEPARATOR.join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def unit_interval(*parts: object) -> float:
    """Returns a stable pseudo-random number in [0, 1) for ``parts`` (used for hash-based splits and samples)."""
    return stable_hash64(*parts) / 2.0**64


def rng_for(seed: int, document_id: str, duplicate: int, purpose: str = "instances") -> random.Random:
    """Returns the generator for one (seed, document, duplicate): how its instances' pairs are cut comes from it.

    Only ``Random.random()`` is drawn from it (see ``sop``): CPython guarantees that sequence for an
    int seed across versions, whereas ``randint``/``shuffle``/``choices`` have changed between releases.
    """
    return random.Random(stable_hash64(purpose, seed, document_id, duplicate))
