#!/usr/bin/env bash
# KernelBench levels 1-3 on every GPU of one host at once, from one shared queue (benchmarks/kernelbench_levels.py
# --queue): one benchmarks/kernelbench_gpu.sh per GPU, each with its own state STATE_DIR/gpuK and the cores
# `nproc / GPUS` pinned to it (taskset), claiming groups of --batch problems as it frees up. Then the states are
# merged with STATE_DIR's own lines into STATE_DIR/results.jsonl (per problem the line that finished last) and
# STATE_DIR/summary.md.
#   bash benchmarks/kernelbench_gpus.sh STATE_DIR BUDGET_S [extra args for kernelbench_levels.py]
# e.g. bash benchmarks/kernelbench_gpus.sh .cache/kb 440 --batch 4 --set 'baselines.compile_modes=[]'
# The queue (STATE_DIR/queue.txt) starts, each call, with the problems that already have a line in STATE_DIR
# (seeded by hand, or merged by an earlier call) or in a GPU's state, so a later call (a fresh machine: carry
# STATE_DIR) goes on with the rest. Give --batch (default 4 here): small groups balance the GPUs; each group is one
# run.py. GPUS (default: all that nvidia-smi lists) limits the GPUs used; TREE (default benchmarks/kernelbench) is
# KernelBench's problem folder. When $OUT is set, the merged results.jsonl, summary.md and each GPU's log.txt are
# copied to $OUT/kernelbench/.
# Exit: 0, or the first non-zero exit of a GPU's invocation; 2 on bad usage or no GPU.
set -o pipefail
usage="usage: bash benchmarks/kernelbench_gpus.sh STATE_DIR BUDGET_S [extra args for kernelbench_levels.py]"
STATE=${1:?$usage}
BUDGET=${2:?$usage}
shift 2
case "$BUDGET" in '' | *[!0-9]*) echo "kernelbench_gpus.sh: BUDGET_S must be whole seconds, got '$BUDGET'" >&2; exit 2 ;; esac
HERE=$(cd "$(dirname "$0")/.." && pwd)
STATE=$(realpath -m "$STATE")
GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
if [ "$GPUS" -lt 1 ]; then
  echo "kernelbench_gpus.sh: no GPU listed by nvidia-smi (set GPUS=N to say how many)" >&2
  exit 2
fi
ARGS=("$@")
case " ${ARGS[*]} " in *" --batch "*) ;; *) ARGS+=(--batch 4) ;; esac
CORES=$(nproc)
PER=$((CORES / GPUS > 0 ? CORES / GPUS : 1))
mkdir -p "$STATE"
cd "$HERE" || exit 2

shopt -s nullglob
# the queue of this call: the lines so far (STATE_DIR's own, seeded by hand or merged before, and each GPU's)
# merged into STATE_DIR/results.jsonl, and counted as claimed
python3 benchmarks/kernelbench_levels.py --state "$STATE" --merge-from "$STATE" "$STATE"/gpu*/ \
  --queue "$STATE/queue.txt" || exit 2

pids=()
for ((k = 0; k < GPUS; k++)); do
  first=$((k * PER % CORES))
  CUDA_VISIBLE_DEVICES=$k OUT= taskset -c "$first-$((first + PER - 1))" \
    bash benchmarks/kernelbench_gpu.sh "$STATE/gpu$k" "$BUDGET" --queue "$STATE/queue.txt" "${ARGS[@]}" \
    > "$STATE/gpu$k.out" 2>&1 &
  pids+=($!)
done
code=0
for pid in "${pids[@]}"; do
  wait "$pid"
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$code" -eq 0 ]; then code=$rc; fi
done
python3 benchmarks/kernelbench_levels.py --state "$STATE" --merge-from "$STATE" "$STATE"/gpu*/ \
  --summary "$STATE/summary.md" --tree "${TREE:-benchmarks/kernelbench}"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT/kernelbench"
  cp "$STATE/results.jsonl" "$STATE/summary.md" "$OUT/kernelbench/" 2>/dev/null
  for log in "$STATE"/gpu*/log.txt; do cp "$log" "$OUT/kernelbench/$(basename "$(dirname "$log")")-log.txt"; done
fi
exit "$code"
