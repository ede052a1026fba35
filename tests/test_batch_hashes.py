"""The batched, compiled stable hashes give exactly hashlib's SHA-256 and ``stable_hash64``'s values."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pyarrow as pa

from pipelines.algorithms.batch_hashes import sha256_first64, stable_hashes64
from pipelines.algorithms.hashes import stable_hash64, unit_interval


def test_sha256_matches_hashlib_at_every_padding_boundary_and_over_many_blocks() -> None:
    rng = random.Random(7)
    lengths = [*range(0, 130), 183, 447, 448, 1000, *(rng.randrange(2000) for _ in range(50))]
    messages = [rng.randbytes(n) for n in lengths]
    offsets = np.concatenate([[0], np.cumsum([len(m) for m in messages])])
    got = sha256_first64(np.frombuffer(b"".join(messages), np.uint8), offsets)
    want = [int.from_bytes(hashlib.sha256(m).digest()[:8], "big") for m in messages]
    assert got.dtype == np.uint64 and got.tolist() == want


def test_stable_hashes_are_stable_hash64_row_by_row() -> None:
    ids = ["doc-1", "módulo/ünïcode.py", "", "a\x1fb", "汉字", *(f"pkg/m{i}.py" for i in range(200))]
    duplicates = np.arange(len(ids)) % 7 - 2  # negative values too: str() of each, as stable_hash64 writes it
    got = stable_hashes64(("masks", 12345), ids, duplicates)
    assert got.tolist() == [stable_hash64("masks", 12345, d, int(k)) for d, k in zip(ids, duplicates, strict=True)]
    arrow = stable_hashes64(("validation",), pa.chunked_array([ids[:3], ids[3:]]))
    assert (arrow / 2.0**64).tolist() == [unit_interval("validation", d) for d in ids]
    assert stable_hashes64(("x", 1), [], []).tolist() == []
