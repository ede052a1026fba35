"""Training data over the Arrow shards: a memory-mapped dataset, a resumable rank-aware sampler, collate.

- ``ShardDataset`` opens shards only through ``manifest.json`` and reads rows as zero-copy numpy views of the
  memory-mapped files. Masks are either as stored (static, the ALBERT paper) or drawn again for every
  (seed, epoch, row) with the pipeline's own ``mask_ngrams`` (dynamic, RoBERTa).
- ``EpochBatchSampler`` draws one permutation per (seed, epoch), the same on every rank; global batch g is
  ``perm[g·W·B : (g+1)·W·B]`` and rank r takes the r-th block of B, so any world size sees the same global
  batches. Its state (epoch, batches done, seed, world size) makes mid-epoch resumption exact.
- ``ShardDataModule`` ties them together for Lightning and checkpoints the loader position.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import lightning as L
import numpy as np
import pyarrow as pa
import sentencepiece as spm
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from pipelines.masking import MaskingConfig, TokenClasses, mask_ngrams
from pipelines.seeding import rng_for
from pipelines.shards import SPIECE, Manifest

__all__ = ["EpochBatchSampler", "ShardDataModule", "ShardDataset", "collate"]

MASKING_MODES = ("static", "dynamic")
LIST_COLUMNS = ("input_ids", "token_type_ids", "masked_lm_positions", "masked_lm_ids")
IGNORE_INDEX = -100  # label of padded prediction slots: cross_entropy skips it


class _Shard:
    """One memory-mapped shard as flat numpy views: row i of a list column is values[offsets[i]:offsets[i+1]]."""

    def __init__(self, path: str) -> None:
        table = pa.ipc.open_file(pa.memory_map(path, "r")).read_all().combine_chunks()
        self.rows = table.num_rows
        self.lists = {}
        for name in LIST_COLUMNS:
            column = table.column(name).chunk(0) if table.num_rows else None
            offsets = column.offsets.to_numpy() if column is not None else np.zeros(1, np.int32)
            values = column.values.to_numpy() if column is not None else np.zeros(0, np.int64)
            self.lists[name] = (offsets, values)
        self.labels = table.column("sentence_order_label").to_numpy() if table.num_rows else np.zeros(0, np.int8)

    def row(self, i: int) -> dict[str, np.ndarray]:
        out = {name: values[offsets[i] : offsets[i + 1]] for name, (offsets, values) in self.lists.items()}
        out["sentence_order_label"] = self.labels[i]
        return out


class ShardDataset(Dataset):
    """Rows of one split; an item is addressed by (epoch, global row index), the epoch seeding dynamic masks."""

    def __init__(self, folder: str | os.PathLike, split: str, masking: str = "static", seed: int = 0) -> None:
        if masking not in MASKING_MODES:
            raise ValueError(f"masking={masking!r}: choose one of {MASKING_MODES}")
        self.manifest = Manifest.read(folder)
        self.paths = self.manifest.paths(folder, split)
        self.counts = np.array([s.rows for s in self.manifest.split(split)], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)])
        self.masking, self.seed = masking, seed
        self.spiece = os.path.join(folder, SPIECE)
        params = self.manifest.params
        self.masking_config = MaskingConfig(
            params["masked_lm_prob"], params["max_predictions_per_seq"], params["ngram"], params["favor_shorter_ngram"]
        )
        self._shards: list[_Shard] | None = None  # opened lazily, once per worker process
        self._classes: TokenClasses | None = None

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _open(self) -> None:
        self._shards = [_Shard(p) for p in self.paths]
        sp = spm.SentencePieceProcessor(model_file=self.spiece)
        self._classes = TokenClasses.from_pieces([sp.id_to_piece(i) for i in range(sp.get_piece_size())])

    def __getitem__(self, key: tuple[int, int] | int) -> dict[str, Any]:
        epoch, index = key if isinstance(key, tuple) else (0, key)
        if self._shards is None:
            self._open()
        shard = int(np.searchsorted(self.starts, index, side="right") - 1)
        row = self._shards[shard].row(index - int(self.starts[shard]))
        row["index"] = index
        if self.masking == "dynamic":
            row.update(self._remask(row, epoch, index))
        return row

    def _remask(self, row: dict[str, Any], epoch: int, index: int) -> dict[str, np.ndarray]:
        original = row["input_ids"].astype(np.int64)
        original[row["masked_lm_positions"].astype(np.int64)] = row["masked_lm_ids"]
        rng = rng_for(self.seed, f"epoch{epoch}", index, "dynamic-masking")
        masked = mask_ngrams(original.tolist(), self._classes, self.masking_config, rng)
        return {
            "input_ids": np.asarray(masked.input_ids, dtype=np.int64),
            "masked_lm_positions": np.asarray(masked.positions, dtype=np.int64),
            "masked_lm_ids": np.asarray(masked.labels, dtype=np.int64),
        }


def collate(rows: list[dict[str, Any]], multiple: int = 8) -> dict[str, torch.Tensor]:
    """Pads a batch to its longest sequence, rounded up to ``multiple`` (tensor-core friendly shapes).

    Returns input_ids/token_type_ids/attention_mask [B, T], masked_lm_positions [B, P] (padding 0) and
    masked_lm_ids [B, P] (padding -100), sentence_order_label [B] and the rows' global index [B].
    """
    length = -(-max(len(r["input_ids"]) for r in rows) // multiple) * multiple
    predictions = max(1, max(len(r["masked_lm_positions"]) for r in rows))
    batch = {
        "input_ids": torch.zeros(len(rows), length, dtype=torch.long),
        "token_type_ids": torch.zeros(len(rows), length, dtype=torch.long),
        "attention_mask": torch.zeros(len(rows), length, dtype=torch.long),
        "masked_lm_positions": torch.zeros(len(rows), predictions, dtype=torch.long),
        "masked_lm_ids": torch.full((len(rows), predictions), IGNORE_INDEX, dtype=torch.long),
    }
    for i, row in enumerate(rows):
        n, p = len(row["input_ids"]), len(row["masked_lm_positions"])
        batch["input_ids"][i, :n] = torch.from_numpy(row["input_ids"].astype(np.int64))
        batch["token_type_ids"][i, :n] = torch.from_numpy(row["token_type_ids"].astype(np.int64))
        batch["attention_mask"][i, :n] = 1
        batch["masked_lm_positions"][i, :p] = torch.from_numpy(row["masked_lm_positions"].astype(np.int64))
        batch["masked_lm_ids"][i, :p] = torch.from_numpy(row["masked_lm_ids"].astype(np.int64))
    batch["sentence_order_label"] = torch.tensor([int(r["sentence_order_label"]) for r in rows], dtype=torch.long)
    batch["index"] = torch.tensor([int(r["index"]) for r in rows], dtype=torch.long)
    return batch


class EpochBatchSampler(Sampler[list[tuple[int, int]]]):
    """Yields this rank's batches of (epoch, index) for the current epoch, resuming after ``skip`` batches.

    The sampler counts epochs itself: handing out the last batch of an epoch moves ``epoch`` on, so the next
    pass is the next epoch. It cannot wait for the pass to be exhausted (Lightning stops asking at ``len``), nor
    follow Lightning's count: Lightning never calls ``set_epoch`` on a ``batch_sampler`` (``_set_sampler_epoch``
    looks at ``dataloader.sampler`` and ``batch_sampler.sampler`` only), and its epoch count runs one ahead of
    the data after resuming from a checkpoint written when ``max_steps`` stopped a run mid-epoch.

    Args:
        size: rows in the split.
        batch_size: rows per rank per batch.
        rank, world_size: this process's place among the data-parallel ranks.
        seed: with the epoch, seeds the permutation (identical on every rank).
        shuffle: False keeps file order (validation).
        drop_last: drop the final incomplete global batch (training); otherwise (validation) the final batch
            wraps around to the first rows, as ``DistributedSampler`` pads, so every rank runs the same number of
            batches and a collective inside a step can never wait on a rank that has finished.
    """

    def __init__(
        self,
        size: int,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
    ) -> None:
        self.size, self.batch_size, self.rank, self.world_size = size, batch_size, rank, world_size
        self.seed, self.shuffle, self.drop_last = seed, shuffle, drop_last
        self.epoch = 0
        self.skip = 0  # batches of this epoch already consumed before a resume

    def __len__(self) -> int:
        global_batch = self.batch_size * self.world_size
        return self.size // global_batch if self.drop_last else -(-self.size // global_batch)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        epoch = self.epoch
        order = np.random.default_rng([self.seed, epoch]).permutation(self.size) if self.shuffle else None
        global_batch = self.batch_size * self.world_size
        skip, self.skip = self.skip, 0
        for g in range(skip, len(self)):
            if g == len(self) - 1:
                self.epoch = epoch + 1
            first = g * global_batch + self.rank * self.batch_size
            if first >= self.size and self.size > 0:  # this rank's block of the last batch is all padding
                block = [i % self.size for i in range(first, first + self.batch_size)]
            else:
                block = list(range(first, min(first + self.batch_size, self.size)))
            yield [(epoch, int(order[i]) if order is not None else i) for i in block]


class ShardDataModule(L.LightningDataModule):
    """The pretraining shards for Lightning, with the loader position saved in every checkpoint.

    Args:
        data_dir: the instances stage's output folder (holds manifest.json).
        batch_size: sequences per device per micro-batch (global batch = batch_size × devices × accumulation).
        masking: "static" uses the masks stored in the shards (the paper); "dynamic" draws new ones per epoch.
        seed: seeds the per-epoch permutation and dynamic masks.
        num_workers: DataLoader worker processes per rank.
    """

    def __init__(
        self,
        data_dir: str = "data/shards",
        batch_size: int = 32,
        masking: str = "static",
        seed: int = 12345,
        num_workers: int = 1,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.data_dir, self.batch_size, self.masking = data_dir, batch_size, masking
        self.seed, self.num_workers = seed, num_workers
        self.manifest = Manifest.read(data_dir)
        self._train_sampler: EpochBatchSampler | None = None
        self._position = {"epoch": 0, "batches": 0}  # batches of the current epoch seen by training_step
        self._resume: dict[str, int] | None = None

    @property
    def vocab_size(self) -> int:
        return self.manifest.vocab_size

    @property
    def max_seq_length(self) -> int:
        return self.manifest.max_seq_length

    @property
    def inter_sentence(self) -> str:
        return self.manifest.params["inter_sentence"]

    def _rank_world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def train_dataloader(self) -> DataLoader:
        dataset = ShardDataset(self.data_dir, "train", self.masking, self.seed)
        rank, world = self._rank_world()
        self._train_sampler = EpochBatchSampler(len(dataset), self.batch_size, rank, world, self.seed)
        if self._resume is not None:
            self._train_sampler.epoch, self._train_sampler.skip = self._resume["epoch"], self._resume["batches"]
            self._resume = None
        return self._loader(dataset, self._train_sampler)

    def val_dataloader(self) -> DataLoader:
        dataset = ShardDataset(self.data_dir, "validation", "static", self.seed)
        rank, world = self._rank_world()
        sampler = EpochBatchSampler(len(dataset), self.batch_size, rank, world, shuffle=False, drop_last=False)
        return self._loader(dataset, sampler)

    def _loader(self, dataset: ShardDataset, sampler: EpochBatchSampler) -> DataLoader:
        return DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=collate,
            num_workers=self.num_workers,
            persistent_workers=False,
            pin_memory=torch.cuda.is_available(),
        )

    def on_after_batch_transfer(self, batch: dict[str, torch.Tensor], dataloader_idx: int) -> dict[str, torch.Tensor]:
        # Runs right before training_step, so the count is of batches the model has actually been given.
        # Counted here, not read from the sampler: DataLoader workers prefetch, so the sampler may already be in
        # the next epoch while the last batches of this one are still to come.
        if self.trainer is not None and self.trainer.training and self._train_sampler is not None:
            epoch, batches = self._position["epoch"], self._position["batches"] + 1
            if batches == len(self._train_sampler):  # epoch complete: the sampler's next pass is the next one
                epoch, batches = epoch + 1, 0
            self._position = {"epoch": epoch, "batches": batches}
        return batch

    def state_dict(self) -> dict[str, Any]:
        world = self._rank_world()[1]
        return {**self._position, "seed": self.seed, "world_size": world, "batch_size": self.batch_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        world = self._rank_world()[1]
        mine = {"seed": self.seed, "world_size": world, "batch_size": self.batch_size}
        theirs = {k: state[k] for k in mine}
        if mine != theirs:
            raise ValueError(
                f"cannot resume the data loader exactly: the checkpoint was written with {theirs}, this run has "
                f"{mine}; resume with the same seed, devices and batch size"
            )
        self._position = {"epoch": state["epoch"], "batches": state["batches"]}
        self._resume = dict(self._position)
