#!/usr/bin/env bash
# bench/mfu.py on a lent GPU machine, as one prepared call: that machine has PyTorch, Lightning, numba, pyarrow
# and SentencePiece but neither Beam nor this repo's data/ (DVC outputs are not in the working tree that travels).
#
# Here, once the data stages have run (dvc repro instances):
#   bash bench/gpu_mfu.sh prepare   # the instances stage at 512 tokens, dupe_factor 1: .device/shards512, ~18 MB
# Then with the device tool, in one call of about 5 minutes:
#   run(command="bash bench/gpu_mfu.sh run", carry=[".device"], timeout_s=540)
# which times base and large eager and then compiled, fed by the shard loader (dynamic masking), and brings back
# each run's mfu.{json,md} under eager/ and compiled/. Any further arguments go to every bench/mfu.py call, e.g.
# `OUT=/tmp/mfu bash bench/gpu_mfu.sh run --device cpu --preset tiny --steps 1` to try the call here.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARDS=.device/shards512
mode=${1:-}
shift || true
case "$mode" in
prepare)
	python -m pipelines.instances --input data/deduped --spiece data/vocab/spiece.model --output "$SHARDS" \
		--max_seq_length 512 --dupe_factor 1 --max_predictions_per_seq 20 "$@"
	du -sh "$SHARDS"
	;;
run)
	export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 # the repo is not installed there
	nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv 2>/dev/null || true
	python3 -c 'import torch, lightning; print("torch", torch.__version__, "lightning", lightning.__version__)'
	python3 bench/mfu.py --shards "$SHARDS" --results "${OUT:?the device tool sets OUT}/eager" "$@"
	python3 bench/mfu.py --shards "$SHARDS" --results "$OUT/compiled" --compile "$@"
	;;
*)
	echo "usage: bash bench/gpu_mfu.sh prepare|run [bench/mfu.py arguments]" >&2
	exit 2
	;;
esac
