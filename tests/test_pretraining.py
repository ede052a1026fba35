"""Tests for albert_lightning.pretraining (module, cli), .sharding and .interop.export on shards of the real stages.

Training runs use the tiny preset for a few steps. One-device runs call ``cli_main`` in this process; the
two-process FSDP runs go through ``python -m albert_lightning.fit`` in a subprocess (in-process, Lightning's
launcher would re-run the pytest command line). Every run records its steps with ``StepRecorder``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pyarrow as pa
import pytest
import torch
import torch.distributed as dist

from albert_lightning.interop.hf import export_hf
from albert_lightning.model import AlbertConfig, AlbertForPreTraining
from albert_lightning.pretraining.cli import AlbertCLI, cli_main
from albert_lightning.pretraining.data import IGNORE_INDEX, ShardDataset, collate
from albert_lightning.pretraining.module import AlbertPretraining
from pipelines.contracts.manifest import SPIECE, Manifest
from pipelines.contracts.shards import ShardWriter, open_shard
from pipelines.runtime.files import open_atomically
from tests.conftest import DISTRIBUTED_ENV

REPO = Path(__file__).resolve().parents[1]
# Left behind by an in-process run, or set by a parent launcher: a subprocess must choose its own.


class StepRecorder(L.Callback):
    """Appends one JSON line per training step to ``{default_root_dir}/steps-rank{r}.jsonl``.

    ``curves/train.csv`` holds rank 0's own loss only; comparing a data-parallel run with one process needs
    every rank's loss, its number of masked tokens and the rows it trained on.
    """

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from albert_lightning.model import AlbertLayer

        # Forward calls of the transformer layers per step: a recomputing (checkpointed) layer runs twice.
        self.layer_calls = 0
        for module in pl_module.model.modules():
            if isinstance(module, AlbertLayer):
                module.register_forward_pre_hook(self._count)

    def _count(self, *args) -> None:
        self.layer_calls += 1

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        from torch.distributed.fsdp import FSDPModule

        metrics = trainer.callback_metrics  # the rank's own values: training_step logs with sync_dist=False
        row = {
            "step": trainer.global_step,
            "index": batch["index"].tolist(),
            "masked": int((batch["masked_lm_ids"] != IGNORE_INDEX).sum()),
            "mlm_loss": float(metrics["train/mlm_loss"]),
            "sop_loss": float(metrics["train/sop_loss"]),
            "loss": float(metrics["train/loss"]),
            "world_size": trainer.world_size,
            "fsdp": isinstance(pl_module.model, FSDPModule),
            "backend": dist.get_backend() if dist.is_initialized() else None,
            "layer_calls": self.layer_calls,
        }
        self.layer_calls = 0
        with open(Path(trainer.default_root_dir) / f"steps-rank{trainer.global_rank}.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")


def recorded(root: Path, rank: int = 0) -> list[dict]:
    return [json.loads(line) for line in (root / f"steps-rank{rank}.jsonl").read_text().splitlines()]


def fit_args(root: Path, data: Path, batch_size: int, max_steps: int, *extra: str) -> list[str]:
    return [
        "--model.preset=tiny",
        "--model.optimizer=adamw",
        "--model.warmup_steps=0",
        # Fixed, not derived from max_steps: a run stopped early must follow the uninterrupted run's schedule.
        "--model.total_steps=40",
        f"--data.data_dir={data}",
        f"--data.batch_size={batch_size}",
        "--data.num_workers=0",
        "--trainer.accelerator=cpu",
        f"--trainer.max_steps={max_steps}",
        "--trainer.log_every_n_steps=1",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={root}",
        f"--trainer.callbacks+={__name__}.StepRecorder",
        *extra,
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fit_subprocess(args: list[str], devices: int = 1, check: bool = True) -> subprocess.CompletedProcess:
    """Runs ``python -m albert_lightning.fit`` on ``devices`` CPU processes; ``check``: assert that it succeeded."""
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    env["MASTER_PORT"] = str(free_port())
    # The workers import StepRecorder from this file by its module name.
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), str(REPO), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "albert_lightning.fit", *args, f"--trainer.devices={devices}"]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 or not check, done.stderr[-4000:]
    return done


@contextlib.contextmanager
def cli_in_process(args: list[str]) -> Iterator[AlbertCLI]:
    """Trains on one device in this process and yields the CLI (its ``trainer`` and ``model``).

    Afterwards it removes the process group and the environment variables that the run leaves behind.
    """
    saved, cwd = dict(os.environ), os.getcwd()
    os.chdir(REPO)  # the default config is read relative to the working directory, as dvc.yaml runs it
    try:
        yield cli_main([*args, "--trainer.devices=1"])
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)
        os.chdir(cwd)


def fit_in_process(args: list[str]) -> dict[str, torch.Tensor]:
    """Trains on one device in this process (``cli_in_process``); returns the trained weights as plain tensors."""
    with cli_in_process(args) as cli:
        model = cli.model.model
        # Read while the process group lives: FSDP2 holds the weights as DTensors.
        return {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}


def write_subset(source: Path, folder: Path, rows: int, validation_rows: int | None = None) -> Path:
    """Writes a shard folder holding the first ``rows`` rows of each split of ``source`` (short epochs), or of
    its train split and the first ``validation_rows`` of its validation split."""
    folder.mkdir(parents=True)
    manifest = Manifest.read(source)
    writer = ShardWriter(str(folder), 1, manifest.schema, open_atomically)
    shards = []
    for split, count in (("train", rows), ("validation", rows if validation_rows is None else validation_rows)):
        table = pa.concat_tables(open_shard(p) for p in manifest.paths(source, split)).slice(0, count)
        shards.append(writer.write_shard(split, 0, [table]))
    writer.write_vocab(SPIECE, (source / SPIECE).read_bytes())
    writer.write_manifest(dataclasses.replace(manifest, shards=shards))
    return folder


@pytest.fixture(scope="module")
def short_epochs(pipeline_run, tmp_path_factory) -> Path:
    """20 training rows: 5 batches of 4 per epoch, so a dozen steps cross two epoch boundaries."""
    return write_subset(pipeline_run.shards, tmp_path_factory.mktemp("short") / "shards", 20)


# ----------------------------------------------------------------------------------------------- training runs


def test_fsdp_on_two_cpu_processes_resumes_and_matches_one_process_with_the_same_global_batch(pipeline_run, tmp_path):
    two, one = tmp_path / "two", tmp_path / "one"
    fit_subprocess(fit_args(two, pipeline_run.shards, 4, 3), devices=2)

    checkpoint = torch.load(two / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    embeddings = checkpoint["state_dict"]["model.albert.embeddings.word_embeddings.weight"]
    assert type(embeddings) is torch.Tensor and embeddings.shape == (Manifest.read(pipeline_run.shards).vocab_size, 32)
    moments = [s["exp_avg"].shape for s in checkpoint["optimizer_states"][0]["state"].values()]
    assert embeddings.shape in moments  # full, not per-rank, optimizer state
    assert checkpoint["ShardDataModule"] == {"epoch": 0, "batches": 3, "seed": 12345, "world_size": 2, "batch_size": 4}

    last = str(two / "checkpoints" / "last.ckpt")
    fit_subprocess(fit_args(two, pipeline_run.shards, 4, 6, f"--ckpt_path={last}"), devices=2)
    fit_in_process(fit_args(one, pipeline_run.shards, 8, 6))

    assert_two_ranks_match_one_process(two, one, steps=6)


def assert_two_ranks_match_one_process(two: Path, one: Path, steps: int) -> None:
    """The 2-rank FSDP run in ``two`` trained on the global batches of the one-process run in ``one``, with its
    losses: rank r on the r-th block of each batch."""
    ranks, single = [recorded(two, 0), recorded(two, 1)], recorded(one)
    assert [r["step"] for r in ranks[0]] == [r["step"] for r in single] == list(range(1, steps + 1))
    assert all(r["fsdp"] and r["world_size"] == 2 and r["backend"] == "gloo" for rank in ranks for r in rank)
    for a, b, whole in zip(*ranks, single, strict=True):
        assert a["index"] + b["index"] == whole["index"]  # rank r trained on the r-th block of the global batch
        # Each rank averages MLM over its own masked tokens; weighting by their counts gives the global average.
        mlm = (a["mlm_loss"] * a["masked"] + b["mlm_loss"] * b["masked"]) / (a["masked"] + b["masked"])
        loss = mlm + (a["sop_loss"] + b["sop_loss"]) / 2
        # The gradients are not bit-equal: FSDP averages the ranks' gradients of per-rank means. At step 1 (no
        # update yet) only the summation order differs; a lost optimizer state on resume moves the loss ~1e-2.
        tolerance = 1e-5 if whole["step"] == 1 else 1e-3
        assert loss == pytest.approx(whole["loss"], rel=tolerance), whole["step"]


def test_fsdp_gathering_each_sublayer_per_use_with_recomputation_trains_as_one_process(pipeline_run, tmp_path):
    # The xxlarge setting on ranks short of memory (bench/model_sizes.py): the same steps, only the gathers move.
    two, one = tmp_path / "two", tmp_path / "one"
    per_use = ["--model.gather_per_use=true", "--model.activation_checkpointing=true"]
    fit_subprocess(fit_args(two, pipeline_run.shards, 4, 3, *per_use), devices=2)
    fit_in_process(fit_args(one, pipeline_run.shards, 8, 3))
    assert_two_ranks_match_one_process(two, one, steps=3)
    # 2 uses; per use, recomputation runs each sublayer again, not the layer (tests/test_sharding.py)
    assert [r["layer_calls"] for r in recorded(two)] == [2, 2, 2]


# With a worker process the sampler runs ahead of training (prefetch); the loader position must not.
@pytest.mark.parametrize(("masking", "workers", "resume_from"), [("static", 0, "path"), ("dynamic", 1, "last")])
def test_resuming_mid_epoch_replays_the_uninterrupted_run_exactly(
    short_epochs, tmp_path, masking, workers, resume_from
):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    steps, stop = 12, 7  # 5 batches per epoch: stop 2 batches into the second epoch, end in the third
    data = [f"--data.masking={masking}", f"--data.num_workers={workers}"]
    fit_in_process(fit_args(whole, short_epochs, 4, steps, *data))
    fit_in_process(fit_args(parts, short_epochs, 4, stop, *data))
    checkpoint = parts / "checkpoints" / "last.ckpt"
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["ShardDataModule"]
    assert (state["epoch"], state["batches"]) == (1, 2)
    ckpt_path = str(checkpoint) if resume_from == "path" else "last"
    fit_in_process(fit_args(parts, short_epochs, 4, steps, *data, f"--ckpt_path={ckpt_path}"))

    expected, got = recorded(whole), recorded(parts)
    assert [r["step"] for r in got] == list(range(1, steps + 1))
    assert [r["index"] for r in got] == [r["index"] for r in expected]
    assert [r["loss"] for r in got] == pytest.approx([r["loss"] for r in expected], rel=1e-6, abs=0)
    # Each epoch visits every row once, in a new order.
    epochs = [[i for r in expected[e * 5 : (e + 1) * 5] for i in r["index"]] for e in range(2)]
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(20))
    assert epochs[0] != epochs[1]
    # The report keeps the steps written before the checkpoint and appends the rest.
    curve = [float(line.split(",")[1]) for line in (parts / "curves" / "train.csv").read_text().splitlines()[1:]]
    assert curve == pytest.approx([r["loss"] for r in expected], rel=1e-6, abs=0)


@pytest.fixture(scope="module")
def trained(pipeline_run, tmp_path_factory) -> SimpleNamespace:
    """A 3-step one-device run: its checkpoint and the weights the LightningModule ended with."""
    root = tmp_path_factory.mktemp("trained")
    weights = fit_in_process(fit_args(root, pipeline_run.shards, 4, 3))
    return SimpleNamespace(checkpoint=root / "checkpoints" / "last.ckpt", weights=weights)


def test_export_cli_writes_a_folder_that_transformers_loads_with_the_trained_models_outputs(
    trained, pipeline_run, tmp_path
):
    transformers = pytest.importorskip("transformers")
    output = tmp_path / "export"
    command = [sys.executable, "-m", "albert_lightning.export", "--checkpoint", str(trained.checkpoint)]
    command += ["--spiece", str(pipeline_run.spiece), "--output", str(output)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]

    theirs, info = transformers.AlbertForPreTraining.from_pretrained(output, output_loading_info=True)
    assert not any(info.values()), info
    assert_same_outputs_on_shard_rows(plain_model(trained.weights), theirs, pipeline_run.shards)
    assert transformers.AlbertTokenizer.from_pretrained(output).convert_tokens_to_ids("[MASK]") == 4


def test_load_from_checkpoint_builds_the_model_once_and_holds_the_trained_weights(trained):
    module = AlbertPretraining.load_from_checkpoint(trained.checkpoint, map_location="cpu")
    model = module.model  # load_from_checkpoint calls configure_model before loading the weights
    module.configure_model()
    module.configure_model()  # as a later fit does: the guard keeps the loaded model
    assert module.model is model
    for name, tensor in trained.weights.items():
        torch.testing.assert_close(model.state_dict()[name], tensor, rtol=0, atol=0)
    assert model.predictions.decoder.weight is model.albert.embeddings.word_embeddings.weight


# ----------------------------------------------------------------------------------------- Hugging Face interop


def plain_model(weights: dict[str, torch.Tensor]) -> AlbertForPreTraining:
    vocab_size = weights["albert.embeddings.word_embeddings.weight"].shape[0]
    model = AlbertForPreTraining(AlbertConfig.preset("tiny", vocab_size=vocab_size))
    model.load_state_dict(weights)
    return model.eval()


def shard_batch(shards: Path, rows: int = 12) -> dict[str, torch.Tensor]:
    """Rows spread over the split: different lengths and numbers of masks, so padding is exercised too."""
    dataset = ShardDataset(shards, "train")
    return collate([dataset[i] for i in range(0, len(dataset), len(dataset) // rows)][:rows])


def assert_same_outputs_on_shard_rows(ours: AlbertForPreTraining, theirs, shards: Path) -> None:
    batch = shard_batch(shards)
    positions = batch["masked_lm_positions"]  # [B, P]
    assert len(set(batch["attention_mask"].sum(1).tolist())) > 1
    with torch.no_grad():
        got = ours.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], positions)
        expected = theirs.eval()(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
        )
    # transformers computes logits at every position: [B, T, V] -> the masked ones, [B, P, V]
    at_masks = expected.prediction_logits.gather(1, positions[..., None].expand(-1, -1, got.prediction_logits.size(-1)))
    real = batch["masked_lm_ids"] != IGNORE_INDEX
    torch.testing.assert_close(got.prediction_logits[real], at_masks[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.sop_logits, expected.sop_logits, atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def exported(pipeline_run, tmp_path_factory) -> SimpleNamespace:
    """A freshly initialised tiny model at the shards' vocabulary, exported with the pipeline's spiece.model."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.preset("tiny", vocab_size=Manifest.read(pipeline_run.shards).vocab_size))
    with torch.no_grad():  # a non-zero output bias, so that the tied bias is checked too
        model.predictions.bias.normal_(std=0.1)
    folder = export_hf(model, model.config, tmp_path_factory.mktemp("export"), spiece_model=pipeline_run.spiece)
    return SimpleNamespace(model=model.eval(), folder=folder)


def test_transformers_gives_our_masked_lm_and_sop_logits_on_real_shard_rows(exported, pipeline_run):
    transformers = pytest.importorskip("transformers")
    theirs = transformers.AlbertForPreTraining.from_pretrained(exported.folder)
    assert_same_outputs_on_shard_rows(exported.model, theirs, pipeline_run.shards)


def test_transformers_tokenizer_gives_the_pipelines_ids_on_the_embedded_corpus_up_to_viterbi_ties(
    exported, pipeline_run
):
    import pyarrow.parquet as pq
    import sentencepiece

    from pipelines.algorithms.sentences import document_sentences
    from pipelines.algorithms.textnorm import Normalizer

    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AlbertTokenizer.from_pretrained(exported.folder)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(pipeline_run.spiece))
    documents = pq.read_table(next(pipeline_run.corpus.glob("documents-*.parquet"))).to_pylist()
    # Every sentence of the 600 documents (~7000): headings, prose, code, tables and non-ASCII text alike.
    sentences = [s for d in documents for s in document_sentences(d["text"], d["presegmented"])]
    normalize = Normalizer()
    differ = []
    for sentence in sentences:
        ours, theirs = sp.encode(normalize(sentence)), tokenizer(sentence, add_special_tokens=False)["input_ids"]
        if ours != theirs:
            differ.append((sentence, ours, theirs))
    # transformers 5's AlbertTokenizer runs the `tokenizers` Unigram model, which breaks ties between equally
    # scored segmentations otherwise than SentencePiece: e.g. "=" * 31 as 16 + 15 or as 15 + 16. Those are the
    # only differences allowed: the same pieces' text and the same total score.
    for sentence, ours, theirs in differ:
        assert sp.decode(ours) == sp.decode(theirs), sentence
        assert sum(map(sp.get_score, ours)) == pytest.approx(sum(map(sp.get_score, theirs)), abs=1e-4), sentence
    assert len(differ) <= len(sentences) // 1000


def test_activation_checkpointing_recomputes_layers_without_changing_the_losses(short_epochs, tmp_path):
    plain, recomputed = tmp_path / "plain", tmp_path / "recomputed"
    fit_in_process(fit_args(plain, short_epochs, 4, 3))
    fit_in_process(fit_args(recomputed, short_epochs, 4, 3, "--model.activation_checkpointing=true"))
    expected, got = recorded(plain), recorded(recomputed)
    assert [r["index"] for r in got] == [r["index"] for r in expected]
    assert [r["loss"] for r in got] == pytest.approx([r["loss"] for r in expected], rel=1e-5)
    # tiny: 2 layer applications per forward; checkpointing runs each again in backward (an ignored flag fails)
    assert [r["layer_calls"] for r in expected] == [2, 2, 2]
    assert [r["layer_calls"] for r in got] == [4, 4, 4]
