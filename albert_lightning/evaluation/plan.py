"""Which fine-tuning runs the evaluation makes: the seeds, the nested training subsets and their step counts (pure).

Every choice is a function of ``evaluate.seed`` and the task's name through
``pipelines.algorithms.seeding.stable_hash64`` (the same on every machine and process), so two evaluations of one
checkpoint fine-tune on the same examples in the same order. Tests: ``python -m pytest tests/test_plan.py``.
"""

from __future__ import annotations

import math

import numpy as np

from pipelines.algorithms.seeding import stable_hash64

__all__ = ["finetuning_seeds", "finetuning_steps", "random_init_seed", "train_sizes", "train_subset"]


def finetuning_seeds(seed: int, count: int) -> list[int]:
    """Returns ``count`` fine-tuning seeds derived from ``seed``; asking for more keeps the first ones.

    The seeds fit in 32 bits, as ``lightning.seed_everything`` requires.

    Raises:
        ValueError: ``count`` is below 1.
    """
    if count < 1:
        raise ValueError(f"evaluate.seeds is {count}; expected at least one fine-tuning seed")
    return [stable_hash64("finetune", seed, i) % 2**32 for i in range(count)]


def random_init_seed(seed: int) -> int:
    """Returns the seed of the random-init weights of fine-tuning ``seed``: a stream of its own, so the weights
    are not the classifier's and dropout's draws (which ``seed`` itself seeds) over again."""
    return stable_hash64("random-init", seed) % 2**32


def train_subset(num_examples: int, seed: int, task: str, size: int) -> list[int]:
    """Returns the indices (ascending) of the ``size`` training examples one fine-tuning seed trains on.

    The subset is the first ``size`` entries of one permutation per (seed, task), so for a seed the subset of 32
    lies inside that of 128, and a learning curve adds examples rather than swapping them.

    Args:
        num_examples: How many training examples the task has.
        seed: The fine-tuning seed.
        task: The task's name: each task gets its own permutation.
        size: Examples wanted; 0, or at least ``num_examples``, means all of them.
    """
    if size <= 0 or size >= num_examples:
        return list(range(num_examples))
    order = np.random.default_rng(stable_hash64("train-subset", seed, task)).permutation(num_examples)
    return sorted(int(i) for i in order[:size])


def train_sizes(sizes: list[int], num_examples: int) -> list[int]:
    """Returns the distinct training-set sizes ``sizes`` ask for, ascending; 0 (and anything larger) is all."""
    return sorted({num_examples if size <= 0 else min(size, num_examples) for size in sizes})


def finetuning_steps(size: int, epochs: float, batch_size: int, min_steps: int, max_steps: int) -> int:
    """Optimizer steps for ``size`` examples: ``epochs`` passes, at least ``min_steps``, at most ``max_steps``.

    A set of 32 examples is one batch: an epoch count alone would give it a handful of steps, too few to move
    the classifier off its random start, hence the floor. ``max_steps`` of -1 (or 0) means no cap.
    """
    steps = max(min_steps, math.ceil(epochs * size / batch_size), 1)
    return min(steps, max_steps) if max_steps > 0 else steps
