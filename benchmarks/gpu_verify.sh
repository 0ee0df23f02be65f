#!/usr/bin/env bash
# Verify on a GPU machine: environment, parallel prebuild, GPU tests, then a full run.
#   bash benchmarks/gpu_verify.sh [run.py arguments...]     (default: --all)
# Logs and the run's records/leaderboards are copied to $OUT (default ./gpu-verify).
set -u
OUT=${OUT:-gpu-verify}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
RUN_ID=gpu-$(date -u +%Y%m%d-%H%M%S)
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  nvcc --version | tail -1
} 2>&1 | tee "$OUT/env.txt"
python3 benchmarks/prebuild.py solutions/*/*.py --jobs 12 2>&1 | tee "$OUT/prebuild.log"
[ -n "${SKIP_GPU_TESTS:-}" ] || python3 -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tee "$OUT/pytest_gpu.log"
if [ $# -eq 0 ]; then set -- --all; fi
python3 run.py "$@" --run-id "$RUN_ID" 2>&1 | tee "$OUT/run.log"
echo "run.py exit code: ${PIPESTATUS[0]}" | tee -a "$OUT/run.log"
cp "results/$RUN_ID/records.jsonl" "results/$RUN_ID/leaderboard.md" "results/$RUN_ID/leaderboard.csv" "$OUT/" 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "results/$RUN_ID" logs 2>/dev/null
