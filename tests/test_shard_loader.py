"""Tests for albert_lightning.pretraining.data: global batches at any world size, epochs, loader state, masks, collate.

Training through the loader (exact mid-epoch resumption, FSDP data parallelism) is in test_pretraining.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from albert_lightning.pretraining.data import IGNORE_INDEX, EpochBatchSampler, ShardDataModule, ShardDataset, collate

NUM_SPECIAL = 5  # <pad> <unk> [CLS] [SEP] [MASK]: never masked


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("epoch", [0, 1])
def test_every_world_size_sees_the_same_global_batches(world_size, epoch):
    size, batch_size = 103, 3  # not a multiple of any global batch: the incomplete last one is dropped

    def batches(batch, rank, world):
        sampler = EpochBatchSampler(size, batch, rank, world, seed=5)
        sampler.epoch = epoch
        return list(sampler)

    whole = batches(batch_size * world_size, 0, 1)
    ranks = [batches(batch_size, rank, world_size) for rank in range(world_size)]
    assert all(len(rank) == len(whole) == size // (batch_size * world_size) for rank in ranks)
    for g, expected in enumerate(whole):
        assert [key for rank in ranks for key in rank[g]] == expected  # rank r holds the r-th block
    assert {e for batch in whole for e, _ in batch} == {epoch}


def test_each_epoch_is_a_new_permutation_fixed_by_seed_and_epoch():
    def order(seed: int, epoch: int) -> list[int]:
        sampler = EpochBatchSampler(40, 4, seed=seed)
        sampler.epoch = epoch
        return [index for batch in sampler for _, index in batch]

    assert sorted(order(0, 0)) == sorted(order(0, 1)) == list(range(40))
    assert order(0, 0) != order(0, 1)
    assert order(1, 0) != order(0, 0)
    assert order(0, 1) == order(0, 1)


def test_the_sampler_moves_to_the_next_epoch_when_it_hands_out_the_last_batch():
    sampler = EpochBatchSampler(40, 4, seed=3)
    first, second = list(sampler), list(sampler)
    assert {e for b in first for e, _ in b} == {0} and {e for b in second for e, _ in b} == {1}
    # Lightning stops asking after len(sampler) batches without exhausting the pass: that is the end too.
    sampler = EpochBatchSampler(40, 4, seed=3)
    passing = iter(sampler)
    [next(passing) for _ in range(len(sampler) - 1)]
    assert sampler.epoch == 0  # a run stopped by max_steps stays in its epoch
    next(passing)
    assert sampler.epoch == 1


def test_a_resumed_sampler_continues_the_epoch_after_the_batches_done():
    sampler = EpochBatchSampler(40, 4, seed=3)
    sampler.epoch = 2
    expected = list(sampler)
    resumed = EpochBatchSampler(40, 4, seed=3)
    resumed.epoch, resumed.skip = 2, 7
    assert list(resumed) == expected[7:]
    assert {e for b in resumed for e, _ in b} == {3}  # then the next epoch, from its start


def test_loader_state_from_another_world_size_is_refused_naming_both(pipeline_run):
    writer = ShardDataModule(str(pipeline_run.shards), batch_size=4, seed=1)
    writer.trainer = SimpleNamespace(global_rank=0, world_size=2)
    state = writer.state_dict()
    reader = ShardDataModule(str(pipeline_run.shards), batch_size=4, seed=1)
    reader.trainer = SimpleNamespace(global_rank=0, world_size=4)
    with pytest.raises(ValueError, match=r"written with \{.*'world_size': 2.*this run has \{.*'world_size': 4"):
        reader.load_state_dict(state)
    reader.trainer = SimpleNamespace(global_rank=3, world_size=2)
    reader.load_state_dict(state)  # the same world size: any rank resumes


def originals(row: dict) -> np.ndarray:
    """The row's tokens before masking: masked_lm_ids scattered back to their positions."""
    tokens = row["input_ids"].astype(np.int64)
    tokens[row["masked_lm_positions"].astype(np.int64)] = row["masked_lm_ids"]
    return tokens


def test_dynamic_masks_change_every_epoch_over_the_same_originals_and_keep_the_invariants(pipeline_run):
    static = ShardDataset(pipeline_run.shards, "train", "static", seed=1)
    dynamic = ShardDataset(pipeline_run.shards, "train", "dynamic", seed=1)
    config = dynamic.manifest.masking
    sample = range(0, len(static), len(static) // 50)
    changed = 0
    for index in sample:
        row = static[index]
        tokens = originals(row)
        epochs = [dynamic[(epoch, index)] for epoch in (0, 1)]
        for masked in epochs:
            positions = masked["masked_lm_positions"]
            np.testing.assert_array_equal(originals(masked), tokens)
            np.testing.assert_array_equal(masked["token_type_ids"], row["token_type_ids"])
            assert np.all(np.diff(positions) > 0)  # sorted, unique
            assert np.all(tokens[positions] >= NUM_SPECIAL)  # [CLS], [SEP] and the others are never masked
            budget = min(config.max_predictions_per_seq, max(1, round(len(tokens) * config.masked_lm_prob)))
            assert 0 < len(positions) <= budget
            untouched = np.setdiff1d(np.arange(len(tokens)), positions)
            np.testing.assert_array_equal(masked["input_ids"][untouched], tokens[untouched])
        changed += not np.array_equal(epochs[0]["masked_lm_positions"], epochs[1]["masked_lm_positions"])
        for key, value in dynamic[(1, index)].items():  # drawn from (seed, epoch, row) alone
            np.testing.assert_array_equal(value, epochs[1][key])
    assert changed >= 0.9 * len(sample)


@pytest.mark.parametrize("masking", ["static", "dynamic"])
def test_a_batch_read_at_once_equals_its_rows_read_one_by_one(pipeline_run, masking):
    """DataLoader reads a batch through __getitems__ (every shard it touches at once, masked in one call)."""
    dataset = ShardDataset(pipeline_run.shards, "train", masking, seed=3)
    keys = [(2, int(i)) for i in np.random.default_rng(0).permutation(len(dataset))[:40]]
    batch = dataset.__getitems__(keys)
    assert len(dataset.paths) > 1 and len(np.unique(np.searchsorted(dataset.starts, batch.index, "right"))) > 1
    for i, key in enumerate(keys):
        alone = dataset[key]
        for name, value in batch.row(i).items():
            np.testing.assert_array_equal(value, alone[name], err_msg=name)
    assert batch.index.tolist() == [index for _, index in keys]


def test_collate_pads_to_a_multiple_of_8_with_a_matching_attention_mask(pipeline_run):
    dataset = ShardDataset(pipeline_run.shards, "train")
    rows = [dataset[i] for i in range(0, len(dataset), len(dataset) // 9)][:9]
    batch = collate(rows)
    lengths = [len(r["input_ids"]) for r in rows]
    B, T = batch["input_ids"].shape
    assert B == 9 and T % 8 == 0 and max(lengths) <= T < max(lengths) + 8
    assert batch["attention_mask"].sum(1).tolist() == lengths
    for i, row in enumerate(rows):
        n, p = lengths[i], len(row["masked_lm_positions"])
        assert batch["attention_mask"][i, :n].all() and not batch["attention_mask"][i, n:].any()
        assert batch["input_ids"][i, :n].tolist() == row["input_ids"].tolist() and not batch["input_ids"][i, n:].any()
        assert batch["token_type_ids"][i, :n].tolist() == row["token_type_ids"].tolist()
        assert batch["masked_lm_positions"][i, :p].tolist() == row["masked_lm_positions"].tolist()
        assert batch["masked_lm_ids"][i, :p].tolist() == row["masked_lm_ids"].tolist()
        assert (batch["masked_lm_ids"][i, p:] == IGNORE_INDEX).all()  # the loss skips padded predictions
    assert batch["index"].tolist() == [int(r["index"]) for r in rows]
    assert batch["sentence_order_label"].tolist() == [int(r["sentence_order_label"]) for r in rows]


def test_validation_gives_every_rank_the_same_number_of_batches() -> None:
    # 58 rows, batch 4, 2 ranks: rank 1's block of the last global batch would be empty without padding.
    counts = [len(list(EpochBatchSampler(58, 4, rank, 2, shuffle=False, drop_last=False))) for rank in range(2)]
    assert counts == [8, 8]
    seen = {i for rank in range(2) for batch in EpochBatchSampler(58, 4, rank, 2, shuffle=False, drop_last=False)
            for _, i in batch}  # fmt: skip
    assert seen == set(range(58))
