"""``stable_hash64`` of many keys in one call: the keys joined by Arrow, SHA-256 compiled (pure).

The instances stage seeds two or three generators per (document, duplicate) and holds documents out by a hash
of their ids: at ``dupe_factor`` 16, half a million ``hashlib`` calls a corpus of 13 k documents, each ~1 µs of
interpreter work around a sub-microsecond digest. Here Arrow builds every key string (``str`` of each part,
joined by ``\\x1f``, as ``stable_hash64`` does) in C++, and a compiled SHA-256 hashes them all: the same 64 bits,
a few times cheaper. ``tests/test_batch_hashes.py`` checks both against ``hashlib`` and ``stable_hash64``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.algorithms.hashes import KEY_SEPARATOR

__all__ = ["sha256_first64", "stable_hashes64"]

# FIPS 180-4: the first 32 bits of the fractional parts of the cube roots of the first 64 primes (round
# constants) and of the square roots of the first 8 (initial hash value), computed rather than typed in.


def _primes(n: int) -> list[int]:
    found: list[int] = []
    candidate = 2
    while len(found) < n:
        if all(candidate % p for p in found):
            found.append(candidate)
        candidate += 1
    return found


def _exact_root_bits(prime: int, degree: int) -> int:
    """The first 32 fractional bits of prime ** (1 / degree), exactly (integer roots, no float rounding)."""
    scaled = prime << (32 * degree)
    low, high = 0, 1 << (32 + prime.bit_length())
    while low < high:  # the largest r with r ** degree <= scaled
        middle = (low + high + 1) // 2
        low, high = (middle, high) if middle**degree <= scaled else (low, middle - 1)
    return low & 0xFFFFFFFF


_K = np.array([_exact_root_bits(p, 3) for p in _primes(64)], dtype=np.uint32)
_H0 = np.array([_exact_root_bits(p, 2) for p in _primes(8)], dtype=np.uint32)

# numba widens integer arithmetic to 64 bits, so every sum and left shift below is cast back to uint32 (mod 2 ** 32)
# before a right shift could pull its high bits down; a store into a uint32 array truncates the same way.


@numba.njit(cache=True, nogil=True, inline="always")
def _rotr(x, n):
    return np.uint32((x >> np.uint32(n)) | (x << np.uint32(32 - n)))


@numba.njit(cache=True, nogil=True, inline="always")
def _compress(state, w, k):
    """One SHA-256 block into ``state``: ``w[:16]`` holds its big-endian words; ``w[16:]`` is scratch."""
    for t in range(16, 64):
        x, y = w[t - 15], w[t - 2]
        s0 = _rotr(x, 7) ^ _rotr(x, 18) ^ (x >> np.uint32(3))
        s1 = _rotr(y, 17) ^ _rotr(y, 19) ^ (y >> np.uint32(10))
        w[t] = np.uint32(w[t - 16] + s0 + w[t - 7] + s1)
    a, b, c, d, e, f, g, h = state[0], state[1], state[2], state[3], state[4], state[5], state[6], state[7]
    for t in range(64):
        t1 = np.uint32(h + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[t] + w[t])
        t2 = np.uint32((_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c)))
        h, g, f, e, d, c, b, a = g, f, e, np.uint32(d + t1), c, b, a, np.uint32(t1 + t2)
    state[0] += a
    state[1] += b
    state[2] += c
    state[3] += d
    state[4] += e
    state[5] += f
    state[6] += g
    state[7] += h


@numba.njit(cache=True, nogil=True)
def _first64(data, offsets, k, h0, out):
    state, w, block = np.empty(8, np.uint32), np.empty(64, np.uint32), np.empty(64, np.uint8)
    for i in range(len(out)):
        lo, hi = offsets[i], offsets[i + 1]
        state[:] = h0
        length = hi - lo
        blocks = (length + 8) // 64 + 1  # the message, the 0x80 byte and the 8-byte bit length, padded
        for b in range(blocks):
            start = lo + 64 * b
            take = min(64, max(0, hi - start))
            block[:take] = data[start : start + take]
            block[take:] = 0
            if 0 <= length - 64 * b < 64:
                block[length - 64 * b] = 0x80
            if b == blocks - 1:
                bits = np.uint64(length) * np.uint64(8)
                for j in range(8):
                    block[63 - j] = (bits >> np.uint64(8 * j)) & np.uint64(0xFF)
            for t in range(16):
                w[t] = (
                    (np.uint32(block[4 * t]) << np.uint32(24))
                    | (np.uint32(block[4 * t + 1]) << np.uint32(16))
                    | (np.uint32(block[4 * t + 2]) << np.uint32(8))
                    | np.uint32(block[4 * t + 3])
                )
            _compress(state, w, k)
        out[i] = (np.uint64(state[0]) << np.uint64(32)) | np.uint64(state[1])


def sha256_first64(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Returns, as uint64, the first 8 bytes (big-endian) of the SHA-256 of each message
    ``data[offsets[i]:offsets[i + 1]]`` (uint8 data, int64 offsets, one more than messages)."""
    out = np.empty(len(offsets) - 1, dtype=np.uint64)
    _first64(np.ascontiguousarray(data, np.uint8), np.asarray(offsets, np.int64), _K, _H0, out)
    return out


def _strings(column: Sequence[object] | np.ndarray | pa.Array | pa.ChunkedArray) -> pa.Array:
    """``str`` of each value, as Arrow strings (an integer's decimal digits, as ``str`` writes them)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return (column if isinstance(column, pa.Array) else pa.array(column)).cast(pa.string())


def stable_hashes64(prefix: Sequence[object], *columns: Sequence[object] | np.ndarray | pa.Array) -> np.ndarray:
    """Returns ``stable_hash64(*prefix, *row)`` for every row of ``columns`` (equal lengths), as uint64: the
    columns hold strings or integers (lists, numpy or Arrow arrays), the prefix any values."""
    keys = pc.binary_join_element_wise(
        *(pa.scalar(str(part)) for part in prefix), *(_strings(column) for column in columns), KEY_SEPARATOR
    )
    _, offsets, data = keys.buffers()  # validity, int32 offsets, UTF-8 bytes (None when every key is empty)
    offsets = np.frombuffer(offsets, np.int32, len(keys) + 1, keys.offset * 4).astype(np.int64)
    return sha256_first64(np.empty(0, np.uint8) if data is None else np.frombuffer(data, np.uint8), offsets)
