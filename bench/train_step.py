"""Benchmarks one pretraining step against ``transformers.AlbertForPreTraining``, and the loader (DESIGN.md §3).

Run: ``python bench/train_step.py [--preset small] [--batch_size 32] [--seq_len 128] [--steps 8] [--threads N]``
from anywhere (with the project installed). It prints, for our model and for transformers' on the same config,
the same batch and the same number of threads:

1. tokens/s of a full training step: forward, MLM + SOP loss, backward, AdamW step. Ours computes the loss as
   ``AlbertPretraining`` does (MLM logits at the masked positions only); transformers' the normal way, with
   ``labels`` at the masked positions and -100 elsewhere (V-wide logits at every position). Warm-up steps are
   not timed; tokens are the batch's non-padding tokens; the rate is over the median step time;
2. peak memory of the step: on CPU the peak RSS during the timed steps (``VmHWM`` after resetting it through
   ``/proc/self/clear_refs``; ``ru_maxrss`` where that is unavailable) minus the RSS just before the first step,
   so weights and the batch are not counted but gradients, optimizer state and activations are; on CUDA
   ``torch.cuda.max_memory_allocated`` minus the allocation before the first step;
3. the ratios ours / transformers (targets: tokens/s ≥ 1.2, peak memory < 1);
4. the loader's sequences/s per core: ``ShardDataset.__getitems__`` (what ``DataLoader`` calls for a batch) +
   ``EpochBatchSampler`` + ``collate`` in one process, in batches of ``--loader_batch_size`` (128: one GPU's
   micro-batch at length 128), with dynamic masking (the target) and static masks (for reference), per CPU
   second of that process.

Each measurement runs in its own fresh subprocess, so one model's memory does not hide the other's.

The batch: ``--seq_len`` rows from the training shards of ``--shards`` (default ``data/shards``, the instances
stage's output) when that folder exists and its sequences are ``--seq_len`` long; otherwise a synthetic batch
of full-length rows with 20 masked positions each. The loader needs shards: without ``--shards``' folder it
builds small ones in a temporary folder (600 documents of the embedded corpus, vocabulary 2000, through each
stage's ``run()``; about a minute) and says so.

Timings are only meaningful on an otherwise idle machine: each worker reports the cores that other processes
used meanwhile (``busy_other``), and a WARNING line says when that exceeded a quarter of a core.
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

REPO = Path(__file__).resolve().parents[1]
MB = 1 << 20
TARGETS = {"tokens_per_s": 1.2, "peak_memory": 1.0, "loader_vs_gpu": 10.0}
BUSY_WARNING = 0.25
MASKED_PER_ROW = 20  # the synthetic batch's predictions per row: the paper's max_predictions_per_seq
# One GPU's consumption, for the loader target: ALBERT-base (85 M multiply-add weights per token over its 12
# layer applications) at 40 % MFU of 989 TFLOP/s (H100/H200 dense bf16), 6·N + 12·L·H·T FLOPs per token.
GPU_FLOPS = 0.4 * 989e12
BASE_WEIGHTS, BASE_LAYERS, BASE_HIDDEN = 12 * (4 * 768**2 + 2 * 768 * 3072), 12, 768


# --------------------------------------------------------------------------------------------------- the batch


def shard_batch(shards: Path, batch_size: int, seed: int = 0):
    """``batch_size`` training rows of the shards drawn by a seeded permutation, collated."""
    import numpy as np

    from albert_lightning.shard_loader import ShardDataset, collate

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


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (all processes, all cores)."""
    fields = [float(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


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


def build_step(kind: str, preset: str, vocab_size: int, batch):
    """Returns the model of ``kind`` ("ours" or "transformers") and a function running one training step."""
    import torch

    from albert_lightning.model import AlbertConfig
    from albert_lightning.pretraining import AlbertPretraining

    length = batch["input_ids"].shape[1]
    longer = length > AlbertConfig.preset(preset).max_position_embeddings  # e.g. tiny (128) at 512
    module = AlbertPretraining(preset, vocab_size, {"max_position_embeddings": length} if longer else None)
    if kind == "ours":
        module.configure_model()
        model = module.model.train()

        def loss() -> torch.Tensor:
            return module.losses(batch)["loss"]  # exactly the training step's loss
    else:
        import dataclasses

        import transformers

        fields = {k: v for k, v in dataclasses.asdict(module.config).items() if k != "sharing"}
        model = transformers.AlbertForPreTraining(transformers.AlbertConfig(**fields, hidden_act="gelu_new")).train()
        labels = torch.full_like(batch["input_ids"], -100)  # [B, T]: the original token at masked positions
        real = batch["masked_lm_ids"] != -100
        rows = torch.arange(len(labels), device=labels.device)[:, None].expand_as(real)
        labels[rows[real], batch["masked_lm_positions"][real]] = batch["masked_lm_ids"][real]
        inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}

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

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    batch = {k: v.to(device) for k, v in torch.load(args.batch_file).items()}
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
    times, cpu0, busy0, wall0 = [], time.process_time(), busy_cpu_s(), time.perf_counter()
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
        "peak_mb": peak_mb - before_mb,
        "peak_method": "cuda" if cuda else "VmHWM" if resettable else "ru_maxrss",
        "maxrss_before_mb": maxrss_before,
        "parameters": sum(p.numel() for p in model.parameters()),
        "threads": torch.get_num_threads(),
        "cpu_per_wall": cpu / wall,
        "busy_other": (busy_cpu_s() - busy0 - cpu) / wall,
    }


def loader_worker(args: argparse.Namespace) -> dict:
    import torch

    from albert_lightning.shard_loader import EpochBatchSampler, ShardDataset, collate

    torch.set_num_threads(1)
    result = {}
    for masking in ("dynamic", "static"):
        dataset = ShardDataset(args.shards, "train", masking, seed=1)
        sampler = EpochBatchSampler(len(dataset), args.loader_batch_size, seed=1)
        dataset[0]  # opens the shards and the vocabulary: once per worker process, not per batch
        sequences, cpu0, wall0, busy0 = 0, time.process_time(), time.perf_counter(), busy_cpu_s()
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
            "busy_other": (busy_cpu_s() - busy0 - cpu) / wall,
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
    vocab.run([*local, "--input", str(folder / "sentences"), "--output", str(folder / "vocab"), "--vocab_size=2000"])
    spiece = folder / "vocab" / "spiece.model"
    argv = ["--input", str(folder / "sentences"), "--spiece", str(spiece), "--output", str(folder / "shards")]
    instances.run([*local, *argv, "--max_seq_length=128", "--dupe_factor=4"])
    return folder / "shards"


def default_vocab_size() -> int:
    import yaml

    return int(yaml.safe_load((REPO / "params.yaml").read_text())["vocab"]["vocab_size"])


def gpu_sequences_per_s(seq_len: int) -> float:
    flops_per_token = 6 * BASE_WEIGHTS + 12 * BASE_LAYERS * BASE_HIDDEN * seq_len
    return GPU_FLOPS / (flops_per_token * seq_len)


def report(train: dict[str, dict], loader: dict, seq_len: int, source: str) -> None:
    ours, theirs = train["ours"], train["transformers"]
    print(f"batch: {source}; shape {ours['shape']}, {ours['tokens']} real tokens; threads {ours['threads']}")
    print(f"{'model':<14}{'params':>10}{'step s':>9}{'tokens/s':>10}{'peak MiB':>10}{'cpu/wall':>9}{'busy_other':>11}")
    for name, r in train.items():
        rate = r["tokens"] / r["step_s"]
        print(
            f"{name:<14}{r['parameters']:>10}{r['step_s']:>9.3f}{rate:>10.0f}{r['peak_mb']:>10.1f}"
            f"{r['cpu_per_wall']:>9.2f}{r['busy_other']:>11.2f}"
        )
    speed = theirs["step_s"] / ours["step_s"]
    memory = ours["peak_mb"] / theirs["peak_mb"]
    print(f"ours/transformers tokens/s: {speed:.2f} (target ≥ {TARGETS['tokens_per_s']})")
    print(f"ours/transformers peak memory: {memory:.2f} (target < {TARGETS['peak_memory']}; {ours['peak_method']})")
    gpu = gpu_sequences_per_s(seq_len)
    for masking, r in loader.items():
        print(
            f"loader ({masking} masking): {r['per_cpu_s']:.0f} sequences/s per core "
            f"({r['per_wall_s']:.0f}/s wall, {r['sequences']} sequences, busy_other {r['busy_other']:.2f})"
        )
    ratio = loader["dynamic"]["per_cpu_s"] / gpu
    print(
        f"one GPU at 40% MFU trains ALBERT-base on ~{gpu:.0f} sequences/s of length {seq_len}: "
        f"loader/GPU {ratio:.2f} per core (target ≥ {TARGETS['loader_vs_gpu']:.0f})"
    )
    busy = [r["busy_other"] for r in train.values()] + [r["busy_other"] for r in loader.values()]
    if max(busy) > BUSY_WARNING:
        print(f"WARNING: other processes used up to {max(busy):.2f} cores meanwhile; timings are disturbed")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads, the same for both")
    parser.add_argument("--shards", type=Path, default=REPO / "data" / "shards")
    parser.add_argument("--loader_seconds", type=float, default=4.0, help="wall time per loader measurement")
    parser.add_argument(
        "--loader_batch_size", type=int, default=128, help="rows per loader batch (one GPU's micro-batch)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--worker", choices=["ours", "transformers", "loader"], help=argparse.SUPPRESS)
    parser.add_argument("--batch_file", help=argparse.SUPPRESS)
    parser.add_argument("--vocab_size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(loader_worker(args) if args.worker == "loader" else train_worker(args)))
        return

    import torch

    from pipelines.shards import MANIFEST, Manifest

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
        common = ["--preset", args.preset, "--steps", str(args.steps), "--warmup", str(args.warmup)]
        common += ["--threads", str(args.threads), "--batch_file", str(Path(tmp) / "batch.pt")]
        common += ["--vocab_size", str(vocab_size)]
        train = {kind: run_worker(kind, common) for kind in ("ours", "transformers")}
        loader_args = ["--loader_seconds", str(args.loader_seconds), "--loader_batch_size", str(args.loader_batch_size)]
        loader = run_worker("loader", ["--shards", str(shards), *loader_args])
    print(f"preset {args.preset}, vocabulary {vocab_size}")
    report(train, loader, manifest.max_seq_length, source)
    if args.json:
        args.json.write_text(json.dumps({"train": train, "loader": loader}, indent=2) + "\n")


if __name__ == "__main__":
    main()
