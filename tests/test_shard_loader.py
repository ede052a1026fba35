"""Tests for albert_lightning.pretraining.data: global batches at any world size, epochs, loader state, masks, collate.

Training through the loader (exact mid-epoch resumption, FSDP data parallelism) is in test_pretraining.py, and
resumption on other world sizes in test_elastic_resume.py.
"""

from __future__ import annotations

from pathlib import Path
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


def loader(shards: Path, world_size: int, batch_size: int = 4, seed: int = 1) -> ShardDataModule:
    """A data module as rank 0 of ``world_size`` sees it, resuming ``last.ckpt``."""
    module = ShardDataModule(str(shards), batch_size=batch_size, seed=seed)
    module.trainer = SimpleNamespace(global_rank=0, world_size=world_size, ckpt_path="last.ckpt")
    return module


def test_loader_state_resumes_at_the_same_sample_on_any_world_size_and_batch_size(pipeline_run):
    # 6 global batches of 4 × 2 ranks: sample 48 of epoch 3, wherever and however it is resumed.
    state = {"epoch": 3, "batches": 6, "seed": 1, "world_size": 2, "batch_size": 4}
    for world, batch_size, batches in [(2, 4, 6), (4, 4, 3), (1, 4, 12), (8, 2, 3), (3, 2, 8), (1, 48, 1)]:
        reader = loader(pipeline_run.shards, world, batch_size)
        reader.load_state_dict(state)
        assert reader.state_dict() == {"epoch": 3, "batches": batches, "seed": 1, "world_size": world,
                                       "batch_size": batch_size}  # fmt: skip
        sampler = reader.train_dataloader().batch_sampler
        assert (sampler.epoch, sampler.skip) == (3, batches)


def test_a_loader_built_before_the_checkpoint_is_restored_still_resumes(pipeline_run):
    # Lightning builds it first when configure_optimizers asks for estimated_stepping_batches.
    reader = loader(pipeline_run.shards, 2)
    sampler = reader.train_dataloader().batch_sampler
    reader.load_state_dict({"epoch": 1, "batches": 4, "seed": 1, "world_size": 1, "batch_size": 4})
    assert (sampler.epoch, sampler.skip) == (1, 2)


@pytest.mark.parametrize(
    ("state", "world", "message"),
    [
        ({"seed": 2}, 2, r"^last\.ckpt: cannot resume the data loader exactly: its epochs are drawn with seed 2, "
                         r"this run's with 1; resume with --data\.seed 2$"),
        ({"batches": 3}, 4, r"^last\.ckpt: cannot resume the data loader exactly: it stopped 24 samples into epoch 0 "
                            r"\(global batches of 4 rows × 2 ranks\), which this run's global batch of 4 rows × 4 "
                            r"ranks = 16 does not divide; resume with a global batch that divides 24$"),
        ({"batches": 3, "world_size": 1}, 8, r"of 4 rows × 1 rank\), which this run's global batch of 4 rows × 8 "
                                             r"ranks = 32 does not divide; resume with a global batch that divides"),
        ({"batches": 10**6}, 2, r"^last\.ckpt: cannot resume the data loader exactly: it stopped 8000000 samples into "
                                r"epoch 0, and .* holds \d+ training rows; resume on the shards it was written with$"),
    ],
)  # fmt: skip
def test_a_loader_state_that_cannot_be_resumed_exactly_is_refused_in_one_line_naming_the_checkpoint(
    pipeline_run, state, world, message
):
    reader = loader(pipeline_run.shards, world)
    with pytest.raises(ValueError, match=message):
        reader.load_state_dict({"epoch": 0, "batches": 3, "seed": 1, "world_size": 2, "batch_size": 4, **state})


def test_a_position_in_the_new_global_batchs_dropped_tail_resumes_at_the_next_epoch(pipeline_run):
    rows = len(ShardDataset(pipeline_run.shards, "train"))
    batches = rows // 4 - 1  # one batch of 4 short of the epoch's end...
    reader = loader(pipeline_run.shards, 1, batch_size=4 * batches)  # ...under one of these: the dropped tail
    reader.load_state_dict({"epoch": 0, "batches": batches, "seed": 1, "world_size": 1, "batch_size": 4})
    assert (reader.state_dict()["epoch"], reader.state_dict()["batches"]) == (1, 0)


def progress(ready: int) -> dict:
    """A checkpoint's loops as Lightning writes them in on_train_batch_end, ``ready`` batches into the epoch (and
    the run): the batch in hand is not counted completed yet."""
    counters = dict.fromkeys(("ready", "started", "processed"), ready) | {"completed": ready - 1}
    return {"loops": {"fit_loop": {"epoch_loop.batch_progress": {"current": counters, "total": dict(counters)}}}}


@pytest.mark.parametrize(
    ("written", "world", "lightning", "expected"),
    [
        ((0, 6), 2, 6, 6),  # the same world size: Lightning's count stands
        ((0, 6), 4, 6, 3),  # twice the global batch: half the batches
        ((0, 6), 1, 6, 12),
        ((1, 0), 2, None, None),  # an epoch just finished: Lightning's count is the epoch's end, at this run's size
        ((1, 0), 4, None, None),
    ],
)
def test_lightnings_count_of_the_epochs_batches_is_rewritten_to_this_runs_global_batches(
    pipeline_run, written, world, lightning, expected
):
    rows = len(ShardDataset(pipeline_run.shards, "train"))
    epoch, batches = written
    if lightning is None:  # the checkpoint's epoch ended at its last batch of 4 × 2
        lightning, expected = rows // 8, rows // (4 * world)
    checkpoint = progress(lightning)
    checkpoint["ShardDataModule"] = {"epoch": epoch, "batches": batches, "seed": 1, "world_size": 2, "batch_size": 4}
    loader(pipeline_run.shards, world).align_epoch_progress(checkpoint)
    current = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
    assert current == {"ready": expected, "started": expected, "processed": expected, "completed": expected - 1}
    assert checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]["total"]["ready"] == lightning  # steps: kept


def test_a_checkpoint_without_loader_state_or_loops_is_left_alone(pipeline_run):
    no_loader = progress(5)
    loader(pipeline_run.shards, 4).align_epoch_progress(no_loader)
    assert no_loader == progress(5)
    no_loops = {"ShardDataModule": {"epoch": 0, "batches": 4, "seed": 1, "world_size": 2, "batch_size": 4}}
    loader(pipeline_run.shards, 4).align_epoch_progress(no_loops)
    assert no_loops == {"ShardDataModule": {"epoch": 0, "batches": 4, "seed": 1, "world_size": 2, "batch_size": 4}}


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
