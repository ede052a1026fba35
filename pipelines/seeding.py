"""Stable hashing and counter-based randomness: the one source of every seed, split and random draw (pure).

Python's ``hash()`` is salted per process, so it would make shards differ between runs and workers;
sha256 of an unambiguous encoding does not. Sequential choices (how a document is cut into pairs) draw from a
``random.Random`` seeded that way; masking, which runs over whole batches in compiled code, uses
*counter-based* draws instead: the number for (key, stream, counter) is a hash of the three, so a draw depends
on nothing drawn before it and a batch gives every row the numbers it would get alone. The hashes are numba
ufuncs: one definition serves numpy arrays and compiled loops alike.
"""

from __future__ import annotations

import hashlib
import random

import numba
import numpy as np

__all__ = ["mix64", "mix_keys", "rng_for", "stable_hash64", "uniform", "uniforms", "unit_interval"]


def stable_hash64(*parts: object) -> int:
    """Returns a 64-bit integer hash of ``parts`` that is the same on every machine, process and run."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
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


STREAMS = 256  # streams per key: a stream is one kind of draw (order, span length, replacement, ...)


@numba.vectorize(["uint64(uint64)"], cache=True)
def mix64(x):  # a ufunc: arrays in numpy code, scalars in compiled code
    """SplitMix64's finaliser: a bijection of uint64 that spreads every input bit over the output."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.vectorize(["uint64(uint64, uint64)"], cache=True)
def mix_keys(key, counter):
    """A new key for each (key, counter) pair, e.g. a document's key and a row's number in it."""
    return mix64(key ^ mix64(counter))


@numba.vectorize(["float64(uint64, uint64, uint64)"], cache=True)
def uniform(key, stream, counter):
    """A float64 in [0, 1) with 53 random bits for each (key, stream < STREAMS, counter).

    Counter-based (as Philox or Threefry, with SplitMix64's mixer): the value is a function of its address
    alone, so vectorised or compiled code draws in any order and still gets the same numbers.
    """
    return np.float64(mix_keys(key, (counter << np.uint64(8)) | stream) >> np.uint64(11)) * 2.0**-53


def uniforms(keys: np.ndarray, stream: int, counters: np.ndarray) -> np.ndarray:
    """Returns ``uniform`` for arrays of keys and counters (from numpy code, which passes int64 counters)."""
    if not 0 <= stream < STREAMS:
        raise ValueError(f"stream={stream}: must lie in [0, {STREAMS})")
    return uniform(np.asarray(keys, np.uint64), np.uint64(stream), np.asarray(counters, np.uint64))
