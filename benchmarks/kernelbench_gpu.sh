#!/usr/bin/env bash
# KernelBench levels 1-3 on a GPU machine, one part per call (benchmarks/kernelbench_levels.py):
#   bash benchmarks/kernelbench_gpu.sh STATE_DIR BUDGET_S [extra args for kernelbench_levels.py]
# e.g. bash benchmarks/kernelbench_gpu.sh .cache/kbstate 450 --levels 1   (.cache/ is ignored: carry it)
# Each call goes on where the last stopped (STATE_DIR/results.jsonl holds one line per finished problem)
# and stops cleanly before a problem that would not fit in BUDGET_S; leave about 150 s of the
# call's limit for a problem's stop and the clean-up. Writes STATE_DIR/summary.md and appends to
# STATE_DIR/log.txt (and, when $OUT is set, copies the three to $OUT/kernelbench/: put them back in
# STATE_DIR before the next call on a fresh machine). Needs benchmarks/kernelbench/ filled first:
#   python3 benchmarks/kernelbench_levels.py --tree benchmarks/kernelbench --fetch-from KERNELBENCH_GIT_DIR
set -o pipefail
STATE=${1:?usage: bash benchmarks/kernelbench_gpu.sh STATE_DIR BUDGET_S [extra args]}
BUDGET=${2:?usage: bash benchmarks/kernelbench_gpu.sh STATE_DIR BUDGET_S [extra args]}
shift 2
mkdir -p "$STATE"
export PYTHONUNBUFFERED=1
TREE=${TREE:-benchmarks/kernelbench}  # KernelBench's problem folder

clean() {
  # What a killed invocation leaves: each problem's scratch (TMPDIR, build and torch.compile caches)
  # and its run folder live under STATE/tmp and STATE/results; the harness's own scratch and
  # per-run folders under /tmp (only those whose process has ended). Skipped while an invocation
  # holds the state's lock.
  if flock -n "$STATE/.lock" true 2>/dev/null; then
    rm -rf "$STATE/tmp" "$STATE/results"
    # the harness's scratch folders whose run is gone (a live run's are left alone)
    python3 -c 'from harness.parent.scratch import default_base, sweep_stale; sweep_stale(default_base())' 2>/dev/null
  fi
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  python3 -c 'import torch; print("torch", torch.__version__)'
  df -h "${TMPDIR:-/tmp}" "$STATE" | tail -n +2
  echo "problems in $TREE: $(find "$TREE"/level1 "$TREE"/level2 "$TREE"/level3 -name '*.py' 2>/dev/null | wc -l)"
} 2>&1 | tee -a "$STATE/log.txt"
clean
timeout -k 60 $((BUDGET + 90)) python3 benchmarks/kernelbench_levels.py --tree "$TREE" --state "$STATE" --budget-s "$BUDGET" "$@" 2>&1 | tee -a "$STATE/log.txt"
code=$?
clean
python3 benchmarks/kernelbench_levels.py --state "$STATE" --tree "$TREE" --summary "$STATE/summary.md" 2>&1 | tee -a "$STATE/log.txt"
echo "lines in $STATE/results.jsonl: $(wc -l < "$STATE/results.jsonl" 2>/dev/null || echo 0); exit $code" | tee -a "$STATE/log.txt"
df -h "${TMPDIR:-/tmp}" "$STATE" | tail -n +2 | tee -a "$STATE/log.txt"
if [ -n "$OUT" ] && [ -d "$OUT" ]; then  # the device machine's return folder: what the next call needs to go on
  mkdir -p "$OUT/kernelbench" && cp "$STATE"/results.jsonl "$STATE"/summary.md "$STATE"/log.txt "$OUT/kernelbench/" 2>/dev/null
fi
exit $code
