"""Stable hashing and counter-based randomness: the one source of every seed, split and random draw (pure).

Python's ``hash()`` is salted per process, so it would make shards differ between runs and workers;
sha256 of an unambiguous encoding does not. Sequential choices (how a document is cut into pairs) draw from a
``random.Random`` seeded that way; masking, which runs over whole batches in compiled code, uses
*counter-based* draws instead: the number for (key, stream, counter) is a hash of the three, so a draw depends
on nothing drawn before it and a batch gives every row the numbers it would get alone. The hashes are numba
ufuncs: one definition serves numpy arrays and compiled loops alike. Compiled loops that draw sequentially
(``sop``'s pairs) use ``mersenne_seed``/``mersenne_random``: CPython's ``random.Random`` written out, so they
draw the very numbers ``rng_for`` gives. The hashlib functions live in ``hashes``, which imports no numba, for
the stages that only hash; they are re-exported here.
"""

from __future__ import annotations

import numba
import numpy as np

from pipelines.algorithms.hashes import rng_for, stable_hash64, unit_interval  # re-exported: one import for every draw

__all__ = [
    "mersenne_random",
    "mersenne_seed",
    "mersenne_states",
    "mix64",
    "mix_keys",
    "rng_for",
    "stable_hash64",
    "uniform",
    "uniforms",
    "unit_interval",
]


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


# CPython's Mersenne Twister (Modules/_randommodule.c: init_by_array, genrand_uint32, random_random), so that a
# compiled loop seeded with ``stable_hash64(purpose, seed, document_id, duplicate)`` draws exactly what
# ``rng_for``'s generator would: the pairs stayed the same when their loop was compiled. A generator is a row of
# int64: the 624 state words (each < 2**32, so products fit int64 and ``& MASK32`` is the C code's uint32
# wrap-around) and, last, the index of the next word.
MT_N, MT_M, MASK32 = 624, 397, 0xFFFFFFFF


def _init_genrand(s: int) -> np.ndarray:
    state = [s]
    for i in range(1, MT_N):
        state.append((1812433253 * (state[-1] ^ (state[-1] >> 30)) + i) & MASK32)
    return np.array(state, dtype=np.int64)


_GENRAND_19650218 = _init_genrand(19650218)  # where init_by_array starts for every seed: computed once


@numba.njit(cache=True, nogil=True)
def mersenne_states(generators):
    """Returns ``generators`` unseeded generators, one per row, for ``mersenne_seed``."""
    return np.zeros((generators, MT_N + 1), dtype=np.int64)


@numba.njit(cache=True, nogil=True)
def mersenne_seed(states, seeds):
    """Seeds ``states[g]`` as ``random.Random(seeds[g])`` seeds itself, for int seeds in [0, 2**64).

    Seeding is two chains of 624 multiplications, each word depending on the one before, so the generators are
    seeded side by side (a chain's latency hides another's): a few at a time is ~3x faster than one by one.
    """
    n = len(seeds)
    # init_by_array adds key[j] + j in round r, j = r % key length: the key holds the 32-bit words the seed needs
    # (at least one), so the addend alternates between two values, or is one value for a seed below 2**32.
    add, previous = np.empty((2, n), np.int64), np.empty(n, np.int64)
    for g in range(n):
        seed = np.uint64(seeds[g])
        low, high = np.int64(seed & np.uint64(MASK32)), np.int64(seed >> np.uint64(32))
        add[0, g], add[1, g] = low, high + 1 if high else low
        previous[g] = _GENRAND_19650218[0]
    # The C loops with their index wrap-around unrolled: rounds at i = 1..N-1, then once more at i = 1 after
    # mt[0] = mt[N-1].
    for i in range(1, MT_N):
        for g in range(n):
            x = previous[g]
            previous[g] = ((_GENRAND_19650218[i] ^ ((x ^ (x >> 30)) * 1664525)) + add[(i - 1) & 1, g]) & MASK32
            states[g, i] = previous[g]
    for g in range(n):
        x = previous[g]
        previous[g] = ((states[g, 1] ^ ((x ^ (x >> 30)) * 1664525)) + add[1, g]) & MASK32
        states[g, 1] = previous[g]
    for i in range(2, MT_N):
        for g in range(n):
            x = previous[g]
            previous[g] = ((states[g, i] ^ ((x ^ (x >> 30)) * 1566083941)) - i) & MASK32
            states[g, i] = previous[g]
    for g in range(n):
        x = previous[g]
        states[g, 1] = ((states[g, 1] ^ ((x ^ (x >> 30)) * 1566083941)) - 1) & MASK32
        states[g, 0] = 0x80000000
        states[g, MT_N] = MT_N  # the first draw twists


@numba.njit(cache=True, nogil=True)
def _twist(state, k, next_word, ahead):
    y = (state[k] & 0x80000000) | (state[next_word] & 0x7FFFFFFF)
    state[k] = state[ahead] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)


@numba.njit(cache=True, nogil=True)
def _mersenne_word(state):
    if state[MT_N] >= MT_N:  # the next 624 words at once, as genrand_uint32's three loops
        for k in range(MT_N - MT_M):
            _twist(state, k, k + 1, k + MT_M)
        for k in range(MT_N - MT_M, MT_N - 1):
            _twist(state, k, k + 1, k + MT_M - MT_N)
        _twist(state, MT_N - 1, 0, MT_M - 1)
        state[MT_N] = 0
    y = state[state[MT_N]]
    state[MT_N] += 1
    y ^= y >> 11
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    return y ^ (y >> 18)


@numba.njit(cache=True, nogil=True)
def mersenne_random(state):
    """The next ``random.Random.random()`` of ``state``: a float64 in [0, 1) from two 32-bit words."""
    a, b = _mersenne_word(state) >> 5, _mersenne_word(state) >> 6
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)
