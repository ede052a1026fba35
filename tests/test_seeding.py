"""The compiled Mersenne Twister draws what CPython's ``random.Random`` draws, for every kind of 64-bit seed."""

from __future__ import annotations

import random

import numpy as np

from pipelines.algorithms.seeding import mersenne_random, mersenne_seed, mersenne_states


def test_mersenne_draws_are_cpythons_for_every_seed_width() -> None:
    rng = random.Random(0)
    # 0 and seeds below 2**32 make a one-word key, larger ones two words; 1,300 draws cross several twists.
    seeds = [0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1]
    seeds += [rng.getrandbits(rng.choice([20, 32, 40, 64])) for _ in range(60)]
    states = mersenne_states(len(seeds))
    mersenne_seed(states, np.array(seeds, dtype=np.uint64))  # side by side, as sop seeds its items
    for seed, state in zip(seeds, states, strict=True):
        expected = random.Random(seed)
        assert [mersenne_random(state) for _ in range(1300)] == [expected.random() for _ in range(1300)], seed


def test_seeding_again_restarts_the_stream() -> None:
    states = mersenne_states(1)
    mersenne_seed(states, np.array([12345], np.uint64))
    first = [mersenne_random(states[0]) for _ in range(5)]
    mersenne_seed(states, np.array([12345], np.uint64))
    assert [mersenne_random(states[0]) for _ in range(5)] == first
