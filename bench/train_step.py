"""Benchmarks one pretraining step against ``transformers.AlbertForPreTraining``, and the loader (bench/README.md).

Run: ``python bench/train_step.py [--preset small] [--batch_size 32] [--seq_len 128] [--steps 8] [--rounds 3]``
from anywhere (with the project installed). It prints, for our model and for transformers' on the same config,
the same batch and the same number of threads:

1. tokens/s of a full training step: forward, MLM + SOP loss, backward, AdamW step. Ours computes the loss as
   ``AlbertPretraining`` does (MLM logits at the masked positions only, as the reference TF code gathers them);
   transformers' the normal way, with ``labels`` at the masked positions and -100 elsewhere (V-wide logits at
   every position). That is a real advantage of ours, so the step ratio mixes two effects; hence also
   tokens/s of **the encoder alone** (embeddings, shared layers, pooler; the mean of its outputs as the loss;
   AdamW), the same work on both sides. Warm-up steps are not timed; tokens are the batch's non-padding
   tokens; a worker's figure is its median step;
2. peak memory of the step: on CPU the peak RSS during the timed steps (``VmHWM`` after resetting it through
   ``/proc/self/clear_refs``; ``ru_maxrss`` where that is unavailable) minus the RSS just before the first step,
   so weights and the batch are not counted but gradients, optimizer state and activations are; on CUDA
   ``torch.cuda.max_memory_allocated`` minus the allocation before the first step;
3. the ratios (targets, bench/README.md: full step ≥ 1.5, encoder alone ≥ 1.2, peak memory ≤ 1), each of
   medians over ``--rounds`` rounds run interleaved (ours, transformers, ours-encoder, transformers-encoder,
   loader, then again), from wall time and from the process's CPU time. Torch's OpenMP threads busy-wait, so
   under contention a step's CPU time inflates severalfold: for these benches the honest figure is wall time
   on an idle machine, and the CPU-time ratios are printed for reference only;
4. the loader's sequences/s per core: ``ShardDataset.__getitems__`` (what ``DataLoader`` calls for a batch) +
   ``EpochBatchSampler`` + ``collate`` in one process, in batches of ``--loader_batch_size`` (128: one GPU's
   micro-batch at length 128), with dynamic masking (the target) and static masks (for reference), per CPU
   second of that process.

Each measurement runs in its own fresh subprocess, so one model's memory does not hide the other's. The
figures go to ``--results`` (default ``bench/results``) as ``train_step.json`` and ``train_step.md``, with the
machine's cores, load, date, git commit and command line (``bench/measure.py``).

The batch: ``--seq_len`` rows from the training shards of ``--shards`` (default ``data/shards``, the instances
stage's output) when that folder exists and its sequences are ``--seq_len`` long; otherwise a synthetic batch
of full-length rows with 20 masked positions each. The loader needs shards: without ``--shards``' folder it
builds small ones in a temporary folder (600 documents of the embedded corpus, vocabulary 2000, through each
stage's ``run()``; about a minute) and says so.

Timings are only meaningful on an otherwise idle machine: each worker reports the cores that other processes
used meanwhile (``busy_other``); when that exceeded a quarter of a core in any run, no PASS/FAIL verdict is
printed, only the figures and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure

if TYPE_CHECKING:  # imported inside the functions that need it, as the workers are separate processes
    import torch

REPO = Path(__file__).resolve().parents[1]
MB = 1 << 20
TARGETS = {
    "tokens_per_s": (">=", 1.5),
    "encoder_tokens_per_s": (">=", 1.2),
    "peak_memory": ("<=", 1.0),
    "loader_vs_gpu": (">=", 10.0),
}
KINDS = ("ours", "transformers", "ours-encoder", "transformers-encoder", "loader")  # one round, in this order
MASKED_PER_ROW = 20  # the synthetic batch's predictions per row: the paper's max_predictions_per_seq
# One GPU's consumption, for the loader target: ALBERT-base at 40 % MFU of 989 TFLOP/s (H100/H200 dense bf16),
# FLOPs per token as bench/mfu.py counts them.
GPU_FLOPS = 0.4 * 989e12


# --------------------------------------------------------------------------------------------------- the batch


def shard_batch(shards: Path, batch_size: int, seed: int = 0):
    """``batch_size`` training rows of the shards drawn by a seeded permutation, collated."""
    import numpy as np

    from albert_lightning.pretraining.data import ShardDataset, collate

    dataset = ShardDataset(shards, "train")
    rows = np.random.default_rng(seed).permutation(len(dataset))[:batch_size]
    return collate([dataset[int(i)] for i in rows])


def synthetic_batch(batch_size: int, seq_len: int, vocab_size: int, seed: int = 0):
    """Full-length ``[CLS] A [SEP] B [SEP]`` rows of random pieces with ``MASKED_PER_ROW`` sorted masks each."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (batch_size, seq_len), generator=g)
    middle = seq_len // 2
    ids[:, 0], ids[:, middle], ids[:, -1] = 2, 3, 3
    candidates = torch.tensor([p for p in range(1, seq_len - 1) if p != middle])
    choice = torch.rand(batch_size, len(candidates), generator=g).argsort(dim=1)[:, :MASKED_PER_ROW]
    positions = candidates[choice].sort(dim=1).values  # [B, P]
    labels = ids.gather(1, positions)
    ids.scatter_(1, positions, 4)  # [MASK]
    return {
        "input_ids": ids,
        "token_type_ids": (torch.arange(seq_len) > middle).long().expand(batch_size, -1).clone(),
        "attention_mask": torch.ones(batch_size, seq_len, dtype=torch.long),
        "masked_lm_positions": positions,
        "masked_lm_ids": labels,
        "sentence_order_label": torch.randint(0, 2, (batch_size,), generator=g),
        "index": torch.arange(batch_size),
    }


# ------------------------------------------------------------------------------------------------- the workers


def rss_mb(field: str) -> float | None:
    """A memory field of /proc/self/status ("VmRSS", "VmHWM") in MiB, or None off Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def reset_peak_rss() -> bool:
    """Resets the process's peak RSS (Linux ≥ 4.0); False where it cannot, and ru_maxrss is used instead."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def encoder_loss(out: tuple) -> torch.Tensor:
    """The encoder-alone loss: the mean of its outputs, elementwise work that is the same on both sides."""
    return out[0].float().mean() + out[1].float().mean()  # sequence [B, T, H] and pooled [B, H]


def build_step(kind: str, preset: str, vocab_size: int, batch):
    """Returns the model of ``kind`` (``KINDS`` but "loader") and a function running one training step."""
    import torch

    from albert_lightning.model import AlbertConfig
    from albert_lightning.pretraining.module import AlbertPretraining

    length = batch["input_ids"].shape[1]
    longer = length > AlbertConfig.preset(preset).max_position_embeddings  # e.g. tiny (128) at 512
    module = AlbertPretraining(preset, vocab_size, {"max_position_embeddings": length} if longer else None)
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    if kind.startswith("ours"):
        module.configure_model()
        model = module.model.train()
        if kind == "ours-encoder":
            model = model.albert

            def loss() -> torch.Tensor:
                return encoder_loss(model(**inputs))
        else:

            def loss() -> torch.Tensor:
                return module.losses(batch)["loss"]  # exactly the training step's loss
    else:
        import dataclasses

        import transformers

        fields = {k: v for k, v in dataclasses.asdict(module.config).items() if k != "sharing"}
        model = transformers.AlbertForPreTraining(transformers.AlbertConfig(**fields)).train()
        labels = torch.full_like(batch["input_ids"], -100)  # [B, T]: the original token at masked positions
        real = batch["masked_lm_ids"] != -100
        rows = torch.arange(len(labels), device=labels.device)[:, None].expand_as(real)
        labels[rows[real], batch["masked_lm_positions"][real]] = batch["masked_lm_ids"][real]
        if kind == "transformers-encoder":
            model = model.albert

            def loss() -> torch.Tensor:
                return encoder_loss(model(**inputs))
        else:

            def loss() -> torch.Tensor:
                return model(**inputs, labels=labels, sentence_order_label=batch["sentence_order_label"]).loss

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss().backward()
        optimizer.step()

    return model, step


def train_worker(args: argparse.Namespace) -> dict:
    import torch

    from albert_lightning.checkpoints import load_checkpoint

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    batch = {k: v.to(device) for k, v in load_checkpoint(args.batch_file).items()}
    with device:
        model, step = build_step(args.worker, args.preset, args.vocab_size, batch)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    before_mb = torch.cuda.memory_allocated() / MB if cuda else rss_mb("VmRSS")
    resettable = not cuda and reset_peak_rss()
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for _ in range(args.warmup):
        step()
    sync()
    times, cpu0, busy0, wall0 = [], time.process_time(), measure.busy_cpu_s(), time.perf_counter()
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    if cuda:
        peak_mb = torch.cuda.max_memory_allocated() / MB
    elif resettable:
        peak_mb = rss_mb("VmHWM")
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "tokens": int(batch["attention_mask"].sum()),
        "shape": list(batch["input_ids"].shape),
        "step_s": statistics.median(times),
        "step_s_all": times,
        "cpu_s_per_step": cpu / args.steps,  # all the process's threads; inflated by busy-waiting under load
        "peak_mb": peak_mb - before_mb,
        "peak_method": "cuda" if cuda else "VmHWM" if resettable else "ru_maxrss",
        "maxrss_before_mb": maxrss_before,
        "parameters": sum(p.numel() for p in model.parameters()),
        "threads": torch.get_num_threads(),
        "cpu_per_wall": cpu / wall,
        "busy_other": (measure.busy_cpu_s() - busy0 - cpu) / wall,
    }


def loader_worker(args: argparse.Namespace) -> dict:
    import torch

    from albert_lightning.pretraining.data import EpochBatchSampler, ShardDataset, collate

    torch.set_num_threads(1)
    result = {}
    for masking in ("dynamic", "static"):
        dataset = ShardDataset(args.shards, "train", masking, seed=1)
        sampler = EpochBatchSampler(len(dataset), args.loader_batch_size, seed=1)
        dataset[0]  # opens the shards and the vocabulary: once per worker process, not per batch
        sequences, cpu0, wall0, busy0 = 0, time.process_time(), time.perf_counter(), measure.busy_cpu_s()
        for keys in sampler:
            collate(dataset.__getitems__(keys))  # what DataLoader calls for a batch
            sequences += len(keys)
            if time.perf_counter() - wall0 > args.loader_seconds:
                break
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        result[masking] = {
            "sequences": sequences,
            "per_cpu_s": sequences / cpu,
            "per_wall_s": sequences / wall,
            "busy_other": (measure.busy_cpu_s() - busy0 - cpu) / wall,
        }
    return result


# -------------------------------------------------------------------------------------------------- the parent


def run_worker(kind: str, argv: list[str]) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, *argv]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{kind} worker failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def build_small_shards(folder: Path) -> Path:
    """corpus → segment → vocab → instances on 600 embedded documents, as tests/conftest.py does."""
    from pipelines import corpus, instances, segment, vocab

    local = ["--params", os.devnull, "--direct_running_mode=in_memory", "--direct_num_workers=1"]
    corpus.run([*local, "--output", str(folder / "corpus"), "--embedded_max_documents=600"])
    segment.run([*local, "--input", str(folder / "corpus"), "--output", str(folder / "sentences")])
    local += ["--allow_undeduped"]  # shards to time steps on: no held-out score is read from them
    vocab.run([*local, "--input", str(folder / "sentences"), "--output", str(folder / "vocab"), "--vocab_size=2000"])
    spiece = folder / "vocab" / "spiece.model"
    argv = ["--input", str(folder / "sentences"), "--spiece", str(spiece), "--output", str(folder / "shards")]
    instances.run([*local, *argv, "--max_seq_length=128", "--dupe_factor=4"])
    return folder / "shards"


def default_vocab_size() -> int:
    import yaml

    return int(yaml.safe_load((REPO / "params.yaml").read_text())["vocab"]["vocab_size"])


def gpu_sequences_per_s(seq_len: int) -> float:
    """Sequences/s one GPU trains ALBERT-base on at 40 % MFU (``GPU_FLOPS``), with 20 predictions per row."""
    from mfu import flops_per_token

    from albert_lightning.model import AlbertConfig

    return GPU_FLOPS / (flops_per_token(AlbertConfig.preset("base"), seq_len, MASKED_PER_ROW) * seq_len)


def combine(runs: list[dict]) -> dict:
    """One kind's rounds: medians and spread of the per-round figures, the highest load, every round kept."""
    if "step_s" not in runs[0]:  # the loader
        rates = {m: measure.summary([r[m]["per_cpu_s"] for r in runs]) for m in runs[0]}
        return {"per_cpu_s": rates, "busy_other": max(r[m]["busy_other"] for r in runs for m in r), "rounds": runs}
    fixed = {k: runs[0][k] for k in ("tokens", "shape", "parameters", "threads", "peak_method")}
    figures = {k: measure.summary([r[k] for r in runs]) for k in ("step_s", "cpu_s_per_step", "peak_mb")}
    return {**fixed, **figures, "busy_other": max(r["busy_other"] for r in runs), "rounds": runs}


def ratios(figures: dict, seq_len: int) -> dict[str, dict]:
    """The bench's ratios, each of medians over the rounds, with what it divides."""
    ours, theirs = figures["ours"], figures["transformers"]
    ours_enc, theirs_enc = figures["ours-encoder"], figures["transformers-encoder"]
    masked = "ours computes MLM logits at masked positions only, transformers at every position"
    same = "encoder alone: the same work on both sides"
    gather = "loader sequences per CPU-second (dynamic masking) ÷ sequences/s one GPU trains ALBERT-base on at 40 % MFU"
    med = "median"
    return {
        "tokens_per_s": measure.ratio(theirs["step_s"][med], ours["step_s"][med],
                                      f"transformers' step wall-s ÷ ours (= our tokens/s ÷ theirs); {masked}"),
        "tokens_per_cpu_s": measure.ratio(theirs["cpu_s_per_step"][med], ours["cpu_s_per_step"][med],
                                          f"transformers' step CPU-s ÷ ours; {masked}; inflated by load"),
        "encoder_tokens_per_s": measure.ratio(theirs_enc["step_s"][med], ours_enc["step_s"][med],
                                              f"transformers' step wall-s ÷ ours; {same}"),
        "encoder_tokens_per_cpu_s": measure.ratio(theirs_enc["cpu_s_per_step"][med], ours_enc["cpu_s_per_step"][med],
                                                  f"transformers' step CPU-s ÷ ours; {same}; inflated by load"),
        "peak_memory": measure.ratio(ours["peak_mb"][med], theirs["peak_mb"][med],
                                     f"our step's peak memory ÷ transformers' ({ours['peak_method']}); full step"),
        "loader_vs_gpu": measure.ratio(figures["loader"]["per_cpu_s"]["dynamic"][med], gpu_sequences_per_s(seq_len),
                                       f"{gather}, length {seq_len}"),
    }  # fmt: skip


def report(figures: dict, source: str) -> None:
    ours = figures["ours"]
    print(f"batch: {source}; shape {ours['shape']}, {ours['tokens']} real tokens; threads {ours['threads']}")
    head = f"{'model':<22}{'params':>10}{'step s':>9}{'spread':>8}{'tokens/s':>10}{'cpu s':>8}{'peak MiB':>10}"
    print(head + f"{'busy_other':>11}")
    for name in KINDS[:-1]:
        r = figures[name]
        step = r["step_s"]["median"]
        print(
            f"{name:<22}{r['parameters']:>10}{step:>9.3f}{r['step_s']['spread']:>8.2f}{r['tokens'] / step:>10.0f}"
            f"{r['cpu_s_per_step']['median']:>8.3f}{r['peak_mb']['median']:>10.1f}{r['busy_other']:>11.2f}"
        )
    for masking, rate in figures["loader"]["per_cpu_s"].items():
        print(
            f"loader ({masking} masking): {rate['median']:.0f} sequences per CPU-second (spread {rate['spread']:.2f})"
        )
    print("step s, cpu s: medians over rounds of each worker's median step; spread: (max − min) / median")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per model and round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every measurement")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads, the same for both")
    parser.add_argument("--shards", type=Path, default=REPO / "data" / "shards")
    parser.add_argument("--loader_seconds", type=float, default=4.0, help="wall time per loader measurement")
    parser.add_argument(
        "--loader_batch_size", type=int, default=128, help="rows per loader batch (one GPU's micro-batch)"
    )
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results", help="train_step.json/.md go here")
    parser.add_argument("--worker", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--batch_file", help=argparse.SUPPRESS)
    parser.add_argument("--vocab_size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(loader_worker(args) if args.worker == "loader" else train_worker(args)))
        return

    import torch

    from pipelines.contracts.manifest import MANIFEST, Manifest

    with tempfile.TemporaryDirectory() as tmp:
        shards = args.shards
        if not (shards / MANIFEST).exists():
            print(f"{shards} has no manifest: building small shards for the loader in {tmp}", file=sys.stderr)
            shards = build_small_shards(Path(tmp))
        manifest = Manifest.read(shards)
        if args.shards == shards and manifest.max_seq_length == args.seq_len:
            vocab_size, source = manifest.vocab_size, f"{args.batch_size} rows of {shards}"
            batch = shard_batch(shards, args.batch_size)
        else:
            vocab_size = manifest.vocab_size if args.shards == shards else default_vocab_size()
            source = f"synthetic, {MASKED_PER_ROW} masked positions per row"
            batch = synthetic_batch(args.batch_size, args.seq_len, vocab_size)
        torch.save(batch, Path(tmp) / "batch.pt")
        train = ["--preset", args.preset, "--steps", str(args.steps), "--warmup", str(args.warmup)]
        train += ["--threads", str(args.threads), "--batch_file", str(Path(tmp) / "batch.pt")]
        train += ["--vocab_size", str(vocab_size)]
        loader = ["--shards", str(shards), "--loader_seconds", str(args.loader_seconds)]
        loader += ["--loader_batch_size", str(args.loader_batch_size)]
        rounds = measure.run_rounds(KINDS, args.rounds, lambda k: run_worker(k, loader if k == "loader" else train))
    figures = {kind: combine(runs) for kind, runs in rounds.items()}
    print(f"preset {args.preset}, vocabulary {vocab_size}, {args.rounds} rounds")
    report(figures, source)
    found = ratios(figures, manifest.max_seq_length)
    for name, r in found.items():
        print(f"{name} = {r['value']:.3g}: {r['divides']}")
    load = max(f["busy_other"] for f in figures.values())
    lines = measure.verdicts(found, TARGETS, load)
    print("\n".join(lines))
    figures.update(preset=args.preset, vocab_size=vocab_size, batch=source)
    paths = measure.write_results(args.results, "train_step", figures, found, load, lines)
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
