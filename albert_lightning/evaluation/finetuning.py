"""Fine-tuning ALBERT on downstream tasks: the pretrained encoder with a task head (``heads``).

``AlbertFineTuning`` starts from our pretraining checkpoint, from a Hugging Face ALBERT folder, or from random
weights of the same shape (the baseline that tells what pretraining bought). Texts are normalised and encoded
exactly as the pretraining pipeline did (``textnorm`` with the switches the start records, see ``load_pretrained``,
then its ``spiece.model`` or WordPiece ``vocab.txt``) into ``[CLS] A [SEP] B [SEP]``, in that vocabulary's ids.

An evaluation is many small runs (every task, size, seed and start): ``show_run`` gives each one line on the
console, and the command sends Lightning's per-run banners, tips and the libraries' warnings to its log
(``CHATTER``, ``pipelines.runtime.commands.main``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from albert_lightning.evaluation.plan import random_init_seed
from albert_lightning.heads import make_head
from albert_lightning.interop.pretrained import load_pretrained
from albert_lightning.model import AlbertConfig, AlbertForPreTraining
from albert_lightning.optim import build_optimizer, warmup_linear_decay
from albert_lightning.sharding import FSDP2Strategy, shard_albert
from pipelines.algorithms.textnorm import Normalizer
from pipelines.algorithms.vocabulary import Vocabulary, load_vocabulary
from pipelines.runtime.commands import LIGHTNING_LOGGERS, Chatter, console

__all__ = [
    "CHATTER",
    "AlbertFineTuning",
    "Encoder",
    "finetune_trainer",
    "load_encoder",
    "mask_padded_options",
    "random_encoder",
    "run_finetuning",
    "show_run",
    "start_names",
    "starts",
]


# What evaluate sends to its log: each of its runs would print Lightning's banners and tip again, and the warnings
# libraries raise during runs whose settings evaluate fixes are not the user's to act on.
CHATTER = Chatter(LIGHTNING_LOGGERS, (Warning,))


def load_encoder(source: str | Path | None, config: AlbertConfig | None = None) -> AlbertForPreTraining:
    """Returns the pretrained network to start from.

    Args:
        source: a Lightning pretraining checkpoint (``.ckpt``), a Hugging Face ALBERT folder, or None for random
            weights (then ``config`` gives the shape).
        config: the shape of a random model.
    """
    if source is None:
        if config is None:
            raise ValueError("a randomly initialised model needs its config")
        model = AlbertForPreTraining(config)
        model.init_weights()
        return model
    return load_pretrained(source)[0]


def random_encoder(config: AlbertConfig, seed: int) -> AlbertForPreTraining:
    """Returns random weights of ``config``'s shape drawn for ``seed`` alone.

    ``init_weights`` draws from torch's global generator, whose state depends on whatever ran before in the
    process (a previous task's fine-tuning, checkpoint loading): the random-init baseline then changed between
    runs of one evaluation. A forked, seeded generator makes the weights a function of ``seed`` and leaves the
    caller's generator as it was.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return load_encoder(None, config)


def finetune_trainer(devices: int, max_steps: int) -> L.Trainer:
    """The Trainer of one fine-tuning run: FSDP2 over ``devices``, no logs, checkpoints or sanity steps."""
    return L.Trainer(
        accelerator="auto",
        devices=devices,
        strategy=FSDP2Strategy(),
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        use_distributed_sampler=False,
        num_sanity_val_steps=0,
    )


def run_finetuning(
    build: Callable[[], AlbertFineTuning], loader: DataLoader, steps: int, seed: int, devices: int
) -> tuple[L.Trainer, AlbertFineTuning]:
    """Fine-tunes the module ``build`` makes, for ``steps`` on ``loader`` over ``devices``.

    ``seed`` is set before ``build`` runs, so the head's init and the dropout masks follow it (the loader's
    order has its own generator). Every fine-tuning run of ``evaluate`` goes through here. The module keeps the
    run's start time and last training loss (``started``, ``loss``) for ``show_run``: scoring clears the trainer's.
    """
    # Adam's second moments and some activations underflow into subnormal floats, which x86 CPUs compute many
    # times slower: flushing them halved the small preset's step time on one thread.
    torch.set_flush_denormal(True)
    L.seed_everything(seed, verbose=False)
    module = build()
    module.started = time.perf_counter()  # show_run's clock: the run's fit and the scoring after it
    trainer = finetune_trainer(devices, steps)
    trainer.fit(module, train_dataloaders=loader)
    loss = trainer.callback_metrics.get("finetune/loss")
    module.loss = None if loss is None else float(loss)
    return trainer, module


def show_run(what: str, trainer: L.Trainer, module: AlbertFineTuning, scores: dict[str, float]) -> str:
    """Prints one finished run's line to the console and returns it, e.g. ``package, 128 examples, seed 3/5,
    pretrained: lr 0.0001, 30 steps, loss 0.412, dev accuracy 0.610 (4.2 s)``.

    Args:
        what: which run: the task, training examples, seed and start.
        trainer, module: ``run_finetuning``'s, after any scoring (the time counts it).
        scores: name → the run's score, as the caller measured it.
    """
    parts = [f"lr {module.hparams.lr:g}", f"{trainer.global_step} steps"]
    parts += [f"loss {module.loss:.3f}"] if getattr(module, "loss", None) is not None else []
    parts += [f"{name} {value:.3f}" for name, value in scores.items()]
    line = f"{what}: {', '.join(parts)} ({time.perf_counter() - module.started:.1f} s)"
    if trainer.is_global_zero:  # every rank of a sharded run gets here: one line for the run
        print(line, file=console(), flush=True)
    return line


def start_names(random_baseline: bool = True) -> tuple[str, ...]:
    """The names of the starts ``starts`` yields, in its order."""
    return ("pretrained", "random_init") if random_baseline else ("pretrained",)


def starts(
    pretrained: AlbertForPreTraining, seed: int, random_baseline: bool = True
) -> Iterator[tuple[str, AlbertForPreTraining]]:
    """The networks one fine-tuning seed starts from: the checkpoint's, then (the baseline) random weights of its
    shape, drawn for that seed alone."""
    yield "pretrained", pretrained
    if random_baseline:
        yield "random_init", random_encoder(pretrained.config, random_init_seed(seed))


class Encoder:
    """Text → ``[CLS] A [SEP] B [SEP]`` ids, as the pretraining pipeline encodes (same normalisation, same pieces).

    Args:
        vocab: the ``spiece.model`` or ``vocab.txt`` pretraining used (``load_vocabulary``), or the vocabulary.
        max_seq_length: the most ids in an example, special tokens included.
        normalizer: the pretraining text's normalisation (None: the defaults).
    """

    def __init__(
        self, vocab: str | Path | Vocabulary, max_seq_length: int, normalizer: Normalizer | None = None
    ) -> None:
        # Loading refuses a spiece.model whose special ids are not ALBERT's and a vocab.txt that lacks BERT's.
        self.vocab = load_vocabulary(vocab) if isinstance(vocab, str | Path) else vocab
        self.cls_id, self.sep_id = (self.vocab.special_ids[role] for role in ("cls_token", "sep_token"))
        self.max_seq_length = max_seq_length
        self.normalize = normalizer or Normalizer()

    def pieces(self, text: str) -> list[int]:
        """The ids of one text's pieces, normalised first (no special tokens)."""
        return self.vocab.encode([self.normalize(text)])[0].tolist()

    def __call__(self, text_a: str, text_b: str | None = None) -> tuple[list[int], list[int]]:
        """Returns (input_ids, token_type_ids); the longer text loses tokens at its end until the pair fits."""
        a = self.pieces(text_a)
        b = self.pieces(text_b) if text_b is not None else []
        budget = self.max_seq_length - (3 if text_b is not None else 2)
        while len(a) + len(b) > budget:
            (a if len(a) >= len(b) else b).pop()
        ids = [self.cls_id, *a, self.sep_id]
        types = [0] * len(ids)
        if text_b is not None:
            ids += [*b, self.sep_id]
            types += [1] * (len(b) + 1)
        return ids, types


def collate_examples(rows: Sequence[tuple[list[int], list[int], float]], regression: bool) -> dict[str, torch.Tensor]:
    """Pads encoded examples to the longest in the batch (a multiple of 8)."""
    length = -(-max(len(ids) for ids, _, _ in rows) // 8) * 8
    batch = {
        "input_ids": torch.zeros(len(rows), length, dtype=torch.long),
        "token_type_ids": torch.zeros(len(rows), length, dtype=torch.long),
        "attention_mask": torch.zeros(len(rows), length, dtype=torch.long),
    }
    for i, (ids, types, _) in enumerate(rows):
        batch["input_ids"][i, : len(ids)] = torch.tensor(ids)
        batch["token_type_ids"][i, : len(ids)] = torch.tensor(types)
        batch["attention_mask"][i, : len(ids)] = 1
    labels = [label for _, _, label in rows]
    batch["labels"] = torch.tensor(labels, dtype=torch.float if regression else torch.long)
    return batch


def make_loader(
    encoded: list[tuple[list[int], list[int], float]], batch_size: int, regression: bool, shuffle: bool, seed: int
) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        encoded,
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        collate_fn=lambda rows: collate_examples(rows, regression),
    )


def mask_padded_options(logits: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Option scores [B, options] with each padded option (one attending to no token, [B, options, T]) at the
    lowest value: a question with fewer options than its batch's most (C3) can neither choose nor learn one."""
    return logits.masked_fill(~attention_mask.bool().any(-1), torch.finfo(logits.dtype).min)


class AlbertFineTuning(L.LightningModule):
    """Fine-tuning the encoder with a task head (``heads.HEADS``).

    ``classification``: cross-entropy on the pooled ``[CLS]`` (MSE when ``num_labels`` is 1: regression);
    ``span``: cross-entropy of the answer's start and end positions, averaged (batch ``start_positions``,
    ``end_positions``); ``choice``: cross-entropy over the options' scores (inputs [B, options, T]).

    Args:
        network: the pretrained (or random) ``AlbertForPreTraining``; its encoder is kept, its heads dropped.
        num_labels: classes; 1 means regression (classification only).
        classifier_dropout: dropout before the classifier (0.1 in the paper).
        encoder_dropout: dropout inside the encoder while fine-tuning (ALBERT pretrains without; 0 keeps it so).
        lr, weight_decay, warmup_proportion: AdamW with linear warm-up and decay, as the paper fine-tunes.
        total_steps: optimizer steps, for the schedule.
        head: "classification", "span" or "choice".
    """

    def __init__(
        self,
        network: AlbertForPreTraining,
        num_labels: int = 2,
        classifier_dropout: float = 0.1,
        encoder_dropout: float = 0.0,
        lr: float = 3e-5,
        weight_decay: float = 0.01,
        warmup_proportion: float = 0.1,
        total_steps: int = 1000,
        head: str = "classification",
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["network"])
        config = dataclasses.replace(
            network.config, hidden_dropout_prob=encoder_dropout, attention_probs_dropout_prob=encoder_dropout
        )
        self.network = make_head(head, config, num_labels, classifier_dropout)
        self.network.albert.load_state_dict(network.albert.state_dict())
        output = self.network.qa_outputs if head == "span" else self.network.classifier
        nn.init.normal_(output.weight, std=config.initializer_range)
        nn.init.zeros_(output.bias)
        self._sharded = False

    def configure_model(self) -> None:
        mesh = getattr(self, "_device_mesh", None)
        if mesh is not None and not self._sharded:  # once: Lightning may call this hook again
            shard_albert(self.network, mesh["data_parallel"])
            self._sharded = True

    @property
    def _regression(self) -> bool:
        return self.hparams.head == "classification" and self.hparams.num_labels == 1

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.network(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        if self.hparams.head == "choice":
            return mask_padded_options(logits, batch["attention_mask"])
        return logits.squeeze(-1) if self._regression else logits

    def _loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.hparams.head == "span":  # logits [B, 2, T]
            start = F.cross_entropy(logits[:, 0].float(), batch["start_positions"])
            return (start + F.cross_entropy(logits[:, 1].float(), batch["end_positions"])) / 2
        if self._regression:
            return F.mse_loss(logits.float(), batch["labels"])
        return F.cross_entropy(logits.float(), batch["labels"])

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._loss(self(batch), batch)
        self.log("finetune/loss", loss, prog_bar=True)
        return loss

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self(batch)
        # Reading heads give their logits: decoding spans and scoring options needs them, not an argmax.
        return logits if self._regression or self.hparams.head != "classification" else logits.argmax(-1)

    def configure_optimizers(self) -> dict[str, Any]:
        h = self.hparams
        optimizer = build_optimizer(self, "adamw", h.lr, h.weight_decay)
        warmup = min(int(h.warmup_proportion * h.total_steps), h.total_steps - 1)
        scheduler = warmup_linear_decay(optimizer, warmup, h.total_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
