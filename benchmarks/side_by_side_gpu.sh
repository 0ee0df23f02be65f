#!/usr/bin/env bash
# Ours and KernelBench's own eval on the same corpus draw, side by side. On a host with two GPUs: GPU 0 with the first
# half of the cores runs ours (benchmarks/verdict_rate_gpu.sh, loop profile), GPU 1 with the other half runs
# KernelBench's (benchmarks/kernelbench_eval_gpu.sh), each pinned with taskset so neither build pool takes the other's
# cores. On a host with one GPU (or SEQUENTIAL=1): ours first, then KernelBench's, each on the same GPU with every
# core, each cold (its build folder removed before it starts, when its results are empty). Then KernelBench's report
# against our state: both rates, and the kernels whose verdicts differ.
#   OUT=DIR [BUDGET=430] [KB_BUDGET=BUDGET] [OURS_ARGS="--set sanitizer.prestart=true"] bash benchmarks/side_by_side_gpu.sh [draw args]
#   draw args: those of both scripts' kernel draw (default: --fraction 0.23 --seed 7)
# One GPU, one 10-minute call for both: a small draw and budgets that sum under the limit, e.g.
#   OUT=DIR BUDGET=250 KB_BUDGET=230 bash benchmarks/side_by_side_gpu.sh --fraction 0.04 --seed 7
# KernelBench's eval needs more than one 10-minute call (its build phase, then 11 to 27 s per kernel). Run this again
# with the same OUT on the same machine while it is held: both go on where they stopped, and the builds stay in /tmp.
# KB_BUDGET=0 runs ours alone in this call. On one GPU, a draw whose KernelBench run fits one call is then measured
# without a stopped call's lost builds: ours cold in a first call with KB_BUDGET=0, KernelBench's cold in the next
# (its builds removed while its results are empty), e.g. for 23 kernels:
#   OUT=DIR BUDGET=400 KB_BUDGET=0 bash benchmarks/side_by_side_gpu.sh --fraction 0.09 --seed 7
#   OUT=DIR BUDGET=400 KB_BUDGET=560 bash benchmarks/side_by_side_gpu.sh --fraction 0.09 --seed 7
# Ours runs again the kernels a budget stopped before their record (--retry 'no record'): without it, a call that
# ends while one slow kernel holds the lane leaves every later kernel of the draw unjudged for good.
# Remove /tmp/kbcorpus-builds and /tmp/kernelbench-eval-builds before a cold first call, and when done.
# Writes $OUT/ours (verdict_rate_gpu.sh's files), $OUT/kb (kernelbench_eval_gpu.sh's), $OUT/report.md (the two side by
# side) and $OUT/calls.txt (each call's exit codes and seconds). Prints both rates, then each side's host CPUs: their
# busy share, the seconds bound by them and the CPU-seconds per verdict (benchmarks/host_cpu.py).
set -o pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
. "$HERE/benchmarks/stoppable.sh"
OUT=$(realpath -m "${OUT:?usage: OUT=DIR bash benchmarks/side_by_side_gpu.sh [draw args]}")
BUDGET=${BUDGET:-430}
export KBCORPUS=$(realpath -m "${KBCORPUS:-$HERE/.kbcorpus}")
DRAW=("$@")
[ ${#DRAW[@]} -eq 0 ] && DRAW=(--fraction 0.23 --seed 7)
read -r -a EXTRA <<< "${OURS_ARGS:-}"
KB_BUDGET=${KB_BUDGET:-$BUDGET}
CPUS=$(nproc)
HALF=$((CPUS / 2))
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$GPUS" -lt 1 ]; then
  echo "side_by_side_gpu.sh needs a GPU (nvidia-smi lists none)" >&2
  exit 2
fi
mkdir -p "$OUT/ours" "$OUT/kb"
started=$(date +%s)
stopped=""
trap 'stopped=1' INT TERM  # stopped: each side keeps what it finished, a side not started is not started, the report is written
if [ "$GPUS" -lt 2 ] || [ "$HALF" -lt 1 ] || [ -n "${SEQUENTIAL:-}" ]; then
  # one after the other on GPU 0, each with every core; a first call starts each side cold
  [ -s "$OUT/ours/state.jsonl" ] || rm -rf "${TMPDIR:-/tmp}/kbcorpus-builds"
  [ -s "$OUT/kb/results.jsonl" ] || rm -rf "${TMPDIR:-/tmp}/kernelbench-eval-builds"
  echo "one after the other on GPU 0 with $CPUS cores: ours (budget $BUDGET s), then KernelBench's (budget $KB_BUDGET s)" >> "$OUT/calls.txt"
  CUDA_VISIBLE_DEVICES=0 OUT="$OUT/ours" BUDGET=$BUDGET \
    bash "$HERE/benchmarks/verdict_rate_gpu.sh" 1/1 --profiles loop "${DRAW[@]}" --retry 'no record' "${EXTRA[@]}" > "$OUT/ours/outer.txt" 2>&1
  echo "ours exit $? after $(( $(date +%s) - started )) s" >> "$OUT/calls.txt"
  if [ "$KB_BUDGET" = 0 ]; then
    echo "kernelbench not started: KB_BUDGET=0" >> "$OUT/calls.txt"
  elif [ -z "$stopped" ]; then
    CUDA_VISIBLE_DEVICES=0 OUT="$OUT/kb" BUDGET=$KB_BUDGET \
      bash "$HERE/benchmarks/kernelbench_eval_gpu.sh" "${DRAW[@]}" --workers "$CPUS" > "$OUT/kb/outer.txt" 2>&1
    echo "kernelbench exit $? after $(( $(date +%s) - started )) s" >> "$OUT/calls.txt"
  else
    echo "kernelbench not started: the call was stopped" >> "$OUT/calls.txt"
  fi
else
(
  trap 'true' INT TERM  # a stop: wait for this side to keep what it finished
  CUDA_VISIBLE_DEVICES=0 OUT="$OUT/ours" BUDGET=$BUDGET taskset -c "0-$((HALF - 1))" \
    bash "$HERE/benchmarks/verdict_rate_gpu.sh" 1/1 --profiles loop "${DRAW[@]}" --retry 'no record' "${EXTRA[@]}" > "$OUT/ours/outer.txt" 2>&1
  echo "ours exit $? after $(( $(date +%s) - started )) s" >> "$OUT/calls.txt"
) &
(
  trap 'true' INT TERM
  CUDA_VISIBLE_DEVICES=1 OUT="$OUT/kb" BUDGET=$((BUDGET - 30)) taskset -c "$HALF-$((CPUS - 1))" \
    bash "$HERE/benchmarks/kernelbench_eval_gpu.sh" "${DRAW[@]}" --workers "$((CPUS - HALF))" > "$OUT/kb/outer.txt" 2>&1
  echo "kernelbench exit $? after $(( $(date +%s) - started )) s" >> "$OUT/calls.txt"
) &
wait_all  # both sides still finish keeping what they have
fi
timeout 60 python3 "$HERE/benchmarks/kernelbench_eval.py" --corpus "$KBCORPUS" --out "$OUT/kb" --results "$OUT/kb/results.jsonl" \
  --report "$OUT/report.md" --report-only "${DRAW[@]}" --ours "$OUT/ours/state.jsonl" > /dev/null
code=$?
echo "report exit $code; $(date -u +%FT%TZ)" >> "$OUT/calls.txt"
grep -m1 "verdicts per GPU-hour" "$OUT/report.md"
grep -m1 "verdicts per GPU-hour" "$OUT/ours/rate.md"
# each side's host CPUs over its calls (benchmarks/host_cpu.py): which side was bound by its cores, at what cost
sed -n 's/^host CPUs/ours: host CPUs/p' "$OUT/ours/rate.md" 2>/dev/null
sed -n 's/^host CPUs/KernelBench: host CPUs/p' "$OUT/kb/busy.txt" 2>/dev/null
exit "$code"
