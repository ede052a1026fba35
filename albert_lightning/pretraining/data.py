"""Training data over the Arrow shards: a memory-mapped dataset, a resumable rank-aware sampler, collate.

- ``ShardDataset`` opens shards only through ``manifest.json`` and reads rows as zero-copy numpy views of the
  memory-mapped files, a whole batch at a time. Masks are either as stored (static, the ALBERT paper) or drawn
  again for every (seed, epoch, row) with the pipeline's own ``mask_batch`` (dynamic, RoBERTa).
- ``EpochBatchSampler`` draws one permutation per (seed, epoch), the same on every rank and at every world size;
  global batch g is ``perm[g·W·B : (g+1)·W·B]`` and rank r takes the r-th block of B, so the run reads the
  permutation in order whatever W and B are.
- ``ShardDataModule`` ties them together for Lightning and checkpoints the loader position, which names a sample
  of the epoch's permutation: a run resumes there exactly, at its own world size and batch size or at others. A
  remote ``data_dir`` (s3://...) is read from a local copy that ``bucket_cache`` downloads once and checks.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import lightning as L
import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from albert_lightning.pretraining.bucket_cache import is_remote, local_folder
from pipelines.algorithms.masking import TokenClasses, mask_batch
from pipelines.algorithms.seeding import mix_keys, stable_hash64
from pipelines.algorithms.vocabulary import token_classes
from pipelines.contracts.manifest import Manifest
from pipelines.contracts.shards import open_shard

__all__ = ["EpochBatchSampler", "ShardDataModule", "ShardDataset", "collate"]

MASKING_MODES = ("static", "dynamic")
LIST_COLUMNS = ("input_ids", "token_type_ids", "masked_lm_positions", "masked_lm_ids")
JOINS = "joins_word"  # the list column of shards whose words a segmenter made (manifest.shard_schema)
IGNORE_INDEX = -100  # label of padded prediction slots: cross_entropy skips it


@dataclass
class Rows:
    """A batch of rows as flat columns: row i's tokens are ``input_ids[offsets[i]:offsets[i + 1]]`` and its
    predictions ``masked_lm_positions[prediction_offsets[i]:prediction_offsets[i + 1]]``."""

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    offsets: np.ndarray
    masked_lm_positions: np.ndarray
    masked_lm_ids: np.ndarray
    prediction_offsets: np.ndarray
    sentence_order_label: np.ndarray
    index: np.ndarray  # the rows' global indices in the split
    joins_word: np.ndarray | None = None  # laid out as input_ids, when a word segmenter made the shards' words

    def __len__(self) -> int:
        return len(self.index)

    def row(self, i: int) -> dict[str, Any]:
        """Returns row i as a dict of numpy arrays (with its ``index`` and ``sentence_order_label``)."""
        tokens = slice(self.offsets[i], self.offsets[i + 1])
        predictions = slice(self.prediction_offsets[i], self.prediction_offsets[i + 1])
        return {
            "input_ids": self.input_ids[tokens],
            "token_type_ids": self.token_type_ids[tokens],
            "masked_lm_positions": self.masked_lm_positions[predictions],
            "masked_lm_ids": self.masked_lm_ids[predictions],
            "sentence_order_label": self.sentence_order_label[i],
            "index": int(self.index[i]),
        }

    @classmethod
    def concatenate(cls, pieces: dict[str, list[np.ndarray]], labels: np.ndarray, index: np.ndarray) -> Rows:
        """Returns the batch whose row i has ``pieces[column][i]`` in each list column."""
        columns = {name: np.concatenate(parts) if parts else np.zeros(0, np.int64) for name, parts in pieces.items()}
        return cls(
            columns["input_ids"], columns["token_type_ids"], _offsets(map(len, pieces["input_ids"])),
            columns["masked_lm_positions"], columns["masked_lm_ids"], _offsets(map(len, pieces["masked_lm_positions"])),
            np.asarray(labels), np.asarray(index), columns.get(JOINS),
        )  # fmt: skip

    @classmethod
    def from_dicts(cls, rows: Sequence[dict[str, Any]]) -> Rows:
        """Returns the batch of ``row`` dicts (as ``ShardDataset[key]`` gives them)."""
        pieces = {name: [np.asarray(r[name]) for r in rows] for name in LIST_COLUMNS}
        labels, index = [r["sentence_order_label"] for r in rows], [r["index"] for r in rows]
        return cls.concatenate(pieces, np.array(labels, dtype=np.int8), np.array(index, dtype=np.int64))


def _offsets(lengths: Iterable[int] | np.ndarray) -> np.ndarray:
    lengths = lengths if isinstance(lengths, np.ndarray) else np.fromiter(lengths, dtype=np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


class _Shard:
    """One memory-mapped shard as flat numpy views: row i of a list column is values[offsets[i]:offsets[i+1]]."""

    def __init__(self, path: str, schema: pa.Schema) -> None:
        table = open_shard(path, schema).combine_chunks()  # the contract's reader: names the file, checks the schema
        self.rows = table.num_rows
        self.lists = {}
        for name in (*LIST_COLUMNS, JOINS) if JOINS in schema.names else LIST_COLUMNS:
            column = table.column(name).chunk(0) if table.num_rows else None
            offsets = column.offsets.to_numpy() if column is not None else np.zeros(1, np.int32)
            values = column.values.to_numpy() if column is not None else np.zeros(0, np.int64)
            self.lists[name] = (offsets, values)
        self.labels = table.column("sentence_order_label").to_numpy() if table.num_rows else np.zeros(0, np.int8)


class ShardDataset(Dataset):
    """Rows of one split; an item is addressed by (epoch, global row index), the epoch seeding dynamic masks.

    ``dataset[key]`` gives one row as a dict; ``dataset.__getitems__(keys)``, which ``DataLoader`` calls for a
    whole batch, gives ``Rows`` and masks them in one call.
    """

    def __init__(
        self, folder: str | os.PathLike, split: str, masking: str = "static", seed: int = 0, verify: bool = True
    ) -> None:
        if masking not in MASKING_MODES:
            raise ValueError(f"masking={masking!r}: choose one of {MASKING_MODES}")
        # verify: every shard's size and sha256 against the manifest, and the vocabulary's id layout.
        self.manifest = Manifest.read(folder, verify=verify)
        self.paths = self.manifest.paths(folder, split)
        self.counts = np.array([s.rows for s in self.manifest.split(split)], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)])
        self.masking, self.seed = masking, seed
        self.folder = os.fspath(folder)
        if verify:
            self.manifest.vocabulary(self.folder)
        self._key = np.uint64(stable_hash64("dynamic-masking", seed))
        self._shards: list[_Shard] | None = None  # opened lazily, once per worker process
        self._classes: TokenClasses | None = None

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _open(self) -> None:
        self._shards = [_Shard(p, self.manifest.schema) for p in self.paths]
        self._classes = token_classes(self.manifest.vocabulary(self.folder))

    def __getitem__(self, key: tuple[int, int] | int) -> dict[str, Any]:
        return self.__getitems__([key]).row(0)

    def __getitems__(self, keys: Sequence[tuple[int, int] | int]) -> Rows:
        if self._shards is None:
            self._open()
        pairs = np.array([key if isinstance(key, tuple) else (0, key) for key in keys], dtype=np.int64).reshape(-1, 2)
        epochs, indices = pairs[:, 0], pairs[:, 1]
        shard_of = np.searchsorted(self.starts, indices, side="right") - 1
        local = indices - self.starts[shard_of]
        columns = (*LIST_COLUMNS, JOINS) if JOINS in self.manifest.schema.names else LIST_COLUMNS
        pieces: dict[str, list[np.ndarray]] = {name: [] for name in columns}
        labels = np.empty(len(keys), dtype=np.int8)
        for i, (shard, row) in enumerate(zip(shard_of.tolist(), local.tolist(), strict=True)):
            # Views of the memory-mapped columns; the concatenation below is the one copy.
            for name, (offsets, values) in self._shards[shard].lists.items():
                pieces[name].append(values[offsets[row] : offsets[row + 1]])
            labels[i] = self._shards[shard].labels[row]
        rows = Rows.concatenate(pieces, labels, indices)
        if self.masking == "dynamic":
            self._remask(rows, epochs)
        return rows

    def _remask(self, rows: Rows, epochs: np.ndarray) -> None:
        """Replaces the stored masks by new ones drawn from (seed, epoch, row index) alone."""
        original = rows.input_ids.astype(np.int64)
        predictions = np.diff(rows.prediction_offsets)
        row_start = np.repeat(rows.offsets[:-1], predictions)
        original[row_start + rows.masked_lm_positions] = rows.masked_lm_ids
        keys = mix_keys(mix_keys(self._key, epochs.astype(np.uint64)), rows.index.astype(np.uint64))
        masked = mask_batch(original, rows.offsets, keys, self._classes, self.manifest.masking, rows.joins_word)
        rows.input_ids, rows.masked_lm_positions, rows.masked_lm_ids = masked.input_ids, masked.positions, masked.labels
        rows.prediction_offsets = masked.offsets


def collate(batch: Rows | Sequence[dict[str, Any]], multiple: int = 8) -> dict[str, torch.Tensor]:
    """Pads a batch to its longest sequence, rounded up to ``multiple`` (tensor-core friendly shapes).

    Returns input_ids/token_type_ids/attention_mask [B, T], masked_lm_positions [B, P] (padding 0) and
    masked_lm_ids [B, P] (padding -100), sentence_order_label [B] and the rows' global index [B].
    """
    rows = batch if isinstance(batch, Rows) else Rows.from_dicts(batch)
    lengths, predictions = np.diff(rows.offsets), np.diff(rows.prediction_offsets)
    length = -(-int(lengths.max(initial=1)) // multiple) * multiple
    slots = int(predictions.max(initial=1))  # at least one prediction slot, so the loss never sees an empty batch
    out = {
        "input_ids": _padded(rows.input_ids, lengths, length, 0),
        "token_type_ids": _padded(rows.token_type_ids, lengths, length, 0),
        "attention_mask": (np.arange(length) < lengths[:, None]).astype(np.int64),
        "masked_lm_positions": _padded(rows.masked_lm_positions, predictions, slots, 0),
        "masked_lm_ids": _padded(rows.masked_lm_ids, predictions, slots, IGNORE_INDEX),
        "sentence_order_label": rows.sentence_order_label.astype(np.int64),
        "index": np.asarray(rows.index, dtype=np.int64),
    }
    return {name: torch.from_numpy(value) for name, value in out.items()}


def _padded(values: np.ndarray, lengths: np.ndarray, width: int, fill: int) -> np.ndarray:
    """Returns [rows, width] int64: row i holds its ``lengths[i]`` values, then ``fill``."""
    out = np.full((len(lengths), width), fill, dtype=np.int64)
    out[np.arange(width) < lengths[:, None]] = values
    return out


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
        data_dir: the instances stage's output folder (holds manifest.json); a URL (s3://bucket/shards) is
            downloaded once into ``cache_dir`` and read from there.
        batch_size: sequences per device per micro-batch (global batch = batch_size × devices × accumulation).
        masking: "static" uses the masks stored in the shards (the paper); "dynamic" draws new ones per epoch.
        seed: seeds the per-epoch permutation and dynamic masks.
        num_workers: DataLoader worker processes per rank.
        cache_dir: where a remote ``data_dir``'s files are kept; None is ``~/.cache/albert-lightning/shards``.
    """

    def __init__(
        self,
        data_dir: str = "data/shards",
        batch_size: int = 32,
        masking: str = "static",
        seed: int = 12345,
        num_workers: int = 1,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.data_dir, self.batch_size, self.masking = data_dir, batch_size, masking
        self.seed, self.num_workers = seed, num_workers
        self.folder = local_folder(data_dir, cache_dir)  # data_dir itself when local
        # Every byte is checked once per process, before training: a truncated or replaced shard fails here, named
        # (a remote folder's files by the cache, which fetches a bad copy again); the datasets made for each
        # epoch's loaders then skip the check.
        self.manifest = ShardDataset(self.folder, "train", verify=not is_remote(data_dir)).manifest
        self._train_rows = sum(s.rows for s in self.manifest.split("train"))
        if not self._train_rows:
            raise ValueError(f"{data_dir}: the manifest lists no training rows; is the corpus large enough?")
        self._train_sampler: EpochBatchSampler | None = None
        self._position = {"epoch": 0, "batches": 0}  # global batches of the current epoch seen by training_step
        self._resume: dict[str, int] | None = None

    @property
    def vocab_size(self) -> int:
        return self.manifest.vocab_size

    @property
    def max_seq_length(self) -> int:
        return self.manifest.max_seq_length

    @property
    def inter_sentence(self) -> str:
        return self.manifest.inter_sentence

    @property
    def spiece_sha256(self) -> str:
        """The sha256 of the shards' vocabulary file (spiece.model or vocab.txt); the model records it."""
        return self.manifest.vocab_sha256

    @property
    def normalizer(self) -> dict[str, bool | str]:
        """How the shards' text was normalised (``textnorm.Normalizer``'s fields), for fine-tuning and export."""
        return dataclasses.asdict(self.manifest.normalizer)

    def _rank_world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def train_dataloader(self) -> DataLoader:
        dataset = ShardDataset(self.folder, "train", self.masking, self.seed, verify=False)
        rank, world = self._rank_world()
        self._train_sampler = EpochBatchSampler(len(dataset), self.batch_size, rank, world, self.seed)
        self._apply_resume()
        return self._loader(dataset, self._train_sampler)

    def _apply_resume(self) -> None:
        # Lightning builds the training loader before restoring a checkpoint when configure_optimizers asks for
        # estimated_stepping_batches (max_epochs set, total_steps not): the position then goes to that sampler.
        if self._resume is not None and self._train_sampler is not None:
            self._train_sampler.epoch, self._train_sampler.skip = self._resume["epoch"], self._resume["batches"]
            self._resume = None

    def val_dataloader(self) -> DataLoader:
        dataset = ShardDataset(self.folder, "validation", "static", self.seed, verify=False)
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
        """The loader position: ``batches`` global batches of ``epoch`` done at ``world_size`` ranks of ``batch_size``
        rows, and the ``seed``. It means sample ``batches × batch_size × world_size`` of the epoch's permutation,
        the same at any world size (``resumed_position``); checkpoints have always held these keys."""
        world = self._rank_world()[1]
        return {**self._position, "seed": self.seed, "world_size": world, "batch_size": self.batch_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes at the checkpoint's sample (``resumed_position``); raises its ValueError where it cannot."""
        self._position = self.resumed_position(state)
        self._resume = dict(self._position)
        self._apply_resume()

    def resumed_position(self, state: dict[str, Any]) -> dict[str, int]:
        """Returns where a run resumed from loader ``state`` starts: the same sample of the same epoch, as ``epoch``
        and ``batches`` of this run's global batch (batch_size × world size), whatever the checkpoint's were.

        The per-rank batch stays this run's, not derived to keep the checkpoint's global batch: it is what fits a
        device (8 ranks resumed on 1 would need 8 times it), and the old global batch need not split over the new
        ranks. A changed global batch changes the tokens per optimizer step, and the learning-rate schedule
        counts steps: ``--data.batch_size`` keeps the global batch where that matters.

        Raises:
            ValueError: one line naming the checkpoint: another seed (another order); a position that this run's
                global batch does not divide (no whole number of its batches ends there, and the state, counting
                batches, could not record it); more samples than this data's epoch (other shards).
        """
        name = getattr(self.trainer, "ckpt_path", None) or "the checkpoint"
        cannot = f"{name}: cannot resume the data loader exactly"
        if state["seed"] != self.seed:
            raise ValueError(f"{cannot}: its epochs are drawn with seed {state['seed']}, this run's with {self.seed}; "
                             f"resume with --data.seed {state['seed']}")  # fmt: skip
        world = self._rank_world()[1]
        samples, global_batch = state["batches"] * state["batch_size"] * state["world_size"], self.batch_size * world
        epoch, batches, at = state["epoch"], samples // global_batch, f"it stopped {samples} samples into epoch"
        if samples % global_batch:
            raise ValueError(
                f"{cannot}: {at} {epoch} (global batches of {_global(state['batch_size'], state['world_size'])}), "
                f"which this run's global batch of {_global(self.batch_size, world)} = {global_batch} does not "
                f"divide; resume with a global batch that divides {samples}"
            )
        if samples > self._train_rows:
            raise ValueError(f"{cannot}: {at} {epoch}, and {self.data_dir} holds {self._train_rows} training rows; "
                             "resume on the shards it was written with")  # fmt: skip
        if batches and batches == self._train_rows // global_batch:  # the rest is this run's dropped tail
            epoch, batches = epoch + 1, 0
        return {"epoch": epoch, "batches": batches}

    def align_epoch_progress(self, checkpoint: dict[str, Any]) -> None:
        """Sets Lightning's count of the epoch's batches in ``checkpoint`` to this run's resumed position, before
        Lightning restores its loops from it (``AlbertPretraining.on_load_checkpoint`` calls this). Lightning ends
        an epoch when the count reaches ``len(train_dataloader)``: left in the checkpoint's global batches, it
        would end the epoch before the sampler's last batch (the next pass repeating the epoch) or after it. A
        checkpoint without the loader state or Lightning's loops is left as it is."""
        state = checkpoint.get(type(self).__qualname__)
        loops = checkpoint.get("loops", {}).get("fit_loop", {})
        progress = loops.get("epoch_loop.batch_progress")
        if state is None or progress is None:
            return
        position, current = self.resumed_position(state), progress["current"]
        epochs = loops.get("epoch_progress", {}).get("current", {})
        # Saved at an epoch's last batch (on_train_batch_end): the loader is at the next epoch's start while
        # Lightning's count stands at the epoch's end, from where Lightning moves on itself; the end is this run's
        # number of batches. Saved once Lightning had closed its epoch (max_steps stopped the run, at an epoch's
        # end or not): it restarts in a new epoch carrying the count on, so the count is the loader's position,
        # 0 at an epoch's end; the epoch's end would take the new epoch's first batch for its last.
        closed = epochs.get("ready", 0) > 0 and epochs.get("completed") == epochs["ready"]
        at_last_batch = position["epoch"] > state["epoch"] or (state["batches"] == 0 and current["ready"] > 0)
        if at_last_batch and not closed:
            target = self._train_rows // (self.batch_size * self._rank_world()[1])
        else:
            target = position["batches"]
        shift = target - current["ready"]
        for counter in ("ready", "started", "processed", "completed"):  # completed lags by one mid-step
            current[counter] += shift


def _global(batch_size: int, ranks: int) -> str:
    return f"{batch_size} rows × {ranks} rank{'s' * (ranks != 1)}"
