"""Which fine-tuning learning rate each start gets: the best of a small grid on a slice of the training set.

The paper fine-tunes each task at the best of a few learning rates. A rate good for a random start is not the
rate for a pretrained one (and the reverse): with one shared rate, the comparison measures the rate as much as
pretraining. Here each start (pretrained, random init) fine-tunes once per rate on the training examples outside
a held slice, is scored on that slice with the task's primary metric, and keeps its best rate for every run of
the task. Dev and test are never looked at, so the scores stay unbiased estimates. Ties go to the first rate of
the grid. A one-rate grid skips the selection. Tests: ``python -m pytest tests/test_lr_selection.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from albert_lightning.evaluation.finetuning import start_names, starts
from albert_lightning.evaluation.plan import finetuning_seeds
from albert_lightning.model import AlbertForPreTraining
from pipelines.algorithms.hashes import unit_interval

__all__ = ["HeldSlice", "LrChoice", "SelectionConfig", "choose_lr", "choose_lrs", "fixed_rate", "selection_split"]


@dataclass(frozen=True)
class LrChoice:
    """The rate a start fine-tunes at, and each rate's score on the held slice (empty for a one-rate grid)."""

    lr: float
    scores: dict[str, float]

    def to_json(self) -> dict:
        return {"lr": self.lr, "slice_scores": self.scores}


def selection_split(ids: Sequence[str], task: str, fraction: float) -> tuple[list[int], list[int]]:
    """Returns the indices (ascending) of the examples to fine-tune on and of the held slice to score on.

    The slice is the ``round(fraction × n)`` examples (at least one) whose stable hash of (task, example id) is
    smallest: the same slice for every start, rate and seed, and of the asked size even for a dozen examples.

    Raises:
        ValueError: ``fraction`` leaves one side empty.
    """
    order = sorted(range(len(ids)), key=lambda i: (unit_interval("lr-slice", task, ids[i]), i))
    count = max(1, round(fraction * len(ids))) if fraction > 0 else 0
    held, fit = sorted(order[:count]), sorted(order[count:])
    if not held or not fit:
        raise ValueError(
            f"task {task}: a selection fraction of {fraction} over {len(ids)} training examples leaves "
            f"{len(fit)} to fine-tune on and {len(held)} to score; change evaluate.lr_selection_fraction"
        )
    return fit, held


def fixed_rate(lrs: Sequence[float], starts: Sequence[str]) -> dict[str, LrChoice] | None:
    """The choices when there is nothing to choose: every start at a one-rate grid's rate; None for a grid.

    Raises:
        ValueError: an empty grid.
    """
    if not lrs:
        raise ValueError("evaluate.lrs is empty: give at least one fine-tuning learning rate")
    return dict.fromkeys(starts, LrChoice(lrs[0], {})) if len(lrs) == 1 else None


def choose_lr(lrs: Sequence[float], score: Callable[[float], float]) -> LrChoice:
    """Returns the rate of ``lrs`` whose fine-tuning ``score(lr)`` rates highest (the first on ties).

    Raises:
        ValueError: an empty grid.
    """
    if not lrs:
        raise ValueError("evaluate.lrs is empty: give at least one fine-tuning learning rate")
    scores = {f"{lr:g}": score(lr) for lr in lrs}
    best = max(range(len(lrs)), key=lambda i: (scores[f"{lrs[i]:g}"], -i))
    return LrChoice(lrs[best], scores)


class SelectionConfig(Protocol):
    """The knobs of ``evaluate``'s config the choice reads."""

    lrs: list[float]
    lr_selection_fraction: float
    seed: int
    random_baseline: bool


@dataclass(frozen=True)
class HeldSlice:
    """Which training examples a rate is tried on: indices to fine-tune on, to score on, and the seed to do it with."""

    fit: list[int]
    held: list[int]
    seed: int


def choose_lrs(
    pretrained: AlbertForPreTraining,
    config: SelectionConfig,
    ids: Sequence[str],
    task: str,
    score: Callable[[AlbertForPreTraining, HeldSlice, float], float],
) -> dict[str, LrChoice]:
    """Each start's fine-tuning rate (``fixed_rate``, else ``choose_lr`` over ``config.lrs``) for the task ``task``
    whose training examples are ``ids``: sentence tasks and reading tasks choose the same way.

    Args:
        score: ``score(network, part, lr)`` fine-tunes a copy of ``network`` at ``lr`` on ``part.fit`` with
            ``part.seed`` and returns the task's primary score on ``part.held``. The slice is ``selection_split``'s,
            the seed is the first fine-tuning seed; dev and test play no part.
    """
    fixed = fixed_rate(config.lrs, start_names(config.random_baseline))
    if fixed is not None:
        return fixed
    seed = finetuning_seeds(config.seed, 1)[0]
    part = HeldSlice(*selection_split(ids, task, config.lr_selection_fraction), seed)
    return {
        start: choose_lr(config.lrs, functools.partial(score, network, part))
        for start, network in starts(pretrained, seed, config.random_baseline)
    }
