"""Which CPU kernels make two machines' pretraining part, and what pinning them costs (bench/README.md).

Run: ``python bench/determinism.py [--steps 150] [--rounds 2] [--settings default "ATen avx2" ...]`` from the
repository. Each setting is a set of environment variables that torch, MKL and oneDNN read when they load, so
every run is its own process: ``python -m albert_lightning.fit`` on the ablation grid's configuration
(``configs/pretrain.yaml`` + ``configs/ablation.yaml``, the SOP shards in ``--data_dir``) for ``--steps`` steps,
one thread (``OMP_NUM_THREADS=1``: the thread count is part of the arithmetic too), into a private temporary
folder. Two settings are not variables but calls a wrapper makes before the run (``torch.backends.mkldnn.enabled
= False``, ``torch.use_deterministic_algorithms(True)``); every setting runs through the same wrapper.

Per setting it prints the CPU capability ATen dispatched to, the validation MLM loss before the first step and
after the last (every digit), the largest absolute difference of any trained weight from the default's, which
earlier setting gave the very same bytes, and two CPU-time ratios against the default, medians over ``--rounds``
rounds run interleaved (A B C … A B C …, the machine being shared):

- ``run``: user + system CPU-seconds of the whole process (``os.wait4``, what ``/usr/bin/time`` reports), imports,
  data loading and validation included;
- ``step``: CPU-seconds of the training steps alone (an optimizer pre-step hook's ``time.process_time`` at the
  first step and the last: forward, backward and update of every step between), the marginal cost of a step.

A setting that changes the bytes on one machine names a kernel choice that differs between CPUs with other
features or another vendor. A pinned setting that no further cap changes leaves no such choice on this machine;
that two vendors then agree needs a second CPU to show (bench/results/determinism.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure

REPO = Path(__file__).resolve().parents[1]

# Runs albert_lightning.fit as `python -m` would, after the settings that are calls, and records the capability
# ATen chose and the CPU time at the first and the last optimizer step (the pre-hook fires before the closure
# runs forward and backward, so last − first spans steps - 1 whole steps, validation excluded).
WRAPPER = """
import json, os, runpy, sys, time
sys.path.insert(0, os.getcwd())
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook
if os.environ.get("DET_MKLDNN") == "off":
    torch.backends.mkldnn.enabled = False
if os.environ.get("DET_DETERMINISTIC") == "1":
    torch.use_deterministic_algorithms(True)
marks = []
register_optimizer_step_pre_hook(lambda *_: marks.append(time.process_time()))
sys.argv = ["albert_lightning.fit", *sys.argv[1:]]
try:
    runpy.run_module("albert_lightning.fit", run_name="__main__", alter_sys=True)
finally:
    with open(os.environ["DET_INFO"], "w") as f:
        json.dump({"capability": torch.backends.cpu.get_cpu_capability(), "steps": len(marks),
                   "step_cpu_s": (marks[-1] - marks[0]) / (len(marks) - 1) if len(marks) > 1 else None}, f)
"""

# name → environment. Each knob alone, then the pins: every kernel choice found moved to what any x86-64 CPU with
# AVX2 runs, and that pin again under every further cap (which must change nothing).
PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}
SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "ATen avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "ATen avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "ATen default (no SIMD)": {"ATEN_CPU_CAPABILITY": "default"},
    "MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
    "MKL_CBWR=AVX2": {"MKL_CBWR": "AVX2"},
    "MKL_ENABLE_INSTRUCTIONS=AVX2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "ONEDNN_MAX_CPU_ISA=AVX2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "mkldnn off": {"DET_MKLDNN": "off"},
    "deterministic algorithms": {"DET_DETERMINISTIC": "1"},
    "ATen avx2 + MKL_CBWR=AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
    "pinned: ATen avx2 + MKL_CBWR=COMPATIBLE": PINNED,
    "pinned + every cap": {
        **PINNED, "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "AVX2", "DET_MKLDNN": "off",
        "DET_DETERMINISTIC": "1",
    },
}  # fmt: skip
KNOBS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "MKL_DEBUG_CPU_TYPE")


def fit_argv(wrapper: Path, data_dir: str, steps: int, out: Path) -> list[str]:
    """The ablation grid's pretraining command for ``steps`` steps, one validation at the end, into ``out``."""
    return [
        sys.executable, str(wrapper), "--config", "configs/pretrain.yaml", "--config", "configs/ablation.yaml",
        "--data.data_dir", data_dir, "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(steps),
        "--trainer.default_root_dir", str(out),
    ]  # fmt: skip


def run_one(name: str, args: argparse.Namespace, work: Path, count: dict[str, int]) -> dict:
    """Runs one setting once; returns its CPU times, capability, losses and trained weights (a dict of tensors)."""
    import torch  # only here: the runs import it under their own environment

    count[name] = count.get(name, 0) + 1
    out = work / f"{name.replace(' ', '_').replace(':', '')}-{count[name]}"
    # `env` execs the command in the same process, so os.wait4 still times the run itself; a knob set in the
    # caller's shell is removed, so that only the setting's own apply.
    unset = [arg for k in os.environ if k in KNOBS or k.startswith("DET_") for arg in ("-u", k)]
    assign = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "DET_INFO": f"{out}.json", **SETTINGS[name]}
    command = ["env", *unset, *(f"{k}={v}" for k, v in assign.items())]
    tree = measure.run_tree([*command, *fit_argv(work / "wrap.py", args.data_dir, args.steps, out)], work / "fit.log")
    if tree.returncode:
        raise SystemExit(f"{name} failed ({tree.returncode}): {(work / 'fit.log').read_text()[-2000:]}")
    info = json.loads(Path(f"{out}.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    state = torch.load(out / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")["state_dict"]
    shutil.rmtree(out)
    digest = hashlib.sha256(b"".join(t.numpy().tobytes() for t in state.values())).hexdigest()[:16]
    return {
        "cpu_s": tree.cpu_s, "step_cpu_s": info["step_cpu_s"], "other_cores": tree.other_cores,
        "capability": info["capability"], "steps": info["steps"], "digest": digest, "state": state,
        "loss_start": metrics["validation_at_start"]["mlm_loss"], "loss_end": metrics["validation"]["mlm_loss"],
    }  # fmt: skip


def max_abs_diff(a: dict, b: dict) -> float:
    """The largest |a − b| over every tensor of two state dicts with the same keys and shapes."""
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def table(results: dict[str, list[dict]], steps: int) -> list[str]:
    """One Markdown row per setting: capability, losses, weight difference, identical-to, CPU ratios."""
    base = results["default"]
    run_base = statistics.median(r["cpu_s"] for r in base)
    step_base = statistics.median(r["step_cpu_s"] for r in base)
    first_with: dict[str, str] = {}
    lines = [
        f"| setting | capability | val MLM loss at step 0 | after {steps} | max abs weight diff vs default "
        "| same bytes as | CPU-s ratio: run | step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in results.items():
        first = runs[0]
        digests = {r["digest"] for r in runs}
        same = first_with.setdefault(first["digest"], name)
        same = "—" if same == name else same
        if len(digests) > 1:
            same += f" (rounds differ: {len(digests)} digests)"
        diff = max_abs_diff(first["state"], base[0]["state"])
        run_ratio = statistics.median(r["cpu_s"] for r in runs) / run_base
        step_ratio = statistics.median(r["step_cpu_s"] for r in runs) / step_base
        lines.append(
            f"| {name} | {first['capability']} | {first['loss_start']!r} | {first['loss_end']!r} | {diff:.3g} "
            f"| {same} | {run_ratio:.2f} | {step_ratio:.2f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="training steps per run (validation at the end)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of every setting")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--data_dir", default="data/ablations/shards/sop", help="the shards to pretrain on")
    parser.add_argument("--json", type=Path, help="also write every figure (and the machine) here")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps: at least 2 (a step's CPU time is taken between the first and the last)")
    names = ["default", *[n for n in args.settings if n != "default"]]
    work = Path(tempfile.mkdtemp(prefix="bench-determinism-"))
    count: dict[str, int] = {}
    try:
        (work / "wrap.py").write_text(WRAPPER)
        results = measure.run_rounds(names, args.rounds, lambda name: run_one(name, args, work, count))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = table(results, args.steps)
    load = max(r["other_cores"] for runs in results.values() for r in runs)
    lines.append("")
    lines.append(
        f"{args.steps} steps, 1 thread, {args.rounds} interleaved rounds; CPU-s ratios are medians against the "
        f"default's (run: {statistics.median(r['cpu_s'] for r in results['default']):.1f} CPU-s, step: "
        f"{1000 * statistics.median(r['step_cpu_s'] for r in results['default']):.1f} CPU-ms); other processes "
        f"kept up to {load:.2f} cores busy."
    )
    print("\n".join(lines))
    if args.json:
        figures = {n: [{k: v for k, v in r.items() if k != "state"} for r in runs] for n, runs in results.items()}
        body = {**measure.machine(), "settings": SETTINGS, "load_other_cores": load, "runs": figures}
        args.json.write_text(json.dumps(body, indent=2) + "\n")


if __name__ == "__main__":
    main()
