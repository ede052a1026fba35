"""The paper's model sizes through FSDP2 on CPU: per-rank memory, CPU time per step and checkpoint bytes.

Run: ``python bench/model_sizes.py [--presets base large xlarge] [--ranks 1 2 4 8] [--ac_ranks 2]
[--per_use_ranks 8] [--count_only xxlarge] [--steps 3] [--merge]``. For each preset and world size it runs the real
command, ``python -m albert_lightning.fit --trainer.devices N`` with ``FSDP2Strategy`` over gloo, as a subprocess for
a few optimizer steps (LAMB, the paper's) at length 128; at the ``--ac_ranks`` world sizes once more with
``--model.activation_checkpointing true``, and at the ``--per_use_ranks`` with that and
``--model.gather_per_use true`` (each sublayer gathered per use: a rank's memory for a layer's).
``--merge`` keeps the runs of the results file that this run does not measure again. ``--malloc_mmap_threshold_mb``
sets glibc's ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` for the fits: each allocation that large gets
pages of its own, returned when freed, instead of a place in a heap that freed tensors leave fragmented (0.5 GB a
rank of xxlarge's steady state, measured on 2 ranks); the table says which runs had it. Each rank records
(``model_sizes_callback.SizeRecorder``):

- its peak RSS up to the first step (the model is built whole on every rank, then sharded) and over the steps;
- the bytes of its own shards of the parameters and of the optimizer's state: the figure that must fall as 1/N.
  ``shard_1_over_n_{preset}_{N}`` = the largest rank's bytes ÷ (the 1-rank bytes / N); target ≤ 1.15;
- each step's CPU seconds (its process, all threads); a run's figure is the median over the steps after the
  first (which allocates the optimizer's state), summed over the ranks: the machine's CPU-s per step;
- the bytes of a sharded checkpoint (a folder, one file per rank) and of a full one (one file, from rank 0).

The vocabulary is 30,000 (``--vocab_size``), the paper's, although the shards' is smaller (a tiny corpus cannot
fill 30,000 pieces): the callback widens the model's before it is built, so the embedding table, the tied
decoder, their optimizer state and the logits at masked positions are the paper's size, and every shard id is
still a valid input. The parameter counts of ``--count_only`` presets (xxlarge: its 8-rank fit needs most of
the machine) come from the meta device, without a fit.

The shards: the four books of ``tests/fixtures/prose`` through corpus → segment → vocab (2,000 pieces) →
instances at length 128 (``dupe_factor`` 1, no short sequences), in ``--workdir`` (a temporary folder unless
given; kept and reused when given). Every fit runs in a folder of its own there, from which no default config
is read. A fit is stopped (and its figures left out) past ``--timeout_s`` or when its process tree's summed RSS
passes ``--max_tree_gb`` (summed PSS: each rank maps the same libraries, whose pages summed RSS would count
once per rank, 0.2 GB each); none starts while MemAvailable is under ``--min_available_gb`` (it waits, then skips).

Figures go to ``--results`` (default ``bench/results``) as ``model_sizes.json`` and ``model_sizes.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import BUSY_WARNING, MB, busy_cpu_s, other_cores, ratio, verdicts, write_results

REPO = Path(__file__).resolve().parents[1]
PROSE = REPO / "tests" / "fixtures" / "prose"
DISTRIBUTED_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK")
NO_PARAMS = ["--params", os.devnull]  # the bench sets every stage flag it relies on, whatever params.yaml holds
LOCAL = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
# Rows per rank per step: xlarge gets 1 so that 8 ranks' activations stay inside the memory cap on 2 cores.
BATCH_SIZE = {"base": 2, "large": 2, "xlarge": 1, "xxlarge": 1}
PRESETS = list(BATCH_SIZE)  # the paper's, in size order
TOLERANCE = 1.15  # the "within 15 %" of 1/N


# ------------------------------------------------------------------------------------------------- the inputs


def parameter_count(preset: str, vocab_size: int) -> int:
    """The preset's parameters (pretraining heads included), counted on the meta device: no memory."""
    import torch

    from albert_lightning.model import AlbertConfig, AlbertForPreTraining, num_parameters

    with torch.device("meta"):
        return num_parameters(AlbertForPreTraining(AlbertConfig.preset(preset, vocab_size=vocab_size)))


def build_shards(workdir: Path, seq_len: int) -> Path:
    """The prose fixture's four books as shards of ``seq_len`` (vocabulary 2,000); reused when already built."""
    from pipelines import corpus, instances, segment, vocab

    shards = workdir / f"shards{seq_len}"
    if (shards / "manifest.json").exists():
        return shards
    docs, sentences, pieces = workdir / "corpus", workdir / "sentences", workdir / "vocab"
    corpus.run([*NO_PARAMS, "--inputs", str(PROSE), "--output", str(docs), *LOCAL])
    segment.run([*NO_PARAMS, "--input", str(docs), "--output", str(sentences), *LOCAL])
    # No dedup stage: held-out text is not measured here, only the shapes and the work of a step.
    vocab.run([*NO_PARAMS, "--input", str(sentences), "--output", str(pieces), "--allow_undeduped",
               "--vocab_size=2000", *LOCAL])  # fmt: skip
    instances.run([*NO_PARAMS, "--input", str(sentences), "--spiece", str(pieces / "spiece.model"),
                   "--output", str(shards), "--allow_undeduped", f"--max_seq_length={seq_len}", "--dupe_factor=1",
                   "--short_seq_prob=0", "--validation_dupe_factor=1", *LOCAL])  # fmt: skip
    return shards


# --------------------------------------------------------------------------------------------------- one fit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mem_available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / (1 << 20)
    return 0.0


def wait_for_memory(min_gb: float, wait_s: float) -> bool:
    """Whether MemAvailable reached ``min_gb`` within ``wait_s`` (other jobs share the machine)."""
    deadline = time.monotonic() + wait_s
    while mem_available_gb() < min_gb:
        if time.monotonic() > deadline:
            return False
        time.sleep(15)
    return True


# How a fit gathers and recomputes: (activation checkpointing, gather per use) by the name its runs are listed under.
MODES = {"plain": (False, False), "ac": (True, False), "per_use": (True, True)}
AGAINST_PLAIN = {
    "ac": "with activation checkpointing ÷ without",
    "per_use": "each sublayer gathered per use, recomputed, ÷ each layer gathered once per step, not recomputed",
}


def fit_command(args: argparse.Namespace, preset: str, ranks: int, mode: str, shards: Path, root: Path) -> list[str]:
    ac, per_use = MODES[mode]
    return [
        sys.executable, "-m", "albert_lightning.fit",
        f"--model.preset={preset}", "--model.optimizer=lamb", "--model.warmup_steps=0",
        f"--model.total_steps={args.steps}", f"--model.activation_checkpointing={str(ac).lower()}",
        f"--model.gather_per_use={str(per_use).lower()}",
        f"--data.data_dir={shards}", f"--data.batch_size={args.batch_size or BATCH_SIZE[preset]}",
        "--data.num_workers=0", "--seed_everything=1",
        "--trainer.accelerator=cpu", f"--trainer.devices={ranks}",
        "--trainer.strategy.class_path=albert_lightning.sharding.FSDP2Strategy", f"--trainer.max_steps={args.steps}",
        "--trainer.limit_val_batches=0", "--trainer.num_sanity_val_steps=0", "--trainer.use_distributed_sampler=false",
        "--trainer.logger=false", "--trainer.enable_checkpointing=false", "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false", f"--trainer.default_root_dir={root}",
        "--trainer.callbacks+=model_sizes_callback.SizeRecorder",
    ]  # fmt: skip


def run_fit(
    command: list[str], root: Path, vocab_size: int, timeout_s: float, max_tree_gb: float, mmap_mb: float | None
) -> dict[str, Any]:
    """Runs one fit in ``root``, watching its process tree; returns how it ended, its CPU time and its peak."""
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    env.update(MASTER_PORT=str(free_port()), MODEL_SIZES_VOCAB=str(vocab_size), PYTHONUNBUFFERED="1")
    if mmap_mb is not None:
        env["MALLOC_MMAP_THRESHOLD_"] = env["MALLOC_TRIM_THRESHOLD_"] = str(int(mmap_mb * MB))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "bench"), str(REPO), env.get("PYTHONPATH", "")])
    root.mkdir(parents=True)
    start, busy0, stopped, peak = time.perf_counter(), busy_cpu_s(), None, 0
    with open(root / "fit.log", "w") as log:
        # A session of its own: a stop ends the launcher and every rank it started, and nothing else.
        child = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=log, start_new_session=True)
        parent = psutil.Process(child.pid)
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)  # wait4, not poll: its rusage is the tree's CPU
            if pid:
                break
            try:
                tree = [parent, *parent.children(recursive=True)]
                peak = max(peak, sum(p.memory_full_info().pss for p in tree if p.is_running()))
            except psutil.NoSuchProcess:
                pass
            over = peak > max_tree_gb * (1 << 30)
            if over or time.perf_counter() - start > timeout_s:
                stopped = f"summed PSS over {max_tree_gb} GB" if over else f"past {timeout_s:.0f} s"
                os.killpg(child.pid, signal.SIGKILL)
                _, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.25)
    wall = time.perf_counter() - start
    cpu = usage.ru_utime + usage.ru_stime
    out = {"returncode": os.waitstatus_to_exitcode(status), "stopped": stopped, "wall_s": wall, "tree_cpu_s": cpu,
           "tree_peak_pss_mb": peak / MB, "busy_other": other_cores(busy0, cpu, wall)}  # fmt: skip
    if out["returncode"] != 0 and not stopped:
        out["error"] = (root / "fit.log").read_text()[-2000:]
    return out


def folder_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure_run(args: argparse.Namespace, preset: str, ranks: int, mode: str, shards: Path) -> dict[str, Any]:
    """One fit's figures: the tree's, each rank's, and the checkpoints' bytes (then deleted: xlarge's are GBs)."""
    root = args.workdir / "runs" / f"{preset}-{ranks}-{mode}"
    shutil.rmtree(root, ignore_errors=True)
    ac, per_use = MODES[mode]
    figures: dict[str, Any] = {"preset": preset, "ranks": ranks, "activation_checkpointing": ac,
                               "gather_per_use": per_use, "batch_size": args.batch_size or BATCH_SIZE[preset],
                               "steps": args.steps,
                               "malloc_mmap_threshold_mb": args.malloc_mmap_threshold_mb}  # fmt: skip
    if not wait_for_memory(args.min_available_gb, args.wait_s):
        return {**figures, "skipped": f"MemAvailable under {args.min_available_gb} GB for {args.wait_s:.0f} s"}
    command = fit_command(args, preset, ranks, mode, shards, root)
    figures.update(
        run_fit(command, root, args.vocab_size, args.timeout_s, args.max_tree_gb, args.malloc_mmap_threshold_mb)
    )
    records = [json.loads(p.read_text()) for p in sorted(root.glob("rank*.json"))]
    if figures["returncode"] != 0 or len(records) != ranks:
        return figures
    steady = [statistics.median(r["step_cpu_s"][1:] or r["step_cpu_s"]) for r in records]
    state = [r["param_bytes"] + r["optimizer_bytes"] for r in records]
    sharded, full = root / "sharded.ckpt", root / "full.ckpt"
    figures.update(
        parameters=records[0]["parameters"],
        vocab_size=records[0]["vocab_size"],
        threads_per_rank=records[0]["threads"],
        peak_rss_build_mb=max(r["vm_hwm_build_mb"] for r in records),
        peak_rss_train_mb=max(r["vm_hwm_train_mb"] for r in records),
        peak_rss_save_mb=max(r["vm_hwm_save_mb"] for r in records),
        state_bytes_max=max(state),
        state_bytes_min=min(state),
        param_bytes_max=max(r["param_bytes"] for r in records),
        optimizer_bytes_max=max(r["optimizer_bytes"] for r in records),
        grad_bytes_max=max(r["grad_bytes"] for r in records),
        cpu_s_per_step=sum(steady),  # the machine's CPU for one global step, every rank together
        cpu_s_per_step_per_rank=statistics.mean(steady),
        wall_s_per_step=statistics.median(statistics.median(r["step_wall_s"][1:] or r["step_wall_s"]) for r in records),
        sharded_ckpt_bytes=folder_bytes(sharded) if sharded.exists() else None,
        sharded_ckpt_largest_file=max((p.stat().st_size for p in sharded.rglob("*") if p.is_file()), default=None),
        full_ckpt_bytes=folder_bytes(full) if full.exists() else None,
        ranks_records=records,
    )
    for path in (sharded, full):
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return figures


# ----------------------------------------------------------------------------------------------- the report


def mode_of(run: dict[str, Any]) -> str:
    flags = (run["activation_checkpointing"], run.get("gather_per_use", False))  # earlier results lack the key
    return next(m for m, f in MODES.items() if f == flags)


def merged(runs: list[dict[str, Any]], previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``runs`` with the ``previous`` runs (an earlier results file's) that they do not measure again, in preset,
    world-size and mode order."""

    def key(r: dict[str, Any]) -> tuple[int, int, int]:
        order = PRESETS.index(r["preset"]) if r["preset"] in PRESETS else len(PRESETS)
        return order, r["ranks"], list(MODES).index(mode_of(r))

    new = {key(r) for r in runs}
    kept = [r for r in previous if key(r) not in new]
    return sorted([*kept, *runs], key=key)


def derive_ratios(runs: list[dict[str, Any]]) -> dict[str, dict]:
    """The 1/N check per preset and world size (on the plain run, or the per-use one where no plain run fitted),
    activation checkpointing's memory and CPU, and gathering per use's against the plain run's."""
    done = {(r["preset"], r["ranks"], mode_of(r)): r for r in runs if "state_bytes_max" in r}
    ratios: dict[str, dict] = {}
    for (preset, ranks, mode), r in done.items():
        one = done.get((preset, 1, "plain"))
        checked = mode == "plain" or (mode == "per_use" and (preset, ranks, "plain") not in done)
        if ranks > 1 and one and checked:
            ratios[f"shard_1_over_n_{preset}_{ranks}"] = ratio(
                r["state_bytes_max"], one["state_bytes_max"] / ranks,
                f"{preset} at {ranks} ranks: the largest rank's parameter + optimizer-state bytes ÷ 1/{ranks} of "
                "the 1-rank bytes",
            )  # fmt: skip
        off = done.get((preset, ranks, "plain"))
        if mode != "plain" and off:
            ratios[f"{mode}_peak_rss_train_{preset}_{ranks}"] = ratio(
                r["peak_rss_train_mb"], off["peak_rss_train_mb"],
                f"{preset} at {ranks} ranks: the largest rank's peak RSS over the steps, {AGAINST_PLAIN[mode]}",
            )  # fmt: skip
            ratios[f"{mode}_cpu_per_step_{preset}_{ranks}"] = ratio(
                r["cpu_s_per_step"], off["cpu_s_per_step"],
                f"{preset} at {ranks} ranks: CPU-s per step (all ranks), {AGAINST_PLAIN[mode]}",
            )  # fmt: skip
    return ratios


def table(runs: list[dict[str, Any]], counts: dict[str, int], ratios: dict[str, dict]) -> list[str]:
    """The Markdown table of every run, one row each."""
    lines = ["| preset | parameters (V=30,000) | ranks | act. ckpt | gathered | batch/rank | peak RSS build MB | "
             "peak RSS steps MB | param+optimizer MB/rank | ÷ (1-rank / N) | CPU-s/step (all ranks) | "
             "sharded ckpt MB | full ckpt MB |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in runs:
        head = f"| {r['preset']} | {counts[r['preset']] / 1e6:.2f} M | {r['ranks']} | "
        head += f"{'yes' if r['activation_checkpointing'] else 'no'} | "
        head += "each sublayer per use" if r.get("gather_per_use") else "each layer per step"
        if r.get("malloc_mmap_threshold_mb") is not None:
            head += f", glibc mmap ≥ {r['malloc_mmap_threshold_mb']:g} MB"
        head += " | "
        head += f"{r['batch_size']} | "
        if "state_bytes_max" not in r:
            why = r.get("skipped") or r.get("stopped") or f"exit {r.get('returncode')}"
            lines.append(head + f"not measured: {why} | | | | | | |")
            continue
        key = f"shard_1_over_n_{r['preset']}_{r['ranks']}"
        one_n = f"{ratios[key]['value']:.3f}" if key in ratios else ("1" if r["ranks"] == 1 else "")
        lines.append(
            head + f"{r['peak_rss_build_mb']:,.0f} | {r['peak_rss_train_mb']:,.0f} | {r['state_bytes_max'] / MB:,.1f}"
            f" | {one_n} | {r['cpu_s_per_step']:.2f} | {r['sharded_ckpt_bytes'] / MB:,.1f} | "
            f"{r['full_ckpt_bytes'] / MB:,.1f} |"
        )
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=PRESETS)
    parser.add_argument("--ranks", nargs="*", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--ac_ranks", nargs="*", type=int, default=[2], help="world sizes also run with AC on")
    parser.add_argument("--per_use_ranks", nargs="*", type=int, default=[], help="world sizes run gathering per use")
    parser.add_argument("--merge", action="store_true", help="keep the results file's runs not measured again")
    parser.add_argument("--count_only", nargs="*", default=[], help="presets counted on meta, no fit")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per fit")
    parser.add_argument("--malloc_mmap_threshold_mb", type=float, help="glibc's mmap and trim thresholds for fits")
    parser.add_argument("--batch_size", type=int, help=f"rows per rank per step (default per preset: {BATCH_SIZE})")
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--vocab_size", type=int, default=30000, help="the model's vocabulary (the paper's)")
    parser.add_argument("--timeout_s", type=float, default=1500.0, help="a fit is stopped past this")
    parser.add_argument("--max_tree_gb", type=float, default=10.0, help="a fit is stopped past this summed PSS")
    parser.add_argument("--min_available_gb", type=float, default=14.0, help="MemAvailable a fit waits for")
    parser.add_argument("--wait_s", type=float, default=600.0, help="how long a fit waits for that memory")
    parser.add_argument("--workdir", type=Path, help="shards and runs (kept); default: a temporary folder")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    temporary = args.workdir is None
    args.workdir = Path(tempfile.mkdtemp(prefix="model_sizes-")) if temporary else args.workdir
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        counts = {p: parameter_count(p, args.vocab_size) for p in [*args.presets, *args.count_only]}
        for preset, count in counts.items():
            # LAMB keeps two moments per parameter: float32 weights + state = 12 bytes a parameter on one rank.
            print(f"{preset:<8} {count:>13,} parameters at V={args.vocab_size:,}; "
                  f"param+optimizer on 1 rank {12 * count / MB:,.1f} MB")  # fmt: skip
        shards = build_shards(args.workdir, args.seq_len)
        runs = []
        wanted = {"plain": args.ranks, "ac": args.ac_ranks, "per_use": args.per_use_ranks}
        for preset in args.presets:
            for ranks in sorted({*args.ranks, *args.ac_ranks, *args.per_use_ranks}):
                for mode in [m for m, at in wanted.items() if ranks in at]:
                    r = measure_run(args, preset, ranks, mode, shards)
                    runs.append(r)
                    if "state_bytes_max" in r:
                        print(f"{preset:<8} ranks {ranks} {mode:<7} peak RSS {r['peak_rss_build_mb']:,.0f}/"
                              f"{r['peak_rss_train_mb']:,.0f} MB; param+opt {r['state_bytes_max'] / MB:,.1f} MB/rank;"
                              f" {r['cpu_s_per_step']:.2f} CPU-s/step; ckpt {r['sharded_ckpt_bytes'] / MB:,.1f} MB"
                              f" sharded, {r['full_ckpt_bytes'] / MB:,.1f} MB full", flush=True)  # fmt: skip
                    else:
                        print(
                            f"{preset:<8} ranks {ranks} {mode}: not measured "
                            f"({r.get('skipped') or r.get('stopped') or r.get('error', '')[-400:]})",
                            flush=True,
                        )
    finally:
        if temporary:
            shutil.rmtree(args.workdir, ignore_errors=True)
    if args.merge:
        previous = json.loads((args.results / "model_sizes.json").read_text())["figures"]
        runs, counts = merged(runs, previous["runs"]), {**previous["counts"], **counts}
    ratios = derive_ratios(runs)
    targets = {k: ("<=", TOLERANCE) for k in ratios if k.startswith("shard_1_over_n_")}
    # Bytes of shards do not depend on the machine's load: the 1/N check is judged whatever the load.
    load = max((r.get("busy_other", 0.0) for r in runs), default=0.0)
    lines = verdicts(ratios, targets, 0.0)
    print("\n1/N check (param + optimizer bytes of the largest rank ÷ 1/N of one rank's):")
    print("\n".join(lines))
    for key, r in ratios.items():
        if key.startswith("ac_"):
            print(f"{key} = {r['value']:.3f}: {r['divides']}")
    if load > BUSY_WARNING:
        print(f"(other processes kept up to {load:.2f} cores busy: CPU-s are inflated, memory and bytes are not)")
    figures = {"counts": counts, "runs": runs, "vocab_size": args.vocab_size, "seq_len": args.seq_len}
    json_path, md_path = write_results(args.results, "model_sizes", figures, ratios, load, lines)
    md = md_path.read_text().splitlines()
    md += ["", "## Runs", "", *table(runs, counts, ratios), "", "Parameter counts at V=30,000 (meta device):", ""]
    md += [f"- {p}: {c:,}" for p, c in counts.items()]
    md_path.write_text("\n".join(md) + "\n")
    print(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    main()
