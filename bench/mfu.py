"""Model FLOPs utilisation of a pretraining step: FSDP2 on one device, bf16, the shard loader feeding it.

Run on a GPU: ``python bench/mfu.py`` (``--preset base large --seq_len 512 --batch_size 32``; the target
is MFU ≥ 45 % for ``base``). Smoke test on CPU, in seconds:
``python bench/mfu.py --device cpu --preset tiny --seq_len 64 --steps 3``. ``bench/gpu_mfu.sh`` prepares shards of 512
tokens here and runs this there, on a lent GPU machine, in one call.

Each step, timed with the device synchronised at both ends of each part:

1. the loader: a batch of ``--batch_size`` rows from ``ShardDataset.__getitems__`` (dynamic masking) and
   ``collate`` when ``--shards`` holds shards of ``--seq_len``, else ``collate`` over synthetic full-length rows
   with ``--masked_per_row`` predictions; then the copy to the device. It runs in the training process here, so
   its share of the step is what ``DataLoader`` workers must hide;
2. the model step: ``AlbertPretraining.losses`` (the training loss: MLM at masked positions, SOP), backward and
   an AdamW step, on ``AlbertForPreTraining`` sharded by ``sharding.shard_albert`` over a 1-device mesh with
   ``param_dtype`` bfloat16 (float32 reduction and master weights, as in training).

MFU = model FLOPs of a step / median step time / the device's peak dense FLOP/s (``PEAK_TFLOPS`` by device
name, ``--peak_tflops`` to override; on CPU an estimate from cores × clock × FMA width). Model FLOPs count the
B·T positions of each batch (padding included: that work is done) with ``flops_per_token``; tokens/s counts
non-padding tokens over the median whole step. It is printed for the
model step alone and for the whole step (loader included).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import torch

from albert_lightning.model import AlbertConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import BUSY_WARNING, busy_cpu_s, ratio, summary, verdicts, write_results

__all__ = ["flops_per_token", "peak_tflops", "resolve_device"]

REPO = Path(__file__).resolve().parents[1]
# Dense bf16 tensor-core peaks (no sparsity), from the vendors' data sheets, in TFLOP/s; matched in order against
# torch.cuda.get_device_name, so a more specific name comes first.
PEAK_TFLOPS = {
    "H200": 989.0,
    "H100 PCIe": 756.0,
    "H100": 989.0,  # SXM
    "GH200": 989.0,
    "A100": 312.0,
    "L40S": 362.0,
    "L4": 121.0,
    "A10G": 70.0,
    "A10": 125.0,
    "RTX 4090": 165.0,
}
TARGETS = {"mfu_model_step_base": (">=", 0.45)}  # only judged on a GPU


def flops_per_token(config: AlbertConfig, seq_len: int, masked_per_row: float) -> float:
    """Training FLOPs per position of a pretraining step, counted from the model's shapes.

    With H hidden, E embedding, V vocabulary, I intermediate, T the sequence length, P predictions per row and
    D = num_hidden_layers × inner_group_num the effective depth (shared layers cost compute at every use),
    the forward multiply-adds per position are::

        E·H                      embedding projection E→H
      + D·(4·H² + 2·H·I)         Q, K, V, output projections and the FFN, per layer application
      + D·2·T·H                  attention: QKᵀ and attention × V over all T keys (no causal halving)
      + (P/T)·(H·E + E·V)        MLM head (dense H→E, tied decoder E→V) at the masked positions only
      + (H² + 2·H)/T             pooler and SOP classifier, once per sequence

    and FLOPs = 6 × that: 2 FLOPs per multiply-add forward, twice as many again backward (gradients of inputs
    and of weights). Embedding lookups, LayerNorm, GELU, softmax and the optimizer are not counted (PaLM's
    convention, Chowdhery et al. 2022, appendix B).
    """
    H, E, V = config.hidden_size, config.embedding_size, config.vocab_size
    I = config.intermediate_size  # noqa: E741 (the paper's name)
    depth = config.num_hidden_layers * config.inner_group_num
    multiply_adds = E * H + depth * (4 * H * H + 2 * H * I) + depth * 2 * seq_len * H
    multiply_adds += masked_per_row / seq_len * (H * E + E * V) + (H * H + 2 * H) / seq_len
    return 6.0 * multiply_adds


def cpu_peak_tflops(threads: int) -> float:
    """An fp32 peak estimate for ``threads`` cores: clock × FMA lanes × 2 FLOPs × 2 FMA units per core."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    lanes = 16 if " avx512f" in flags else 8 if " avx2" in flags else 4  # fp32 lanes per vector
    freq = psutil.cpu_freq()
    ghz = (freq.max or freq.current) / 1000 if freq and (freq.max or freq.current) else 2.5
    return threads * ghz * lanes * 2 * 2 / 1000


def peak_tflops(device: torch.device, override: float | None) -> tuple[float, str]:
    """Returns the device's peak dense TFLOP/s and where the figure came from."""
    if override:
        return override, "--peak_tflops"
    if device.type == "cpu":
        return cpu_peak_tflops(torch.get_num_threads()), f"CPU estimate ({torch.get_num_threads()} threads, fp32)"
    name = torch.cuda.get_device_name(device)
    for key, tflops in PEAK_TFLOPS.items():
        if key in name:
            return tflops, f"{name}: table entry {key!r}"
    raise SystemExit(f"no peak FLOP/s known for {name!r}: pass --peak_tflops")


def synthetic_rows(batch_size: int, seq_len: int, vocab_size: int, masked: int, rng: np.random.Generator) -> list:
    """Full-length ``[CLS] A [SEP] B [SEP]`` rows of random pieces, as ``ShardDataset[key]`` gives rows."""
    middle, rows = seq_len // 2, []
    candidates = np.array([p for p in range(1, seq_len - 1) if p != middle])
    for i in range(batch_size):
        ids = rng.integers(5, vocab_size, seq_len)
        ids[[0, middle, seq_len - 1]] = [2, 3, 3]
        positions = np.sort(rng.choice(candidates, masked, replace=False))
        labels = ids[positions].copy()
        ids[positions] = 4  # [MASK]
        types = (np.arange(seq_len) > middle).astype(np.int64)
        rows.append(dict(input_ids=ids, token_type_ids=types, masked_lm_positions=positions, masked_lm_ids=labels,
                         sentence_order_label=int(rng.integers(0, 2)), index=i))  # fmt: skip
    return rows


def batches(args: argparse.Namespace, vocab_size: int):
    """Yields collated CPU batches forever: from shards of ``--seq_len`` if given, else synthetic."""
    from albert_lightning.pretraining.data import EpochBatchSampler, ShardDataset, collate

    if args.shards:
        dataset = ShardDataset(args.shards, "train", "dynamic", seed=1)
        sampler = EpochBatchSampler(len(dataset), args.batch_size, seed=1)
        dataset[0]  # opens the shards and the vocabulary once, as a DataLoader worker does
        while True:
            for keys in sampler:
                yield collate(dataset.__getitems__(keys))
    rng = np.random.default_rng(0)
    pool = [synthetic_rows(args.batch_size, args.seq_len, vocab_size, args.masked_per_row, rng) for _ in range(4)]
    while True:
        for rows in pool:
            yield collate(rows)


def build(args: argparse.Namespace, preset: str, vocab_size: int, device: torch.device):
    """Returns (module, optimizer): ``AlbertPretraining`` with its model sharded on a 1-device mesh."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from albert_lightning.optim import build_optimizer
    from albert_lightning.pretraining.module import AlbertPretraining
    from albert_lightning.sharding import shard_albert

    if not dist.is_initialized():  # one rank; an in-process store needs no port
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo", store=dist.HashStore(), rank=0, world_size=1
        )
    mesh = init_device_mesh(device.type, (1,), mesh_dim_names=("data_parallel",))
    longer = args.seq_len > AlbertConfig.preset(preset).max_position_embeddings  # e.g. tiny (128) at 512
    overrides = {"max_position_embeddings": args.seq_len} if longer else None
    module = AlbertPretraining(preset, vocab_size, overrides, optimizer="adamw")
    with device:
        module.configure_model()  # no mesh attached: builds and initialises the plain model on ``device``
    shard_albert(module.model, mesh, args.activation_checkpointing, args.param_dtype)
    if args.compile:
        module.model.compile()
    return module, build_optimizer(module.model, "adamw", 1e-4)


def measure_preset(args: argparse.Namespace, preset: str, device: torch.device) -> dict:
    """Times ``--warmup`` + ``--steps`` steps of ``preset`` and returns its figures."""
    vocab_size = args.vocab_size
    if args.shards:
        from pipelines.contracts.manifest import Manifest

        manifest = Manifest.read(args.shards)
        if manifest.max_seq_length != args.seq_len:  # else a run "at 512" would time the shards' length instead
            raise SystemExit(f"{args.shards}: shards of {manifest.max_seq_length} tokens; pass --seq_len to match")
        vocab_size = manifest.vocab_size
    module, optimizer = build(args, preset, vocab_size, device)
    source = batches(args, vocab_size)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    loader_s, model_s, shapes, flops, tokens = [], [], set(), 0.0, 0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            busy0, cpu0, wall0 = busy_cpu_s(), time.process_time(), time.perf_counter()
        start = time.perf_counter()
        cpu_batch = next(source)
        batch = {k: v.to(device, non_blocking=True) for k, v in cpu_batch.items()}
        sync()
        loaded = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        module.losses(batch)["loss"].backward()
        optimizer.step()
        sync()
        if step >= args.warmup:
            loader_s.append(loaded - start)
            model_s.append(time.perf_counter() - loaded)
            (rows, length), slots = batch["input_ids"].shape, batch["masked_lm_positions"].shape[1]
            shapes.add((rows, length))
            flops += rows * length * flops_per_token(module.config, length, slots)  # padding slots are computed
            tokens += int(cpu_batch["attention_mask"].sum())
    wall = time.perf_counter() - wall0
    busy_other = max(0.0, (busy_cpu_s() - busy0 - (time.process_time() - cpu0)) / wall)
    peak_mb = torch.cuda.max_memory_allocated(device) / (1 << 20) if device.type == "cuda" else None
    del module, optimizer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    step_s = [a + b for a, b in zip(loader_s, model_s, strict=True)]
    return {
        "shapes": sorted(shapes), "flops_per_step": flops / args.steps, "tokens_per_step": tokens / args.steps,
        "loader_s": summary(loader_s), "model_s": summary(model_s), "step_s": summary(step_s),
        "tokens_per_s": tokens / args.steps / statistics.median(step_s), "busy_other": busy_other,
        "peak_mb": peak_mb,
    }  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", nargs="+", default=["base", "large"])
    parser.add_argument("--device", default="cuda" if cuda else "cpu")
    parser.add_argument("--seq_len", type=int, default=512)
    parser.add_argument("--batch_size", type=int, default=32, help="rows per step")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per preset")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (allocator, kernels, compile)")
    parser.add_argument("--masked_per_row", type=int, default=20, help="synthetic rows' predictions")
    parser.add_argument("--vocab_size", type=int, default=30000, help="synthetic rows' vocabulary")
    parser.add_argument("--shards", type=Path, help="the instances stage's output, sequences of --seq_len")
    parser.add_argument("--param_dtype", default="bfloat16" if cuda else "float32", help="compute dtype (FSDP2)")
    parser.add_argument("--activation_checkpointing", action="store_true")
    parser.add_argument("--compile", action="store_true", help="torch.compile the sharded model")
    parser.add_argument("--peak_tflops", type=float, help="the device's peak dense FLOP/s, in TFLOP/s")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results", help="where mfu.json/.md go")
    return parser.parse_args(argv)


def resolve_device(name: str) -> torch.device:
    """``name`` as a device with an index where it is a GPU: ``torch.cuda.set_device`` refuses a bare "cuda"."""
    device = torch.device(name)
    return torch.device(device.type, 0) if device.type == "cuda" and device.index is None else device


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = resolve_device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    peak, peak_source = peak_tflops(device, args.peak_tflops)
    print(f"device {device}; peak {peak:.1f} TFLOP/s ({peak_source}); param_dtype {args.param_dtype}")
    print(f"{'preset':<8}{'B×T':>10}{'step s':>9}{'spread':>8}{'tokens/s':>11}{'TFLOP/s':>9}{'MFU':>7}"
          f"{'MFU+loader':>11}{'loader':>8}{'busy_other':>11}")  # fmt: skip
    figures, ratios = {}, {}
    for preset in args.preset:
        r = measure_preset(args, preset, device)
        model_s, step_s = r["model_s"]["median"], r["step_s"]["median"]
        achieved = r["flops_per_step"] / model_s / 1e12
        ratios[f"mfu_model_step_{preset}"] = ratio(achieved, peak, "model FLOP/s of the model step ÷ peak FLOP/s")
        whole = r["flops_per_step"] / step_s / 1e12
        ratios[f"mfu_whole_step_{preset}"] = ratio(whole, peak, "model FLOP/s of loader + model step ÷ peak")
        share = ratio(r["loader_s"]["median"], step_s, "median loader seconds ÷ median step seconds (loader+model)")
        ratios[f"loader_share_{preset}"] = share
        figures[preset] = r
        shape = "×".join(map(str, r["shapes"][0]))
        print(f"{preset:<8}{shape:>10}{step_s:>9.4f}{r['step_s']['spread']:>8.2f}{r['tokens_per_s']:>11,.0f}"
              f"{achieved:>9.3g}{achieved / peak:>7.1%}{whole / peak:>11.1%}{share['value']:>8.1%}"
              f"{r['busy_other']:>11.2f}")  # fmt: skip
    load = max(r["busy_other"] for r in figures.values())
    targets = {k: v for k, v in TARGETS.items() if k in ratios} if device.type == "cuda" else {}
    lines = verdicts(ratios, targets, load)
    if load > BUSY_WARNING or targets:
        print("\n".join(lines))
    figures["peak_tflops"], figures["peak_source"] = peak, peak_source
    paths = write_results(args.results, "mfu", figures, ratios, load, lines)
    print(f"wrote {paths[0]} and {paths[1]}")
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
