#!/usr/bin/env bash
# The first GPU run, from one command: `fit` at base and xxlarge in bf16 on one GPU and on all the machine's GPUs,
# printing tokens/s, MFU against the device's peak and peak memory. A lent GPU machine has PyTorch, Lightning,
# numba, pyarrow and SentencePiece but neither Beam nor this repo's data/ (DVC outputs are not in the working tree
# that travels), so the shards are built here first.
#
# Here, once the data stages have run (dvc repro instances):
#   bash bench/gpu_mfu.sh prepare   # the instances stage at 512 tokens, dupe_factor 1: .device/shards512, ~18 MB
# Then with the device tool, in one call of a few minutes:
#   run(command="bash bench/gpu_mfu.sh", carry=[".device"], timeout_s=540)
# `bash bench/gpu_mfu.sh` (or `... run`): for each of $PRESETS (base xxlarge) and 1 then all GPUs, `python -m
# albert_lightning.fit` with FSDP2Strategy, precision bf16-mixed, the paper's vocabulary (30,000: the model is
# widened before it is built, bench/model_sizes_callback.py), $STEPS optimizer steps; each rank's step times,
# tokens and peak allocation come back under $OUT/fit-<preset>-<gpus>/, and the table goes to $OUT/gpu_mfu.json.
# MFU = model FLOPs (bench/mfu.py flops_per_token, padding included) per second ÷ (GPUs × the device's peak dense
# bf16 FLOP/s, bench/mfu.py PEAK_TFLOPS; $PEAK_TFLOPS overrides), over the second half of the steps.
# On a machine without a GPU it says so in one line and exits 0. The same path on CPU, to try it here:
#   ACCELERATOR=cpu PRESETS=tiny SHARDS=DIR SEQ_LEN=128 STEPS=4 BATCH=2 bash bench/gpu_mfu.sh
# (DIR: shards of SEQ_LEN tokens, e.g. bench/model_sizes.py --workdir W's W/shards128).
# `bash bench/gpu_mfu.sh mfu [bench/mfu.py arguments]`: bench/mfu.py's model step alone, eager then compiled, on
# one GPU (base and large), each run's mfu.{json,md} under $OUT/eager and $OUT/compiled.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
SHARDS=${SHARDS:-.device/shards512}
mode=${1:-run}
shift || true
export PYTHONPATH="$REPO/bench:$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 # the repo is not installed there
case "$mode" in
prepare)
	python -m pipelines.instances --input data/deduped --spiece data/vocab/spiece.model --output "$SHARDS" \
		--max_seq_length 512 --dupe_factor 1 --max_predictions_per_seq 20 "$@"
	du -sh "$SHARDS"
	;;
run)
	accelerator=${ACCELERATOR:-gpu}
	if [ "$accelerator" = gpu ] && ! python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
		echo "bench/gpu_mfu.sh: no GPU on this machine (torch.cuda.is_available() is False): nothing measured"
		exit 0
	fi
	[ -f "$SHARDS/manifest.json" ] || { echo "bench/gpu_mfu.sh: no shards in $SHARDS: run 'bash bench/gpu_mfu.sh prepare' here first" >&2; exit 2; }
	shards=$(cd "$SHARDS" && pwd)
	out=${OUT:-$(mktemp -d)}
	out=$(mkdir -p "$out" && cd "$out" && pwd)
	if [ "$accelerator" = gpu ]; then
		all=$(python3 -c 'import torch; print(torch.cuda.device_count())')
		nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv 2>/dev/null || true
	else
		all=${DEVICES:-2}
	fi
	python3 -c 'import torch, lightning; print("torch", torch.__version__, "lightning", lightning.__version__)'
	for preset in ${PRESETS:-base xxlarge}; do
		case "$preset" in xxlarge | xlarge) batch=${BATCH:-8} ;; *) batch=${BATCH:-32} ;; esac
		for n in $(printf '%s\n' 1 "$all" | sort -un); do
			root="$out/fit-$preset-$n"
			rm -rf "$root" && mkdir -p "$root"
			echo "fit: $preset on $n $accelerator device(s), batch $batch per device, ${STEPS:-30} steps"
			# From the run's own folder, so that configs/pretrain.yaml (the embedded default's run) is not read.
			if ! (cd "$root" && env -u MASTER_ADDR -u MASTER_PORT -u WORLD_SIZE -u RANK -u LOCAL_RANK -u NODE_RANK \
				MODEL_SIZES_VOCAB=30000 \
				MODEL_SIZES_CHECKPOINTS=0 python3 -m albert_lightning.fit --model.preset="$preset" \
				--model.optimizer=lamb --model.warmup_steps=0 --model.total_steps="${STEPS:-30}" \
				--data.data_dir="$shards" --data.batch_size="$batch" --data.num_workers=2 --seed_everything=1 \
				--trainer.accelerator="$accelerator" --trainer.devices="$n" --trainer.precision=bf16-mixed \
				--trainer.strategy.class_path=albert_lightning.sharding.FSDP2Strategy \
				--trainer.max_steps="${STEPS:-30}" --trainer.limit_val_batches=0 --trainer.num_sanity_val_steps=0 \
				--trainer.use_distributed_sampler=false --trainer.logger=false --trainer.enable_checkpointing=false \
				--trainer.enable_progress_bar=false --trainer.enable_model_summary=false \
				--trainer.default_root_dir="$root" --trainer.callbacks+=model_sizes_callback.SizeRecorder \
				>"$root/fit.log" 2>&1); then
				echo "fit: $preset on $n device(s) failed; the end of $root/fit.log:"
				tail -n 15 "$root/fit.log"
			fi
		done
	done
	python3 - "$out" "$accelerator" <<'EOF'
import json, os, statistics, sys
from pathlib import Path

import torch

from albert_lightning.model import AlbertConfig
from mfu import cpu_peak_tflops, flops_per_token, peak_tflops

out, accelerator = Path(sys.argv[1]), sys.argv[2]
override = float(os.environ["PEAK_TFLOPS"]) if os.environ.get("PEAK_TFLOPS") else None
print(f"{'preset':<8}{'devices':>8}{'B×T':>9}{'step s':>9}{'tokens/s':>11}{'TFLOP/s/dev':>12}{'MFU':>7}{'peak GB':>9}")
rows = []
for folder in sorted(out.glob("fit-*")):
    ranks = [json.loads(p.read_text()) for p in sorted(folder.glob("rank*.json"))]
    if not ranks:
        continue
    n, config = ranks[0]["world_size"], AlbertConfig(**ranks[0]["config"])
    half = len(ranks[0]["step_wall_s"]) // 2  # the first half warms allocator and kernels up
    step_s = statistics.median(max(r["step_wall_s"][i] for r in ranks) for i in range(half, len(ranks[0]["step_wall_s"])))
    steps = len(ranks[0]["step_wall_s"]) - half
    tokens = sum(sum(r["step_tokens"][half:]) for r in ranks) / steps
    flops = sum(b * t * flops_per_token(config, t, p) for r in ranks for b, t, p in r["step_positions"][half:]) / steps
    if accelerator == "gpu":
        peak, _ = peak_tflops(torch.device("cuda", 0), override)
        memory = max(r["cuda_max_allocated_mb"] for r in ranks) / 1024
    else:
        peak = override or cpu_peak_tflops(ranks[0]["threads"])
        memory = max(r["vm_hwm_train_mb"] for r in ranks) / 1024  # RSS: what the CPU path holds
    achieved = flops / step_s / n / 1e12
    b, t, _ = ranks[0]["step_positions"][-1]
    row = dict(preset=folder.name.split("-")[1], devices=n, rows=b, length=t,
               step_s=step_s, tokens_per_s=tokens / step_s, tflops_per_device=achieved, mfu=achieved / peak,
               peak_memory_gb=memory, peak_tflops=peak)
    rows.append(row)
    print(f"{row['preset']:<8}{n:>8}{f'{b}×{t}':>9}{step_s:>9.4f}{row['tokens_per_s']:>11,.0f}{achieved:>12.1f}"
          f"{row['mfu']:>7.1%}{memory:>9.2f}")
(out / "gpu_mfu.json").write_text(json.dumps(rows, indent=1) + "\n")
print(f"wrote {out / 'gpu_mfu.json'}")
EOF
	;;
mfu)
	nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv 2>/dev/null || true
	python3 bench/mfu.py --shards "$SHARDS" --results "${OUT:?the device tool sets OUT}/eager" "$@"
	python3 bench/mfu.py --shards "$SHARDS" --results "$OUT/compiled" --compile "$@"
	;;
*)
	echo "usage: bash bench/gpu_mfu.sh [run] | prepare | mfu [bench/mfu.py arguments]" >&2
	exit 2
	;;
esac
