"""Tests for albert_lightning.evaluation.lr_selection: the held slice and the choice
(an evaluation that chooses per start: tests/test_evaluate.py)."""

from __future__ import annotations

import pytest

from albert_lightning.evaluation.lr_selection import LrChoice, choose_lr, fixed_rate, selection_split


def test_the_slice_is_stable_disjoint_and_of_the_asked_size():
    ids = [f"q{i}" for i in range(50)]
    fit, held = selection_split(ids, "returns", 0.2)
    assert len(held) == 10 and sorted(fit + held) == list(range(50)) and not set(fit) & set(held)
    assert selection_split(ids, "returns", 0.2) == (fit, held)  # a function of task and ids alone
    assert selection_split(ids, "package", 0.2)[1] != held  # each task its own slice
    assert selection_split(ids[:12], "returns", 0.05)[1]  # at least one example to score on
    shuffled = list(reversed(ids))
    assert sorted(shuffled[i] for i in selection_split(shuffled, "returns", 0.2)[1]) == sorted(ids[i] for i in held)


def test_a_slice_that_leaves_nothing_to_train_on_is_refused():
    with pytest.raises(ValueError, match=r"task returns: a selection fraction of 1\.0 over 3 training examples"):
        selection_split(["a", "b", "c"], "returns", 1.0)


def test_the_best_rate_wins_and_ties_go_to_the_first():
    scores = {1e-4: 0.5, 1e-3: 0.7, 1e-2: 0.7}
    tried = []

    def score(lr: float) -> float:
        tried.append(lr)
        return scores[lr]

    assert choose_lr([1e-4, 1e-3, 1e-2], score) == LrChoice(1e-3, {"0.0001": 0.5, "0.001": 0.7, "0.01": 0.7})
    assert tried == [1e-4, 1e-3, 1e-2]
    with pytest.raises(ValueError, match=r"evaluate\.lrs is empty"):
        choose_lr([], score)


def test_a_one_rate_grid_needs_no_selection():
    assert fixed_rate([3e-4], ("pretrained", "random_init")) == {
        "pretrained": LrChoice(3e-4, {}),
        "random_init": LrChoice(3e-4, {}),
    }
    assert fixed_rate([1e-4, 1e-3], ("pretrained",)) is None
