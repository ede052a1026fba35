"""Which fine-tuning runs the evaluation makes: seeds, nested training subsets and step counts."""

from __future__ import annotations

import numpy as np
import pytest

from albert_lightning.evaluation.plan import (
    finetuning_seeds,
    finetuning_steps,
    random_init_seed,
    train_sizes,
    train_subset,
)
from pipelines.algorithms.seeding import stable_hash64


def test_seeds_are_derived_stably_and_more_seeds_keep_the_first() -> None:
    # Pinned: a change here changes every committed evaluation.
    assert finetuning_seeds(12345, 3) == [3224474347, 476288925, 4095372409]
    assert finetuning_seeds(12345, 5)[:3] == finetuning_seeds(12345, 3)
    assert finetuning_seeds(12346, 1) != finetuning_seeds(12345, 1)
    assert all(0 <= s < 2**32 for s in finetuning_seeds(7, 10))  # what seed_everything accepts
    assert random_init_seed(3224474347) not in finetuning_seeds(12345, 3)
    with pytest.raises(ValueError, match="at least one"):
        finetuning_seeds(12345, 0)


def test_subset_is_the_head_of_one_permutation_per_seed_and_task() -> None:
    order = np.random.default_rng(stable_hash64("train-subset", 3, "package")).permutation(10)
    assert train_subset(10, 3, "package", 4) == sorted(order[:4].tolist())
    # Pinned by hand from that permutation: a different generator or key would change them.
    assert train_subset(10, 3, "package", 4) == [1, 5, 6, 7]
    assert train_subset(10, 3, "package", 7) == [0, 1, 2, 3, 5, 6, 7]
    assert train_subset(10, 4, "package", 4) == [0, 2, 7, 8]  # another seed, another subset
    assert train_subset(10, 3, "other", 4) == [1, 2, 4, 6]  # another task, another subset


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_subsets_are_nested_deterministic_and_all_for_zero(seed: int) -> None:
    subsets = [train_subset(600, seed, "same_module", n) for n in (32, 128, 512)]
    assert [len(s) for s in subsets] == [32, 128, 512]
    assert set(subsets[0]) < set(subsets[1]) < set(subsets[2])
    assert subsets[0] == train_subset(600, seed, "same_module", 32)
    assert train_subset(600, seed, "same_module", 0) == train_subset(600, seed, "same_module", 900) == list(range(600))


def test_sizes_cap_at_the_training_set_and_drop_repeats() -> None:
    assert train_sizes([32, 128, 512, 0], 300) == [32, 128, 300]
    assert train_sizes([0], 57) == [57]
    assert train_sizes([128, 32], 1000) == [32, 128]


def test_steps_are_epochs_of_the_subset_between_the_floor_and_the_cap() -> None:
    assert finetuning_steps(32, epochs=3, batch_size=32, min_steps=30, max_steps=300) == 30  # 3 epochs: 3 steps
    assert finetuning_steps(512, epochs=3, batch_size=32, min_steps=30, max_steps=300) == 48  # ceil(3·512/32)
    assert finetuning_steps(500, epochs=2.5, batch_size=32, min_steps=30, max_steps=300) == 40  # ceil(39.06)
    assert finetuning_steps(5000, epochs=3, batch_size=32, min_steps=30, max_steps=300) == 300
    assert finetuning_steps(5000, epochs=3, batch_size=32, min_steps=30, max_steps=-1) == 469
