"""Pretrain ALBERT on the shards: ``python -m albert_lightning.fit [--trainer.devices 8] [--ckpt_path last]``.

A LightningCLI over ``AlbertPretraining`` and ``ShardDataModule``. With no arguments it reads
``configs/pretrain.yaml`` (the file ``dvc.yaml``'s pretrain stage uses) and trains on ``data/shards``.
``--print_config`` shows the resolved configuration; every Trainer flag works. Precision defaults to
``bf16-mixed`` on GPUs and 32-bit on CPUs.

A new run (no ``--ckpt_path``) refuses a checkpoint folder that already holds checkpoints: ``export`` and
``evaluate`` read ``last.ckpt``, and Lightning would write the new run's beside it as ``last-v1.ckpt``.
``--ckpt_path last`` resumes the earlier run; ``--overwrite true`` deletes its checkpoints and starts again.
``dvc repro`` needs neither: DVC removes the stage's outputs, the checkpoint folder among them, before it runs.
A checkpoint to resume from is read as ``checkpoints.load_checkpoint`` reads one: a file naming anything beyond
tensors and plain data is refused, one line naming it, before the run starts.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import os
import pickle
import re
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import lightning as L
import torch
from jsonargparse import Namespace
from lightning.fabric.utilities.warnings import PossibleUserWarning
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningCLI

from albert_lightning.checkpoints import check_sharded_checkpoint, load_checkpoint, refusal, safe_loading
from albert_lightning.pretraining.data import ShardDataModule
from albert_lightning.pretraining.module import AlbertPretraining
from albert_lightning.pretraining.progress_bar import step_progress
from pipelines.runtime.commands import DEPRECATIONS, LIGHTNING_LOGGERS, Chatter
from pipelines.runtime.commands import main as run_command

__all__ = ["DEFAULT_CONFIG", "DESCRIPTION", "cli_main"]

DEFAULT_CONFIG = "configs/pretrain.yaml"
DESCRIPTION = """\
albert-lightning fit: pretrain ALBERT (masked LM + sentence order) on the shards of the instances stage.

With no arguments it runs configs/pretrain.yaml on data/shards into data/pretrain (checkpoints/last.ckpt,
metrics.json, curves). The optimizer and its schedule are the model's: --model.optimizer (adamw or lamb),
--model.lr, --model.weight_decay, --model.warmup_steps, --model.total_steps. A new run refuses a checkpoint
folder that holds checkpoints: --ckpt_path last resumes that run, --overwrite true deletes them and starts again.
"""
# Lightning's warning, from its start (a warnings filter matches a regex at the start of the message).
NOT_RESUMABLE = (
    "You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not resumable"
)
# Deprecation notices raised inside Lightning's code, not ours (module regexes name where they are raised).
LEAF_SPEC = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
LEAF_SPEC_MODULE = r"lightning\.pytorch\.utilities\._pytree\Z"
JSONARGPARSE_NOTICE = r"(?s).*deprecat"  # "... was deprecated in v4.49.0 ...", "... JsonargparseDeprecationWarning ..."
LIGHTNING_CLI_MODULE = r"lightning\.pytorch\.cli\Z"


class AlbertCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--ckpt_path", default=None, help='checkpoint to resume from ("last" for the newest)')
        parser.add_argument(
            "--overwrite",
            type=bool,
            default=False,
            help="start a new run in a checkpoint folder that holds an earlier run's checkpoints, deleting them",
        )
        # The model's vocabulary, second objective and text normalisation are the shards'; they are read, never
        # typed twice (the normalisation is recorded in the checkpoint for export and evaluation).
        parser.link_arguments("data.vocab_size", "model.vocab_size", apply_on="instantiate")
        parser.link_arguments("data.inter_sentence", "model.inter_sentence", apply_on="instantiate")
        parser.link_arguments("data.normalizer", "model.normalizer", apply_on="instantiate")
        parser.link_arguments("data.spiece_sha256", "model.spiece_sha256", apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        trainer = self.config["trainer"]
        if trainer.get("precision") is None:
            trainer["precision"] = "bf16-mixed" if torch.cuda.is_available() else "32-true"
        # A checkpoint callback without a dirpath writes where Lightning decides inside fit (a logger's versioned
        # folder when there is one). Naming {default_root_dir}/checkpoints here means the folder that a new run
        # claims, that --ckpt_path last reads and that export and evaluate expect is Lightning's own dirpath.
        root = trainer.get("default_root_dir") or os.getcwd()
        for callback in trainer.get("callbacks") or []:
            if issubclass(_class(callback.class_path), ModelCheckpoint):
                init_args = callback.get("init_args") or Namespace()
                init_args["dirpath"] = init_args.get("dirpath") or os.path.join(root, "checkpoints")
                callback["init_args"] = init_args

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        # Lightning's bars count the batches of an epoch under "Epoch 0/-2" (max_epochs is -1 when max_steps ends
        # the run), and write every update to a log; ours counts steps out of max_steps, in a log at a line per
        # 30 s or 5 %. A bar given in the config, or none, is left as asked.
        trainer = self.config_init["trainer"]
        callbacks = trainer.get("callbacks") or []
        callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
        if trainer.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar) for c in callbacks):
            kwargs["callbacks"] = [*callbacks, step_progress()]
        return super().instantiate_trainer(**kwargs)


def _class(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def checkpoint_folders(trainer: L.Trainer) -> list[str]:
    """The folders the trainer's ModelCheckpoint callbacks write to: each one's ``dirpath``, which ``AlbertCLI``
    pins before the trainer is built, so that Lightning resolves every folder to the one named here."""
    return [str(callback.dirpath) for callback in trainer.checkpoint_callbacks if getattr(callback, "dirpath", None)]


def claim_checkpoint_folders(trainer: L.Trainer, ckpt_path: str | None, overwrite: bool) -> None:
    """Lets a new run write only into checkpoint folders without an earlier run's checkpoints, which export and
    evaluate would otherwise go on reading (Lightning names the new ones ``last-v1.ckpt``); ``overwrite``
    deletes them first. A resumed run (``ckpt_path``) continues the folder's checkpoints."""
    if ckpt_path is not None:
        if overwrite:
            raise ValueError("--overwrite starts a new run and --ckpt_path resumes one: give one of them")
        return
    for folder in checkpoint_folders(trainer):
        earlier = sorted(glob.glob(os.path.join(glob.escape(folder), "*.ckpt")))
        if earlier and not overwrite:
            names = ", ".join(os.path.basename(p) for p in earlier[:3]) + (", ..." if len(earlier) > 3 else "")
            raise FileExistsError(
                f"{folder}: holds an earlier run's checkpoints ({names}); resume it with --ckpt_path last, "
                "or start again with --overwrite true (deletes them)"
            )
        for path in earlier:  # every rank may get here (torchrun): another may have deleted it already
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


def check_resumed_checkpoints(trainer: L.Trainer, ckpt_path: str | None) -> None:
    """Reads the checkpoints a resume may load (``ckpt_path``; for "last", every ``last*.ckpt`` in the run's
    checkpoint folders) as ``load_checkpoint`` does, so that one naming code is refused before the run starts.

    Raises:
        ValueError: naming the file, for a checkpoint (file or sharded folder) that is unreadable or names other
            types.
    """
    if ckpt_path == "last":
        paths = [p for f in checkpoint_folders(trainer) for p in glob.glob(os.path.join(glob.escape(f), "last*.ckpt"))]
    elif ckpt_path is not None and os.path.exists(ckpt_path):
        paths = [ckpt_path]
    else:
        # None, a URL or "hpc": left to Lightning's restore, weights-only too (FSDP2Strategy.load_checkpoint
        # insists on it, since Lightning 2.6 drops the weights_only that cli_main passes to fit).
        paths = []
    for path in paths:
        if os.path.isdir(path):  # a sharded checkpoint (FSDP2Strategy's save_distributed_checkpoint)
            check_sharded_checkpoint(path)
        else:
            load_checkpoint(path, mmap=True)


def cli_main(args: list[str] | None = None) -> AlbertCLI:
    """Parses ``args`` (None: the command line), trains, and returns the CLI (its ``trainer`` and ``model``)."""
    with warnings.catch_warnings():
        # Lightning trusts only a loader that is itself stateful. ShardDataModule saves the sampler's position
        # (the epoch's sample reached) in the checkpoint, resumes there at any world size and batch size, refuses
        # in one line what it cannot continue exactly (another seed, a position no whole batch ends at), and
        # replays the uninterrupted run sample for sample (tests/test_pretraining.py, test_elastic_resume.py), so
        # resuming mid-epoch is exact here and the warning would only be wrong.
        warnings.filterwarnings("ignore", NOT_RESUMABLE, PossibleUserWarning)
        # torch 2.13 deprecated the name LeafSpec (for treespec_leaf()); Lightning 2.6.6's CombinedLoader still
        # builds LeafSpec(), which behaves as before. Only a Lightning release can change the call.
        warnings.filterwarnings("ignore", LEAF_SPEC, FutureWarning, LEAF_SPEC_MODULE)
        # LightningCLI calls jsonargparse APIs deprecated in jsonargparse 4.49 (add_instantiator, skip_none, ...).
        # They work unchanged in 4.x; the notices are for Lightning's maintainers, and our own calls into
        # jsonargparse (AlbertCLI, above) are not covered by this filter.
        warnings.filterwarnings("ignore", JSONARGPARSE_NOTICE, DeprecationWarning, LIGHTNING_CLI_MODULE)
        cli = AlbertCLI(
            AlbertPretraining,
            ShardDataModule,
            run=False,
            save_config_kwargs={"overwrite": True},  # re-runs (dvc repro) write into the same folder
            parser_kwargs={
                "default_config_files": [DEFAULT_CONFIG] if os.path.exists(DEFAULT_CONFIG) else [],
                "description": DESCRIPTION,
            },
            # The model builds its own optimizer and schedule (--model.optimizer ...); Lightning's --optimizer and
            # --lr_scheduler would be ignored by configure_optimizers, so they are not offered.
            auto_configure_optimizers=False,
            args=args,
        )
        claim_checkpoint_folders(cli.trainer, cli.config["ckpt_path"], cli.config["overwrite"])
        check_resumed_checkpoints(cli.trainer, cli.config["ckpt_path"])
        with safe_loading(), _naming_a_refused_checkpoint(cli.trainer), _naming_a_lost_peer(cli.trainer):
            cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.config["ckpt_path"], weights_only=True)
    return cli


@contextlib.contextmanager
def _naming_a_refused_checkpoint(trainer: L.Trainer) -> Iterator[None]:
    # torch's refusal is a page of advice on loading the file unsafely, and names no file.
    try:
        yield
    except pickle.UnpicklingError as err:
        refused = refusal(trainer.ckpt_path, err)
        if refused is None:
            raise
        raise refused from err


# What gloo and NCCL say when a peer rank died (its sockets closed) or stopped answering (the strategy's timeout).
_PEER_LOST = re.compile(r"closed by peer|Connection reset|timed? ?out|timeout", re.IGNORECASE)


@contextlib.contextmanager
def _naming_a_lost_peer(trainer: L.Trainer) -> Iterator[None]:
    # A lost node surfaces as a bare backend error inside some collective; say what it means and how to go on.
    try:
        yield
    except RuntimeError as err:
        if trainer.world_size == 1 or not _PEER_LOST.search(str(err)):
            raise
        timeout_s = getattr(trainer.strategy, "timeout_s", None)
        within = f" within --trainer.strategy.init_args.timeout_s ({timeout_s:g} s)" if timeout_s else ""
        resume = [os.path.join(f, "last.ckpt") for f in checkpoint_folders(trainer)]
        raise RuntimeError(
            f"rank {trainer.global_rank}: another rank closed its connection or did not answer{within}, so a node "
            f"died or hangs ({err}); restart every node with --ckpt_path {' or '.join(resume) or 'last'}"
        ) from err


def _command(argv: list[str]) -> None:
    # The command line less --verbose, as sys.argv too: LightningCLI warns when given args while sys.argv holds
    # some, and Lightning's launcher starts the other ranks with sys.argv.
    sys.argv[1:] = argv
    cli_main(None)


# Lightning's banners, tip and model summary, and the libraries' deprecation notices, go to the run's log: the
# console keeps the progress bar (stdout), Lightning's warnings and ours, and the error line.
CHATTER = Chatter(LIGHTNING_LOGGERS, DEPRECATIONS)


def command() -> None:
    """Runs the command line; an error is one line, its trace in a log (pipelines/runtime/commands.py)."""
    run_command(_command, "fit", chatter=CHATTER)
